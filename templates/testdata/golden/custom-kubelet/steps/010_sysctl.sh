#!/usr/bin/env bash
# Managed by node-manager for node group databases; changes are overwritten.
set -Eeuo pipefail
write_if_changed() {
  local path=$1 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat > "$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$path"
  echo "updated $path"
}

# Kubernetes networking needs forwarding and bridged traffic seen by iptables.
if write_if_changed /etc/sysctl.d/90-node-manager.conf <<'CONF'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
vm.swappiness = 10
fs.inotify.max_user_watches = 524288
CONF
then
  sysctl --load /etc/sysctl.d/90-node-manager.conf
fi
