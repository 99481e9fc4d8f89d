#!/usr/bin/env bash
# bashible: the node agent of node group databases, served by
# bashible-apiserver as bashibles/databases and run every minute by
# bashible.timer. Each run: take the lock, update itself, skip if the node
# already runs the group's configuration, otherwise fetch the bundle, ask
# for update approval (a new configuration or a reboot request, on a node
# that has run before) and run its steps in order, reporting each one; on
# success record the checksum.
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
NODE_GROUP='databases'
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
# Library of bashible for node group databases; managed by node-manager.
# shellcheck shell=bash

# Paths hang off BASHIBLE_ROOT, empty on a real node; tests point it at a
# directory to run a node without touching the machine.
BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
# shellcheck disable=SC2034 # for the steps that source this library
BASHIBLE_NODE_GROUP='databases'
BASHIBLE_APPROVAL_MODE='Automatic'
# API endpoints from the cluster; BASHIBLE_API_ENDPOINTS (space-separated
# host:port) overrides them where the served ones are not reachable.
read -r -a BASHIBLE_ENDPOINTS <<< "${BASHIBLE_API_ENDPOINTS:-192.168.1.5:6443}"
BASHIBLE_POLL_SECONDS=${BASHIBLE_POLL_SECONDS:-10}

# bb-log MESSAGE...: a line with the time and the step's name, on stderr.
bb-log() {
  printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${BASHIBLE_STEP:-bashible}" "$*" >&2
}

# Flags carry facts between steps of one run (and across runs until unset).
bb-flag-set() { mkdir -p "$BASHIBLE_DIR/flags" && touch "$BASHIBLE_DIR/flags/$1"; }
bb-flag-unset() { rm -f "$BASHIBLE_DIR/flags/$1"; }
bb-flag-is-set() { [[ -e "$BASHIBLE_DIR/flags/$1" ]]; }
# Deckhouse's name; in a command position "bb-flag?" is also a glob, so
# new code calls bb-flag-is-set.
bb-flag?() { bb-flag-is-set "$@"; }

# bb-node-name prints this node's name.
bb-node-name() {
  if [[ -n "${BASHIBLE_NODE_NAME:-}" ]]; then
    echo "$BASHIBLE_NODE_NAME"
  elif [[ -s "$BASHIBLE_DIR/discovered-node-name" ]]; then
    cat "$BASHIBLE_DIR/discovered-node-name"
  else
    # What the kubelet registers by default: the host name, lowercased.
    uname -n | tr '[:upper:]' '[:lower:]'
  fi
}

# bb-kube-api METHOD PATH [CONTENT-TYPE]: one request to the API, body on
# stdin for writes, response body on stdout. Credentials: the kubelet's
# client certificate once the node has joined, the bootstrap token before
# (from a header file, so it never appears in a process list or a log).
# Endpoints are tried in turn; an HTTP error stops at once with the
# server's message. Tracing (set -x) is suspended inside, so a traced step
# never prints a credential.
bb-kube-api() {
  if [[ $- == *x* ]]; then
    set +x
    local rc=0
    bb-kube-api-untraced "$@" || rc=$?
    set -x
    return "$rc"
  fi
  bb-kube-api-untraced "$@"
}

