#!/usr/bin/env bash
# Managed by node-manager for node group batch; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# containerd 2.2.7 (cri.type ContainerdV2) from the package source, verified
# against the version map, with its configuration; restarted only when
# something it reads changed. A new containerd version is a disruption: the
# node asks for approval first (bb-disruption-gate).
# bashible-timeout: 3600

version='2.2.7'
declare -A sums=([amd64]='91cd216ea26a1b8b512219d3f205375c967e7b7de4dae571bc3dd16bfacd34b5' [arm64]='84eb0a161e20ad45465202fa2d6d93b3d9b74666c363e9908706d590a86e2618')
arch=$(bb-arch)
state=/var/lib/node-manager/containerd.installed
wanted="$version ${sums[$arch]}"
if [[ "$(cat "$state" 2>/dev/null || true)" != "$wanted" || ! -x /usr/local/bin/containerd ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  source='https://mirror.corp/node-manager/containerd'
  bb-download "$source/v$version/containerd-$version-linux-$arch.tar.gz" "${sums[$arch]}" "$tmp/containerd.tar.gz"
  mkdir "$tmp/x"
  tar -xzf "$tmp/containerd.tar.gz" -C "$tmp/x"
  previous=$(cut -d' ' -f1 "$state" 2>/dev/null || true)
  if [[ -n "$previous" && "$previous" != "$version" ]]; then
    bb-log "containerd $previous is to be replaced by $version"
    bb-disruption-gate
  fi
  for file in "$tmp"/x/bin/*; do
    name=${file##*/}
    bb-write-if-changed "/usr/local/bin/$name" 0755 containerd < "$tmp/x/bin/$name"
  done
  echo "$wanted" | bb-write-if-changed "$state" 0644
fi

bb-write-if-changed /etc/containerd/config.toml 0644 containerd <<'TOML'
# Managed by node-manager.
version = 3

[plugins.'io.containerd.cri.v1.images']
  max_concurrent_downloads = 10
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.1"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '/etc/containerd/certs.d'

[plugins.'io.containerd.cri.v1.runtime']
  # cri.containerdV2.restrictOOMScoreAdj: no OOM score below containerd's own.
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
TOML

# Registry mirrors: one directory per registry host under certs.d, marked
# as node-manager's; a marked directory of a host no longer listed goes.
# containerd reads these at every pull: no restart.
certs=/etc/containerd/certs.d
mkdir -p "$certs"
wanted_hosts=()
dir="$certs/"'docker.io'
wanted_hosts+=('docker.io')
: | bb-write-if-changed "$dir/.node-manager" 0644
bb-write-if-changed "$dir/ca.crt" 0644 <<'PEM'
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
bb-write-if-changed "$dir/hosts.toml" 0600 <<'TOML'
# Managed by node-manager: pulls from docker.io go to its mirrors first.
server = 'https://docker.io'

[host.'https://mirror.corp:5000']
  capabilities = ['pull', 'resolve']
  ca = '/etc/containerd/certs.d/docker.io/ca.crt'
  [host.'https://mirror.corp:5000'.header]
    Authorization = ['Basic cHVsbGVyOnMzY3JldA==']
TOML
dir="$certs/"'registry.k8s.io'
wanted_hosts+=('registry.k8s.io')
: | bb-write-if-changed "$dir/.node-manager" 0644
bb-remove "$dir/ca.crt"
bb-write-if-changed "$dir/hosts.toml" 0644 <<'TOML'
# Managed by node-manager: pulls from registry.k8s.io go to its mirrors first.
server = 'https://registry.k8s.io'

[host.'https://mirror.corp:5000']
  capabilities = ['pull', 'resolve']

[host.'http://cache.corp:5001']
  capabilities = ['pull', 'resolve']
TOML
for dir in "$certs"/*/; do
  [[ -e "$dir.node-manager" ]] || continue
  host=$(basename "$dir")
  if [[ ! " ${wanted_hosts[*]} " == *" $host "* ]]; then
    bb-remove "$dir"
  fi
done

bb-write-if-changed /etc/systemd/system/containerd.service 0644 containerd <<'UNIT'
# Managed by node-manager.
[Unit]
Description=containerd container runtime
After=network.target local-fs.target

[Service]
EnvironmentFile=-/etc/node-manager/proxy.env
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd --config /etc/containerd/config.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=1048576
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
UNIT
bb-unit-converge containerd.service containerd
