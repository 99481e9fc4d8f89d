#!/usr/bin/env bash
# bashible: the node agent of node group storage, served by
# bashible-apiserver as bashibles/storage and run every minute by
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
NODE_GROUP='storage'
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
# Library of bashible for node group storage; managed by node-manager.
# shellcheck shell=bash

# Paths hang off BASHIBLE_ROOT, empty on a real node; tests point it at a
# directory to run a node without touching the machine.
BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
# shellcheck disable=SC2034 # for the steps that source this library
BASHIBLE_NODE_GROUP='storage'
BASHIBLE_APPROVAL_MODE='Automatic'
# API endpoints from the cluster; BASHIBLE_API_ENDPOINTS (space-separated
# host:port) overrides them where the served ones are not reachable.
read -r -a BASHIBLE_ENDPOINTS <<< "${BASHIBLE_API_ENDPOINTS:-192.168.10.2:6443}"
BASHIBLE_POLL_SECONDS=${BASHIBLE_POLL_SECONDS:-10}
# How long one watch of the Node (bb-node-wait-annotation) stays open
# before the node reads its Node again.
BASHIBLE_WATCH_SECONDS=${BASHIBLE_WATCH_SECONDS:-300}

# A process start is the costly part of a run (a run starts several
# hundred otherwise, most of them for a date, a temporary file or a JSON
# document): the helpers below use bash itself where they can. What they
# make, they make exactly as the commands they replace did.

# bb-utc-now VAR [FORMAT]: sets VAR to the time in UTC, as strftime FORMAT
# (default 2006-01-02T15:04:05Z's form).
bb-utc-now() {
  TZ=UTC0 printf -v "$1" "%(${2:-%Y-%m-%dT%H:%M:%SZ})T" -1
}

