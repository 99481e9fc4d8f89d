#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The node's name is its host name. This group's machines are the
# administrator's (Static): their host name is never changed, only checked.
# The host name must resolve on the machine itself: /etc/hosts gets a line
# for it unless it already has one.

current=$(uname -n)
wanted=$current
# What the kubelet registers the node as: a lowercase DNS-1123 name.
if [[ ! "${wanted,,}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ ]] || (( ${#wanted} > 63 )); then
  bb-log "host name '$wanted' cannot be a node name (lowercase letters, digits, '-' and '.', at most 63 characters); rename the machine"
  exit 1
fi

# The line this step owns is marked; an administrator's own line for the
# name is kept and then none is added.
mark='# node-manager: the node name resolves locally'
others=$(grep -v -F "$mark" /etc/hosts 2>/dev/null || true)
if awk -v name="$wanted" '!/^[[:space:]]*#/ { for (i = 2; i <= NF; i++) if ($i == name) found = 1 } END { exit !found }' <<< "$others"; then
  printf '%s\n' "$others" | bb-write-if-changed /etc/hosts 0644
else
  printf '%s\n127.0.1.1 %s %s\n' "$others" "$wanted" "$mark" | bb-write-if-changed /etc/hosts 0644
fi
