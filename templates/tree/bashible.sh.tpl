#!/usr/bin/env bash
# bashible: the node agent of node group {{ .nodeGroup.name }}, served by
# bashible-apiserver as bashibles/{{ .nodeGroup.name }} and run every minute by
# bashible.timer. Each run: take the lock, update itself, skip if the node
# already runs the group's configuration, otherwise fetch the bundle, ask
# for update approval (a new configuration or a reboot request, on a node
# that has run before) and run its steps in order, reporting each one; on
# success record the checksum. A run that ran steps reports them, with
# their attempts, durations and exit statuses, on the node's Instance
# (status.lastRun, and status.lastFailure when it failed).
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
# A step's name: three digits, an underscore, then letters, digits, - _ .
# Anchored at both ends of the whole string, in jq (Oniguruma) and in bash.
STEP_NAME_RE='\A[0-9]{3}_[-a-zA-Z0-9_.]{1,246}\z'
STEP_NAME_RE_BASH='^[0-9]{3}_[-a-zA-Z0-9_.]{1,246}$'
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

[[ -d "$BASHIBLE_DIR" && -d "${LOCK_FILE%/*}" ]] || mkdir -p "$BASHIBLE_DIR" "${LOCK_FILE%/*}"
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
[[ ! -e "$BASHIBLE_DIR/tmp" ]] || rm -rf "$BASHIBLE_DIR/tmp"
mkdir -p "$BASHIBLE_DIR/tmp"
# The library's API requests keep their files here until the run ends.
export BASHIBLE_RUN_TMP=$BASHIBLE_DIR/tmp
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
# The agent's own bashbooster workspace lives in this run's scratch space
# (the steps' is /var/lib/bashible/.bb-workspace).
# shellcheck disable=SC2034 # read by the library
BB_WORKSPACE=$BASHIBLE_DIR/tmp/agent-workspace
# shellcheck source=/dev/null
source "$BASHIBLE_DIR/lib.sh"

# The group's configuration checksum as the bashibles object self_update
# read names it (empty when it read none): a run that finds the node
# already running it needs no bundle, which is most runs.
SERVED_CHECKSUM=""