# Exit status: 0 on success, 9 on 409 Conflict, 1 on anything else.
bb-kube-api-untraced() {
  local method=$1 path=$2 ctype=${3:-application/json}
  local cert=${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem
  # The API is reached directly, never through a proxy from the environment.
  local -a args=(--silent --show-error --noproxy '*' --connect-timeout 5 --max-time 30 --cacert "$BASHIBLE_DIR/ca.crt" -X "$method")
  if [[ -s "$cert" ]]; then
    args+=(--cert "$cert" --key "$cert")
  elif [[ -s "$BASHIBLE_DIR/bootstrap-token" ]]; then
    (umask 077 && printf 'Authorization: Bearer %s\n' "$(cat "$BASHIBLE_DIR/bootstrap-token")" > "$BASHIBLE_DIR/bootstrap-token-header")
    args+=(-H "@$BASHIBLE_DIR/bootstrap-token-header")
  else
    bb-log "no credentials: neither the kubelet certificate nor $BASHIBLE_DIR/bootstrap-token exists"
    return 1
  fi
  if [[ "$method" != GET ]]; then
    args+=(-H "Content-Type: $ctype" --data-binary @-)
  fi
  local body endpoint code out
  mkdir -p "$BASHIBLE_DIR/tmp"
  body=$(umask 077 && mktemp "$BASHIBLE_DIR/tmp/api.XXXXXX")
  if [[ "$method" != GET ]]; then
    cat > "$body.in"
  fi
  for endpoint in "${BASHIBLE_ENDPOINTS[@]}"; do
    if [[ "$method" != GET ]]; then
      code=$(curl "${args[@]}" -o "$body" -w '%{http_code}' "https://$endpoint$path" < "$body.in" 2>/dev/null) || code=000
    else
      code=$(curl "${args[@]}" -o "$body" -w '%{http_code}' "https://$endpoint$path" 2>/dev/null) || code=000
    fi
    case "$code" in
      2??)
        cat "$body"
        rm -f "$body" "$body.in"
        return 0
        ;;
      000)
        bb-log "$method $path: $endpoint did not answer"
        ;;
      *)
        out=$(jq -r '.message // empty' "$body" 2>/dev/null || true)
        bb-log "$method $path: HTTP $code from $endpoint: ${out:-$(head -c 300 "$body")}"
        rm -f "$body" "$body.in"
        [[ "$code" == 409 ]] && return 9
        return 1
        ;;
    esac
  done
  rm -f "$body" "$body.in"
  bb-log "$method $path: no API endpoint answered (tried: ${BASHIBLE_ENDPOINTS[*]:-none})"
  return 1
}

# bb-node-get prints this node's Node object.
bb-node-get() { bb-kube-api GET "/api/v1/nodes/$(bb-node-name)"; }

# bb-node-annotate-cas RESOURCE-VERSION ANNOTATIONS-JSON: merge-patches the
# Node's annotations (null removes one), only if the Node is still at
# RESOURCE-VERSION: a compare-and-set, so two writers never both win.
bb-node-annotate-cas() {
  jq -n --arg rv "$1" --argjson a "$2" '{metadata: {resourceVersion: $rv, annotations: $a}}' |
    bb-kube-api PATCH "/api/v1/nodes/$(bb-node-name)" application/merge-patch+json > /dev/null
}

# bb-node-annotate ANNOTATIONS-JSON: read, then compare-and-set, retrying
# only on a conflict (someone else wrote the Node in between).
bb-node-annotate() {
  local node rv try rc
  for try in 1 2 3 4 5; do
    node=$(bb-node-get) || return 1
    rv=$(jq -r '.metadata.resourceVersion' <<< "$node") || return 1
    rc=0
    bb-node-annotate-cas "$rv" "$1" || rc=$?
    (( rc == 0 )) && return 0
    (( rc == 9 )) || return 1
    bb-log "annotating the node conflicted (attempt $try); retrying"
    sleep 1
  done
  return 1
}

# bb-node-has-annotation NODE-JSON KEY
bb-node-has-annotation() { jq -e --arg k "$2" '.metadata.annotations // {} | has($k)' <<< "$1" > /dev/null; }

# bb-instance-condition TYPE STATUS REASON MESSAGE: sets one condition on
# this node's Instance (server-side apply with a field manager per
# condition type, so setting one never removes another). The
# transition time changes only with the status. Best effort: a node whose
# Instance does not exist yet reports nothing.
bb-instance-condition() {
  local type=$1 status=$2 reason=$3 message=$4 name current since
  name=$(bb-node-name)
  current=$(bb-kube-api GET "/apis/deckhouse.io/v1alpha1/instances/$name" 2>/dev/null) || return 0
  since=$(jq -r --arg t "$type" --arg s "$status" \
    '[.status.conditions[]? | select(.type == $t and .status == $s) | .lastTransitionTime][0] // empty' <<< "$current" 2>/dev/null) || return 0
  since=${since:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
  jq -n --arg n "$name" --arg t "$type" --arg s "$status" --arg r "$reason" --arg m "${message:0:1000}" --arg since "$since" \
    '{apiVersion: "deckhouse.io/v1alpha1", kind: "Instance", metadata: {name: $n},
      status: {conditions: [{type: $t, status: $s, reason: $r, message: $m, lastTransitionTime: $since}]}}' |
    bb-kube-api PATCH "/apis/deckhouse.io/v1alpha1/instances/$name/status?fieldManager=bashible-$type&force=true" \
      application/apply-patch+yaml > /dev/null || bb-log "could not set $type on Instance $name"
}

