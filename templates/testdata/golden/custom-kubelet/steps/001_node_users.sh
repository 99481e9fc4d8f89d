#!/usr/bin/env bash
# Managed by node-manager for node group databases; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# Node users: the NodeUsers that select this group (0 of them), made,
# kept and removed as Deckhouse's bashible does, early in the run so that
# people can reach the node even when a later step fails.
#
# - A user is /home/deckhouse/<name>, primary group 100 (users), shell
#   /bin/bash, comment "created by deckhouse": the comment marks the users
#   this step manages (Deckhouse's marker, so the users of a node that ran
#   Deckhouse are managed on). A marked user no NodeUser lists any more is
#   removed with its home, after its processes are killed; an unmarked one
#   is never touched.
# - Supplementary groups: spec.extraGroups that exist on the node (others
#   are skipped with a warning), and nodeadmin when spec.isSudoer; the
#   sudoers drop-in lets nodeadmin run any command as root with the user's
#   password, and exists only while some user here is a sudoer.
# - The password is set from spec.passwordHash (through chpasswd's stdin,
#   never an argument); an empty hash locks the password (Deckhouse would
#   leave a user it updates without any password).
# - authorized_keys holds spec.sshPublicKeys and the deprecated
#   spec.sshPublicKey, one per line; it is written as the user (runuser), so
#   a link the user plants in the home directory leads nowhere the user
#   could not write anyway.
# A user that cannot be made (its uid or name taken by another user) is
# reported and skipped; the step goes on with the others and does not
# fail, so one conflict on one node holds up nothing else. The report goes
# to the log and, as Deckhouse's does, to the NodeUser's status.errors
# under this node's name (cleared once the user is made), written with the
# node's own identity, which a ValidatingAdmissionPolicy holds to that one
# key; it is sent only when it changed since the last report.
# Every value was validated by the API and again by the renderer.

nu_home_base=/home/deckhouse
nu_marker='created by deckhouse'
nu_main_group=100
nu_sudo_group=nodeadmin
nu_sudoers=/etc/sudoers.d/30-deckhouse-nodeadmins
nu_errors=()
nu_keep_uids=()
nu_any_sudoer=no
nu_reported=$BASHIBLE_DIR/node-users-reported

# nu-report NAME MESSAGE: sets this node's entry of NodeUser NAME's
# status.errors to MESSAGE, or removes it when MESSAGE is empty. Only with
# the node's own identity (the kubelet's certificate; not before the node
# has joined), and only when it changed since the last report.
nu-report() {
  local name=$1 message=$2 node body state=$nu_reported/$1
  if [[ ! -s /var/lib/kubelet/pki/kubelet-client-current.pem ]]; then
    return 0
  fi
  if [[ -f "$state" && "$(cat "$state")" == "$message" ]] || [[ ! -f "$state" && -z "$message" ]]; then
    return 0
  fi
  node=$(bb-node-name)
  if [[ -n "$message" ]]; then
    body=$(jq -cn --arg node "$node" --arg message "$message" '{status: {errors: {($node): $message}}}')
  else
    body=$(jq -cn --arg node "$node" '{status: {errors: {($node): null}}}')
  fi
  if bb-kube-api PATCH "/apis/deckhouse.io/v1/nodeusers/$name/status" application/merge-patch+json "$body" > /dev/null; then
    mkdir -p "$nu_reported"
    printf '%s' "$message" > "$state"
  else
    bb-log "could not report node user $name's state in its status.errors; it is tried again on the next run"
  fi
}

nu-error() {
  nu_errors+=("$1: $2")
  bb-log "error: node user $1: $2"
  nu-report "$1" "$2"
}

