{{ include "step-header" . }}
{{ include "write-if-changed" . }}

# Kubernetes networking needs forwarding and bridged traffic seen by iptables.
if write_if_changed /etc/sysctl.d/90-node-manager.conf <<'CONF'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
vm.swappiness = {{ .nodeGroup.kubelet.memorySwap.swappiness }}
fs.inotify.max_user_watches = 524288
CONF
then
  sysctl --load /etc/sysctl.d/90-node-manager.conf
fi