# bb-event TYPE REASON NOTE: an events.k8s.io/v1 Event about this Node.
# Only a joined node reports; a bootstrap token may not create Events.
bb-event() {
  [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]] || return 0
  local name
  name=$(bb-node-name)
  jq -n --arg n "$name" --arg type "$1" --arg reason "$2" --arg note "${3:0:1000}" --arg now "$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)" \
    '{apiVersion: "events.k8s.io/v1", kind: "Event",
      metadata: {generateName: ("bashible-" + $n + "-"), namespace: "default", labels: {"bashible.deckhouse.io/node": $n}},
      eventTime: $now, reportingController: "bashible", reportingInstance: $n, action: "Converge",
      type: $type, reason: $reason, note: $note,
      regarding: {apiVersion: "v1", kind: "Node", name: $n}}' |
    bb-kube-api POST /apis/events.k8s.io/v1/namespaces/default/events > /dev/null || bb-log "could not record event $2"
}

# bb-wait-for-update-approval: asks for update approval and waits for it,
# with no time limit (a person may be the one to approve). bashible.sh
# calls it before any step of a new configuration or of a reboot a person
# asked for; bb-disruption-gate calls it for a disruption on a node without
# one. The request (update.node.deckhouse.io/waiting-for-approval) removes
# the node's configuration checksum in the same compare-and-set on the
# Node's resourceVersion, so the node no longer counts as up to date and
# node-manager ends its update only when it reports again; a node approved
# already only loses the checksum. An approval that lands between the write
# and the re-read does not make the node ask again.
bb-wait-for-update-approval() {
  local node rv rc tries=0 ask
  node=$(bb-node-get)
  until ! bb-node-has-annotation "$node" node.deckhouse.io/configuration-checksum &&
      { bb-node-has-annotation "$node" update.node.deckhouse.io/waiting-for-approval ||
        bb-node-has-annotation "$node" update.node.deckhouse.io/approved; }; do
    ask='{"update.node.deckhouse.io/waiting-for-approval": "", "node.deckhouse.io/configuration-checksum": null}'
    if bb-node-has-annotation "$node" update.node.deckhouse.io/approved; then
      ask='{"node.deckhouse.io/configuration-checksum": null}'
    fi
    rv=$(jq -r '.metadata.resourceVersion' <<< "$node")
    rc=0
    bb-node-annotate-cas "$rv" "$ask" || rc=$?
    if (( rc != 0 )); then
      # Only a conflict (someone else wrote the Node) is worth retrying.
      tries=$(( tries + 1 ))
      if (( rc != 9 || tries >= 30 )); then
        bb-log "could not ask for update approval"
        return 1
      fi
      sleep 1
    fi
    node=$(bb-node-get)
  done
  if ! bb-node-has-annotation "$node" update.node.deckhouse.io/approved; then
    bb-instance-condition WaitingApproval True UpdateApprovalRequired \
      "approve with: kubectl annotate node $(bb-node-name) update.node.deckhouse.io/approved="
    bb-log "waiting for update.node.deckhouse.io/approved"
    until bb-node-has-annotation "$node" update.node.deckhouse.io/approved; do
      sleep "$BASHIBLE_POLL_SECONDS"
      node=$(bb-node-get) || true
    done
  fi
  bb-instance-condition WaitingApproval False Approved "the update is approved"
}

