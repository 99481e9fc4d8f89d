#!/usr/bin/env bash
# bashible: the node agent of node group {{ .nodeGroup.name }}, served by
# bashible-apiserver as bashibles/{{ .nodeGroup.name }} and run every minute by
# bashible.timer. Each run: take the lock, update itself, skip if the node
# already runs the group's configuration, otherwise fetch the bundle and run
# its steps in order, reporting each one; on success record the checksum.
#
# Options: --no-lock (the caller holds the lock), --max-retries N (attempts
# per step, default 10). Environment, mostly for tests: BASHIBLE_ROOT (a
# directory standing in for /), BASHIBLE_API_ENDPOINTS, BASHIBLE_NODE_NAME,
# BASHIBLE_RETRY_DELAY (seconds between attempts, default 10),
# BASHIBLE_STEP_TIMEOUT (seconds, default 1800; a step overrides it with a
# line "# bashible-timeout: <seconds>").
set -Eeuo pipefail
# Byte-order sorting of step names whatever the locale, and owner-only
# files for bashible's own state (steps run with the usual 022).
export LC_ALL=C
umask 077

BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
LOCK_FILE=${BASHIBLE_ROOT}/var/lock/bashible
API_PATH=/apis/bashible.deckhouse.io/v1alpha1
NODE_GROUP={{ .nodeGroup.name | squote }}
MAX_RETRIES=10
RETRY_DELAY=${BASHIBLE_RETRY_DELAY:-10}
STEP_TIMEOUT=${BASHIBLE_STEP_TIMEOUT:-1800}
USE_LOCK=yes
export BASHIBLE_ROOT

while (( $# > 0 )); do
  case "$1" in
    --no-lock) USE_LOCK=no ;;
    --max-retries) MAX_RETRIES=$2; shift ;;
    *) echo "bashible: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

mkdir -p "$BASHIBLE_DIR" "$(dirname "$LOCK_FILE")"
if [[ "$USE_LOCK" == yes ]]; then
  exec {lock_fd}> "$LOCK_FILE"
  if ! flock --nonblock "$lock_fd"; then
    echo "bashible: another run holds $LOCK_FILE; exiting" >&2
    exit 0
  fi
  # Steps close it, so nothing a step leaves running can hold the lock.
  export BASHIBLE_LOCK_FD=$lock_fd
fi
# Scratch space for this run, under the lock, removed when the run ends.
rm -rf "$BASHIBLE_DIR/tmp"
mkdir -p "$BASHIBLE_DIR/tmp"
trap 'rm -rf "$BASHIBLE_DIR/tmp"' EXIT

# The library, written only when it changed, then used here and by every step.
lib_new=$(mktemp "$BASHIBLE_DIR/lib.sh.XXXXXX")
cat > "$lib_new" <<'BASHIBLE_LIB'
{{ include "node-lib" . }}
BASHIBLE_LIB
if cmp -s "$lib_new" "$BASHIBLE_DIR/lib.sh"; then
  rm -f "$lib_new"
else
  mv -f "$lib_new" "$BASHIBLE_DIR/lib.sh"
fi
# shellcheck source=/dev/null
source "$BASHIBLE_DIR/lib.sh"

# self_update runs the served bashible.sh when it differs from this one,
# and keeps it only if that run succeeds. A served script that is empty or
# not valid bash is refused, and this one goes on.
self_update() {
  [[ "${BASHIBLE_SKIP_UPDATE:-}" == yes ]] && return 0
  local json new=$BASHIBLE_DIR/bashible-new.sh
  json=$(bb-kube-api GET "$API_PATH/bashibles/$NODE_GROUP") || return 1
  if ! jq -j '.data["bashible.sh"] // ""' <<< "$json" > "$new" 2>/dev/null; then
    bb-log "the API answered bashibles/$NODE_GROUP with something that is not an object"
    rm -f "$new"
    return 1
  fi
  if [[ ! -s "$new" ]] || [[ "$(head -n 1 "$new")" != "#!/usr/bin/env bash" ]] || ! bash -n "$new" 2>/dev/null; then
    bb-log "refusing the served bashible.sh: it is empty or not a valid bash script; keeping the current one"
    bb-event Warning BashibleUpdateRefused "the served bashible.sh is empty or not valid bash; the node keeps the one it has"
    rm -f "$new"
    return 0
  fi
  if cmp -s "$new" "$BASHIBLE_DIR/bashible.sh"; then
    rm -f "$new"
    return 0
  fi
  bb-log "running the updated bashible.sh"
  chmod 0755 "$new"
  if BASHIBLE_SKIP_UPDATE=yes bash "$new" --no-lock --max-retries "$MAX_RETRIES"; then
    mv -f "$new" "$BASHIBLE_DIR/bashible.sh"
    exit 0
  else
    local rc=$?
    rm -f "$new"
    exit "$rc"
  fi
}