# bb-json-string VAR TEXT: sets VAR to TEXT as a JSON string, quotes
# included. Text with bytes outside ASCII goes through jq, which also
# replaces what is not UTF-8; plain ASCII is escaped here.
bb-json-string() {
  local _bb_s=$2 _bb_i _bb_c _bb_e
  if [[ "$_bb_s" == *[![:ascii:]]* ]]; then
    _bb_s=$(jq -n --arg s "$2" '$s') || return 1
    printf -v "$1" '%s' "$_bb_s"
    return 0
  fi
  _bb_s=${_bb_s//\\/\\\\}
  _bb_s=${_bb_s//\"/\\\"}
  if [[ "$_bb_s" == *[[:cntrl:]]* ]]; then
    _bb_s=${_bb_s//$'\n'/\\n}
    _bb_s=${_bb_s//$'\t'/\\t}
    _bb_s=${_bb_s//$'\r'/\\r}
    for _bb_i in {1..31} 127; do
      printf -v _bb_c '%02x' "$_bb_i"
      printf -v _bb_c '%b' "\\x$_bb_c"
      [[ "$_bb_s" == *"$_bb_c"* ]] || continue
      printf -v _bb_e '\\u%04x' "$_bb_i"
      _bb_s=${_bb_s//"$_bb_c"/"$_bb_e"}
    done
  fi
  printf -v "$1" '"%s"' "$_bb_s"
}

# bb-log MESSAGE...: a line with the time and the step's name, on stderr.
bb-log() {
  local now
  bb-utc-now now
  printf '%s %s: %s\n' "$now" "${BASHIBLE_STEP:-bashible}" "$*" >&2
}

# Flags carry facts between steps of one run (and across runs until unset),
# as files in BB_FLAG_DIR. Deckhouse's names; bb-flag-is-set is bb-flag?
# under a name that is no glob in a command position.
BB_FLAG_DIR=$BASHIBLE_DIR/flags
bb-flag-set() {
  if [[ ! -d "$BB_FLAG_DIR" ]]; then
    bb-log-debug "Creating flag directory at '$BB_FLAG_DIR'"
    mkdir -p "$BB_FLAG_DIR"
  fi
  bb-log-info "Creating flag '$1' at '$BB_FLAG_DIR'"
  touch "$BB_FLAG_DIR/$1"
}
bb-flag-unset() {
  [[ ! -e "$BB_FLAG_DIR/$1" && ! -L "$BB_FLAG_DIR/$1" ]] || rm -f "$BB_FLAG_DIR/$1"
}
bb-flag-is-set() { [[ -f "$BB_FLAG_DIR/$1" ]]; }
bb-flag?() { bb-flag-is-set "$@"; }

# bb-node-name prints this node's name.
bb-node-name() {
  local name
  bb-node-name-into name
  echo "$name"
}

# bb-node-name-into VAR sets VAR to this node's name.
bb-node-name-into() {
  local _bb_name
  if [[ -n "${BASHIBLE_NODE_NAME:-}" ]]; then
    _bb_name=$BASHIBLE_NODE_NAME
  elif [[ -s "$BASHIBLE_DIR/discovered-node-name" ]]; then
    IFS= read -r _bb_name < "$BASHIBLE_DIR/discovered-node-name" || true
  else
    # What the kubelet registers by default: the host name, lowercased.
    _bb_name=$(uname -n)
    _bb_name=${_bb_name,,}
  fi
  printf -v "$1" '%s' "$_bb_name"
}

# bb-kube-api METHOD PATH [CONTENT-TYPE [BODY]]: one request to the API, the
# body of a write as BODY or on stdin, response body on stdout. Credentials: the kubelet's
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

# bb-kube-api-options ARRAY appends to ARRAY the curl options of every
# request: the API reached directly (never through a proxy from the
# environment), the cluster's CA, and the node's credentials. Untraced
# callers only: it handles the bootstrap token.
bb-kube-api-options() {
  local -n _bb_options=$1
  local cert=${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem token
  _bb_options+=(--silent --show-error --noproxy '*' --connect-timeout 5 --cacert "$BASHIBLE_DIR/ca.crt")
  if [[ -s "$cert" ]]; then
    _bb_options+=(--cert "$cert" --key "$cert")
  elif [[ -s "$BASHIBLE_DIR/bootstrap-token" ]]; then
    IFS= read -r token < "$BASHIBLE_DIR/bootstrap-token" || true
    (umask 077 && printf 'Authorization: Bearer %s\n' "$token" > "$BASHIBLE_DIR/bootstrap-token-header")
    _bb_options+=(-H "@$BASHIBLE_DIR/bootstrap-token-header")
  else
    bb-log "no credentials: neither the kubelet certificate nor $BASHIBLE_DIR/bootstrap-token exists"
    return 1
  fi
}

# Exit status: 0 on success, 9 on 409 Conflict, 4 on 404 Not Found, 1 on
# anything else.
bb-kube-api-untraced() {
  local method=$1 path=$2 ctype=${3:-application/json}
  local -a args=()
  bb-kube-api-options args || return 1
  args+=(--max-time 30 -X "$method")
  # The request's files are this process's own, in the run's scratch
  # space (owner-only), emptied once the answer is read; bb-kube-api-forget.
  local dir=$BASHIBLE_DIR/tmp endpoint code out data=""
  [[ -d "$dir" ]] || (umask 077 && mkdir -p "$dir")
  local body=$dir/api.$BASHPID
  if [[ "$method" != GET ]]; then
    if (( $# >= 4 )); then
      data=$4
    else
      IFS= read -r -d '' data || true
    fi
    printf '%s' "$data" > "$body.in"
    args+=(-H "Content-Type: $ctype" --data-binary "@$body.in")
  fi
  for endpoint in "${BASHIBLE_ENDPOINTS[@]}"; do
    : > "$body"
    code=""
    curl "${args[@]}" -o "$body" -w '%{http_code}' "https://$endpoint$path" > "$body.code" 2>/dev/null || true
    IFS= read -r code < "$body.code" || true
    case "${code:-000}" in
      2??)
        out=""
        IFS= read -r -d '' out < "$body" || true
        bb-kube-api-forget "$body"
        printf '%s' "$out"
        return 0
        ;;
      000)
        bb-log "$method $path: $endpoint did not answer"
        ;;
      *)
        out=$(jq -r '.message // empty' "$body" 2>/dev/null || true)
        if [[ -z "$out" ]]; then
          IFS= read -r -N 300 out < "$body" || true
        fi
        bb-log "$method $path: HTTP $code from $endpoint: $out"
        bb-kube-api-forget "$body"
        [[ "$code" == 409 ]] && return 9
        [[ "$code" == 404 ]] && return 4
        return 1
        ;;
    esac
  done
  bb-kube-api-forget "$body"
  bb-log "$method $path: no API endpoint answered (tried: ${BASHIBLE_ENDPOINTS[*]:-none})"
  return 1
}

# bb-kube-api-forget BODY empties a request's files. The shell of a run of
# bashible.sh, or of one of its steps, keeps them, empty, for its next
# request (BASHIBLE_RUN_TMP is the run's scratch space, which the run
# removes when it ends). A subshell ($(bb-kube-api ...)) is gone after its
# request, and a new one has a new process id: it removes them, or a node
# polling for its approval for days would pile up files. So does any
# request outside a run.
bb-kube-api-forget() {
  if [[ "${BASHIBLE_RUN_TMP:-}" == "$BASHIBLE_DIR/tmp" && "$BASHPID" == "$$" ]]; then
    : > "$1"
    [[ ! -e "$1.in" ]] || : > "$1.in"
  else
    rm -f "$1" "$1.in" "$1.code"
  fi
}

# bb-kube-api-watch PATH FILTER [JQ-OPTIONS...]: watches PATH (a watch
# request, with its own timeoutSeconds) at the first API endpoint and
# returns 0 at the first event the jq FILTER accepts, 1 once the watch ends
# without one (its timeout, an error answer, the endpoint gone). The watch
# is closed at once either way. Tracing is suspended, as in bb-kube-api.
bb-kube-api-watch() {
  if [[ $- == *x* ]]; then
    set +x
    local rc=0
    bb-kube-api-watch-untraced "$@" || rc=$?
    set -x
    return "$rc"
  fi
  bb-kube-api-watch-untraced "$@"
}

bb-kube-api-watch-untraced() {
  local path=$1 filter=$2 event fd pid rc=1
  shift 2
  (( ${#BASHIBLE_ENDPOINTS[@]} > 0 )) || return 1
  local -a args=()
  bb-kube-api-options args || return 1
  args+=(--no-buffer --max-time $(( BASHIBLE_WATCH_SECONDS + 30 )))
  # The watch must not hold the run's lock (a run killed while it waits
  # would leave it to the next runs until the watch's timeout).
  exec {fd}< <(
    [[ -z "${BASHIBLE_LOCK_FD:-}" ]] || exec {BASHIBLE_LOCK_FD}>&-
    exec curl "${args[@]}" "https://${BASHIBLE_ENDPOINTS[0]}$path" 2>/dev/null
  )
  pid=$!
  while IFS= read -r -u "$fd" event; do
    if jq -e "$@" "$filter" <<< "$event" > /dev/null 2>&1; then
      rc=0
      break
    fi
  done
  exec {fd}<&-
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return "$rc"
}

# bb-node-wait-annotation KEY returns once this node's Node has the
# annotation KEY, however long that takes (a person may be the one to
# give it). Between two reads of the Node it watches it from the version
# read, so the annotation is seen the moment it is set rather than at the
# next poll, with one request held open instead of a read every
# BASHIBLE_POLL_SECONDS; a watch that cannot be held (refused, or the
# first endpoint down) costs a pause of BASHIBLE_POLL_SECONDS, as a poll.
bb-node-wait-annotation() {
  local key=$1 node name rv began
  bb-node-name-into name
  while :; do
    began=$SECONDS
    if node=$(bb-node-get); then
      ! bb-node-has-annotation "$node" "$key" || return 0
      rv=$(jq -r '.metadata.resourceVersion // empty' <<< "$node" 2>/dev/null || true)
      # shellcheck disable=SC2016 # $k is jq's, bound by --arg
      if [[ -n "$rv" ]] && bb-kube-api-watch "/api/v1/nodes?fieldSelector=metadata.name%3D$name&watch=true&resourceVersion=$rv&timeoutSeconds=$BASHIBLE_WATCH_SECONDS" \
          '.type == "MODIFIED" and (.object.metadata.annotations // {} | has($k))' --arg k "$key"; then
        continue
      fi
    fi
    (( SECONDS - began >= BASHIBLE_POLL_SECONDS )) || sleep "$BASHIBLE_POLL_SECONDS"
  done
}

# bb-node-get prints this node's Node object.
bb-node-get() {
  local name
  bb-node-name-into name
  bb-kube-api GET "/api/v1/nodes/$name"
}

# bb-node-annotate-cas RESOURCE-VERSION ANNOTATIONS-JSON: merge-patches the
# Node's annotations (null removes one), only if the Node is still at
# RESOURCE-VERSION: a compare-and-set, so two writers never both win.
bb-node-annotate-cas() {
  local name rv
  bb-node-name-into name
  bb-json-string rv "$1"
  bb-kube-api PATCH "/api/v1/nodes/$name" application/merge-patch+json \
    "{\"metadata\":{\"resourceVersion\":$rv,\"annotations\":$2}}" > /dev/null
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

# bb-version-ge A B: whether version A is B or later (sort -V).
bb-version-ge() { [[ "$(printf '%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }

# bb-node-capabilities CRI prints the merge patch of this node's metadata
# that reports what the node can run, as Deckhouse's bashible decides it
# (node-manager's NodeGroup policy refuses a group's changes its nodes
# cannot take by these):
#   node.deckhouse.io/cgroup: the file system type of /sys/fs/cgroup,
#     cgroup2fs (cgroup v2), tmpfs (cgroup v1), else unknown;
#   node.deckhouse.io/containerd-v2-unsupported: "" when the node cannot
#     run containerd 2 (kernel before 5.8, systemd before 244 or none, no
#     cgroup v2, no EROFS), removed otherwise, with what it lacks in the
#     annotation node.deckhouse.io/containerd-v2-err (a JSON array);
#   node.deckhouse.io/containerd-config: custom when
#     /etc/containerd/conf.d holds .toml files, default when not, on a
#     node whose runtime (CRI) is Containerd; removed otherwise.
bb-node-capabilities() {
  local cri=$1 cgroup kernel systemd config=null unsupported=null err=null errs=()
  cgroup=$(stat -fc %T "${BASHIBLE_ROOT}/sys/fs/cgroup" 2> /dev/null) || cgroup=unknown
  [[ "$cgroup" == cgroup2fs || "$cgroup" == tmpfs ]] || cgroup=unknown
  kernel=$(uname -r)
  bb-version-ge "${kernel%%-*}" 5.8 || errs+=(kernel)
  if command -v systemctl > /dev/null; then
    systemd=$(systemctl --version 2> /dev/null | awk 'NR == 1 { print $2 }')
    bb-version-ge "${systemd:-0}" 244 || errs+=(systemd)
  else
    errs+=(systemd)
  fi
  [[ "$cgroup" == cgroup2fs ]] || errs+=(cgroupv2)
  grep -qsw erofs "${BASHIBLE_ROOT}/proc/filesystems" || modprobe -qn erofs 2> /dev/null || errs+=(erofs)
  if (( ${#errs[@]} )); then
    unsupported='""'
    err=$(printf '%s\n' "${errs[@]}" | jq -cRs 'split("\n") | map(select(. != "")) | tojson')
  fi
  if [[ "$cri" == Containerd ]]; then
    config='"default"'
    if compgen -G "${BASHIBLE_ROOT}/etc/containerd/conf.d/*.toml" > /dev/null; then
      config='"custom"'
    fi
  fi
  jq -cn --arg cgroup "$cgroup" --argjson config "$config" --argjson unsupported "$unsupported" --argjson err "$err" \
    '{metadata: {labels: {"node.deckhouse.io/cgroup": $cgroup, "node.deckhouse.io/containerd-config": $config,
      "node.deckhouse.io/containerd-v2-unsupported": $unsupported}, annotations: {"node.deckhouse.io/containerd-v2-err": $err}}}'
}

# bb-node-patch PATCH-JSON: merge-patches this node's Node (its own
# credentials: a node can write only its own Node).
bb-node-patch() {
  local name
  bb-node-name-into name
  bb-kube-api PATCH "/api/v1/nodes/$name" application/merge-patch+json "$1" > /dev/null
}

# bb-node-has-annotation NODE-JSON KEY
bb-node-has-annotation() { jq -e --arg k "$2" '.metadata.annotations // {} | has($k)' <<< "$1" > /dev/null; }

# bb-instance-condition TYPE STATUS REASON MESSAGE: sets one condition on
# this node's Instance (server-side apply with a field manager per
# condition type, so setting one never removes another). The
# transition time changes only with the status; a condition the Instance
# already shows as it is is not written again (a node in sync says so every
# run). Best effort: a node whose Instance does not exist yet reports nothing.
bb-instance-condition() {
  local type=$1 status=$2 reason=$3 message=${4:0:1000} name current since body j
  bb-node-name-into name
  current=$(bb-kube-api GET "/apis/deckhouse.io/v1alpha1/instances/$name" 2>/dev/null) || return 0
  # The transition time of the condition in this status, or "unchanged".
  since=$(jq -r --arg t "$type" --arg s "$status" --arg r "$reason" --arg m "$message" \
    '[.status.conditions[]? | select(.type == $t and .status == $s)][0] // empty |
      if .reason == $r and .message == $m then "unchanged" else .lastTransitionTime // empty end' <<< "$current" 2>/dev/null) || return 0
  [[ "$since" != unchanged ]] || return 0
  [[ -n "$since" ]] || bb-utc-now since
  bb-json-string j "$name"
  body="{\"apiVersion\":\"deckhouse.io/v1alpha1\",\"kind\":\"Instance\",\"metadata\":{\"name\":$j},\"status\":{\"conditions\":[{"
  bb-json-string j "$type"; body+="\"type\":$j,"
  bb-json-string j "$status"; body+="\"status\":$j,"
  bb-json-string j "$reason"; body+="\"reason\":$j,"
  bb-json-string j "$message"; body+="\"message\":$j,"
  bb-json-string j "$since"; body+="\"lastTransitionTime\":$j}]}}"
  bb-kube-api PATCH "/apis/deckhouse.io/v1alpha1/instances/$name/status?fieldManager=bashible-$type&force=true" \
    application/apply-patch+yaml "$body" > /dev/null || bb-log "could not set $type on Instance $name"
}

# bb-event TYPE REASON NOTE [ACTION]: an events.k8s.io/v1 Event about this
# Node (ACTION defaults to Converge). Only a joined node reports; a
# bootstrap token may not create Events.
bb-event() {
  [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]] || return 0
  local name now t=${EPOCHREALTIME/[!0-9]/.} n body j
  bb-node-name-into name
  TZ=UTC0 printf -v now '%(%Y-%m-%dT%H:%M:%S)T.%sZ' "${t%.*}" "${t#*.}"
  bb-json-string n "$name"
  bb-json-string j "bashible-$name-"
  body="{\"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\","
  body+="\"metadata\":{\"generateName\":$j,\"namespace\":\"default\",\"labels\":{\"bashible.deckhouse.io/node\":$n}},"
  body+="\"eventTime\":\"$now\",\"reportingController\":\"bashible\",\"reportingInstance\":$n,"
  bb-json-string j "${4:-Converge}"; body+="\"action\":$j,"
  bb-json-string j "$1"; body+="\"type\":$j,"
  bb-json-string j "$2"; body+="\"reason\":$j,"
  bb-json-string j "${3:0:1000}"; body+="\"note\":$j,"
  body+="\"regarding\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":$n}}"
  bb-kube-api POST /apis/events.k8s.io/v1/namespaces/default/events application/json "$body" > /dev/null || bb-log "could not record event $2"
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
    bb-node-wait-annotation update.node.deckhouse.io/approved
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
  local approved_for=""
  [[ ! -s "$BASHIBLE_DIR/flags/disruption" ]] || IFS= read -r approved_for < "$BASHIBLE_DIR/flags/disruption" || true
  if [[ "$approved_for" == "${BASHIBLE_CHECKSUM:-}" ]]; then
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
    bb-node-wait-annotation update.node.deckhouse.io/disruption-approved
  fi
  bb-instance-condition WaitingDisruptionApproval False DisruptionApproved ""
  mkdir -p "$BASHIBLE_DIR/flags"
  echo "${BASHIBLE_CHECKSUM:-}" > "$BASHIBLE_DIR/flags/disruption"
}
# The name Deckhouse's steps call.
bb-deckhouse-get-disruptive-update-approval() { bb-disruption-gate; }

# ---- Helpers for configuration steps (documented in templates/AUTHORING.md).

# bb-bundle prints this machine's OS bundle (debian, ubuntu-lts or centos),
# from /etc/os-release (bb-is-bundle, which prints "unknown" instead); on
# any other OS it fails, naming what is supported.
bb-bundle() {
  local bundle
  bundle=$(bb-is-bundle 2> /dev/null)
  if [[ "$bundle" == unknown ]]; then
    bb-log "unsupported OS '$(bb-os-release-field ID 2> /dev/null || true)': supported are debian (12, 13), ubuntu-lts (22.04, 24.04) and centos (RHEL family 9: Rocky, Alma, CentOS Stream)"
    return 1
  fi
  echo "$bundle"
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
# (written by the proxy step to /etc/node-manager/proxy.env; bb-set-proxy)
# in its environment; without that file, with the environment as it is.
bb-with-proxy() {
  (
    if [[ -f /etc/node-manager/proxy.env ]]; then
      bb-set-proxy
    fi
    exec "$@"
  )
}

# bb-sha256 FILE prints the file's sha256.
bb-sha256() { sha256sum "$1" | cut -d' ' -f1; }

# bb-download takes both forms: node-manager's, URL SHA256 DEST [MODE]
# [MARK] (bb-download-verified), and Deckhouse's, URL [NAME] [true|false]
# (bb-download-to-workspace): three or more arguments whose third is not
# true or false are node-manager's.
bb-download() {
  if (( $# >= 3 )) && [[ "$3" != true && "$3" != false ]]; then
    bb-download-verified "$@"
  else
    bb-download-to-workspace "$@"
  fi
}

# bb-download-verified URL SHA256 DEST [MODE] [MARK]: makes DEST the file at URL,
# verified against SHA256. Nothing is fetched when DEST already has that
# sum. The download is retried, bounded in time, goes through the
# cluster's proxy, and replaces DEST only once verified; then MARK is set.
bb-download-verified() {
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

# bb-package-install takes both forms: OS packages (PACKAGE...,
# bb-os-package-install) and Deckhouse's registry packages
# (NAME:sha256:<hex>..., bb-registry-package-install).
bb-package-install() {
  local arg rp=0
  for arg in "$@"; do
    if [[ "$arg" =~ ^[^:]+:sha256:[0-9a-f]{64}$ ]]; then
      rp=$(( rp + 1 ))
    fi
  done
  if (( rp == 0 )); then
    bb-os-package-install "$@"
  elif (( rp == $# )); then
    bb-registry-package-install "$@"
  else
    bb-log-error "bb-package-install: give either OS packages or registry packages (NAME:sha256:<hex>), not both: $*"
    return 1
  fi
}

# bb-os-package-install PACKAGE...: installs the packages that are missing,
# with apt-get or dnf, through the cluster's proxy. Installed packages are
# left alone (no upgrade). Each attempt is bounded in time; a failed one
# refreshes the package lists and is retried, three attempts in all.
bb-os-package-install() {
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

# ---- Deckhouse's bashbooster helpers (templates/AUTHORING.md, "Deckhouse's helpers").
# shellcheck disable=SC2034 # the BB_* settings are read by steps and by eval

# -- Errors and variables.
BB_ERROR_ASSERT_FAILED=10
BB_ERROR_WORKSPACE_CREATION_FAILED=11
BB_ERROR_EVENT_MAX_DEPTH_REACHED=12
BB_ERROR_TASK_BAD_CONTEXT=13
BB_ERROR_TASK_UNDEFINED=14
BB_ERROR=0
BB_EXIT_CODE=0

# bb-error? keeps the status of the command before it in BB_ERROR and is
# true when that status was not 0.
bb-error?() {
  BB_ERROR=$?
  (( BB_ERROR != 0 ))
}

# bb-var NAME DEFAULT sets NAME to DEFAULT when NAME is empty or unset.
bb-var() {
  local name=$1
  if [[ -z "${!name:-}" ]]; then
    printf -v "$name" '%s' "${2-}"
  fi
}

# -- Logging: "<prefix> [<LEVEL>] <message>" on stderr, from BB_LOG_LEVEL
# (a number or DEBUG, INFO, WARNING, ERROR) up. The prefix is the step's
# name, or bb-<group> when a helper logs (bb-apt, bb-sync...).
BB_LOG_DEBUG=1
BB_LOG_INFO=2
BB_LOG_WARNING=3
BB_LOG_ERROR=4
declare -gA BB_LOG_LEVEL_NAME=([1]=DEBUG [2]=INFO [3]=WARNING [4]=ERROR)
declare -gA BB_LOG_LEVEL_CODE=([DEBUG]=1 [INFO]=2 [WARNING]=3 [ERROR]=4)
bb-var BB_LOG_LEVEL "$BB_LOG_INFO"
bb-var BB_LOG_PREFIX "${BASHIBLE_STEP:-bashible}"
bb-var BB_LOG_TIME 'date +"%Y-%m-%d %H:%M:%S"'
# shellcheck disable=SC2016 # expanded when a line is logged
bb-var BB_LOG_FORMAT '${PREFIX} [${LEVEL}] ${MESSAGE}'
bb-var BB_LOG_USE_COLOR false
declare -gA BB_LOG_COLORS=()
if [[ "$BB_LOG_USE_COLOR" == true ]]; then
  BB_LOG_FORMAT="\${COLOR}${BB_LOG_FORMAT}\${NOCOLOR}"
  BB_LOG_COLORS=(
    [1]="$(tput bold 2> /dev/null || true)$(tput setaf 0 2> /dev/null || true)"
    [2]="$(tput setaf 2 2> /dev/null || true)"
    [3]="$(tput setaf 3 2> /dev/null || true)"
    [4]="$(tput setaf 1 2> /dev/null || true)"
    [NC]="$(tput sgr0 2> /dev/null || true)"
  )
fi

# bb-log-level-code prints BB_LOG_LEVEL as a number.
bb-log-level-code() {
  local level=${BB_LOG_LEVEL:-$BB_LOG_INFO}
  if [[ "$level" =~ ^[0-9]+$ ]]; then
    echo "$level"
  else
    echo "${BB_LOG_LEVEL_CODE[$level]:-$BB_LOG_INFO}"
  fi
}

# bb-log-level-name prints BB_LOG_LEVEL as a name.
bb-log-level-name() {
  local level=${BB_LOG_LEVEL:-$BB_LOG_INFO}
  if [[ "$level" =~ ^[0-9]+$ ]]; then
    echo "${BB_LOG_LEVEL_NAME[$level]:-$level}"
  else
    echo "$level"
  fi
}

# bb-log-prefix prints the prefix of a line logged now: bb-<group> of the
# first helper on the call stack that is not a logging one, otherwise
# BB_LOG_PREFIX.
bb-log-prefix() {
  local prefix
  bb-log-prefix-into prefix
  echo "$prefix"
}

# bb-log-prefix-into VAR sets VAR to bb-log-prefix's answer.
bb-log-prefix-into() {
  local i=1 fn
  while (( i < ${#FUNCNAME[@]} )); do
    case "${FUNCNAME[$i]}" in
      bb-log*|bb-exit|bb-exit-helper|bb-exit-on-error|bb-cleanup) i=$(( i + 1 )) ;;
      *) break ;;
    esac
  done
  fn=${FUNCNAME[$i]:-}
  if [[ "$fn" == bb-* ]]; then
    fn=${fn#bb-}
    printf -v "$1" '%s' "bb-${fn%%-*}"
  else
    printf -v "$1" '%s' "$BB_LOG_PREFIX"
  fi
}

# bb-log-msg LEVEL MESSAGE logs MESSAGE (backslash escapes interpreted) at
# LEVEL through BB_LOG_FORMAT, which may use PREFIX, TIME, LEVEL, MESSAGE,
# COLOR and NOCOLOR. A line below BB_LOG_LEVEL costs no process, and TIME
# is taken only when the format uses it.
# shellcheck disable=SC2034 # the variables are read by the format
bb-log-msg() {
  local code=$(( ${1:-0} )) threshold=${BB_LOG_LEVEL:-$BB_LOG_INFO}
  [[ "$threshold" =~ ^[0-9]+$ ]] || threshold=${BB_LOG_LEVEL_CODE[$threshold]:-$BB_LOG_INFO}
  (( code >= threshold )) || return 0
  local MESSAGE=${2:-} PREFIX TIME="" LEVEL=${BB_LOG_LEVEL_NAME[$code]:-$code} COLOR=${BB_LOG_COLORS[$code]:-} NOCOLOR=${BB_LOG_COLORS[NC]:-}
  bb-log-prefix-into PREFIX
  if [[ "$BB_LOG_FORMAT" == *TIME* ]]; then
    TIME=$(eval "$BB_LOG_TIME")
  fi
  eval "printf '%b\n' \"$BB_LOG_FORMAT\"" >&2
}

bb-log-debug() { bb-log-msg "$BB_LOG_DEBUG" "$*"; }
bb-log-info() { bb-log-msg "$BB_LOG_INFO" "$*"; }
bb-log-warning() { bb-log-msg "$BB_LOG_WARNING" "$*"; }
# bb-log-warn: the short name Deckhouse's own OS detection calls.
bb-log-warn() { bb-log-msg "$BB_LOG_WARNING" "$*"; }
bb-log-error() { bb-log-msg "$BB_LOG_ERROR" "$*"; }

# bb-log-deprecated ALTERNATIVE [CURRENT] warns that CURRENT (default: the
# calling function) is deprecated in favour of ALTERNATIVE.
bb-log-deprecated() {
  bb-log-warning "'${2:-${FUNCNAME[1]:-main}}' is deprecated, use '$1' instead"
}

# bb-log-callstack [FRAME] logs the call stack from FRAME (default 1) at DEBUG.
bb-log-callstack() {
  local frame=$(( ${1:-1} )) msg="Call stack is:" i
  for (( i = frame; i < ${#FUNCNAME[@]}; i++ )); do
    msg+="\n\t${BASH_SOURCE[$i]:-}:${BASH_LINENO[$(( i - 1 ))]:-}\t${FUNCNAME[$i]}()"
  done
  bb-log-debug "$msg"
}

# bb-log-stream-dhctl prefixes every line of stdin with "=== Step output: ".
bb-log-stream-dhctl() {
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do
    printf '=== Step output: %s\n' "$line"
  done
}

# -- Exit and assertions.

# bb-exit CODE MESSAGE logs MESSAGE (INFO for 0, ERROR with the call stack
# otherwise) and exits the step with CODE.
bb-exit() { bb-exit-helper "$(( ${1:-0} ))" "${2:-}"; }

# bb-exit-on-error MESSAGE exits with the status of the command before it,
# logging MESSAGE, when that status was not 0.
bb-exit-on-error() {
  if "bb-error?"; then
    bb-exit-helper "$BB_ERROR" "${1:-}"
  fi
}

bb-exit-helper() {
  local code=$(( ${1:-0} ))
  if (( code == 0 )); then
    bb-log-info "${2:-}"
  else
    bb-log-error "${2:-}"
    bb-log-callstack 3
  fi
  BB_EXIT_CODE=$code
  exit "$code"
}

# bb-assert EXPRESSION [MESSAGE] evaluates EXPRESSION and exits with 10
# (BB_ERROR_ASSERT_FAILED) and MESSAGE when it is false.
bb-assert() {
  local __bb_assertion=$1
  local __bb_message=${2:-Assertion error \'$1\'}
  if ! eval "$__bb_assertion"; then
    bb-exit "$BB_ERROR_ASSERT_FAILED" "$__bb_message"
  fi
}

bb-assert-root() {
  local msg="This script must be run as root!"
  [[ $EUID -eq 0 ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${1:-$msg}"
}
bb-assert-file() {
  local msg="File '$1' not found"
  [[ -f "$1" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}
bb-assert-file-readable() {
  local msg="File '$1' is not readable"
  [[ -f "$1" && -r "$1" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}
bb-assert-file-writeable() {
  local msg="File '$1' is not writeable"
  [[ -f "$1" && -w "$1" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}
bb-assert-file-executable() {
  local msg="File '$1' is not executable"
  [[ -f "$1" && -x "$1" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}
bb-assert-dir() {
  local msg="Directory '$1' not found"
  [[ -d "$1" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}
bb-assert-var() {
  local msg="Variable '$1' not set"
  [[ -n "${!1:-}" ]] || bb-exit "$BB_ERROR_ASSERT_FAILED" "${2:-$msg}"
}

# -- Commands defined from a body on stdin.

# bb-exe? NAME is true when NAME is a command, function or builtin.
bb-exe?() { type -t "$1" > /dev/null; }

# check_python sets python_binary to the first of python3, python2 and
# python found; it fails, saying so, when there is none.
check_python() {
  local pybin
  for pybin in python3 python2 python; do
    if command -v "$pybin" > /dev/null 2>&1; then
      python_binary=$pybin
      return 0
    fi
  done
  echo "Python not found, exiting..."
  return 1
}

declare -gA BB_EXT_BODIES=()
bb-ext-name-ok() {
  [[ "$1" =~ ^[A-Za-z_][-A-Za-z0-9_?.]*$ ]] || { bb-log-error "'$1' is not a function name"; return 1; }
}

# bb-ext-python NAME defines the command NAME that runs stdin's Python
# program with NAME's arguments.
bb-ext-python() {
  bb-ext-name-ok "$1" || return 1
  BB_EXT_BODIES[$1]=$(cat)
  eval "$1() { bb-ext-python-run '$1' \"\$@\"; }"
}
bb-ext-python-run() {
  local name=$1 python_binary
  shift
  check_python > /dev/null || { bb-log-error "$name needs Python, and the machine has none"; return 1; }
  "$python_binary" -c "${BB_EXT_BODIES[$name]}" "$@"
}

# BB_AUGEAS_ROOT is the root augtool works on; BB_AUGEAS_PARAMS are added
# to its arguments (split on spaces).
bb-var BB_AUGEAS_PARAMS ""
bb-var BB_AUGEAS_ROOT "/"
bb-var BB_AUGEAS_EXTRA_COMMANDS ""

# bb-ext-augeas NAME defines the command NAME that runs stdin's augtool
# commands.
bb-ext-augeas() {
  bb-ext-name-ok "$1" || return 1
  BB_EXT_BODIES[$1]=$(cat)
  eval "$1() { bb-ext-augeas-run '$1'; }"
}
bb-ext-augeas-run() {
  local -a params=()
  read -r -a params <<< "$BB_AUGEAS_PARAMS"
  augtool -r "$BB_AUGEAS_ROOT" "${params[@]}" <<< "${BB_EXT_BODIES[$1]}"
}

# -- Workspace and temporary files. The workspace is
# /var/lib/bashible/.bb-workspace (where Deckhouse's relative ".bb-workspace"
# lands, as steps run in /var/lib/bashible); each step gets its own
# temporary directory in it, removed when the step ends.
bb-var BB_WORKSPACE "$BASHIBLE_DIR/.bb-workspace"

bb-workspace-init() {
  bb-log-debug "Initializing workspace at '$BB_WORKSPACE'"
  if [[ ! -d "$BB_WORKSPACE" ]]; then
    mkdir -p "$BB_WORKSPACE" || bb-exit "$BB_ERROR_WORKSPACE_CREATION_FAILED" "Failed to initialize workspace at '$BB_WORKSPACE'"
  fi
  if [[ "$BB_WORKSPACE" != /* ]]; then
    BB_WORKSPACE=$(cd "$BB_WORKSPACE" && pwd)
  fi
}

# bb-dir-list DIR sets BB_DIR_ENTRIES to DIR's entries, dot files
# included, without starting a process.
bb-dir-list() {
  local nullglob=0 dotglob=0
  shopt -q nullglob && nullglob=1
  shopt -q dotglob && dotglob=1
  shopt -s nullglob dotglob
  BB_DIR_ENTRIES=("$1"/*)
  (( nullglob )) || shopt -u nullglob
  (( dotglob )) || shopt -u dotglob
}

bb-workspace-cleanup() {
  bb-log-debug "Cleaning up workspace at '$BB_WORKSPACE'"
  [[ -d "$BB_WORKSPACE" ]] || return 0
  bb-dir-list "$BB_WORKSPACE"
  if (( ${#BB_DIR_ENTRIES[@]} == 0 )); then
    bb-log-debug "Workspace is empty. Removing"
    rm -rf "$BB_WORKSPACE"
  else
    bb-log-debug "Workspace is not empty"
  fi
}

# bb-tmp-name prints a fresh name: the time and two random numbers.
bb-tmp-name() { echo "$EPOCHSECONDS$RANDOM$RANDOM"; }

# bb-tmp-init names the step's temporary directory; bb-event-init makes it.
bb-tmp-init() { BB_TMP_DIR=$BB_WORKSPACE/tmp_$EPOCHSECONDS$RANDOM$RANDOM; }

# bb-tmp-file creates an empty file (mode from the umask, as touch makes
# it) in the step's temporary directory and prints its path.
bb-tmp-file() {
  local file
  [[ -d "$BB_TMP_DIR" ]] || mkdir -p "$BB_TMP_DIR"
  file=$(mktemp "$BB_TMP_DIR/XXXXXXXXXX")
  chmod "$(printf '%o' $(( 0666 & ~$(umask) )))" "$file"
  echo "$file"
}

# bb-tmp-dir creates a directory in the step's temporary directory and
# prints its path.
bb-tmp-dir() {
  local dir
  [[ -d "$BB_TMP_DIR" ]] || mkdir -p "$BB_TMP_DIR"
  dir=$(mktemp -d "$BB_TMP_DIR/XXXXXXXXXX")
  chmod "$(printf '%o' $(( 0777 & ~$(umask) )))" "$dir"
  echo "$dir"
}

# bb-tmp-cleanup removes the step's temporary directory, and the workspace
# with it when that holds nothing else (bb-workspace-cleanup would remove
# it next: one process instead of two).
bb-tmp-cleanup() {
  [[ -e "$BB_TMP_DIR" ]] || return 0
  bb-dir-list "$BB_WORKSPACE"
  if [[ "${#BB_DIR_ENTRIES[@]}" == 1 && "${BB_DIR_ENTRIES[0]}" == "$BB_TMP_DIR" ]]; then
    rm -rf "$BB_WORKSPACE"
  else
    rm -rf "$BB_TMP_DIR"
  fi
}

# bb-template FILE prints FILE with its $VARIABLES and $(commands) expanded,
# as in a here-document.
bb-template() {
  local __bb_template
  __bb_template=$(< "$1")
  eval "cat <<BB_TEMPLATE_END
${__bb_template}
BB_TEMPLATE_END"
}

# -- Events: handlers subscribed in a step run when the event fires, with
# the event's arguments; delayed events fire once each when the step ends.
declare -gA BB_EVENT_DEPTH=()
BB_EVENT_MAX_DEPTH=1000

# bb-event-init makes the step's events directory in its temporary
# directory, and so those and the workspace: one process (mode from the
# umask, as bb-tmp-dir makes one).
bb-event-init() {
  BB_EVENT_DIR=$BB_TMP_DIR/events
  mkdir -p "$BB_EVENT_DIR" || bb-exit "$BB_ERROR_WORKSPACE_CREATION_FAILED" "Failed to initialize workspace at '$BB_WORKSPACE'"
}

# bb-event-file EVENT prints the file of EVENT's handlers.
bb-event-file() { echo "$BB_EVENT_DIR/${1//\//%2F}.handlers"; }

# bb-event-on EVENT HANDLER subscribes HANDLER (a command line) to EVENT, once.
bb-event-on() {
  local handlers
  handlers=$(bb-event-file "$1")
  touch "$handlers"
  if ! grep -Fxq -- "$2" "$handlers"; then
    bb-log-debug "Subscribed handler '$2' on event '$1'"
    printf '%s\n' "$2" >> "$handlers"
  fi
}

# bb-event-off EVENT HANDLER unsubscribes HANDLER from EVENT.
bb-event-off() {
  local handlers rest
  handlers=$(bb-event-file "$1")
  if [[ -f "$handlers" ]]; then
    bb-log-debug "Removed handler '$2' from event '$1'"
    rest=$(grep -vFx -- "$2" "$handlers" || true)
    if [[ -n "$rest" ]]; then
      printf '%s\n' "$rest" > "$handlers"
    else
      : > "$handlers"
    fi
  fi
}

# bb-event-fire EVENT [ARGS...] runs EVENT's handlers now, each with ARGS
# appended. An event that fires itself 1000 deep ends the step with 12.
bb-event-fire() {
  (( $# > 0 )) && [[ -n "$1" ]] || return 0
  local event=$1 handlers handler handler_args="" depth
  shift
  if (( $# > 0 )); then
    handler_args=$(printf ' %q' "$@")
  fi
  depth=$(( ${BB_EVENT_DEPTH[$event]:-0} + 1 ))
  BB_EVENT_DEPTH[$event]=$depth
  if (( depth >= BB_EVENT_MAX_DEPTH )); then
    bb-exit "$BB_ERROR_EVENT_MAX_DEPTH_REACHED" "Max recursion depth has been reached on processing event '$event'"
  fi
  handlers=$(bb-event-file "$event")
  if [[ -s "$handlers" ]]; then
    bb-log-info "Run handlers for event '$event'"
    local -a list=()
    mapfile -t list < "$handlers"
    for handler in "${list[@]}"; do
      eval "$handler$handler_args"
    done
  fi
  BB_EVENT_DEPTH[$event]=$(( ${BB_EVENT_DEPTH[$event]:-1} - 1 ))
}

# bb-event-delay EVENT [ARGS...] fires EVENT with ARGS when the step ends,
# once however often it is delayed.
bb-event-delay() {
  (( $# > 0 )) && [[ -n "$1" ]] || return 0
  local events=$BB_EVENT_DIR/events line
  line=$(printf '%q ' "$@")
  touch "$events"
  if ! grep -Fxq -- "$line" "$events"; then
    bb-log-debug "Delayed event '$line'"
    printf '%s\n' "$line" >> "$events"
  fi
}

# bb-event-cleanup fires the delayed events (and those their handlers
# delay), each once.
bb-event-cleanup() {
  local events=$BB_EVENT_DIR/events list line rounds=0
  while [[ -f "$events" ]]; do
    rounds=$(( rounds + 1 ))
    if (( rounds >= BB_EVENT_MAX_DEPTH )); then
      bb-log-error "Max recursion depth has been reached on processing event '__delay__'"
      rm -f "$events"
      return "$BB_ERROR_EVENT_MAX_DEPTH_REACHED"
    fi
    local -a delayed=()
    list=$(bb-tmp-file)
    mv -f "$events" "$list"
    mapfile -t delayed < "$list"
    for line in "${delayed[@]}"; do
      eval "bb-event-fire $line"
    done
  done
}

# -- Flags: facts kept in /var/lib/bashible/flags across steps and runs
# until unset (bashible's own flags live there too).
bb-flag-init() { BB_FLAG_DIR=$BASHIBLE_DIR/flags; }
bb-flag-clean() {
  bb-log-debug "Removing flag directory"
  rm -rf "$BB_FLAG_DIR"
}
bb-flag-cleanup() {
  [[ -d "$BB_FLAG_DIR" ]] || return 0
  bb-dir-list "$BB_FLAG_DIR"
  if (( ${#BB_DIR_ENTRIES[@]} == 0 )); then
    bb-log-debug "Flag directory is empty"
    bb-flag-clean
  fi
}

# -- Synchronising files and directories. A file whose change was not yet
# followed by a successful run is listed in BB_SYNC_UNHANDLED_FILES_STORE
# and counts as changed again on the next attempt, so a failed step does
# not lose its change event; bashible.sh clears the list when a run ends
# well.
bb-var BB_SYNC_UNHANDLED_FILES_STORE "$BASHIBLE_DIR/bashbooster_unhandled_synced_files"

# bb-sync-file DST SRC|- [EVENT [ARGS...]] makes DST a copy of SRC (stdin
# with "-"), with SRC's mode, replacing it atomically. When DST changed (or
# a change of it is still unhandled), bb-sync-file-changed fires with DST
# and EVENT is delayed to the end of the step. Returns 0 unless it failed.
bb-sync-file() {
  local dst=$1 src=$2 changed=false tmp
  shift 2
  if [[ "$src" == - ]]; then
    src=$(bb-tmp-file)
    cat > "$src"
  fi
  if [[ -f "$BB_SYNC_UNHANDLED_FILES_STORE" ]] && grep -Fxq -- "$dst" "$BB_SYNC_UNHANDLED_FILES_STORE"; then
    changed=true
  fi
  if [[ ! -f "$dst" ]]; then
    mkdir -p "$(dirname "$dst")"
    touch "$dst"
    changed=true
    echo "$dst" >> "$BB_SYNC_UNHANDLED_FILES_STORE"
  fi
  if ! cmp -s "$src" "$dst"; then
    tmp=$(mktemp "$dst.XXXXXX")
    cp -f -p "$src" "$tmp"
    mv -f "$tmp" "$dst"
    changed=true
    echo "$dst" >> "$BB_SYNC_UNHANDLED_FILES_STORE"
  fi
  if [[ "$changed" == true ]]; then
    bb-event-fire bb-sync-file-changed "$dst"
    bb-event-delay "$@"
  fi
}

# bb-sync-dir [-o|--one-way|-t|--two-way] DST SRC [EVENT [ARGS...]] syncs
# every file of SRC into DST with bb-sync-file. Two-way (the default) also
# removes what DST has and SRC has not (bb-sync-file-removed,
# bb-sync-dir-removed); a created DST fires bb-sync-dir-created. EVENT is
# delayed on any change. The options are read among the first three
# arguments.
bb-sync-dir() {
  local two_way=true test=3
  local -a args=()
  while (( $# > 0 && test > 0 )); do
    test=$(( test - 1 ))
    case "$1" in
      -o|--one-way) two_way=false ;;
      -t|--two-way) two_way=true ;;
      *) args+=("$1") ;;
    esac
    shift
  done
  bb-sync-dir-helper "$two_way" "${args[@]}" "$@"
}

bb-sync-dir-helper() {
  local two_way=$1 dst src name
  dst=$(realpath -m "$2")
  src=$(realpath -m "$3")
  shift 3
  if [[ ! -d "$dst" ]]; then
    mkdir -p "$dst"
    bb-event-delay "$@"
    bb-event-fire bb-sync-dir-created "$dst"
  fi
  local -a names=()
  mapfile -t names < <(find "$src" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
  for name in "${names[@]}"; do
    if [[ -d "$src/$name" ]]; then
      bb-sync-dir-helper "$two_way" "$dst/$name" "$src/$name" "$@"
    elif [[ -f "$src/$name" ]]; then
      bb-sync-file "$dst/$name" "$src/$name" "$@"
    fi
  done
  if [[ "$two_way" == true ]]; then
    mapfile -t names < <(find "$dst" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)
    for name in "${names[@]}"; do
      if [[ ! -e "$src/$name" ]]; then
        local event=bb-sync-file-removed
        if [[ -d "$dst/$name" ]]; then
          event=bb-sync-dir-removed
        fi
        rm -rf "${dst:?}/$name"
        bb-event-delay "$@"
        bb-event-fire "$event" "$dst/$name"
      fi
    done
  fi
}

# -- Tasks: named functions run once per bb-task-run, dependencies first.
declare -gA BB_TASK_FUNCS=()
declare -ga BB_TASK_CONTEXT=()

# bb-task-def NAME [FUNCTION] defines task NAME (run as FUNCTION, default NAME).
bb-task-def() { BB_TASK_FUNCS[$1]=${2:-$1}; }

# bb-task-run TASK... runs the tasks, each (and each dependency) once.
bb-task-run() {
  BB_TASK_CONTEXT+=("$(bb-tmp-file)")
  bb-task-depends "$@"
  unset 'BB_TASK_CONTEXT[-1]'
}

# bb-task-depends TASK... (inside a task) runs the tasks not run yet in
# this bb-task-run. Outside one it exits with 13; an undefined task exits
# with 14; a failed task exits with its status.
bb-task-depends() {
  local context="" name task code
  if (( ${#BB_TASK_CONTEXT[@]} > 0 )); then
    context=${BB_TASK_CONTEXT[-1]}
  fi
  if [[ ! -f "$context" ]]; then
    bb-exit "$BB_ERROR_TASK_BAD_CONTEXT" "Cannot run tasks. Bad context"
  fi
  for name in "$@"; do
    if ! grep -Fxq -- "$name" "$context"; then
      bb-log-info "Running task '$name'..."
      task=${BB_TASK_FUNCS[$name]:-}
      if [[ -z "$task" ]]; then
        bb-exit "$BB_ERROR_TASK_UNDEFINED" "Undefined task '$name'"
      fi
      "$task"
      code=$?
      if (( code != 0 )); then
        bb-exit "$code" "Task '$name' failed"
      fi
      bb-log-info "Task '$name' OK"
    fi
    echo "$name" >> "$context"
  done
}

# -- Waiting and users.

# bb-wait CONDITION [TIMEOUT] evaluates CONDITION every second until it is
# true; after TIMEOUT seconds (if given) it fails.
bb-wait() {
  local __bb_condition=$1 __bb_timeout=${2:-} __bb_left
  __bb_left=$(( ${2:-0} ))
  while ! eval "$__bb_condition"; do
    sleep 1
    if [[ -n "$__bb_timeout" ]]; then
      __bb_left=$(( __bb_left - 1 ))
      if (( __bb_left <= 0 )); then
        bb-log-error "Timeout has been reached during wait for '$__bb_condition'"
        return 1
      fi
    fi
  done
}

# bb-create_user_and_group USER UID GROUP GID creates the group and the
# user (with a home) unless they exist; existing ones are left as they are,
# with a warning.
bb-create_user_and_group() {
  local username=$1 userid=$2 groupname=$3 groupid=$4
  if id "$username" > /dev/null 2>&1 && [[ "$(id -u "$username")" == "$userid" && "$(id -g "$username")" == "$groupid" ]]; then
    bb-log-warning "User $username with UID $userid and GID $groupid already exists. No changes needed."
    return 0
  fi
  bb-log-info "Creating user $username with UID $userid and GID $groupid"
  if getent passwd "$username" > /dev/null 2>&1; then
    bb-log-warning "User $username already exists"
    return 0
  fi
  if getent group "$groupname" > /dev/null 2>&1; then
    bb-log-warning "Group $groupname already exists"
  elif getent group "$groupid" > /dev/null 2>&1; then
    bb-log-warning "Group ID $groupid is already exists"
    groupname=$(getent group "$groupid" | cut -d: -f1)
  else
    groupadd -g "$groupid" "$groupname"
  fi
  if getent passwd "$userid" > /dev/null 2>&1; then
    bb-log-warning "User ID $userid is already exists"
  else
    useradd -m -u "$userid" -g "$groupname" "$username"
  fi
}

# -- Reading settings files into variables: PREFIX<key>="value", with
# every character of a key that is not a letter, digit or _ turned into _.

# bb-read-name-assign NAME VALUE assigns VALUE to NAME (made a variable name).
bb-read-name-assign() {
  local name
  name=$(printf '%s' "$1" | sed 's/[^A-Za-z0-9_]/_/g')
  printf -v "$name" '%s' "$2"
}

# bb-read-properties-helper FILE PREFIX prints NAME<TAB>VALUE for each
# key=value, key: value and "key value" line (# and ! start comments).
bb-read-properties-helper() {
  local file=$1 prefix=${2:-} line
  while IFS= read -r line || [[ -n "$line" ]]; do
    line=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<< "$line")
    [[ -n "$line" && "$line" != [#!]* ]] || continue
    [[ "$line" =~ ^([^[:space:]:=]*)[[:space:]:=]+(.+)$ ]] || continue
    printf '%s\t%s\n' "$prefix${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  done < "$file"
}

# bb-read-properties FILE PREFIX sets PREFIX<key> for each line.
bb-read-properties() {
  if [[ ! -r "$1" ]]; then
    bb-log-error "'$1' is not readable"
    return 1
  fi
  local flat
  flat=$(bb-read-properties-helper "$1" "${2:-}") || return 1
  bb-read-assign-flat <<< "$flat"
}

# bb-properties-read: the deprecated name of bb-read-properties.
bb-properties-read() {
  bb-log-deprecated 'bb-read-properties'
  bb-read-properties "$@"
}

# bb-read-ini FILE [SECTION|*] PREFIX reads an INI file's SECTION (every
# section for * or empty) into PREFIX<section>_<key> (keys lowercased, as
# Python's ConfigParser does).
bb-read-ini() {
  if [[ ! -r "$1" ]]; then
    bb-log-error "'$1' is not readable"
    return 1
  fi
  local flat
  flat=$(bb-read-ini-helper "$1" "${2:-}" "${3:-}") || return 1
  bb-read-assign-flat <<< "$flat"
}

# bb-read-ini-helper FILE SECTION PREFIX prints NAME<TAB>VALUE lines.
bb-read-ini-helper() {
  local file=$1 want=${2:-} prefix=${3:-} line section="" key value
  while IFS= read -r line || [[ -n "$line" ]]; do
    line=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<< "$line")
    [[ -n "$line" && "$line" != [#\;]* ]] || continue
    if [[ "$line" =~ ^\[(.*)\]$ ]]; then
      section=${BASH_REMATCH[1]}
      continue
    fi
    [[ -n "$section" ]] || continue
    [[ -z "$want" || "$want" == "*" || "$want" == "$section" ]] || continue
    [[ "$line" =~ ^([^:=]*[^[:space:]:=])[[:space:]]*[:=][[:space:]]*(.*)$ ]] || continue
    key=${BASH_REMATCH[1],,}
    value=${BASH_REMATCH[2]}
    printf '%s\t%s\n' "$prefix${section}_$key" "$value"
  done < "$file"
}

# bb-read-json-flatten PREFIX prints the JSON document on stdin as
# NAME<TAB>VALUE lines: objects add _<key>, arrays add _len and _<index>,
# null is empty.
bb-read-json-flatten() {
  jq -r --arg p "$1" '
    def flat($n):
      if type == "object" then to_entries[] | .key as $k | .value | flat($n + "_" + $k)
      elif type == "array" then [$n + "_len", (length | tostring)], (to_entries[] | .key as $i | .value | flat($n + "_" + ($i | tostring)))
      elif . == null then [$n, ""]
      else [$n, tostring] end;
    flat($p) | @tsv'
}
bb-read-assign-flat() {
  local name value
  while IFS=$'\t' read -r name value; do
    [[ -n "$name" ]] || continue
    bb-read-name-assign "$name" "$value"
  done
}

# bb-read-json FILE PREFIX reads a JSON document (with jq).
bb-read-json() {
  if [[ ! -r "$1" ]]; then
    bb-log-error "'$1' is not readable"
    return 1
  fi
  local flat
  flat=$(bb-read-json-helper "$1" "${2:-}") || return 1
  bb-read-assign-flat <<< "$flat"
}

# bb-read-json-helper FILE PREFIX prints NAME<TAB>VALUE lines.
bb-read-json-helper() { bb-read-json-flatten "${2:-}" < "$1"; }

# bb-read-yaml? is true when YAML can be read (Python with its yaml module).
bb-read-yaml?() {
  local python_binary
  check_python > /dev/null && "$python_binary" -c 'import yaml' 2> /dev/null
}

# bb-read-yaml FILE PREFIX reads a YAML document like bb-read-json.
bb-read-yaml() {
  if [[ ! -r "$1" ]]; then
    bb-log-error "'$1' is not readable"
    return 1
  fi
  local python_binary flat
  "bb-read-yaml?" || { bb-log-error "reading YAML needs Python with its yaml module"; return 1; }
  flat=$(bb-read-yaml-helper "$1" "${2:-}") || return 1
  bb-read-assign-flat <<< "$flat"
}

# bb-read-yaml-helper FILE PREFIX prints NAME<TAB>VALUE lines.
bb-read-yaml-helper() {
  local python_binary
  check_python > /dev/null || return 1
  "$python_binary" -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' "$1" | bb-read-json-flatten "${2:-}"
}

# -- Augeas (when augtool is installed).

bb-augeas?() { "bb-exe?" augtool; }
bb-augeas-get-path() { echo "/files$1/$2"; }
bb-augeas-run() {
  local -a params=()
  read -r -a params <<< "$BB_AUGEAS_PARAMS"
  augtool -r "$BB_AUGEAS_ROOT" "${params[@]}"
}

# bb-augeas-file-supported? FILE is true when an Augeas lens parses FILE.
bb-augeas-file-supported?() {
  local out
  out=$(printf '%s\nmatch /augeas/load/*/incl %s\nprint %s\n' "$BB_AUGEAS_EXTRA_COMMANDS" "'$1'" "'/augeas/files$1[count(error) = 0]/*'" | bb-augeas-run) ||
    bb-assert false "Failed to execute augeas"
  [[ -n "$out" ]]
}

# bb-augeas-get FILE SETTING prints SETTING's value (empty when unset).
bb-augeas-get() {
  local path out
  path=$(bb-augeas-get-path "$1" "$2")
  "bb-augeas-file-supported?" "$1" || { bb-log-error "Cannot get value from unsupported file '$1'"; return 1; }
  out=$(printf '%s\nget %s\n' "$BB_AUGEAS_EXTRA_COMMANDS" "'$path'" | bb-augeas-run) || {
    bb-log-error "An error occured while getting value of '$2' from $1"
    return 1
  }
  if [[ "$out" == *" = "* ]]; then
    out=${out#* = }
    echo "${out// }"
  else
    echo ""
  fi
}

# bb-augeas-match? FILE SETTING VALUE is true when SETTING is VALUE.
bb-augeas-match?() {
  local path out
  path=$(bb-augeas-get-path "$1" "$2")
  "bb-augeas-file-supported?" "$1" || { bb-log-error "Cannot match value from unsupported file '$1'"; return 1; }
  out=$(printf '%s\nmatch %s "%s"\n' "$BB_AUGEAS_EXTRA_COMMANDS" "'$path'" "$3" | bb-augeas-run) || {
    bb-log-error "An error occured while verifying if '$2' matches '$3' ($path)"
    return 1
  }
  [[ "$out" == "/files/"* ]]
}

# bb-augeas-set FILE SETTING VALUE [EVENT [ARGS...]] sets SETTING; when the
# file changed, bb-augeas-file-changed fires with FILE and EVENT is delayed.
bb-augeas-set() {
  local file=$1 setting=$2 value=$3 path out
  shift 3
  path=$(bb-augeas-get-path "$file" "$setting")
  "bb-augeas-file-supported?" "$file" || { bb-log-error "Cannot set value to unsupported file '$file'"; return 1; }
  out=$(printf '%s\nset "%s" "%s"\nsave\n' "$BB_AUGEAS_EXTRA_COMMANDS" "$path" "$value" | bb-augeas-run) || {
    bb-log-error "An error occured while setting value of '$setting' to '$value' ($file)"
    return 1
  }
  if [[ "$out" == "Saved "* ]]; then
    bb-event-delay "$@"
    bb-event-fire bb-augeas-file-changed "$file"
  fi
}

# -- The OS: bundle, family, package manager and versions, from
# /etc/os-release. An OS node-manager does not support is "unknown".

_bb_detect_os_context() {
  [[ -z "${BB_DETECTED_FAMILY:-}" ]] || return 0
  local os_release=${BASHIBLE_ROOT}/etc/os-release id id_like
  BB_DETECTED_FAMILY=unknown BB_DETECTED_BUNDLE=unknown BB_DETECTED_PKG_MGR=unknown
  if [[ ! -e "$os_release" ]]; then
    _bb_set_unknown_os_context
    return 0
  fi
  # shellcheck disable=SC1090 # os-release is a shell fragment by definition
  id=$(. "$os_release" && printf '%s\n%s|' "${ID:-}" "${ID_LIKE:-}")
  id_like=${id#*$'\n'}
  id_like=${id_like%|}
  id=${id%%$'\n'*}
  case "$id" in
    debian) BB_DETECTED_FAMILY=debian BB_DETECTED_BUNDLE=debian BB_DETECTED_PKG_MGR=apt ;;
    ubuntu) BB_DETECTED_FAMILY=debian BB_DETECTED_BUNDLE=ubuntu-lts BB_DETECTED_PKG_MGR=apt ;;
    centos|rocky|almalinux|rhel) BB_DETECTED_FAMILY=centos BB_DETECTED_BUNDLE=centos BB_DETECTED_PKG_MGR=dnf ;;
    *)
      if [[ " $id_like " == *" rhel "* ]]; then
        BB_DETECTED_FAMILY=centos BB_DETECTED_BUNDLE=centos BB_DETECTED_PKG_MGR=dnf
      else
        bb-log-warn "OS '${id:-without an ID}' is not supported. Falling back to 'unknown'."
      fi
      ;;
  esac
}

_bb_set_unknown_os_context() {
  bb-log-warn "Unable to determine OS from /etc/os-release, falling back to 'unknown'."
  BB_DETECTED_FAMILY=unknown BB_DETECTED_BUNDLE=unknown BB_DETECTED_PKG_MGR=unknown
}

# bb-is-bundle prints the OS bundle: debian, ubuntu-lts, centos or unknown.
bb-is-bundle() { _bb_detect_os_context; echo "$BB_DETECTED_BUNDLE"; }
# bb-is-family prints the OS family: debian, centos or unknown.
bb-is-family() { _bb_detect_os_context; echo "$BB_DETECTED_FAMILY"; }
# bb-pkg-mgr prints the package manager: apt, dnf or unknown.
bb-pkg-mgr() { _bb_detect_os_context; echo "$BB_DETECTED_PKG_MGR"; }

# bb-os-release-field FIELD prints one field of /etc/os-release.
bb-os-release-field() {
  # shellcheck disable=SC1090,SC1091
  (. "${BASHIBLE_ROOT}/etc/os-release" && eval "echo \"\${$1:-}\"")
}
bb-is-ubuntu-version?() { [[ "$(bb-os-release-field VERSION_ID)" == "$1" ]]; }
bb-is-centos-version?() { [[ "$(bb-os-release-field VERSION_ID)" == "$1" ]]; }
bb-is-debian-version?() { [[ "$(bb-os-release-field VERSION_ID)" == "$1" ]]; }
# bb-is-astra-version? REGEX is true on Astra Linux whose version matches REGEX.
bb-is-astra-version?() {
  [[ "$(bb-os-release-field ID)" == astra ]] && [[ "$(bb-os-release-field VERSION_ID)" =~ $1 ]]
}
bb-get-ubuntu-codename() { bb-os-release-field UBUNTU_CODENAME; }

# bb-dvp-nesting-level prints how deep this VM is nested in Deckhouse
# Virtualization Platform (the DMI product SKU when it is a number), else 0.
bb-dvp-nesting-level() {
  local sku
  sku=$(cat "${BASHIBLE_ROOT}/sys/devices/virtual/dmi/id/product_sku" 2> /dev/null || true)
  if [[ "$sku" =~ ^[0-9]+$ ]]; then
    echo "$sku"
  else
    echo 0
  fi
}

# -- The proxy. bb-set-proxy exports the cluster's proxy (the one the proxy
# step wrote to /etc/node-manager/proxy.env) in this shell, or unsets the
# proxy variables when there is none; bb-unset-proxy unsets them.
bb-set-proxy() {
  bb-unset-proxy
  if [[ -f /etc/node-manager/proxy.env ]]; then
    set -a
    # shellcheck disable=SC1091 # written by the proxy step
    . /etc/node-manager/proxy.env
    set +a
  fi
}
bb-unset-proxy() { unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy NO_PROXY no_proxy; }

# -- Package managers. An installed package is recorded in a list of
# unhandled packages until the run ends well (bashible.sh clears it), so a
# retried step fires bb-package-installed again; "*-updated" flags keep
# the package lists from being refreshed twice in a run.
bb-var BB_APT_UNHANDLED_PACKAGES_STORE "$BASHIBLE_DIR/bashbooster_unhandled_packages"
bb-var BB_YUM_UNHANDLED_PACKAGES_STORE "$BASHIBLE_DIR/bashbooster_unhandled_packages"
bb-var BB_DNF_UNHANDLED_PACKAGES_STORE "$BASHIBLE_DIR/bashbooster_unhandled_packages"
bb-var BB_ZYPPER_UNHANDLED_PACKAGES_STORE "$BASHIBLE_DIR/bashbooster_unhandled_packages"
bb-var BB_YUM_INSTALL_EXTRA_ARGS ""
bb-var BB_DNF_INSTALL_EXTRA_ARGS ""
bb-var BB_ZYPPER_INSTALL_EXTRA_ARGS ""

# bb-package-unhandled? STORE PACKAGE is true when PACKAGE is in STORE.
bb-package-unhandled?() { [[ -f "$1" ]] && grep -Fxq -- "$2" "$1"; }

# bb-package-installed-now STORE EVENT-PACKAGE NEED-FIRE PACKAGE...:
# records PACKAGE... in STORE (when any) and fires bb-package-installed
# with EVENT-PACKAGE when anything was installed now or is unhandled.
bb-package-installed-now() {
  local store=$1 last=$2 fire=$3
  shift 3
  if (( $# > 0 )); then
    printf '%s\n' "$@" >> "$store"
    fire=true
  fi
  if [[ "$fire" == true ]]; then
    bb-event-fire bb-package-installed "$last"
  fi
}

# bb-split-words WORDS prints WORDS split on spaces, one a line (for the
# *_INSTALL_EXTRA_ARGS settings).
bb-split-words() {
  local -a words=()
  read -r -a words <<< "$1"
  (( ${#words[@]} == 0 )) || printf '%s\n' "${words[@]}"
}

bb-apt?() { "bb-exe?" apt-get; }

# bb-apt-sources prints the apt sources without comments.
bb-apt-sources() {
  local -a files=("${BASHIBLE_ROOT}/etc/apt/sources.list" "${BASHIBLE_ROOT}"/etc/apt/sources.list.d/*)
  grep -hsv '^[[:space:]]*#' "${files[@]}" || true
}
bb-apt-repo?() { grep -qw -- "$1" <<< "$(bb-apt-sources)"; }

# bb-apt-key-add adds the OpenPGP key on stdin to apt's trusted keys (with
# apt-key where the OS still has it, otherwise as a file in
# /etc/apt/trusted.gpg.d).
bb-apt-key-add() {
  if "bb-exe?" apt-key; then
    apt-key add -
    return
  fi
  local key sum ext=gpg dir=${BASHIBLE_ROOT}/etc/apt/trusted.gpg.d
  key=$(bb-tmp-file)
  cat > "$key"
  sum=$(sha256sum "$key" | cut -c1-16)
  if grep -q -- '-----BEGIN PGP PUBLIC KEY BLOCK-----' "$key"; then
    ext=asc
  fi
  mkdir -p "$dir"
  install -m 0644 "$key" "$dir/bb-$sum.$ext"
}

# bb-apt-repo-add LINE... adds the source line (e.g. deb URL SUITE
# COMPONENT) to /etc/apt/sources.list.d/<host>.list unless apt has it, and
# then makes the next bb-apt-update refresh the lists.
bb-apt-repo-add() {
  local line host
  line=$(tr -s ' \t' '  ' <<< "$*")
  if ! tr -s ' \t' '  ' <<< "$(bb-apt-sources)" | grep -Fq -- "$line"; then
    host=$(sed -E 's#^.*https?://([^/[:space:]]+).*$#\1#; t; s#.*#local#' <<< "$*")
    mkdir -p "${BASHIBLE_ROOT}/etc/apt/sources.list.d"
    echo "$*" >> "${BASHIBLE_ROOT}/etc/apt/sources.list.d/$host.list"
    bb-flag-unset apt-updated
  fi
}

# bb-apt-package? PACKAGE[=VERSION] is true when PACKAGE is installed (in
# VERSION, where * matches anything).
bb-apt-package?() {
  local pkg=${1%%=*} want="" status version
  [[ "$1" != *=* ]] || want=${1#*=}
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null || true)
  [[ "$status" == *" installed" ]] || return 1
  [[ -n "$want" ]] || return 0
  version=$(dpkg-query -W -f='${Version}' "$pkg" 2> /dev/null || true)
  # shellcheck disable=SC2053 # VERSION is a pattern
  [[ "$version" == $want ]]
}

bb-apt-update() {
  export DEBIAN_FRONTEND=noninteractive
  "bb-flag?" apt-updated && return 0
  bb-log-info 'Updating apt cache'
  bb-with-proxy apt-get update
  bb-flag-set apt-updated
}

bb-apt-dist-upgrade() {
  export DEBIAN_FRONTEND=noninteractive
  bb-apt-update
  bb-log-info 'Processing dist-upgrade'
  bb-with-proxy apt-get -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold dist-upgrade -y
}

# bb-apt-install PACKAGE[=VERSION]... installs the missing packages
# (refreshing the lists once), holds them, and fires bb-package-installed
# with the last PACKAGE when it installed any. A failed install exits the
# step with apt-get's status.
bb-apt-install() {
  export DEBIAN_FRONTEND=noninteractive
  local pkg last="" fire=false
  local -a missing=()
  for pkg in "$@"; do
    last=$pkg
    if "bb-package-unhandled?" "$BB_APT_UNHANDLED_PACKAGES_STORE" "$pkg"; then
      fire=true
    fi
    "bb-apt-package?" "$pkg" || missing+=("$pkg")
  done
  if (( ${#missing[@]} > 0 )); then
    bb-apt-update
    bb-log-info "Installing packages '${missing[*]}'"
    bb-with-proxy apt-get -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold install \
      --allow-change-held-packages --allow-downgrades -y "${missing[@]}" ||
      bb-exit-on-error "Failed to install packages '${missing[*]}'"
    bb-apt-hold "${missing[@]%%=*}"
  fi
  bb-package-installed-now "$BB_APT_UNHANDLED_PACKAGES_STORE" "$last" "$fire" "${missing[@]}"
}

# bb-apt-remove PACKAGE... removes the installed ones, firing
# bb-package-removed for each.
bb-apt-remove() {
  export DEBIAN_FRONTEND=noninteractive
  local pkg
  local -a present=()
  for pkg in "$@"; do
    if "bb-apt-package?" "$pkg"; then
      present+=("$pkg")
    fi
  done
  (( ${#present[@]} > 0 )) || return 0
  bb-log-info "Removing packages '${present[*]}'"
  apt-get remove -y --allow-change-held-packages "${present[@]}" || bb-exit-on-error "Failed to remove packages '${present[*]}'"
  for pkg in "${present[@]}"; do
    bb-event-fire bb-package-removed "$pkg"
  done
}

bb-apt-autoremove() {
  export DEBIAN_FRONTEND=noninteractive
  bb-log-info 'Autoremoving unused packages'
  apt-get -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold --purge -y autoremove
}

# bb-apt-hold? PACKAGE is true when PACKAGE is installed and held.
bb-apt-hold?() {
  local status
  status=$(dpkg-query -W -f='${Status}' "$1" 2> /dev/null || true)
  [[ "$status" == "hold "*" installed" ]]
}
bb-apt-hold() {
  local pkg
  for pkg in "$@"; do
    apt-mark hold "$pkg"
  done
}
bb-apt-unhold() {
  local pkg
  for pkg in "$@"; do
    apt-mark unhold "$pkg"
  done
}

# bb-apt-package-upgrade? PACKAGE is true when PACKAGE is installed and a
# newer candidate is available.
bb-apt-package-upgrade?() {
  export DEBIAN_FRONTEND=noninteractive
  bb-apt-update
  local policy installed candidate
  policy=$(apt-cache policy "$1")
  installed=$(awk '/Installed: / { print $2; exit }' <<< "$policy")
  candidate=$(awk '/Candidate: / { print $2; exit }' <<< "$policy")
  [[ -n "$installed" && "$installed" != "(none)" && -n "$candidate" && "$installed" != "$candidate" ]]
}

# bb-apt-upgrade PACKAGE... upgrades those that have a newer candidate,
# firing bb-package-pre-upgrade and bb-package-post-upgrade around each.
bb-apt-upgrade() {
  export DEBIAN_FRONTEND=noninteractive
  local pkg
  for pkg in "$@"; do
    if "bb-apt-package-upgrade?" "$pkg"; then
      bb-log-info "Upgrading package '$pkg'"
      bb-event-fire bb-package-pre-upgrade "$pkg"
      bb-with-proxy apt-get install --only-upgrade -y "$pkg" || bb-exit-on-error "Failed to upgrade package '$pkg'"
      bb-event-fire bb-package-post-upgrade "$pkg"
    fi
  done
}

# The apt-rpm helpers are for ALT Linux (apt-get over rpm); node-manager
# does not support it, but they work wherever apt-get and rpm both are.
bb-apt-rpm?() { "bb-exe?" apt-get && "bb-exe?" rpm; }
bb-apt-rpm-repo?() { "bb-apt-repo?" "$@"; }
bb-apt-rpm-repo-add() {
  local before
  before=$(bb-apt-sources)
  bb-apt-repo-add "$@"
  if [[ "$(bb-apt-sources)" != "$before" ]]; then
    bb-flag-unset apt-rpm-updated
  fi
}
bb-apt-rpm-package?() { "bb-apt-package?" "$@"; }
bb-apt-rpm-update() {
  export DEBIAN_FRONTEND=noninteractive
  "bb-flag?" apt-rpm-updated && return 0
  bb-log-info 'Updating apt cache'
  bb-with-proxy apt-get update
  bb-flag-set apt-rpm-updated
}
bb-apt-rpm-dist-upgrade() {
  bb-apt-rpm-update
  bb-log-info 'Processing dist-upgrade'
  bb-with-proxy apt-get dist-upgrade -y
}
# bb-apt-rpm-install [--force] PACKAGE...: like bb-apt-install, without
# holds; --force installs the packages even when they are installed.
bb-apt-rpm-install() {
  export DEBIAN_FRONTEND=noninteractive
  local force=false pkg last="" fire=false
  local -a missing=()
  if [[ "${1:-}" == --force ]]; then
    force=true
    shift
  fi
  for pkg in "$@"; do
    last=$pkg
    if "bb-package-unhandled?" "$BB_APT_UNHANDLED_PACKAGES_STORE" "$pkg"; then
      fire=true
    fi
    if [[ "$force" == true ]] || ! "bb-apt-package?" "$pkg"; then
      missing+=("$pkg")
    fi
  done
  if (( ${#missing[@]} > 0 )); then
    bb-apt-rpm-update
    bb-log-info "Installing packages '${missing[*]}'"
    bb-with-proxy apt-get install -y "${missing[@]}" || bb-exit-on-error "Failed to install packages '${missing[*]}'"
  fi
  bb-package-installed-now "$BB_APT_UNHANDLED_PACKAGES_STORE" "$last" "$fire" "${missing[@]}"
}
bb-apt-rpm-remove() {
  local pkg
  local -a present=()
  for pkg in "$@"; do
    if "bb-apt-package?" "$pkg"; then
      present+=("$pkg")
    fi
  done
  (( ${#present[@]} > 0 )) || return 0
  bb-log-info "Removing packages '${present[*]}'"
  apt-get remove -y "${present[@]}" || bb-exit-on-error "Failed to remove packages '${present[*]}'"
  for pkg in "${present[@]}"; do
    bb-event-fire bb-package-removed "$pkg"
  done
}
bb-apt-rpm-autoremove() {
  bb-log-info 'Autoremoving unused packages'
  apt-get --purge -y autoremove
}
bb-apt-rpm-package-upgrade?() {
  bb-apt-rpm-update
  local policy installed candidate
  policy=$(apt-cache policy "$1")
  installed=$(awk '/Installed: / { print $2; exit }' <<< "$policy")
  candidate=$(awk '/Candidate: / { print $2; exit }' <<< "$policy")
  [[ -n "$installed" && "$installed" != "(none)" && -n "$candidate" && "$installed" != "$candidate" ]]
}
bb-apt-rpm-upgrade() {
  local pkg
  for pkg in "$@"; do
    if "bb-apt-rpm-package-upgrade?" "$pkg"; then
      bb-log-info "Upgrading package '$pkg'"
      bb-event-fire bb-package-pre-upgrade "$pkg"
      bb-with-proxy apt-get install --only-upgrade -y "$pkg" || bb-exit-on-error "Failed to upgrade package '$pkg'"
      bb-event-fire bb-package-post-upgrade "$pkg"
    fi
  done
}

bb-yum?() { "bb-exe?" yum; }
bb-yum-repo?() { yum -C repolist 2> /dev/null | grep -Ewq "^(\W)*$1"; }
bb-yum-package?() { yum -C list installed "$1" > /dev/null 2>&1; }
bb-yum-update() {
  "bb-flag?" yum-updated && return 0
  bb-log-info 'Updating yum cache'
  bb-with-proxy yum clean all
  bb-with-proxy yum makecache
  bb-flag-set yum-updated
}
# bb-yum-install PACKAGE... installs the missing packages (with
# BB_YUM_INSTALL_EXTRA_ARGS) and fires bb-package-installed with the last.
bb-yum-install() {
  local pkg last="" fire=false
  local -a missing=() extra=()
  mapfile -t extra < <(bb-split-words "$BB_YUM_INSTALL_EXTRA_ARGS")
  for pkg in "$@"; do
    last=$pkg
    if "bb-package-unhandled?" "$BB_YUM_UNHANDLED_PACKAGES_STORE" "$pkg"; then
      fire=true
    fi
    "bb-yum-package?" "$pkg" || missing+=("$pkg")
  done
  if (( ${#missing[@]} > 0 )); then
    bb-yum-update
    bb-log-info "Installing packages '${missing[*]}'"
    bb-with-proxy yum install "${extra[@]}" -y "${missing[@]}" || bb-exit-on-error "Failed to install packages '${missing[*]}'"
  fi
  bb-package-installed-now "$BB_YUM_UNHANDLED_PACKAGES_STORE" "$last" "$fire" "${missing[@]}"
}
bb-yum-remove() {
  local pkg
  for pkg in "$@"; do
    if "bb-yum-package?" "$pkg"; then
      bb-yum-update
      bb-log-info "Removing package '$pkg'"
      yum remove -y "$pkg" || bb-exit-on-error "Failed to remove package '$pkg'"
    fi
  done
}

# bb-check-dnf prints dnf, or yum where there is no dnf; with neither it
# exits the step with 1.
bb-check-dnf() {
  if "bb-exe?" dnf; then
    echo dnf
  elif "bb-exe?" yum; then
    echo yum
  else
    bb-log-error "found neither dnf nor yum"
    exit 1
  fi
}
bb-dnf?() { "bb-exe?" dnf; }
bb-dnf-repo?() { dnf repolist 2> /dev/null | grep -Ew "^(\W)*$1"; }
bb-dnf-package?() { dnf list installed "$1" > /dev/null 2>&1; }
bb-dnf-update() {
  "bb-flag?" dnf-updated && return 0
  bb-log-info "Updating dnf cache"
  bb-with-proxy dnf clean all
  bb-with-proxy dnf makecache
  bb-flag-set dnf-updated
}
# bb-dnf-install PACKAGE... installs the missing packages (with
# BB_DNF_INSTALL_EXTRA_ARGS; with yum where there is no dnf) and fires
# bb-package-installed with the last.
bb-dnf-install() {
  local manager
  manager=$(bb-check-dnf)
  if [[ "$manager" == yum ]]; then
    bb-log-info "bb-dnf-install downgraded to yum"
    bb-yum-install "$@"
    return
  fi
  local pkg last="" fire=false
  local -a missing=() extra=()
  mapfile -t extra < <(bb-split-words "$BB_DNF_INSTALL_EXTRA_ARGS")
  for pkg in "$@"; do
    last=$pkg
    if "bb-package-unhandled?" "$BB_DNF_UNHANDLED_PACKAGES_STORE" "$pkg"; then
      fire=true
    fi
    "bb-dnf-package?" "$pkg" || missing+=("$pkg")
  done
  if (( ${#missing[@]} > 0 )); then
    bb-dnf-update
    bb-log-info "Installing packages '${missing[*]}'"
    bb-with-proxy dnf install "${extra[@]}" -y "${missing[@]}" || bb-exit-on-error "Failed to install packages '${missing[*]}'"
  fi
  bb-package-installed-now "$BB_DNF_UNHANDLED_PACKAGES_STORE" "$last" "$fire" "${missing[@]}"
}
bb-dnf-remove() {
  local manager pkg
  manager=$(bb-check-dnf)
  if [[ "$manager" == yum ]]; then
    bb-log-info "bb-dnf-remove downgraded to yum"
    bb-yum-remove "$@"
    return
  fi
  for pkg in "$@"; do
    if "bb-dnf-package?" "$pkg"; then
      bb-dnf-update
      bb-log-info "Removing package '$pkg'"
      dnf remove -y "$pkg" || bb-exit-on-error "Failed to remove package '$pkg'"
      bb-event-fire bb-package-removed "$pkg"
    fi
  done
}

bb-zypper?() { "bb-exe?" zypper; }
bb-zypper-package?() { rpm -q "$1" > /dev/null 2>&1; }
bb-zypper-update() {
  "bb-flag?" zypper-updated && return 0
  bb-log-info 'Updating zypper cache'
  bb-with-proxy zypper clean
  bb-with-proxy zypper refresh
  bb-flag-set zypper-updated
}
bb-zypper-install() {
  local pkg last="" fire=false
  local -a missing=() extra=()
  mapfile -t extra < <(bb-split-words "$BB_ZYPPER_INSTALL_EXTRA_ARGS")
  for pkg in "$@"; do
    last=$pkg
    if "bb-package-unhandled?" "$BB_ZYPPER_UNHANDLED_PACKAGES_STORE" "$pkg"; then
      fire=true
    fi
    "bb-zypper-package?" "$pkg" || missing+=("$pkg")
  done
  if (( ${#missing[@]} > 0 )); then
    bb-zypper-update
    bb-log-info "Installing packages '${missing[*]}'"
    bb-with-proxy zypper install "${extra[@]}" -y "${missing[@]}" || bb-exit-on-error "Failed to install packages '${missing[*]}'"
  fi
  bb-package-installed-now "$BB_ZYPPER_UNHANDLED_PACKAGES_STORE" "$last" "$fire" "${missing[@]}"
}
bb-zypper-remove() {
  local pkg
  for pkg in "$@"; do
    if "bb-zypper-package?" "$pkg"; then
      bb-zypper-update
      bb-log-info "Removing package '$pkg'"
      zypper remove -y "$pkg" || bb-exit-on-error "Failed to remove package '$pkg'"
    fi
  done
}

# bb-yum-or-apt-install PACKAGE... installs with yum, apt-get over rpm
# (ALT) or apt-get, whichever the machine has.
bb-yum-or-apt-install() {
  if "bb-yum?"; then
    bb-yum-install "$@"
  elif "bb-apt-rpm?"; then
    bb-apt-rpm-install "$@"
  elif "bb-apt?"; then
    bb-apt-install "$@"
  else
    bb-log-error "Unsupported package manager"
    return 1
  fi
}

# bb-pkg ACTION ARGS... runs bb-<manager>-ACTION (bb-apt-install,
# bb-dnf-remove, bb-apt-package?...) for this OS's package manager.
bb-pkg() {
  local action=${1:-} manager func
  if [[ -z "$action" ]]; then
    bb-log-error "bb-pkg: action is required (e.g. install, remove, package?)"
    return 1
  fi
  shift
  manager=$(bb-pkg-mgr)
  func=bb-$manager-$action
  if ! declare -F "$func" > /dev/null; then
    bb-log-error "bb-pkg: action '$action' is not supported for package manager '$manager'"
    return 1
  fi
  "$func" "$@"
}

# -- Registry packages: PACKAGE:sha256:<hex> tarballs with install and
# uninstall scripts. Deckhouse serves them from its registry-packages
# proxy; node-manager serves none, so they are fetched from the proxy named
# by PACKAGES_PROXY_ADDRESSES (host:port, comma-separated) and
# PACKAGES_PROXY_TOKEN when a step sets them (one of your own, speaking
# Deckhouse's protocol), and each blob is verified against its digest.
bb-var BB_INSTALLED_PACKAGES_STORE "${BASHIBLE_ROOT}/var/cache/registrypackages"
bb-var BB_FETCHED_PACKAGES_STORE "$BASHIBLE_DIR/tmp/registrypackages"
bb-var BB_EXPORTED_IMAGE_STORE "${BASHIBLE_ROOT}/opt/deckhouse/images"

# bb-package-or-image-is-installed? NAME DIGEST
bb-package-or-image-is-installed?() {
  [[ -f "${BB_INSTALLED_PACKAGES_STORE}/$1/digest" ]] && [[ "$(cat "${BB_INSTALLED_PACKAGES_STORE}/$1/digest")" == "$2" ]]
}
# bb-package-is-fetched? NAME DIGEST
bb-package-is-fetched?() { [[ -f "${BB_FETCHED_PACKAGES_STORE}/$1/$2.tar.gz" ]]; }
# bb-image-is-fetched? NAME DIGEST
bb-image-is-fetched?() { [[ -f "${BB_FETCHED_PACKAGES_STORE}/$1/$2.tar" ]]; }

# bb-regpkg-split NAME:DIGEST prints NAME and DIGEST on two lines.
bb-regpkg-split() {
  if [[ ! "$1" =~ ^([^:]+):(sha256:[0-9a-f]{64})$ ]]; then
    bb-log-error "'$1' is not PACKAGE:sha256:<64 hex digits>"
    return 1
  fi
  printf '%s\n%s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
}

# bb-regpkg-fetch KIND DIGEST OUTPUT fetches a blob (KIND package or image)
# from the packages proxy and keeps it only if its sha256 is DIGEST.
bb-regpkg-fetch() {
  local kind=$1 digest=$2 out=$3 ep header
  local -a endpoints=()
  if [[ -z "${PACKAGES_PROXY_ADDRESSES:-}" ]]; then
    bb-log-error "registry packages come from a packages proxy, and node-manager serves none: set PACKAGES_PROXY_ADDRESSES (and PACKAGES_PROXY_TOKEN) to one of your own, or install with bb-download / bb-package-install PACKAGE"
    return 1
  fi
  IFS=, read -r -a endpoints <<< "$PACKAGES_PROXY_ADDRESSES"
  header=$(bb-tmp-file)
  bb-untraced bb-bearer-header "$header" <<< "${PACKAGES_PROXY_TOKEN:-}"
  mkdir -p "$(dirname "$out")"
  for ep in "${endpoints[@]}"; do
    if curl -fsS --noproxy "$ep" --connect-timeout 10 --max-time 900 -k -H "@$header" -o "$out.part" \
        "https://$ep/$kind?digest=$digest&repository=${REPOSITORY:-}&path=${REPOSITORY_PATH:-}"; then
      if [[ "sha256:$(sha256sum "$out.part" | cut -d' ' -f1)" == "$digest" ]]; then
        mv -f "$out.part" "$out"
        rm -f "$header"
        return 0
      fi
      bb-log-error "the $kind fetched from $ep is not $digest; refusing it"
    else
      bb-log-error "fetching $kind $digest from $ep failed"
    fi
    rm -f "$out.part"
  done
  rm -f "$header"
  return 1
}

# bb-package-fetch-blob DIGEST OUTPUT fetches one package blob.
bb-package-fetch-blob() { bb-regpkg-fetch package "$1" "$2"; }

# bb-package-fetch-blobs / bb-images-fetch fetch the blobs of the caller's
# PACKAGES_MAP (digest -> name); bb-package-fetch and bb-image-fetch call them.
bb-package-fetch-blobs() {
  local digest
  for digest in "${!PACKAGES_MAP[@]}"; do
    bb-regpkg-fetch package "$digest" "${BB_FETCHED_PACKAGES_STORE}/${PACKAGES_MAP[$digest]}/$digest.tar.gz" || return 1
  done
}
bb-images-fetch() {
  local digest
  for digest in "${!PACKAGES_MAP[@]}"; do
    bb-regpkg-fetch image "$digest" "${BB_FETCHED_PACKAGES_STORE}/${PACKAGES_MAP[$digest]}/$digest.tar" || return 1
  done
}

# bb-regpkg-map KIND NAME:DIGEST... fills the caller's PACKAGES_MAP with what is
# neither installed nor fetched.
bb-regpkg-map() {
  local kind=$1 item name digest
  shift
  for item in "$@"; do
    { read -r name; read -r digest; } < <(bb-regpkg-split "$item") || return 1
    [[ -n "$name" ]] || return 1
    if "bb-package-or-image-is-installed?" "$name" "$digest"; then
      bb-log-info "'$item' $kind already installed"
    elif { [[ "$kind" == package ]] && "bb-package-is-fetched?" "$name" "$digest"; } ||
        { [[ "$kind" == image ]] && "bb-image-is-fetched?" "$name" "$digest"; }; then
      bb-log-info "'$item' $kind already fetched"
    else
      PACKAGES_MAP[$digest]=$name
    fi
  done
}

# bb-package-fetch NAME:DIGEST... fetches the packages not installed or fetched yet.
bb-package-fetch() {
  local -A PACKAGES_MAP=()
  bb-regpkg-map package "$@" || return 1
  (( ${#PACKAGES_MAP[@]} > 0 )) || return 0
  bb-log-info "Fetching packages: ${PACKAGES_MAP[*]}"
  bb-package-fetch-blobs || { bb-log-error "Failed to fetch packages"; return 1; }
  bb-log-info "Packages saved under ${BB_FETCHED_PACKAGES_STORE}"
}

# bb-image-fetch NAME:DIGEST... fetches the images not saved or fetched yet.
bb-image-fetch() {
  local -A PACKAGES_MAP=()
  bb-regpkg-map image "$@" || return 1
  (( ${#PACKAGES_MAP[@]} > 0 )) || return 0
  bb-log-info "Fetching images: ${PACKAGES_MAP[*]}"
  bb-images-fetch || { bb-log-error "Failed to fetch images"; return 1; }
  bb-log-info "Images saved under ${BB_FETCHED_PACKAGES_STORE}"
}

# bb-registry-package-install NAME:DIGEST...: Deckhouse's bb-package-install.
# Each package not installed in DIGEST is fetched, unpacked and its
# ./install run; the digest and the install/uninstall scripts are kept in
# /var/cache/registrypackages/NAME, and bb-package-installed fires.
bb-registry-package-install() {
  local item name digest dir
  for item in "$@"; do
    { read -r name; read -r digest; } < <(bb-regpkg-split "$item") || return 1
    [[ -n "$name" ]] || return 1
    if "bb-package-or-image-is-installed?" "$name" "$digest"; then
      bb-log-info "'$item' package already installed"
      continue
    fi
    if ! "bb-package-is-fetched?" "$name" "$digest"; then
      bb-log-info "'$item' package not found locally"
      bb-package-fetch "$item" || return 1
    fi
    bb-log-info "Unpacking package '$name'"
    dir=$(bb-tmp-dir)
    if ! tar -xf "${BB_FETCHED_PACKAGES_STORE}/$name/$digest.tar.gz" -C "$dir"; then
      rm -rf "$dir" "${BB_FETCHED_PACKAGES_STORE:?}/$name"
      bb-log-error "Failed to unpack package $name, it may be corrupted. The package will be refetched on the next attempt"
      return 1
    fi
    bb-log-info "Installing package '$name'"
    if ! (cd "$dir" && ./install); then
      rm -rf "$dir"
      bb-log-error "Failed to install package $name"
      return 1
    fi
    mkdir -p "${BB_INSTALLED_PACKAGES_STORE}/$name"
    echo "$digest" > "${BB_INSTALLED_PACKAGES_STORE}/$name/digest"
    cp "$dir/install" "$dir/uninstall" "${BB_INSTALLED_PACKAGES_STORE}/$name/"
    rm -rf "$dir" "${BB_FETCHED_PACKAGES_STORE:?}/$name"
    bb-log-info "'$name' package successfully installed"
    bb-event-fire bb-package-installed "$name"
  done
}

# bb-image-save NAME:DIGEST... saves each image as
# /opt/deckhouse/images/NAME.tar unless saved in DIGEST already.
bb-image-save() {
  local item name digest
  for item in "$@"; do
    { read -r name; read -r digest; } < <(bb-regpkg-split "$item") || return 1
    [[ -n "$name" ]] || return 1
    if [[ "$(cat "${BB_INSTALLED_PACKAGES_STORE}/images/$name/digest" 2> /dev/null || true)" == "$digest" ]]; then
      bb-log-info "'$item' image already installed"
      continue
    fi
    if ! "bb-image-is-fetched?" "$name" "$digest"; then
      bb-log-info "'$item' image not found locally"
      bb-image-fetch "$item" || return 1
    fi
    bb-log-info "Export image '$name'"
    mkdir -p "${BB_EXPORTED_IMAGE_STORE}" "${BB_INSTALLED_PACKAGES_STORE}/images/$name"
    mv -f "${BB_FETCHED_PACKAGES_STORE}/$name/$digest.tar" "${BB_EXPORTED_IMAGE_STORE}/$name.tar"
    echo "$digest" > "${BB_INSTALLED_PACKAGES_STORE}/images/$name/digest"
    rm -rf "${BB_FETCHED_PACKAGES_STORE:?}/$name"
    bb-log-info "'$name' image successfully saved"
    bb-event-fire bb-package-installed "$name"
  done
}

# bb-package-module-install NAME:DIGEST REPOSITORY PATH installs a package
# of a module's repository.
bb-package-module-install() {
  local REPOSITORY=${2:-} REPOSITORY_PATH=${3:-}
  bb-package-install "$1"
}

# bb-package-remove NAME... runs each installed registry package's
# uninstall script, forgets it and fires bb-package-removed.
bb-package-remove() {
  local pkg
  for pkg in "$@"; do
    if [[ -f "${BB_INSTALLED_PACKAGES_STORE:?}/${pkg:?}/uninstall" ]]; then
      bb-log-info "Removing package '$pkg'"
      # shellcheck disable=SC1090 # the package's own script
      . "${BB_INSTALLED_PACKAGES_STORE}/$pkg/uninstall" || bb-exit-on-error "Failed to remove package '$pkg'"
      rm -rf "${BB_INSTALLED_PACKAGES_STORE:?}/${pkg:?}"
      bb-event-fire bb-package-removed "$pkg"
    fi
  done
}

# -- Registry packages straight from a container registry (Deckhouse's
# older bb-rp-* helpers): PACKAGE:TAG is the image REGISTRY_PATH:TAG at
# SCHEME://REGISTRY_ADDRESS (REGISTRY_AUTH user:password, optional), whose
# last layer holds install and uninstall scripts. A step sets those
# variables; node-manager does not.
bb-var BB_RP_INSTALLED_PACKAGES_STORE "${BASHIBLE_ROOT}/var/cache/registrypackages"

# bb-rp-is-installed? PACKAGE TAG
bb-rp-is-installed?() {
  [[ -f "${BB_RP_INSTALLED_PACKAGES_STORE}/$1/tag" ]] && [[ "$(cat "${BB_RP_INSTALLED_PACKAGES_STORE}/$1/tag")" == "$2" ]]
}

# bb-rp-get-token prints a pull token for REGISTRY_PATH from the registry's
# token service; a registry without bearer authentication exits with 1.
bb-rp-get-token() {
  local header realm service
  header=$(curl --retry 3 -sSLi "${SCHEME:-https}://${REGISTRY_ADDRESS:-}/v2/" | grep -i "www-authenticate" || true)
  realm=$(grep -oE 'Bearer realm="https?://[^"]+"' <<< "$header" | cut -d'"' -f2 || true)
  service=$(grep -oE 'service="[^"]+"' <<< "$header" | cut -d'"' -f2 | sed 's/ /+/g' || true)
  if [[ -z "$realm" ]]; then
    bb-exit 1 "couldn't find bearer realm parameter, consider enabling bearer token auth in your registry, returned header: $header"
  fi
  local repository=${REGISTRY_PATH:-}
  local url="$realm?service=$service&scope=repository:${repository#/}:pull"
  # The credentials go to curl on stdin, never in its arguments or a trace.
  if [[ -n "${REGISTRY_AUTH:-}" ]]; then
    bb-untraced bb-rp-curl-config | curl --retry 3 -fsSL -K - "$url"
  else
    curl --retry 3 -fsSL "$url"
  fi | jq -r '.token'
}
bb-rp-curl-config() { printf 'user = "%s"\n' "${REGISTRY_AUTH:-}"; }

# bb-rp-curl ARGS... runs curl with a fresh pull token in a header file.
bb-rp-curl() {
  local header
  header=$(bb-tmp-file)
  bb-rp-get-token | bb-untraced bb-bearer-header "$header"
  curl --retry 3 -fsSL -H "@$header" "$@"
}

# bb-rp-get-digests TAG prints the digest of the image's last layer.
bb-rp-get-digests() {
  bb-rp-curl -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "${SCHEME:-https}://${REGISTRY_ADDRESS:-}/v2${REGISTRY_PATH:-}/manifests/$1" | jq -r '.layers[-1].digest'
}

# bb-rp-fetch-digest DIGEST OUTPUT fetches one blob.
bb-rp-fetch-digest() {
  bb-rp-curl "${SCHEME:-https}://${REGISTRY_ADDRESS:-}/v2${REGISTRY_PATH:-}/blobs/$1" -o "$2"
}

# bb-rp-install PACKAGE:TAG... installs each package not installed in TAG:
# unpacks its layer, runs ./install, keeps the tag and the scripts in
# /var/cache/registrypackages/PACKAGE, fires bb-package-installed.
bb-rp-install() {
  local item pkg tag digest dir blob
  for item in "$@"; do
    pkg=${item%%:*}
    tag=${item#*:}
    if "bb-rp-is-installed?" "$pkg" "$tag"; then
      continue
    fi
    dir=$(bb-tmp-dir)
    for digest in $(bb-rp-get-digests "$tag"); do
      blob=$(bb-tmp-file)
      bb-rp-fetch-digest "$digest" "$blob"
      tar -xf "$blob" -C "$dir"
      rm -f "$blob"
    done
    bb-log-info "Installing package '$pkg'"
    if ! (cd "$dir" && ./install); then
      rm -rf "$dir"
      bb-log-error "Failed to install package '$pkg'"
      return 1
    fi
    mkdir -p "${BB_RP_INSTALLED_PACKAGES_STORE}/$pkg"
    echo "$tag" > "${BB_RP_INSTALLED_PACKAGES_STORE}/$pkg/tag"
    cp "$dir/install" "$dir/uninstall" "${BB_RP_INSTALLED_PACKAGES_STORE}/$pkg/"
    rm -rf "$dir"
    bb-event-fire bb-package-installed "$pkg"
  done
}

# bb-rp-remove PACKAGE... runs each installed package's uninstall script,
# forgets it and fires bb-package-removed.
bb-rp-remove() {
  local BB_INSTALLED_PACKAGES_STORE=$BB_RP_INSTALLED_PACKAGES_STORE
  bb-package-remove "$@"
}

# -- Downloads (Deckhouse's form of bb-download; node-manager's verified
# form is bb-download-verified, and bb-download takes either).
bb-var BB_DOWNLOAD_WGET_OPTIONS '-nv'
bb-download-init() { BB_DOWNLOAD_DIR=$BB_WORKSPACE/download; }
bb-download-clean() { rm -rf "$BB_DOWNLOAD_DIR"; }

# bb-download-to-workspace URL [NAME] [FORCE]: prints the path
# $BB_DOWNLOAD_DIR/NAME (default: the URL's last part) and downloads URL
# there (with wget, or curl where there is no wget, through the proxy)
# unless it is there already and FORCE is not true.
bb-download-to-workspace() {
  local url=$1 target force=${3:-false}
  target=$BB_DOWNLOAD_DIR/${2:-$(basename "$url")}
  if [[ ! -d "$BB_DOWNLOAD_DIR" ]]; then
    bb-log-debug "Creating download directory at '$BB_DOWNLOAD_DIR'"
    mkdir -p "$BB_DOWNLOAD_DIR"
  fi
  echo "$target"
  if [[ -f "$target" && "$force" != true ]]; then
    return 0
  fi
  bb-log-info "Downloading $url"
  local -a opts=()
  read -r -a opts <<< "$BB_DOWNLOAD_WGET_OPTIONS"
  if "bb-exe?" wget; then
    bb-with-proxy wget "${opts[@]}" -O "$target" "$url" || {
      "bb-error?" || true
      bb-log-error "An error occurs while downloading $url"
      return "$BB_ERROR"
    }
  else
    bb-with-proxy curl -fsSL --retry 3 -o "$target" "$url" || {
      "bb-error?" || true
      bb-log-error "An error occurs while downloading $url"
      return "$BB_ERROR"
    }
  fi
}

# -- The cluster, through this project's credentials and endpoints.

# bb-kubectl ARGS... runs kubectl with a 60 s request timeout.
bb-kubectl() { kubectl --request-timeout 60s "$@"; }

# bb-kubectl-exec ARGS... runs kubectl as the node (kubelet.conf); when the
# server it names does not answer, straight to the first API endpoint that does.
bb-kubectl-exec() {
  local kubeconfig=/etc/kubernetes/kubelet.conf server host port ep
  local -a args=()
  server=$(kubectl --kubeconfig="$kubeconfig" config view -o jsonpath='{.clusters[0].cluster.server}' 2> /dev/null || true)
  if [[ -n "$server" ]]; then
    host=$(sed -E 's#https?://([^:/]+).*#\1#' <<< "$server")
    port=$(sed -E 's#https?://[^:/]+:([0-9]+).*#\1#' <<< "$server")
    if ! (echo > "/dev/tcp/$host/$port") 2> /dev/null; then
      for ep in "${BASHIBLE_ENDPOINTS[@]}"; do
        if (echo > "/dev/tcp/${ep%:*}/${ep##*:}") 2> /dev/null; then
          args=(--server="https://$ep")
          break
        fi
      done
    fi
  fi
  kubectl --request-timeout 60s --kubeconfig="$kubeconfig" "${args[@]}" "$@"
}

# bb-d8-node-name prints this node's name (bb-node-name).
bb-d8-node-name() { bb-node-name; }

# bb-d8-node-ip prints this node's IP: the one discovered at bootstrap,
# else the source address of the route to the first API endpoint.
bb-d8-node-ip() {
  if [[ -s "$BASHIBLE_DIR/discovered-node-ip" ]]; then
    cat "$BASHIBLE_DIR/discovered-node-ip"
    return 0
  fi
  local ep=${BASHIBLE_ENDPOINTS[0]:-}
  ip -4 route get "${ep%:*}" 2> /dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1
}

# bb-untraced COMMAND... runs COMMAND with tracing (set -x) suspended, so a
# traced step never prints a credential COMMAND handles.
bb-untraced() {
  if [[ $- == *x* ]]; then
    set +x
    local rc=0
    "$@" || rc=$?
    set -x
    return "$rc"
  fi
  "$@"
}

# bb-bearer-header FILE writes an Authorization header with the token on
# stdin to FILE (readable by root only), for curl's -H @FILE: a token never
# goes in a process list, nor, called through bb-untraced, in a trace.
bb-bearer-header() {
  local token=""
  IFS= read -r token || true
  (umask 077 && printf 'Authorization: Bearer %s\n' "$token" > "$1")
}

# bb-curl-kube-detect-auth sets BB_KUBE_AUTH_TYPE: cert (the kubelet's
# client certificate), admin-cert (/etc/kubernetes/admin.conf) or
# bootstrap-token.
bb-curl-kube-detect-auth() {
  if [[ -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" ]]; then
    BB_KUBE_AUTH_TYPE=cert
  elif [[ -f "${BASHIBLE_ROOT}/etc/kubernetes/admin.conf" ]]; then
    BB_KUBE_AUTH_TYPE=admin-cert
    bb-curl-kube-extract-admin-certs
  elif [[ -s "$BASHIBLE_DIR/bootstrap-token" ]]; then
    BB_KUBE_AUTH_TYPE=bootstrap-token
  else
    echo "bb-curl-kube: cannot detect auth — no kubelet cert, admin.conf, or bootstrap-token found" >&2
    return 1
  fi
  export BB_KUBE_AUTH_TYPE
}

# bb-curl-kube-extract-admin-certs writes admin.conf's client certificate
# and key to the step's temporary directory.
bb-curl-kube-extract-admin-certs() {
  local conf=${BASHIBLE_ROOT}/etc/kubernetes/admin.conf
  BB_KUBE_ADMIN_CERT=$(bb-tmp-file)
  BB_KUBE_ADMIN_KEY=$(bb-tmp-file)
  chmod 0600 "$BB_KUBE_ADMIN_CERT" "$BB_KUBE_ADMIN_KEY"
  awk '/client-certificate-data:/ { print $2 }' "$conf" | base64 -d > "$BB_KUBE_ADMIN_CERT"
  awk '/client-key-data:/ { print $2 }' "$conf" | base64 -d > "$BB_KUBE_ADMIN_KEY"
}

# bb-curl-kube-build-curl-auth-args sets the array BB_KUBE_AUTH_ARGS for
# BB_KUBE_AUTH_TYPE (a bootstrap token goes in a header file, never in a
# process list).
bb-curl-kube-build-curl-auth-args() {
  local cert=${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem
  BB_KUBE_AUTH_ARGS=(--cacert "$BASHIBLE_DIR/ca.crt")
  case "${BB_KUBE_AUTH_TYPE:-}" in
    cert) BB_KUBE_AUTH_ARGS+=(--cert "$cert" --key "$cert") ;;
    admin-cert) BB_KUBE_AUTH_ARGS+=(--cert "$BB_KUBE_ADMIN_CERT" --key "$BB_KUBE_ADMIN_KEY") ;;
    bootstrap-token)
      bb-untraced bb-bearer-header "$BASHIBLE_DIR/bootstrap-token-header" < "$BASHIBLE_DIR/bootstrap-token"
      BB_KUBE_AUTH_ARGS+=(-H "@$BASHIBLE_DIR/bootstrap-token-header")
      ;;
    *)
      echo "bb-curl-kube: unknown auth type: ${BB_KUBE_AUTH_TYPE:-}" >&2
      return 1
      ;;
  esac
}

# bb-curl-kube-healthz URL is true when URL/healthz answers.
bb-curl-kube-healthz() {
  local -a auth=()
  if [[ -n "${BB_KUBE_AUTH_TYPE:-}" ]] && bb-curl-kube-build-curl-auth-args; then
    auth=("${BB_KUBE_AUTH_ARGS[@]}")
  fi
  curl -sS -f --noproxy '*' --connect-timeout 3 --max-time 3 "${auth[@]}" "$1/healthz" > /dev/null 2>&1
}

# bb-curl-kube-resolve-endpoint sets BB_KUBE_APISERVER_URL to the first API
# endpoint whose /healthz answers.
bb-curl-kube-resolve-endpoint() {
  local ep
  BB_KUBE_APISERVER_URL=""
  for ep in "${BASHIBLE_ENDPOINTS[@]}"; do
    if bb-curl-kube-healthz "https://$ep"; then
      BB_KUBE_APISERVER_URL=https://$ep
      break
    fi
  done
  if [[ -z "$BB_KUBE_APISERVER_URL" ]]; then
    echo "bb-curl-kube: cannot resolve API server endpoint" >&2
    return 1
  fi
  export BB_KUBE_APISERVER_URL
}

# bb-curl-kube PATH [CURL-ARGS...] requests PATH from the API (curl's
# --fail: an HTTP error fails), response on stdout; a failure forgets the
# endpoint so the next call looks again.
bb-curl-kube() {
  local path=$1 rc=0
  shift
  if [[ -z "${BB_KUBE_AUTH_TYPE:-}" ]]; then
    bb-curl-kube-detect-auth || return 1
  fi
  if [[ -z "${BB_KUBE_APISERVER_URL:-}" ]]; then
    bb-curl-kube-resolve-endpoint || return 1
  fi
  bb-curl-kube-build-curl-auth-args || return 1
  curl -sS -f --noproxy '*' --connect-timeout 10 --max-time 60 "${BB_KUBE_AUTH_ARGS[@]}" "$@" "${BB_KUBE_APISERVER_URL}${path}" || rc=$?
  if (( rc != 0 )); then
    BB_KUBE_APISERVER_URL=""
  fi
  return "$rc"
}

# bb-curl-kube-patch-node-metadata NODE FIELD [--resource-version=RV]
# KEY=VALUE|KEY-... strategic-merge-patches the Node's metadata.FIELD
# (labels or annotations); KEY- removes KEY.
bb-curl-kube-patch-node-metadata() {
  local node=$1 field=$2 rv="" arg obj="{}" patch
  shift 2
  if [[ "${1:-}" == --resource-version=* ]]; then
    rv=${1#--resource-version=}
    shift
  fi
  for arg in "$@"; do
    if [[ "$arg" == *=* ]]; then
      obj=$(jq -c --arg k "${arg%%=*}" --arg v "${arg#*=}" '.[$k] = $v' <<< "$obj")
    else
      obj=$(jq -c --arg k "${arg%-}" '.[$k] = null' <<< "$obj")
    fi
  done
  patch=$(jq -nc --arg rv "$rv" --arg f "$field" --argjson o "$obj" \
    '{metadata: ({($f): $o} + (if $rv == "" then {} else {resourceVersion: $rv} end))}')
  bb-curl-kube "/api/v1/nodes/$node" -X PATCH -H "Content-Type: application/strategic-merge-patch+json" --data "$patch"
}

# bb-indent-text INDENT prefixes every line of stdin with INDENT.
bb-indent-text() {
  local line
  while IFS= read -r line || [[ -n "$line" ]]; do
    printf '%s%s\n' "$1" "$line"
  done
}

# -- Status on the Instance and Events (through bb-instance-condition and
# bb-event, which report only what the node may).
bb-patch-instance-condition() { bb-instance-condition "$1" "$2" "$3" "${4:-}"; }
bb-bashible-ready-steps-completed() { bb-patch-instance-condition BashibleReady True StepsCompleted "${2:-Last successful step: $1}"; }
bb-bashible-ready-steps-failed() { bb-patch-instance-condition BashibleReady False StepsFailed "$1${2:+: $2}"; }
bb-bashible-ready-error() { bb-patch-instance-condition BashibleReady False Error "${1:-}"; }
bb-bashible-ready-initial-run() { bb-patch-instance-condition BashibleReady Unknown InitialRunInProgress "${1:-}"; }
bb-waiting-approval-required() { bb-patch-instance-condition WaitingApproval True UpdateApprovalRequired "${1:-}"; }
bb-waiting-approval-not-required() { bb-patch-instance-condition WaitingApproval False UpdateApprovalNotRequired "${1:-}"; }
bb-disruption-approval-required() { bb-patch-instance-condition WaitingDisruptionApproval True DisruptionApprovalRequired "${1:-}"; }
bb-disruption-approval-not-required() { bb-patch-instance-condition WaitingDisruptionApproval False DisruptionApprovalNotRequired "${1:-}"; }

# bb-event-create info|error STEP [NOTE] records an Event about this Node:
# Normal BashibleNodeUpdate, or Warning BashibleStepFailed.
bb-event-create() {
  local type=Normal reason=BashibleNodeUpdate note=${3:-} node
  node=$(bb-node-name)
  if [[ "$1" == error ]]; then
    type=Warning reason=BashibleStepFailed
    note=${note:-Bashible step $2 failed on $node}
  else
    note=${note:-$2 steps update on $node}
  fi
  bb-event "$type" "$reason" "$note"
}
bb-event-error-create() {
  local note="bashible step log is not available."
  if [[ -f "$BASHIBLE_DIR/step.log" ]]; then
    note=$(tail -c 500 "$BASHIBLE_DIR/step.log")
  fi
  bb-event-create error "$1" "$note"
}
bb-event-info-create() { bb-event-create info "$1" ""; }

# bb-nodeuser-patch USER JSON-PATCH [ENDPOINTS] applies a JSON patch to the
# status of NodeUser USER, three attempts 10 s apart, and goes on (with an
# error logged) if they all fail; without credentials it exits with 1.
bb-nodeuser-patch() {
  local user=$1 data=$2 try
  if [[ ! -s "${BASHIBLE_ROOT}/var/lib/kubelet/pki/kubelet-client-current.pem" && ! -s "$BASHIBLE_DIR/bootstrap-token" ]]; then
    bb-log-error "failed to patch NodeUser can't find kubelet.conf or bootstrap-token"
    exit 1
  fi
  for try in 1 2 3; do
    if bb-kube-api PATCH "/apis/deckhouse.io/v1/nodeusers/$user/status" application/json-patch+json <<< "$data" > /dev/null; then
      bb-log-info "Successfully patched NodeUser."
      return 0
    fi
    bb-log-error "Failed to patch NodeUser. $try of 3 attempts..."
    (( try == 3 )) || sleep 10
  done
  bb-log-error "Failed to patch NodeUser. Number of attempts exceeded. NodeUser patch will be skipped."
}

# __bb-fetch-data-from-secret NAMESPACE NAME prints the Secret as JSON;
# nothing (and success) when it does not exist.
__bb-fetch-data-from-secret() {
  local rc=0 out
  out=$(bb-kube-api GET "/api/v1/namespaces/$1/secrets/$2" 2> /dev/null) || rc=$?
  if (( rc == 4 )); then
    return 0
  elif (( rc != 0 )); then
    echo "Failed to get secret $2" >&2
    exit 1
  fi
  echo "$out"
}

# bb-data-device-from-terraform-output FILE SECRET prints this master's
# data device: from FILE (written at bootstrap) or from SECRET in d8-system.
bb-data-device-from-terraform-output() {
  if [[ -f "$BASHIBLE_DIR/$1" ]]; then
    cat "$BASHIBLE_DIR/$1"
    return 0
  fi
  local secret
  secret=$(__bb-fetch-data-from-secret d8-system "$2")
  [[ -n "$secret" ]] || return 0
  jq -re --arg h "$(bb-node-name)" '.data[$h] // empty' <<< "$secret" | base64 -d
}
bb-get-kubernetes-data-device-from-terraform-output() {
  bb-data-device-from-terraform-output kubernetes_data_device_path d8-masters-kubernetes-data-device-path
}
bb-get-registry-data-device-from-terraform-output() {
  bb-data-device-from-terraform-output system_registry_data_device_path d8-masters-system-registry-data-device-path
}

# -- containerd configuration.

# bb-ctrd-has-table FILE TABLE: 0 when the TOML FILE has [TABLE] or a
# table under it, 1 when not, 2 when FILE cannot be read.
bb-ctrd-has-table() {
  if [[ ! -r "$1" ]]; then
    echo "ERROR: Failed to parse TOML config: $1" >&2
    return 2
  fi
  grep -Fq -- "[$2" "$1"
}
# bb-ctrd-v1-has-registry-fields FILE: the containerd 1 registry section.
bb-ctrd-v1-has-registry-fields() { bb-ctrd-has-table "$1" 'plugins."io.containerd.grpc.v1.cri".registry'; }
# bb-ctrd-v2-has-registry-fields FILE: the containerd 2 registry section.
bb-ctrd-v2-has-registry-fields() { bb-ctrd-has-table "$1" 'plugins."io.containerd.cri.v1.images".registry'; }

# -- Start and end of a step (Deckhouse's 99_init). The workspace, the
# step's temporary directory and its events are set up as the library is
# sourced. In a step (BASHIBLE_STEP set), bb-cleanup runs when the step
# exits: it fires bb-cleanup, then the delayed events, once each, then
# removes the temporary files; the step's exit status is kept, or the first
# failure of that.
# An absolute workspace is made with the events directory, in one process.
if [[ "$BB_WORKSPACE" != /* ]]; then
  bb-workspace-init
fi
bb-tmp-init
bb-event-init
bb-download-init
bb-flag-init

bb-cleanup-update-exit-code() {
  if "bb-error?" && (( BB_EXIT_CODE == 0 )); then
    BB_EXIT_CODE=$BB_ERROR
  fi
}

bb-cleanup() {
  bb-cleanup-update-exit-code
  bb-event-fire bb-cleanup; bb-cleanup-update-exit-code
  bb-flag-cleanup; bb-cleanup-update-exit-code
  bb-event-cleanup; bb-cleanup-update-exit-code
  bb-tmp-cleanup; bb-cleanup-update-exit-code
  bb-workspace-cleanup; bb-cleanup-update-exit-code
  exit "$BB_EXIT_CODE"
}

if [[ -n "${BASHIBLE_STEP:-}" ]]; then
  trap bb-cleanup EXIT
fi
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
