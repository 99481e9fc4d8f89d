#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# /var/lib/bashible/cleanup_static_node.sh takes a Static machine back out of
# the cluster: it undoes what this bundle installed and reboots. It is only
# written here; an administrator (or Cluster API Provider Static) runs it.

bb-write-if-changed /var/lib/bashible/cleanup_static_node.sh 0700 <<'SCRIPT'
#!/usr/bin/env bash
# Managed by node-manager: takes this machine out of the cluster. It stops
# and removes what node-manager's bundle installed (bashible, the kubelet,
# containerd unless the runtime is not node-manager's, the local API proxy,
# their files and data), then reboots.
# Run as root with --yes-i-am-sane-and-i-understand-what-i-am-doing.
set -Eeuo pipefail

if [[ "${1:-}" != --yes-i-am-sane-and-i-understand-what-i-am-doing ]]; then
  echo "cleanup_static_node.sh removes Kubernetes and everything node-manager installed from this machine, then reboots it." >&2
  echo "Run it with --yes-i-am-sane-and-i-understand-what-i-am-doing if that is what you want." >&2
  exit 1
fi
if [[ $EUID -ne 0 ]]; then
  echo "cleanup_static_node.sh must run as root" >&2
  exit 1
fi
units=(bashible.timer bashible.service kubelet.service kubernetes-api-proxy.service containerd.service)
for unit in "${units[@]}"; do
  systemctl disable --now "$unit" 2> /dev/null || true
done
# Containers outlive containerd (KillMode=process): stop their shims.
pkill -f containerd-shim 2> /dev/null || true

# Unmount what the kubelet and containerd mounted, deepest first. A mount
# that stays would have its data deleted below: then stop and ask for a
# reboot instead.
root_dir_re='/var/lib/kubelet'
data_mounts() {
  awk '{ print $2 }' /proc/mounts | while read -r mount; do printf '%b\n' "$mount"; done |
    { grep -E "^(/var/lib/kubelet|$root_dir_re|/var/lib/containerd|/run/containerd)(/|\$)" || true; } | sort -r
}
data_mounts | while read -r mount; do
  umount "$mount" 2> /dev/null || umount -l "$mount" 2> /dev/null || true
done
if [[ -n "$(data_mounts)" ]]; then
  echo "cleanup_static_node.sh: these are still mounted, and their data would be deleted:" >&2
  data_mounts >&2
  echo "Nothing was removed. Reboot the machine and run cleanup_static_node.sh again." >&2
  exit 2
fi

paths=(
  /etc/systemd/system/bashible.service
  /etc/systemd/system/bashible.timer
  /etc/systemd/system/kubelet.service
  /etc/systemd/system/kubelet.service.d
  /etc/systemd/system/kubernetes-api-proxy.service
  /usr/local/bin/kubelet
  /usr/local/bin/kubectl
  /etc/kubernetes
  /etc/node-manager
  /etc/modules-load.d/node-manager.conf
  /etc/sysctl.d/90-node-manager.conf
  /etc/systemd/journald.conf.d/node-manager.conf
  /etc/logrotate.d/node-manager
  /var/lib/kubelet
  '/var/lib/kubelet'
  /var/lib/node-manager
  /var/lock/bashible
)
paths+=(/etc/systemd/system/containerd.service /etc/containerd /var/lib/containerd /run/containerd)
# containerd's binaries are those of its release archive.
for binary in containerd containerd-shim containerd-shim-runc-v1 containerd-shim-runc-v2 containerd-stress ctr; do
  paths+=("/usr/local/bin/$binary")
done
# --one-file-system: never follow into anything mounted below these paths.
rm -rf --one-file-system "${paths[@]}"
rm -f /usr/local/share/ca-certificates/node-manager-*.crt /etc/pki/ca-trust/source/anchors/node-manager-*.crt
systemctl daemon-reload || true
# Last, bashible's own directory (this script is in it).
rm -rf --one-file-system /var/lib/bashible
echo "cleanup_static_node.sh: done; rebooting" >&2
systemctl reboot
SCRIPT
