#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# containerd 1.7.34 (cri.type Containerd) from the package source, verified
# against the version map, with its configuration; restarted only when
# something it reads changed. A new containerd version is a disruption: the
# node asks for approval first (bb-disruption-gate).
# bashible-timeout: 3600

version='1.7.34'
declare -A sums=([amd64]='640f989745020ea4897ad0a3d7d977863a7279d3f2e132792fc62c25a45bda50' [arm64]='824cbd16af3bdfc1b1836338350630ae1b6a58c7466636a4bed10549790090ab')
arch=$(bb-arch)
state=/var/lib/node-manager/containerd.installed
wanted="$version ${sums[$arch]}"
if [[ "$(cat "$state" 2>/dev/null || true)" != "$wanted" || ! -x /usr/local/bin/containerd ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  source='https://github.com/containerd/containerd/releases/download'
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
version = 2

[plugins.'io.containerd.grpc.v1.cri']
  sandbox_image = "registry.k8s.io/pause:3.10.1"
  max_concurrent_downloads = 3
  [plugins.'io.containerd.grpc.v1.cri'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins.'io.containerd.grpc.v1.cri'.registry]
    config_path = '/etc/containerd/certs.d'
TOML

# Registry mirrors: one directory per registry host under certs.d, marked
# as node-manager's; a marked directory of a host no longer listed goes.
# containerd reads these at every pull: no restart.
certs=/etc/containerd/certs.d
mkdir -p "$certs"
wanted_hosts=()
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