# bb-disruption-gate: call before anything that disrupts workloads
# (restarting the container runtime, rebooting). It returns when the
# disruption may go ahead; on the first run that is at once (a joining
# machine has no workloads). A disruption is part of an update: a node
# without an update approval asks for one first, since node-manager grants
# disruptions only to approved nodes, at most maxConcurrent at once. In
# RollingUpdate mode the node asks to be replaced instead: the step ends
# here and bashible.sh stops the run without recording the configuration.
bb-disruption-gate() {
  if [[ -e "$BASHIBLE_DIR/first_run" ]]; then
    return 0
  fi
  # Approved for this configuration already (the flag holds its checksum).
  if [[ "$(cat "$BASHIBLE_DIR/flags/disruption" 2>/dev/null || true)" == "${BASHIBLE_CHECKSUM:-}" ]]; then
    return 0
  fi
  local node
  node=$(bb-node-get)
  if ! bb-node-has-annotation "$node" update.node.deckhouse.io/approved; then
    bb-log "a disruption needs an update approval first"
    bb-wait-for-update-approval
    node=$(bb-node-get)
  fi
  if [[ "$BASHIBLE_APPROVAL_MODE" == RollingUpdate ]]; then
    bb-log "a disruptive change is needed; in RollingUpdate mode the node asks to be replaced"
    bb-node-annotate '{"update.node.deckhouse.io/rolling-update": ""}'
    bb-instance-condition WaitingDisruptionApproval True RollingUpdate "the node waits to be replaced"
    bb-flag-set stop-run
    exit 0
  fi
  if ! bb-node-has-annotation "$node" update.node.deckhouse.io/disruption-approved; then
    bb-node-annotate '{"update.node.deckhouse.io/disruption-required": ""}'
    bb-instance-condition WaitingDisruptionApproval True DisruptionApprovalRequired \
      "approve with: kubectl annotate node $(bb-node-name) update.node.deckhouse.io/disruption-approved="
    bb-log "waiting for update.node.deckhouse.io/disruption-approved"
    until bb-node-has-annotation "$node" update.node.deckhouse.io/disruption-approved; do
      sleep "$BASHIBLE_POLL_SECONDS"
      node=$(bb-node-get) || true
    done
  fi
  bb-instance-condition WaitingDisruptionApproval False DisruptionApproved ""
  mkdir -p "$BASHIBLE_DIR/flags"
  echo "${BASHIBLE_CHECKSUM:-}" > "$BASHIBLE_DIR/flags/disruption"
}
# The name Deckhouse's steps call.
bb-deckhouse-get-disruptive-update-approval() { bb-disruption-gate; }

# ---- Helpers for configuration steps (documented in templates/AUTHORING.md).

# bb-bundle prints this machine's OS bundle (debian, ubuntu-lts or centos),
# from /etc/os-release; on any other OS it fails, naming what is supported.
bb-bundle() {
  local os_release=${BASHIBLE_ROOT}/etc/os-release id id_like
  # shellcheck disable=SC1090 # os-release is a shell fragment by definition
  id=$(. "$os_release" && echo "${ID:-}")
  # shellcheck disable=SC1090
  id_like=$(. "$os_release" && echo "${ID_LIKE:-}")
  case "$id" in
    debian) echo debian ;;
    ubuntu) echo ubuntu-lts ;;
    centos|rocky|almalinux|rhel) echo centos ;;
    *)
      case " $id_like " in
        *" rhel "*) echo centos ;;
        *) bb-log "unsupported OS '$id': supported are debian (12, 13), ubuntu-lts (22.04, 24.04) and centos (RHEL family 9: Rocky, Alma, CentOS Stream)"; return 1 ;;
      esac
      ;;
  esac
}

# bb-arch prints the machine's architecture as Kubernetes names it: amd64 or arm64.
bb-arch() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64|arm64) echo arm64 ;;
    *) bb-log "unsupported architecture $(uname -m): supported are amd64 and arm64"; return 1 ;;
  esac
}

# Changes are recorded as marks that outlive the step (and a failed run),
# so the unit that depends on a file is restarted even if the step that
# wrote it, or the run, failed before the restart: a mark is cleared only
# once the restart succeeded.
bb-mark-changed() { bb-flag-set "changed-$1"; }
bb-changed() { bb-flag-is-set "changed-$1"; }
bb-changed-clear() { bb-flag-unset "changed-$1"; }

