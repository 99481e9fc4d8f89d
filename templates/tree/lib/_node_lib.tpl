{{- /* The shell library every step runs with. bashible.sh writes it to
       /var/lib/bashible/lib.sh and sources it, and each step runs in a fresh
       bash that sources it first. Everything here is idempotent. */ -}}
{{- define "node-lib" -}}
# Library of bashible for node group {{ .nodeGroup.name }}; managed by node-manager.
# shellcheck shell=bash

# Paths hang off BASHIBLE_ROOT, empty on a real node; tests point it at a
# directory to run a node without touching the machine.
BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
# shellcheck disable=SC2034 # for the steps that source this library
BASHIBLE_NODE_GROUP={{ .nodeGroup.name | squote }}
BASHIBLE_APPROVAL_MODE={{ .nodeGroup.disruptions.approvalMode | squote }}
# API endpoints from the cluster; BASHIBLE_API_ENDPOINTS (space-separated
# host:port) overrides them where the served ones are not reachable.
read -r -a BASHIBLE_ENDPOINTS <<< "${BASHIBLE_API_ENDPOINTS:-{{ join " " .normal.apiserverEndpoints }}}"
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

{{ include "bashbooster" . }}
{{- end -}}