# boot_id identifies this boot of the machine; it changes on every reboot.
boot_id() { cat "${BASHIBLE_ROOT}/proc/sys/kernel/random/boot_id"; }

# in_sync reports whether the node already runs CHECKSUM: same stored
# checksum, no reboot requested, and no reboot since the last run.
in_sync() {
  local checksum=$1 node=$2
  [[ "$(cat "$BASHIBLE_DIR/configuration_checksum" 2>/dev/null || true)" == "$checksum" ]] || return 1
  ! bb-node-has-annotation "$node" update.node.deckhouse.io/reboot || return 1
  [[ "$(cat "$BASHIBLE_DIR/boot_id" 2>/dev/null || true)" == "$(boot_id)" ]]
}

# step_timeout STEP prints the step's timeout in seconds.
step_timeout() {
  local t
  t=$(sed -n 's/^# bashible-timeout: *\([0-9][0-9]*\) *$/\1/p' "$1" | head -n 1)
  echo "${t:-$STEP_TIMEOUT}"
}

# run_step STEP: runs it in a fresh bash with the library, retrying a
# failure after RETRY_DELAY seconds, with tracing from the third attempt;
# each attempt is reported as an Event. Returns non-zero after MAX_RETRIES.
run_step() {
  local step=$1 name attempt=1 rc start took timeout trace note
  name=$(basename "$step")
  timeout=$(step_timeout "$step")
  while :; do
    trace=""
    (( attempt >= 3 )) && trace="set -x;"
    start=$SECONDS
    rc=0
    (
      if [[ -n "${BASHIBLE_LOCK_FD:-}" ]]; then
        exec {BASHIBLE_LOCK_FD}>&-
      fi
      umask 022
      BASHIBLE_STEP=$name exec timeout --kill-after=10 "$timeout" \
        bash --noprofile --norc -c "set -Eeuo pipefail; $trace source \"\$1\"; cd \"\$2\"; source \"\$3\"" \
        bashible "$BASHIBLE_DIR/lib.sh" "$BASHIBLE_DIR" "$step"
    ) > "$BASHIBLE_DIR/step.log" 2>&1 || rc=$?
    took=$(( SECONDS - start ))
    if (( rc == 0 )); then
      bb-event Normal BashibleStepSucceeded "step $name succeeded in ${took}s (attempt $attempt)"
      return 0
    fi
    if (( rc == 124 || rc == 137 )); then
      note="step $name was killed after its timeout of ${timeout}s (attempt $attempt of $MAX_RETRIES)"
    else
      note="step $name failed with exit status $rc after ${took}s (attempt $attempt of $MAX_RETRIES)"
    fi
    bb-log "$note"
    cp "$BASHIBLE_DIR/step.log" "$BASHIBLE_DIR/step.failed.log"
    # The note leaves out trace lines: they may show values a step handles.
    bb-event Warning BashibleStepFailed "$note; last output: $(grep -v '^+' "$BASHIBLE_DIR/step.log" | tail -n 10 | tail -c 600)"
    bb-instance-condition BashibleReady False StepsFailed "$note"
    if (( attempt >= MAX_RETRIES )); then
      return 1
    fi
    attempt=$(( attempt + 1 ))
    sleep "$RETRY_DELAY"
  done
}

# fetch_steps writes the bundle's steps to a new directory, then swaps it
# in, so a half-written bundle is never run. A bundle without steps, or one
# that does not parse, is refused.
fetch_steps() {
  local json=$1 new pairs key value
  if ! jq -e '.data | type == "object" and length > 0' <<< "$json" > /dev/null 2>&1; then
    bb-log "refusing a bundle without steps"
    return 1
  fi
  pairs=$BASHIBLE_DIR/tmp/steps.pairs
  # One pass: name NUL script NUL, so no name or script is split.
  jq -j '.data | to_entries[] | .key, "\u0000", .value, "\u0000"' <<< "$json" > "$pairs"
  new=$(mktemp -d "$BASHIBLE_DIR/tmp/bundle_steps.XXXXXX")
  while IFS= read -r -d '' key && IFS= read -r -d '' value; do
    if [[ ! "$key" =~ ^[0-9]{3}_[-a-zA-Z0-9_.]+$ ]]; then
      bb-log "refusing a step named '$key'"
      return 1
    fi
    printf '%s' "$value" > "$new/$key"
  done < "$pairs"
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
  if [[ -d "$BASHIBLE_DIR/bundle_steps" ]]; then
    mv "$BASHIBLE_DIR/bundle_steps" "$BASHIBLE_DIR/bundle_steps.old"
  fi
  mv "$new" "$BASHIBLE_DIR/bundle_steps"
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
}