# nu-user NAME UID SUDOER(yes|no) HASH GROUPS(comma-separated) KEY...
nu-user() {
  local name=$1 uid=$2 sudoer=$3 hash=$4 extra=$5
  shift 5
  local home=$nu_home_base/$name entry g current wanted_groups=() current_groups extra_groups=()
  nu_keep_uids+=("$uid")
  if [[ "$sudoer" == yes ]]; then
    nu_any_sudoer=yes
    if ! getent group "$nu_sudo_group" > /dev/null; then
      groupadd "$nu_sudo_group"
      bb-log "created group $nu_sudo_group"
    fi
  fi
  if [[ ! -d "$nu_home_base" ]]; then
    install -d -m 0755 -o root -g root "$nu_home_base"
  fi
  # An empty hash locks the password.
  hash=${hash:-!}

  IFS=, read -r -a extra_groups <<< "$extra"
  for g in "${extra_groups[@]}"; do
    if getent group "$g" > /dev/null; then
      wanted_groups+=("$g")
    else
      bb-log "warning: node user $name: group $g does not exist on this node; skipped"
    fi
  done
  if [[ "$sudoer" == yes ]]; then
    wanted_groups+=("$nu_sudo_group")
  fi
  local wanted
  wanted=$(printf '%s\n' "${wanted_groups[@]}" | sed '/^$/d' | sort -u | paste -sd, -)

  if entry=$(getent passwd "$uid"); then
    local e_name e_gid e_gecos e_home
    IFS=: read -r e_name _ _ e_gid e_gecos e_home _ <<< "$entry"
    if [[ "$e_gecos" != "$nu_marker" ]]; then
      nu-error "$name" "uid $uid belongs to user $e_name, which node-manager did not create"
      return 0
    fi
    if [[ "$e_name" != "$name" ]]; then
      nu-error "$name" "uid $uid belongs to user $e_name (another NodeUser, or renamed on the node)"
      return 0
    fi
    if [[ "$e_gid" != "$nu_main_group" || "$e_home" != "$home" ]]; then
      nu-error "$name" "the user's group ($e_gid) or home ($e_home) was changed on the node; expected $nu_main_group and $home"
      return 0
    fi
  elif getent passwd "$name" > /dev/null; then
    nu-error "$name" "user $name exists with uid $(id -u "$name"), expected $uid"
    return 0
  else
    local add=(useradd -b "$nu_home_base" -g "$nu_main_group" -s /bin/bash -u "$uid" -c "$nu_marker" -m)
    if [[ -n "$wanted" ]]; then
      add+=(-G "$wanted")
    fi
    if ! "${add[@]}" "$name"; then
      nu-error "$name" "useradd failed"
      return 0
    fi
    bb-log "created node user $name (uid $uid)"
  fi
  if [[ ! -d "$home" ]]; then
    install -d -m 0700 -o "$uid" -g "$nu_main_group" "$home"
    bb-log "node user $name: made the missing home $home"
  fi

  current_groups=$(id -nG "$name" | tr ' ' '\n' | grep -vxF "$(id -ng "$name")" | sort -u | paste -sd, - || true)
  if [[ "$current_groups" != "$wanted" ]]; then
    usermod -G "$wanted" "$name"
    bb-log "node user $name: groups ${wanted:-(none)}"
  fi

  current=$(getent shadow "$name" | cut -d: -f2)
  if [[ "$current" != "$hash" ]]; then
    printf '%s:%s\n' "$name" "$hash" | chpasswd -e
    bb-log "node user $name: password hash updated"
  fi

  # The keys, written and read as the user.
  local keys have
  keys=$(printf '%s\n' "$@")
  have=$(runuser -u "$name" -- cat "$home/.ssh/authorized_keys" 2> /dev/null || true)
  if [[ "$have" != "$keys" ]] || [[ "$(runuser -u "$name" -- stat -c %a "$home/.ssh" "$home/.ssh/authorized_keys" 2> /dev/null | paste -sd' ' -)" != "700 600" ]]; then
    # shellcheck disable=SC2016 # expanded by the user's shell
    if ! printf '%s\n' "$keys" | runuser -u "$name" -- bash -Eeuo pipefail -c 'umask 077
      mkdir -p "$1/.ssh"
      chmod 0700 "$1/.ssh"
      cat > "$1/.ssh/authorized_keys.new"
      chmod 0600 "$1/.ssh/authorized_keys.new"
      mv -f "$1/.ssh/authorized_keys.new" "$1/.ssh/authorized_keys"' nu-keys "$home"; then
      nu-error "$name" "could not write $home/.ssh/authorized_keys"
      return 0
    fi
    bb-log "node user $name: wrote authorized_keys ($# keys)"
  fi
  nu-report "$name" ""
}

# The sudoers drop-in, while some user here is a sudoer; checked by visudo
# before it is put in place.
if [[ "$nu_any_sudoer" == yes ]]; then
  if ! grep -Eq '^[@#]includedir[[:space:]]+/etc/sudoers.d[[:space:]]*$' /etc/sudoers; then
    printf '\n@includedir /etc/sudoers.d\n' >> /etc/sudoers
    bb-log "made /etc/sudoers include /etc/sudoers.d"
  fi
  nu_dropin=$(printf '# Managed by node-manager: the node users of NodeUsers with isSudoer.\n%%%s ALL=(ALL) ALL\n' "$nu_sudo_group")
  if [[ ! -f "$nu_sudoers" || "$(cat "$nu_sudoers")" != "$nu_dropin" ]]; then
    nu_tmp=$(mktemp /etc/sudoers.d/.node-users.XXXXXX)
    printf '%s\n' "$nu_dropin" > "$nu_tmp"
    chmod 0440 "$nu_tmp"
    if command -v visudo > /dev/null && ! visudo -cqf "$nu_tmp"; then
      rm -f "$nu_tmp"
      nu_errors+=("the sudoers drop-in does not pass visudo")
      bb-log "error: the sudoers drop-in for $nu_sudo_group does not pass visudo; it is left out"
    else
      mv -f "$nu_tmp" "$nu_sudoers"
      bb-log "wrote $nu_sudoers"
    fi
  fi
else
  bb-remove "$nu_sudoers"
fi

# Users this step made that no NodeUser lists any more.
while IFS=: read -r nu_name _ nu_uid _ nu_gecos _; do
  if [[ "$nu_gecos" != "$nu_marker" ]] || (( nu_uid <= 1000 )); then
    continue
  fi
  for nu_keep in "${nu_keep_uids[@]}"; do
    if [[ "$nu_keep" == "$nu_uid" ]]; then
      continue 2
    fi
  done
  pkill -KILL -U "$nu_uid" || true
  if userdel -r "$nu_name" 2> /dev/null || ! getent passwd "$nu_name" > /dev/null; then
    bb-log "removed node user $nu_name (uid $nu_uid)"
    rm -f "$nu_reported/$nu_name"
  else
    nu_errors+=("$nu_name: userdel failed")
    bb-log "error: node user $nu_name: userdel failed; it is tried again on the next run"
  fi
done < <(getent passwd)

if (( ${#nu_errors[@]} > 0 )); then
  bb-log "node users: ${#nu_errors[@]} could not be made; see the errors above"
fi