# bb-write-if-changed PATH [MODE] [MARK]: writes stdin to PATH only when the
# content or the mode (default 0644) differs, atomically, and then logs it
# and sets MARK (see bb-changed). Always returns 0 when nothing failed.
bb-write-if-changed() {
  local path=$1 mode=${2:-0644} mark=${3:-} tmp
  mkdir -p "$(dirname "$path")"
  tmp=$(mktemp "${path}.XXXXXX")
  cat > "$tmp"
  if [[ -f "$path" && ! -L "$path" ]] && cmp -s "$tmp" "$path" && [[ "$(stat -c %a "$path")" == "${mode#0}" ]]; then
    rm -f "$tmp"
    return 0
  fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$path"
  bb-log "wrote $path"
  if [[ -n "$mark" ]]; then
    bb-mark-changed "$mark"
  fi
}

# bb-remove PATH [MARK]: removes a file (or directory) if it exists, then
# logs it and sets MARK.
bb-remove() {
  if [[ -e "$1" || -L "$1" ]]; then
    rm -rf "$1"
    bb-log "removed $1"
    if [[ -n "${2:-}" ]]; then
      bb-mark-changed "$2"
    fi
  fi
}

# bb-with-proxy COMMAND...: runs COMMAND with the cluster's proxy settings
# (written by the proxy step to /etc/node-manager/proxy.env) in its environment.
bb-with-proxy() {
  (
    if [[ -f /etc/node-manager/proxy.env ]]; then
      set -a
      # shellcheck disable=SC1091 # written by the proxy step
      . /etc/node-manager/proxy.env
      set +a
    fi
    exec "$@"
  )
}

# bb-sha256 FILE prints the file's sha256.
bb-sha256() { sha256sum "$1" | cut -d' ' -f1; }

# bb-download URL SHA256 DEST [MODE] [MARK]: makes DEST the file at URL,
# verified against SHA256. Nothing is fetched when DEST already has that
# sum. The download is retried, bounded in time, goes through the
# cluster's proxy, and replaces DEST only once verified; then MARK is set.
bb-download() {
  local url=$1 sum=$2 dest=$3 mode=${4:-0644} mark=${5:-} tmp got
  if [[ -z "$sum" ]]; then
    bb-log "no sha256 is recorded for $url; refusing to install it unverified (fill the version map: hack/update-versions.sh, or ClusterConfiguration packageSource.versions)"
    return 1
  fi
  if [[ -f "$dest" ]] && [[ "$(bb-sha256 "$dest")" == "$sum" ]]; then
    if [[ "$(stat -c %a "$dest")" != "${mode#0}" ]]; then
      chmod "$mode" "$dest"
    fi
    return 0
  fi
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp "${dest}.XXXXXX")
  bb-log "downloading $url"
  if ! bb-with-proxy curl --fail --silent --show-error --location --retry 5 --retry-delay 3 --retry-all-errors \
      --connect-timeout 10 --max-time 900 -o "$tmp" "$url"; then
    rm -f "$tmp"
    bb-log "downloading $url failed"
    return 1
  fi
  got=$(bb-sha256 "$tmp")
  if [[ "$got" != "$sum" ]]; then
    rm -f "$tmp"
    bb-log "$url has sha256 $got, not the recorded $sum; refusing it"
    return 1
  fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
  bb-log "installed $dest ($sum)"
  if [[ -n "$mark" ]]; then
    bb-mark-changed "$mark"
  fi
}