main() {
  bb-flag-unset stop-run
  self_update
  BASHIBLE_BUNDLE=$(bb-bundle)
  export BASHIBLE_BUNDLE

  local json checksum node="{}" step reboot_requested=no
  json=$(bb-kube-api GET "$API_PATH/nodegroupbundles/$NODE_GROUP")
  checksum=$(jq -r '.metadata.annotations["bashible.deckhouse.io/configuration-checksum"] // empty' <<< "$json" 2>/dev/null || true)
  [[ -n "$checksum" ]] || { bb-log "the served bundle has no checksum annotation"; return 1; }

  if [[ ! -e "$BASHIBLE_DIR/first_run" ]]; then
    node=$(bb-node-get)
    if bb-node-has-annotation "$node" update.node.deckhouse.io/reboot; then
      reboot_requested=yes
    fi
    if in_sync "$checksum" "$node"; then
      if [[ "$(jq -r '.metadata.annotations["node.deckhouse.io/configuration-checksum"] // ""' <<< "$node")" != "$checksum" ]]; then
        bb-node-annotate "$(jq -n --arg c "$checksum" '{"node.deckhouse.io/configuration-checksum": $c}')"
      fi
      bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} is applied; nothing to do"
      return 0
    fi
  else
    bb-instance-condition BashibleReady Unknown InitialRunInProgress "the first run is in progress"
  fi

  fetch_steps "$json"
  bb-log "converging to configuration ${checksum:0:12}"
  bb-instance-condition BashibleReady Unknown ConvergeInProgress "converging to configuration ${checksum:0:12}"
  export BASHIBLE_CHECKSUM=$checksum
  for step in "$BASHIBLE_DIR"/bundle_steps/*; do
    [[ -f "$step" ]] || continue
    run_step "$step" || {
      bb-log "the run failed at $(basename "$step"); configuration ${checksum:0:12} is not applied"
      return 1
    }
    if bb-flag-is-set stop-run; then
      bb-flag-unset stop-run
      bb-log "$(basename "$step") stopped the run (the node waits to be replaced); configuration ${checksum:0:12} is not applied"
      return 0
    fi
  done

  # Local state first, each file replaced whole: if the run dies after
  # this, the next run finds the node in sync and re-asserts the annotation.
  echo "$checksum" > "$BASHIBLE_DIR/configuration_checksum.new"
  mv -f "$BASHIBLE_DIR/configuration_checksum.new" "$BASHIBLE_DIR/configuration_checksum"
  boot_id > "$BASHIBLE_DIR/boot_id.new"
  mv -f "$BASHIBLE_DIR/boot_id.new" "$BASHIBLE_DIR/boot_id"
  rm -f "$BASHIBLE_DIR/first_run"
  bb-flag-unset disruption
  # The reboot request this run answered is cleared; one made since stays.
  bb-node-annotate "$(jq -n --arg c "$checksum" --arg answered "$reboot_requested" \
    '{"node.deckhouse.io/configuration-checksum": $c} + if $answered == "yes" then {"update.node.deckhouse.io/reboot": null} else {} end')"
  bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} applied"
  bb-event Normal BashibleConverged "configuration ${checksum:0:12} applied"
  bb-log "configuration ${checksum:0:12} applied"
  # Once joined, the node needs its bootstrap token no more.
  if [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]]; then
    rm -f "$BASHIBLE_DIR/bootstrap-token" "$BASHIBLE_DIR/bootstrap-token-header"
  fi
  # A reboot asked for by a step comes last, after everything is recorded.
  if bb-flag-is-set reboot-pending; then
    bb-flag-unset reboot-pending
    bb-log "rebooting, as a step asked"
    bb-event Normal BashibleReboot "rebooting, as a step asked"
    ${BASHIBLE_REBOOT_COMMAND:-systemctl reboot}
  fi
}

main
