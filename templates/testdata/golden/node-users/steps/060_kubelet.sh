#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The kubelet: its configuration from the group, its credentials (TLS
# bootstrap with the bootstrap token on the first join, its own rotated
# certificate after), its systemd unit; restarted only when something it
# reads changed (here, its binary, the proxy or the trusted CAs).

# The cluster CA the kubelet trusts the API with.
bb-write-if-changed /etc/kubernetes/pki/ca.crt 0644 kubelet <<'PEM'
-----BEGIN CERTIFICATE-----
MIIBfzCCASWgAwIBAgIUDp2aszEOrm2WnAniQHiVMr14aI8wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbWlycm9yLWNhMCAXDTI2MTEyMTA3NTAwN1oYDzIxMjYxMDI4
MDc1MDA3WjAUMRIwEAYDVQQDDAltaXJyb3ItY2EwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQgnrtDIIEQWRCrYPXQhDNRhG77PPljYgr3gIh+McKUmfeVuxy+6G48
v9WsdrcR2qmJz24dpTRtRkO9jXAfz3Fvo1MwUTAdBgNVHQ4EFgQUU3Mz+IZ8Pync
GWRGFrdBDYQyTe4wHwYDVR0jBBgwFoAUU3Mz+IZ8PyncGWRGFrdBDYQyTe4wDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAqC1V0nU1dVpTXdK5S+ur
GDCqhSrOyaXc9Fm1+yUf+1sCIBMknzu8NmquPnPlvhicr7N1SUb9V9ouBA2WyDYg
Qq3y
-----END CERTIFICATE-----
PEM

# Resource reservation (mode Auto), from this machine's size: CPU 6% of the
# first core, 1% of the second, 0.5% of the next two and 0.25% of the
# rest; memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next
# 8, 6% of the next 112 and 2% of the rest.
cpus=$(nproc)
cpu_m=60
(( cpus >= 2 )) && cpu_m=$(( cpu_m + 10 ))
(( cpus >= 3 )) && cpu_m=$(( cpu_m + 5 * ( (cpus < 4 ? cpus : 4) - 2 ) ))
(( cpus > 4 )) && cpu_m=$(( cpu_m + (cpus - 4) * 25 / 10 ))
mem_mib=$(( $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) / 1024 ))
reserved_mib=0
left=$mem_mib
for tier in "4096 25" "4096 20" "8192 10" "114688 6" "999999999 2"; do
  read -r size percent <<< "$tier"
  part=$(( left < size ? left : size ))
  reserved_mib=$(( reserved_mib + part * percent / 100 ))
  left=$(( left - part ))
  (( left > 0 )) || break
done
reservation="systemReserved:
  cpu: ${cpu_m}m
  memory: ${reserved_mib}Mi
  ephemeral-storage: 1Gi"

# The kubelet's CPU manager keeps its state in a checkpoint and refuses to
# start when the policy, or under the static policy the CPUs reserved for
# the system, differ from what the checkpoint recorded: the kubelet would
# restart for ever. So when they change from what this node last applied
# (recorded in $cpu_manager_applied), the kubelet is stopped and the
# checkpoints (the memory manager's too) are removed before it starts with
# the new configuration. That stops the node's pods' CPU pinning: a
# disruption, approved first. Nodes configured before this was recorded
# are judged by their checkpoint's policy.
cpu_manager=none
cpu_manager_applied=/var/lib/node-manager/kubelet-cpu-manager
cpu_manager_checkpoints=('/var/lib/kubelet/cpu_manager_state' '/var/lib/kubelet/memory_manager_state')
applied_cpu_manager=$(cat "$cpu_manager_applied" 2>/dev/null || true)
if [[ -z "$applied_cpu_manager" && -f "${cpu_manager_checkpoints[0]}" ]]; then
  checkpoint_policy=$(jq -r '.policyName // "unknown"' "${cpu_manager_checkpoints[0]}" 2>/dev/null || echo unreadable)
  case "$checkpoint_policy:$cpu_manager" in
    none:*) applied_cpu_manager=none ;;
    static:static*) applied_cpu_manager=$cpu_manager ;;
    *) applied_cpu_manager="$checkpoint_policy (from the checkpoint)" ;;
  esac
fi
if [[ -n "$applied_cpu_manager" && "$applied_cpu_manager" != "$cpu_manager" ]] &&
    [[ -e "${cpu_manager_checkpoints[0]}" || -e "${cpu_manager_checkpoints[1]}" ]]; then
  bb-log "the kubelet's CPU manager changes from '$applied_cpu_manager' to '$cpu_manager': its checkpoints are removed with the kubelet stopped"
  bb-disruption-gate
  if systemctl is-active --quiet kubelet.service; then
    systemctl stop kubelet.service
  fi
  for checkpoint in "${cpu_manager_checkpoints[@]}"; do
    bb-remove "$checkpoint" kubelet
  done
fi

# The kubelet's resolv.conf: where systemd-resolved serves /etc/resolv.conf
# (its stub, 127.0.0.53), the upstream servers resolved itself uses, as
# kubeadm does: CoreDNS forwarding to the node's stub would query itself.
resolv_conf=/etc/resolv.conf
if [[ -f /run/systemd/resolve/resolv.conf ]] &&
    grep -Eqs '^[[:space:]]*nameserver[[:space:]]+127\.0\.0\.5[34]([[:space:]]|$)' /etc/resolv.conf; then
  resolv_conf=/run/systemd/resolve/resolv.conf
fi

