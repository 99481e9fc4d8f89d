#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The kernel for Kubernetes: modules loaded now and at every boot, sysctl
# settings for pod networking and limits, and swap as the group allows
# (kubelet.memorySwap.swapBehavior: NoSwap).

bb-write-if-changed /etc/modules-load.d/node-manager.conf 0644 kernel-modules <<'CONF'
# Managed by node-manager.
overlay
br_netfilter
nf_conntrack
CONF
if bb-changed kernel-modules; then
  for module in overlay br_netfilter nf_conntrack; do
    modprobe "$module"
  done
  bb-changed-clear kernel-modules
fi

# IPv6 forwarding is set only where the kernel has IPv6 (not booted with
# ipv6.disable=1): sysctl fails on a key it cannot find, even one marked
# with "-" (procps 4.0), and so would the step, on every run. Whether the
# kernel has IPv6 does not change while it runs, so the file is the same on
# every run.
{
  cat <<'CONF'
# Managed by node-manager.
# Pod networking: forwarding, and bridged traffic seen by iptables.
net.ipv4.ip_forward = 1
CONF
  if [[ -d /proc/sys/net/ipv6 ]]; then
    echo 'net.ipv6.conf.all.forwarding = 1'
  else
    echo '# This kernel has no IPv6: net.ipv6.conf.all.forwarding is left out.'
  fi
  cat <<'CONF'
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.netfilter.nf_conntrack_max = 1048576
# Limits many containers need.
fs.inotify.max_user_watches = 524288
fs.inotify.max_user_instances = 8192
fs.file-max = 2097152
vm.max_map_count = 262144
kernel.pid_max = 4194304
# What the kubelet expects of the kernel.
vm.overcommit_memory = 1
kernel.panic = 10
kernel.panic_on_oops = 1
vm.swappiness = 60
CONF
} | bb-write-if-changed /etc/sysctl.d/90-node-manager.conf 0644 sysctl
if bb-changed sysctl; then
  sysctl --quiet --load /etc/sysctl.d/90-node-manager.conf
  bb-changed-clear sysctl
fi

# No swap: the kubelet refuses to start with swap on. Swap is turned off now
# and its /etc/fstab entries are commented out, so it stays off.
if [[ -n "$(swapon --show=NAME --noheadings)" ]]; then
  swapoff -a
  bb-log "turned swap off"
fi
if [[ -f /etc/fstab ]]; then
  awk '!/^[[:space:]]*#/ && $3 == "swap" { print "# swap is off on Kubernetes nodes (node-manager): " $0; next } { print }' /etc/fstab |
    bb-write-if-changed /etc/fstab 0644
fi