# bb-package-install PACKAGE...: installs the packages that are missing,
# with apt-get or dnf, through the cluster's proxy. Installed packages are
# left alone (no upgrade). Each attempt is bounded in time; a failed one
# refreshes the package lists and is retried, three attempts in all.
bb-package-install() {
  local bundle pkg missing=() try
  bundle=$(bb-bundle)
  for pkg in "$@"; do
    case "$bundle" in
      centos) rpm -q --quiet "$pkg" || missing+=("$pkg") ;;
      *) [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" == "install ok installed" ]] || missing+=("$pkg") ;;
    esac
  done
  if (( ${#missing[@]} == 0 )); then
    return 0
  fi
  bb-log "installing ${missing[*]}"
  for try in 1 2 3; do
    case "$bundle" in
      centos)
        if bb-with-proxy timeout 900 dnf install -y -q --setopt=install_weak_deps=False "${missing[@]}"; then
          return 0
        fi
        bb-log "dnf install failed (attempt $try of 3); refreshing the package metadata"
        bb-with-proxy timeout 600 dnf makecache -q || true
        ;;
      *)
        # needrestart (Ubuntu) must not restart services behind the steps' back;
        # --no-remove: a conflict (Docker's containerd.io provides runc, say)
        # fails the install instead of letting apt remove what the machine runs.
        if bb-with-proxy timeout 900 env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 NEEDRESTART_MODE=l apt-get install -y -q --no-install-recommends --no-remove \
            -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confold -o Acquire::Retries=3 "${missing[@]}"; then
          return 0
        fi
        bb-log "apt-get install failed (attempt $try of 3); refreshing the package lists"
        bb-with-proxy timeout 600 apt-get update -q -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 || true
        ;;
    esac
    sleep "$(( try * 5 ))"
  done
  bb-log "could not install ${missing[*]}"
  return 1
}

# bb-unit-converge UNIT [MARK] [restart|reload]: makes a systemd unit
# enabled and running its current configuration. When MARK (default: the
# unit's name) is set, systemd reloads the unit files and the unit is
# restarted (or reloaded), and the mark is cleared; otherwise the unit is
# only enabled and started if it is not already. Nothing else is touched,
# so an unchanged node sees no restart.
bb-unit-converge() {
  local unit=$1 mark=${2:-$1} how=${3:-restart}
  if bb-changed "$mark"; then
    systemctl daemon-reload
    systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl enable --quiet "$unit"
    if [[ "$how" == reload ]]; then
      systemctl reload-or-restart "$unit"
    else
      systemctl restart "$unit"
    fi
    bb-changed-clear "$mark"
    bb-log "$unit: ${how}ed for its new configuration"
    return 0
  fi
  systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl enable --quiet "$unit"
  if ! systemctl is-active --quiet "$unit"; then
    systemctl start "$unit"
    bb-log "$unit: started"
  fi
}
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
# in, so a half-written bundle is never run. The bundle is read one key at
# a time, by name, so no content can make a step of another name: every
# name must be a step name (checked whole, a newline included), every value
# a string without a NUL byte (bash cannot run one, and it is how a value
# could pose as a name). Otherwise, or without steps, the whole bundle is
# refused and the node keeps the steps it has.
fetch_steps() {
  local json=$1 new keys key count=0
  if ! jq -e '.data | type == "object" and length > 0 and all(.[]; type == "string")' <<< "$json" > /dev/null 2>&1; then
    bb-log "refusing a bundle without steps, or with a step that is not text"
    return 1
  fi
  if ! jq -e --arg re "$STEP_NAME_RE" '.data | keys | all(test($re))' <<< "$json" > /dev/null; then
    bb-log "refusing the bundle: a step name is not NNN_<letters, digits, - _ .> (at most 250 bytes): $(jq -c --arg re "$STEP_NAME_RE" '[.data | keys[] | select(test($re) | not)] | .[:3]' <<< "$json" | head -c 600)"
    return 1
  fi
  if ! jq -e '.data | all(.[]; explode | all(. != 0))' <<< "$json" > /dev/null; then
    bb-log "refusing the bundle: step $(jq -r '[.data | to_entries[] | select(.value | explode | any(. == 0)) | .key][0]' <<< "$json") holds a NUL byte"
    return 1
  fi
  # Called in a condition, so set -e does not hold here: every command
  # that can fail says so.
  keys=$(jq -r '.data | keys[]' <<< "$json") || return 1
  new=$(mktemp -d "$BASHIBLE_DIR/tmp/bundle_steps.XXXXXX") || return 1
  while IFS= read -r key; do
    # Checked again here: what is written is exactly what jq checked.
    if [[ ! "$key" =~ $STEP_NAME_RE_BASH ]] || [[ -e "$new/$key" ]]; then
      bb-log "refusing a step named '$key'"
      return 1
    fi
    jq -j --arg k "$key" '.data[$k] | strings' <<< "$json" > "$new/$key" || { bb-log "could not write step $key"; return 1; }
    count=$(( count + 1 ))
  done <<< "$keys"
  if (( count != $(jq '.data | length' <<< "$json") )); then
    bb-log "refusing the bundle: $count steps were written, the bundle has $(jq '.data | length' <<< "$json")"
    return 1
  fi
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
  if [[ -d "$BASHIBLE_DIR/bundle_steps" ]]; then
    mv "$BASHIBLE_DIR/bundle_steps" "$BASHIBLE_DIR/bundle_steps.old" || return 1
  fi
  mv "$new" "$BASHIBLE_DIR/bundle_steps" || return 1
  rm -rf "$BASHIBLE_DIR/bundle_steps.old"
}

# reboot_request NODE-JSON prints what the Node's reboot annotation asks of
# this run: "none"; "reboot" (a request not answered yet: go through
# approval and a disruption, and reboot at the end); or "answered" (the
# machine rebooted for it since: the run converges, then clears it).
reboot_request() {
  if ! bb-node-has-annotation "$1" update.node.deckhouse.io/reboot; then
    echo none
  elif [[ -s "$BASHIBLE_DIR/flags/reboot-answered" ]] &&
      [[ "$(cat "$BASHIBLE_DIR/flags/reboot-answered")" != "$(boot_id)" ]]; then
    echo answered
  else
    echo reboot
  fi
}

main() {
  bb-flag-unset stop-run
  self_update
  BASHIBLE_BUNDLE=$(bb-bundle)
  export BASHIBLE_BUNDLE

  local json checksum node="{}" step reboot=none approval=no
  json=$(bb-kube-api GET "$API_PATH/nodegroupbundles/$NODE_GROUP")
  checksum=$(jq -r '.metadata.annotations["bashible.deckhouse.io/configuration-checksum"] // empty' <<< "$json" 2>/dev/null || true)
  [[ -n "$checksum" ]] || { bb-log "the served bundle has no checksum annotation"; return 1; }

  if [[ ! -e "$BASHIBLE_DIR/first_run" ]]; then
    node=$(bb-node-get)
    reboot=$(reboot_request "$node")
    if in_sync "$checksum" "$node"; then
      if [[ "$(jq -r '.metadata.annotations["node.deckhouse.io/configuration-checksum"] // ""' <<< "$node")" != "$checksum" ]]; then
        bb-node-annotate "$(jq -n --arg c "$checksum" '{"node.deckhouse.io/configuration-checksum": $c}')"
      fi
      bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} is applied; nothing to do"
      return 0
    fi
    # A new configuration, and a reboot a person asked for, are updates:
    # approved before any step runs. A converge of the configuration the
    # node has (after a reboot) needs no approval unless a step asks for a
    # disruption, and then bb-disruption-gate asks for it.
    if [[ "$(cat "$BASHIBLE_DIR/configuration_checksum" 2>/dev/null || true)" != "$checksum" || "$reboot" == reboot ]]; then
      approval=yes
    fi
  else
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
  # Once joined, the node needs its bootstrap token no more.
  if [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]]; then
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
    bb-instance-condition BashibleReady Unknown Rebooting "configuration ${checksum:0:12} applied; rebooting"
    bb-log "rebooting, as asked"
    bb-event Normal BashibleReboot "rebooting, as asked"
    ${BASHIBLE_REBOOT_COMMAND:-systemctl reboot}
    return 0
  fi
  # The reboot request this run answered (by rebooting before it) is
  # cleared; one made since stays.
  bb-node-annotate "$(jq -n --arg c "$checksum" --arg answered "$reboot" \
    '{"node.deckhouse.io/configuration-checksum": $c} + if $answered == "answered" then {"update.node.deckhouse.io/reboot": null} else {} end')"
  rm -f "$BASHIBLE_DIR/flags/reboot-answered"
  bb-instance-condition BashibleReady True StepsCompleted "configuration ${checksum:0:12} applied"
  bb-event Normal BashibleConverged "configuration ${checksum:0:12} applied"
  bb-log "configuration ${checksum:0:12} applied"
}

main