# self_update runs the served bashible.sh when it differs from this one,
# and keeps it only if that run succeeds. A served script that is empty or
# not valid bash is refused, and this one goes on.
self_update() {
  [[ "${BASHIBLE_SKIP_UPDATE:-}" == yes ]] && return 0
  local json new=$BASHIBLE_DIR/bashible-new.sh served=$BASHIBLE_DIR/tmp/bashibles
  json=$(bb-kube-api GET "$API_PATH/bashibles/$NODE_GROUP") || return 1
  # One jq for both: the checksum's line, then the script.
  if ! jq -j '"\(.metadata.annotations["bashible.deckhouse.io/configuration-checksum"] // "")\n", (.data["bashible.sh"] // "")' \
      <<< "$json" > "$served" 2>/dev/null; then
    bb-log "the API answered bashibles/$NODE_GROUP with something that is not an object"
    return 1
  fi
  { IFS= read -r SERVED_CHECKSUM || true; cat > "$new"; } < "$served"
  # The same script as this one needs no check (most runs).
  if cmp -s "$new" "$BASHIBLE_DIR/bashible.sh"; then
    rm -f "$new"
    return 0
  fi
  local first=""
  IFS= read -r first < "$new" || true
  if [[ ! -s "$new" ]] || [[ "$first" != "#!/usr/bin/env bash" ]] || ! bash -n "$new" 2>/dev/null; then
    bb-log "refusing the served bashible.sh: it is empty or not a valid bash script; keeping the current one"
    bb-event Warning BashibleUpdateRefused "the served bashible.sh is empty or not valid bash; the node keeps the one it has"
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
boot_id() {
  local id
  IFS= read -r id < "${BASHIBLE_ROOT}/proc/sys/kernel/random/boot_id"
  echo "$id"
}

# stored FILE prints the first line of FILE, nothing if it is missing.
stored() {
  local line=""
  [[ ! -f "$1" ]] || IFS= read -r line < "$1" || true
  echo "$line"
}

# in_sync reports whether the node already runs CHECKSUM: same stored
# checksum, no reboot requested, and no reboot since the last run.
in_sync() {
  local checksum=$1 node=$2
  [[ "$(stored "$BASHIBLE_DIR/configuration_checksum")" == "$checksum" ]] || return 1
  ! bb-node-has-annotation "$node" update.node.deckhouse.io/reboot || return 1
  [[ "$(stored "$BASHIBLE_DIR/boot_id")" == "$(boot_id)" ]]
}

# now_ms VAR sets VAR to the time in milliseconds, from bash 5's
# EPOCHREALTIME (seconds with six decimals; LC_ALL=C makes the separator a
# dot).
now_ms() {
  local t=${EPOCHREALTIME/./}
  printf -v "$1" '%d' $(( 10#$t / 1000 ))
}

# The run's step history: record_step appends one JSON line per step to
# RUN_STEPS; report_run sends it to the Instance when the run ends. The
# Instance type bounds it (deckhouse.io/v1alpha1 BashibleRun): at most
# MAX_REPORTED_STEPS steps, the last ones (the failed step is always the
# last), the others only counted, and a message of at most 1000 bytes.
RUN_STEPS=$BASHIBLE_DIR/tmp/run-steps.jsonl
MAX_REPORTED_STEPS=128
RUN_START=""
RUN_FAILURE=""

# record_step NAME ATTEMPTS START-MS EXIT-STATUS. The name is a step's,
# checked by fetch_steps; the others are numbers.
record_step() {
  local now name
  now_ms now
  bb-json-string name "$1"
  printf '{"name":%s,"attempts":%d,"durationMilliseconds":%d,"exitCode":%d}\n' "$name" "$2" $(( now - $3 )) "$4" >> "$RUN_STEPS"
}

# report_run RESULT [FAILED-STEP]: applies the run's steps as the node's
# Instance's status.lastRun, and for a Failed run as status.lastFailure
# too, each with server-side apply under a field manager of its own
# (bashible-last-run, bashible-last-failure): a successful run replaces
# lastRun whole and leaves lastFailure. Best effort, like
# bb-instance-condition: a node whose Instance it cannot read reports
# nothing.
report_run() {
  local result=$1 failed=${2:-} name run field manager j finish
  bb-node-name-into name
  bb-kube-api GET "/apis/deckhouse.io/v1alpha1/instances/$name" > /dev/null 2>&1 || return 0
  bb-utc-now finish
  run=$(jq -cs --arg c "${BASHIBLE_CHECKSUM:-}" --arg start "$RUN_START" --arg finish "$finish" \
    --arg r "$result" --arg f "$failed" --arg m "${RUN_FAILURE:0:1000}" --argjson max "$MAX_REPORTED_STEPS" \
    '{checksum: $c, startTime: $start, completionTime: $finish, result: $r, steps: .[-$max:]}
      + (if length > $max then {omittedSteps: (length - $max)} else {} end)
      + (if $f == "" then {} else {failedStep: $f, message: $m} end)' "$RUN_STEPS") || {
    bb-log "could not read this run's step history"
    return 0
  }
  for field in lastRun lastFailure; do
    [[ "$field" == lastRun || "$result" == Failed ]] || continue
    manager=bashible-last-run
    [[ "$field" == lastFailure ]] && manager=bashible-last-failure
    bb-json-string j "$name"
    bb-kube-api PATCH "/apis/deckhouse.io/v1alpha1/instances/$name/status?fieldManager=$manager&force=true" \
      application/apply-patch+yaml "{\"apiVersion\":\"deckhouse.io/v1alpha1\",\"kind\":\"Instance\",\"metadata\":{\"name\":$j},\"status\":{\"$field\":$run}}" \
      > /dev/null || bb-log "could not report the run's steps ($field) on Instance $name"
  done
}

# step_timeout VAR STEP sets VAR to the step's timeout in seconds: its
# first line "# bashible-timeout: <seconds>", or STEP_TIMEOUT.
step_timeout() {
  local text="" re=$'(^|\n)# bashible-timeout: *([0-9]+) *(\n|$)'
  IFS= read -r -d '' text < "$2" || true
  if [[ "$text" =~ $re ]]; then
    printf -v "$1" '%s' "${BASH_REMATCH[2]}"
  else
    printf -v "$1" '%s' "$STEP_TIMEOUT"
  fi
}

# run_step STEP: runs it in a fresh bash with the library, retrying a
# failure after RETRY_DELAY seconds, with tracing from the third attempt;
# each failed attempt is reported as an Event. Returns non-zero after
# MAX_RETRIES. A step that succeeds is not an Event of its own: its
# attempts and duration go into the run's history on the Instance
# (report_run), and the run's one BashibleConverged Event says how many
# steps ran. An Event per step was 40 of a run's 56 requests, and 200,000
# Event writes for a change rolled over 5,000 nodes.
# The shell options are Deckhouse's, -eEo pipefail without nounset, so a
# NodeGroupConfiguration written for Deckhouse runs the same here; the
# built-in steps add -u themselves (their header, lib/_step.tpl). The
# library sets a trap that fires the step's delayed events when it ends.
# The step goes into the run's history (record_step); a failed one leaves
# its note and last output in RUN_FAILURE.
run_step() {
  local step=$1 name attempt=1 rc start took timeout trace note first_ms
  name=${step##*/}
  step_timeout timeout "$step"
  now_ms first_ms
  while :; do
    trace=""
    (( attempt >= 3 )) && trace="set -x;"
    start=$SECONDS
    rc=0
    # Emptied, then appended to: logrotate may copy and truncate it while
    # the step runs (its configuration comes from the logging step).
    : > "$BASHIBLE_DIR/step.log"
    (
      if [[ -n "${BASHIBLE_LOCK_FD:-}" ]]; then
        exec {BASHIBLE_LOCK_FD}>&-
      fi
      umask 022
      BASHIBLE_STEP=$name exec timeout --kill-after=10 "$timeout" \
        bash --noprofile --norc -c "set -eEo pipefail; $trace source \"\$1\"; cd \"\$2\"; source \"\$3\"" \
        bashible "$BASHIBLE_DIR/lib.sh" "$BASHIBLE_DIR" "$step"
    ) >> "$BASHIBLE_DIR/step.log" 2>&1 || rc=$?
    took=$(( SECONDS - start ))
    if (( rc == 0 )); then
      record_step "$name" "$attempt" "$first_ms" 0
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
    RUN_FAILURE="$note; last output: $(grep -v '^+' "$BASHIBLE_DIR/step.log" | tail -n 10 | tail -c 600)"
    bb-event Warning BashibleStepFailed "$RUN_FAILURE"
    bb-instance-condition BashibleReady False StepsFailed "$note"
    if (( attempt >= MAX_RETRIES )); then
      record_step "$name" "$attempt" "$first_ms" "$rc"
      return 1
    fi
    attempt=$(( attempt + 1 ))
    sleep "$RETRY_DELAY"
  done
}

# fetch_steps writes the bundle's steps to a new directory, then swaps it
# in, so a half-written bundle is never run. No content can make a step of
# another name: every name must be a step name (checked whole, a newline
# included), every value a string without a NUL byte (bash cannot hold
# one, and it is how a value could pose as a name). One jq checks that and
# writes each step as its name, its length in bytes and its content; each
# step is read back by that exact length (LC_ALL=C: bash counts bytes) and
# must have it. Otherwise, or without steps, the whole bundle is refused
# and the node keeps the steps it has.
fetch_steps() {
  local json=$1 new frames verdict key len content count=0 expected
  frames=$BASHIBLE_DIR/tmp/bundle_frames
  # Called in a condition, so set -e does not hold here: every command
  # that can fail says so.
  jq -j --arg re "$STEP_NAME_RE" '
    if (.data | type == "object" and length > 0 and all(.[]; type == "string")) | not then
      "refused\na bundle without steps, or with a step that is not text\n"
    elif (.data | keys | all(test($re))) | not then
      "refused\na step name is not NNN_<letters, digits, - _ .> (at most 250 bytes): \([.data | keys[] | select(test($re) | not)] | .[:3] | tojson)\n"
    elif (.data | all(.[]; explode | all(. != 0))) | not then
      "refused\nstep \([.data | to_entries[] | select(.value | explode | any(. == 0)) | .key][0]) holds a NUL byte\n"
    else
      "steps\n\(.data | length)\n", (.data | to_entries[] | "\(.key)\n\(.value | utf8bytelength)\n\(.value)")
    end' <<< "$json" > "$frames" 2>/dev/null || { bb-log "refusing a bundle that is not an object"; return 1; }
  {
    if ! IFS= read -r verdict || ! IFS= read -r expected; then
      bb-log "refusing a bundle that could not be read"
      return 1
    fi
    if [[ "$verdict" != steps ]]; then
      bb-log "refusing the bundle: ${expected:0:600}"
      return 1
    fi
    new=$(mktemp -d "$BASHIBLE_DIR/tmp/bundle_steps.XXXXXX") || return 1
    while IFS= read -r key; do
      # Checked again here: what is written is exactly what jq checked.
      if [[ ! "$key" =~ $STEP_NAME_RE_BASH ]] || [[ -e "$new/$key" ]]; then
        bb-log "refusing a step named '$key'"
        return 1
      fi
      if ! IFS= read -r len || [[ ! "$len" =~ ^[0-9]+$ ]]; then
        bb-log "refusing the bundle: no length for step $key"
        return 1
      fi
      content=""
      if (( len > 0 )); then
        IFS= read -r -N "$len" content || true
      fi
      if (( ${#content} != len )); then
        bb-log "refusing the bundle: step $key has ${#content} bytes, not $len"
        return 1
      fi
      printf '%s' "$content" > "$new/$key" || { bb-log "could not write step $key"; return 1; }
      count=$(( count + 1 ))
    done
  } < "$frames"
  : > "$frames"
  if (( count != expected )); then
    bb-log "refusing the bundle: $count steps were written, the bundle has $expected"
    return 1
  fi
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
  if [[ -d "$BASHIBLE_DIR/bundle_steps" ]]; then
    mv "$BASHIBLE_DIR/bundle_steps" "$BASHIBLE_DIR/bundle_steps.old" || return 1
  fi
  mv "$new" "$BASHIBLE_DIR/bundle_steps" || return 1
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
}

# wait_for_join: a first run ends with the kubelet just started on the
# bootstrap kubeconfig, before its TLS bootstrap (the bootstrap token may
# not read or write Nodes): the configuration is recorded on the Node once
# the kubelet has its client certificate and the Node has registered,
# waited for up to BASHIBLE_JOIN_TIMEOUT seconds (300). A machine whose
# kubelet does not join through this bundle's kubeconfig waits for nothing.
wait_for_join() {
  local cert=${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem
  local deadline=$(( SECONDS + ${BASHIBLE_JOIN_TIMEOUT:-300} )) waited=no
  [[ -s "${BASHIBLE_ROOT}/etc/kubernetes/bootstrap-kubelet.conf" ]] || return 0
  # The certificate may come before the Node: the kubelet registers it
  # after its TLS bootstrap. A kubelet that has joined already is not
  # waited for, and nothing is logged.
  until [[ -s "$cert" ]] && bb-node-get > /dev/null 2>&1; do
    if [[ "$waited" == no ]]; then
      bb-log "waiting for the kubelet to join (its client certificate, then its Node)"
      waited=yes
    fi
    if (( SECONDS >= deadline )); then
      bb-log "the kubelet has not joined within ${BASHIBLE_JOIN_TIMEOUT:-300} s (see journalctl -u kubelet); the next run records the configuration on the Node"
      return 1
    fi
    sleep 2
  done
  [[ "$waited" == no ]] || bb-log "the kubelet has joined"
}

# reboot_request NODE-JSON prints what the Node's reboot annotation asks of
# this run: "none"; "reboot" (a request not answered yet: go through
# approval and a disruption, and reboot at the end); or "answered" (the
# machine rebooted for it since: the run converges, then clears it).
reboot_request() {
  if ! bb-node-has-annotation "$1" update.node.deckhouse.io/reboot; then
    echo none
  elif [[ -s "$BASHIBLE_DIR/flags/reboot-answered" ]] &&
      [[ "$(stored "$BASHIBLE_DIR/flags/reboot-answered")" != "$(boot_id)" ]]; then
    echo answered
  else
    echo reboot
  fi
}

# fetch_bundle sets main's json to the group's NodeGroupBundle and its
# checksum to the configuration checksum the bundle carries.
fetch_bundle() {
  json=$(bb-kube-api GET "$API_PATH/nodegroupbundles/$NODE_GROUP")
  checksum=$(jq -r '.metadata.annotations["bashible.deckhouse.io/configuration-checksum"] // empty' <<< "$json" 2>/dev/null || true)
  [[ -n "$checksum" ]] || { bb-log "the served bundle has no checksum annotation"; return 1; }
}

main() {
  bb-flag-unset stop-run
  self_update
  BASHIBLE_BUNDLE=$(bb-bundle)
  export BASHIBLE_BUNDLE

  local json="" checksum=$SERVED_CHECKSUM node="{}" step reboot=none approval=no flag first_run=no synced=no quoted file steps_began steps_took node_name
  if [[ -e "$BASHIBLE_DIR/first_run" || -z "$checksum" ]]; then
    fetch_bundle
  fi

  if [[ ! -e "$BASHIBLE_DIR/first_run" ]]; then
    node=$(bb-node-get)
    reboot=$(reboot_request "$node")
    in_sync "$checksum" "$node" && synced=yes
    if [[ "$synced" == no && -z "$json" ]]; then
      fetch_bundle
      # The bundle's own checksum decides: the group may have moved on
      # since its bashibles object was read.
      in_sync "$checksum" "$node" && synced=yes
    fi
    if [[ "$synced" == yes ]]; then
      if [[ "$(jq -r '.metadata.annotations["node.deckhouse.io/configuration-checksum"] // ""' <<< "$node")" != "$checksum" ]]; then
        bb-json-string quoted "$checksum"
        bb-node-annotate "{\"node.deckhouse.io/configuration-checksum\":$quoted}"
      fi
      bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} is applied; nothing to do"
      return 0
    fi
    # A new configuration, and a reboot a person asked for, are updates:
    # approved before any step runs. A converge of the configuration the
    # node has (after a reboot) needs no approval unless a step asks for a
    # disruption, and then bb-disruption-gate asks for it.
    if [[ "$(stored "$BASHIBLE_DIR/configuration_checksum")" != "$checksum" || "$reboot" == reboot ]]; then
      approval=yes
    fi
  else
    first_run=yes
    bb-instance-condition BashibleReady Unknown InitialRunInProgress "the first run is in progress"
  fi

  if ! fetch_steps "$json"; then
    bb-instance-condition BashibleReady False BundleRefused "the served bundle of configuration ${checksum:0:12} is malformed and was not run; see bashible's log on the node"
    bb-event Warning BashibleBundleRefused "the served bundle of configuration ${checksum:0:12} is malformed and was not run"
    return 1
  fi
  export BASHIBLE_CHECKSUM=$checksum
  if [[ "$approval" == yes ]]; then
    bb-wait-for-update-approval
  fi
  if [[ "$reboot" == reboot ]]; then
    # 099_reboot passes the disruption gate for it and reboots at the end.
    bb-log "update.node.deckhouse.io/reboot asks for a reboot; the node reboots at the end of this run, once its disruption is approved"
    bb-flag-set reboot
  fi
  bb-log "converging to configuration ${checksum:0:12}"
  bb-instance-condition BashibleReady Unknown ConvergeInProgress "converging to configuration ${checksum:0:12}"
  bb-utc-now RUN_START
  steps_began=$SECONDS
  # Deckhouse's bashible marks a converging run with two BashibleNodeUpdate
  # Events, "start" and "finish"; watchers of those keep working.
  bb-node-name-into node_name
  bb-event Normal BashibleNodeUpdate "start steps update on $node_name" BashibleStepExecution
  : > "$RUN_STEPS"
  for step in "$BASHIBLE_DIR"/bundle_steps/*; do
    [[ -f "$step" ]] || continue
    run_step "$step" || {
      bb-log "the run failed at ${step##*/}; configuration ${checksum:0:12} is not applied"
      report_run Failed "${step##*/}"
      return 1
    }
    if bb-flag-is-set stop-run; then
      bb-flag-unset stop-run
      bb-log "${step##*/} stopped the run (the node waits to be replaced); configuration ${checksum:0:12} is not applied"
      report_run Stopped
      return 0
    fi
  done
  steps_took="$(wc -l < "$RUN_STEPS") steps in $(( SECONDS - steps_began ))s"
  bb-event Normal BashibleNodeUpdate "finish steps update on $node_name" BashibleStepExecution

  # Local state first, each file replaced whole: if the run dies after
  # this, the next run finds the node in sync and re-asserts the annotation.
  echo "$checksum" > "$BASHIBLE_DIR/configuration_checksum.new"
  mv -f "$BASHIBLE_DIR/configuration_checksum.new" "$BASHIBLE_DIR/configuration_checksum"
  boot_id > "$BASHIBLE_DIR/boot_id.new"
  mv -f "$BASHIBLE_DIR/boot_id.new" "$BASHIBLE_DIR/boot_id"
  rm -f "$BASHIBLE_DIR/first_run"
  bb-flag-unset disruption
  # What the steps' bashbooster helpers changed is handled now: the next
  # run refreshes package lists again and fires change events only anew.
  for file in "$BB_SYNC_UNHANDLED_FILES_STORE" "$BB_APT_UNHANDLED_PACKAGES_STORE" "$BB_YUM_UNHANDLED_PACKAGES_STORE" \
    "$BB_DNF_UNHANDLED_PACKAGES_STORE" "$BB_ZYPPER_UNHANDLED_PACKAGES_STORE"; do
    [[ ! -e "$file" ]] || rm -f "$file"
  done
  for flag in apt-updated apt-rpm-updated yum-updated dnf-updated zypper-updated; do
    bb-flag-unset "$flag"
  done
  # Once joined, the node needs its bootstrap token no more.
  if [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]] &&
      [[ -e "$BASHIBLE_DIR/bootstrap-token" || -e "$BASHIBLE_DIR/bootstrap-token-header" ]]; then
    rm -f "$BASHIBLE_DIR/bootstrap-token" "$BASHIBLE_DIR/bootstrap-token-header"
  fi
  # A reboot (asked for by a step or by the reboot annotation) comes last,
  # after everything is recorded here. The Node hears of the configuration
  # only from the run after the reboot (the boot id differs, so that run
  # converges): until then the node stays in its update — approved,
  # disrupted, drained — so node-manager neither uncordons it nor counts
  # its disruption slot free while it is down.
  if bb-flag-is-set reboot-pending; then
    bb-flag-unset reboot-pending
    if [[ "$reboot" == reboot ]]; then
      boot_id > "$BASHIBLE_DIR/flags/reboot-answered"
    fi
    report_run Succeeded
    bb-instance-condition BashibleReady Unknown Rebooting "configuration ${checksum:0:12} applied; rebooting"
    bb-log "rebooting, as asked"
    bb-event Normal BashibleReboot "rebooting, as asked"
    ${BASHIBLE_REBOOT_COMMAND:-systemctl reboot}
    return 0
  fi
  if [[ "$first_run" == yes ]]; then
    wait_for_join || return 1
  fi
  # After the join: a first run can read its Instance only as its node.
  report_run Succeeded
  # What the node can run (cgroup, containerd 2, its own containerd
  # configuration), for the NodeGroup changes its group may take: reported
  # after every converging run, which follows every configuration change and
  # every reboot. A failure is logged; the next run reports again. The
  # group's runtime is the bundle's annotation, read at run time, so that
  # bashible.sh itself stays the same whatever the group's CRI (a CRI change
  # changes only the runtime's steps).
  bb-node-patch "$(bb-node-capabilities "$(jq -r '.metadata.annotations["bashible.deckhouse.io/cri"] // ""' <<< "$json")")" ||
    bb-log "reporting the node's capabilities on its Node failed"
  # The reboot request this run answered (by rebooting before it) is
  # cleared; one made since stays.
  bb-json-string quoted "$checksum"
  if [[ "$reboot" == answered ]]; then
    bb-node-annotate "{\"node.deckhouse.io/configuration-checksum\":$quoted,\"update.node.deckhouse.io/reboot\":null}"
  else
    bb-node-annotate "{\"node.deckhouse.io/configuration-checksum\":$quoted}"
  fi
  bb-flag-unset reboot-answered
  bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} applied"
  bb-event Normal BashibleConverged "configuration ${checksum:0:12} applied: $steps_took"
  bb-log "configuration ${checksum:0:12} applied"
}

main