# The node's IP on a machine with several networks: the kubelet registers
# with this machine's first address (in `ip addr` order, loopback and
# link-local ones left out) inside the first of the cluster's internal
# networks that holds one (StaticClusterConfiguration internalNetworkCIDRs,
# for Static groups, as in Deckhouse). Found, it is --node-ip and
# /var/lib/bashible/discovered-node-ip (bb-d8-node-ip); otherwise the
# kubelet picks the address itself (that of the default route).
node_ip=""
bb-log "no internal network is configured (StaticClusterConfiguration internalNetworkCIDRs, read for Static groups): the kubelet picks the node IP itself"
if [[ -n "$node_ip" ]]; then
  echo "$node_ip" | bb-write-if-changed /var/lib/bashible/discovered-node-ip 0644
else
  bb-remove /var/lib/bashible/discovered-node-ip
fi

{
  cat <<'YAML'
# Managed by node-manager.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
cgroupDriver: systemd
containerRuntimeEndpoint: "unix:///run/containerd/containerd.sock"
staticPodPath: /etc/kubernetes/manifests
clusterDomain: "cluster.local"
clusterDNS:
  - "10.222.0.10"
maxPods: 120
containerLogMaxSize: "50Mi"
containerLogMaxFiles: 4
seccompDefault: false
rotateCertificates: true
# The serving certificate is self-signed by the kubelet (in /var/lib/kubelet/pki):
# nothing in the cluster approves kubernetes.io/kubelet-serving requests, and
# with serverTLSBootstrap the kubelet would serve no certificate at all
# (kubectl logs and exec would fail).
serverTLSBootstrap: false
failSwapOn: true
memorySwap:
  swapBehavior: NoSwap
# Eviction as Deckhouse configures it: on disk pressure at 5 % free space
# or inodes at once and at 10 % after 90 s (the kubelet's own 10 % and 15 %
# evict early on large disks); memory keeps the kubelet's 100Mi.
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "5%"
  nodefs.inodesFree: "5%"
  imagefs.available: "5%"
  imagefs.inodesFree: "5%"
evictionSoft:
  nodefs.available: "10%"
  nodefs.inodesFree: "10%"
  imagefs.available: "10%"
  imagefs.inodesFree: "10%"
evictionSoftGracePeriod:
  nodefs.available: "1m30s"
  nodefs.inodesFree: "1m30s"
  imagefs.available: "1m30s"
  imagefs.inodesFree: "1m30s"
cpuManagerPolicy: none
YAML
  echo "resolvConf: $resolv_conf"
  echo "$reservation"
  # A host joined by Cluster API Provider Static registers with the
  # providerID CAPS wrote, by which Cluster API finds the Machine's Node.
  if [[ -s /var/lib/bashible/node-spec-provider-id ]]; then
    echo "providerID: $(head -n 1 /var/lib/bashible/node-spec-provider-id | jq -R .)"
  fi
} | bb-write-if-changed /etc/kubernetes/kubelet/config.yaml 0644 kubelet
echo "$cpu_manager" | bb-write-if-changed "$cpu_manager_applied" 0644

# Credentials: once the kubelet has its kubeconfig, the bootstrap one goes.
if [[ -s /etc/kubernetes/kubelet.conf ]]; then
  bb-remove /etc/kubernetes/bootstrap-kubelet.conf
elif [[ -s '/var/lib/bashible/bootstrap-token' ]]; then
  # The token is put in by awk, so a traced run never shows it.
  put_token=(awk -v token_file='/var/lib/bashible/bootstrap-token' 'BEGIN { getline token < token_file } { sub(/@TOKEN@/, token) } 1')
  "${put_token[@]}" <<'KUBECONFIG' | bb-write-if-changed /etc/kubernetes/bootstrap-kubelet.conf 0600 kubelet
apiVersion: v1
kind: Config
clusters:
  - name: kubernetes
    cluster:
      server: https://127.0.0.1:6445
      certificate-authority: /etc/kubernetes/pki/ca.crt
contexts:
  - name: bootstrap
    context:
      cluster: kubernetes
      user: bootstrap
current-context: bootstrap
users:
  - name: bootstrap
    user:
      token: @TOKEN@
KUBECONFIG
else
  bb-log "the node cannot join: neither /etc/kubernetes/kubelet.conf nor the bootstrap token "'/var/lib/bashible/bootstrap-token'" exists"
  exit 1
fi

mkdir -p '/var/lib/kubelet' /var/lib/kubelet/pki /etc/kubernetes/manifests
bb-write-if-changed /etc/systemd/system/kubelet.service 0644 kubelet <<'UNIT'
# Managed by node-manager.
[Unit]
Description=kubelet: the Kubernetes node agent
Wants=network-online.target kubernetes-api-proxy.service
After=network-online.target kubernetes-api-proxy.service containerd.service

[Service]
ExecStart=/usr/local/bin/kubelet
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
{
  cat <<'UNIT'
# Managed by node-manager: the node registers with its group's labels and
# the uninitialized taint, which node-manager removes once it has applied
# the group's node template.
[Service]
EnvironmentFile=-/etc/node-manager/proxy.env
ExecStart=
ExecStart=/usr/local/bin/kubelet \
  --config=/etc/kubernetes/kubelet/config.yaml \
  --kubeconfig=/etc/kubernetes/kubelet.conf \
  --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
  --root-dir=/var/lib/kubelet \
  --cert-dir=/var/lib/kubelet/pki \
  --node-labels=node.deckhouse.io/group=worker,node.deckhouse.io/type=Static \
UNIT
  if [[ -n "$node_ip" ]]; then
    echo "  --node-ip=$node_ip \\"
  fi
  echo "  --register-with-taints=node.deckhouse.io/uninitialized=:NoSchedule"
} | bb-write-if-changed /etc/systemd/system/kubelet.service.d/10-node-manager.conf 0644 kubelet
bb-unit-converge kubelet.service kubelet
