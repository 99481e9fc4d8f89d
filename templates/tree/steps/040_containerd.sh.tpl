{{ include "machine-step-header" . }}
{{- if eq .cri "NotManaged" }}
# cri.type is NotManaged: the container runtime is not node-manager's. The
# kubelet talks to it at the group's cri.notManaged.criSocketPath.
bb-changed-clear containerd
exit 0
{{- else }}
{{- $v := .versions.containerd }}
{{- $v2 := hasPrefix "2." $v.version }}
# containerd {{ $v.version }} (cri.type {{ .cri }}) from the package source, verified
# against the version map, with its configuration; restarted only when
# something it reads changed. A new containerd version is a disruption: the
# node asks for approval first (bb-disruption-gate).
# bashible-timeout: 3600

version={{ $v.version | squote }}
declare -A sums=([amd64]={{ $v.sha256.amd64 | squote }} [arm64]={{ $v.sha256.arm64 | squote }})
arch=$(bb-arch)
state=/var/lib/node-manager/containerd.installed
wanted="$version ${sums[$arch]}"
if [[ "$(cat "$state" 2>/dev/null || true)" != "$wanted" || ! -x /usr/local/bin/containerd ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  source={{ .packageSource.containerd | squote }}
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
{{- if $v2 }}
version = 3

[plugins.'io.containerd.cri.v1.images']
  max_concurrent_downloads = {{ .nodeGroup.cri.containerd.maxConcurrentDownloads }}
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {{ .versions.sandboxImage | quote }}
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '/etc/containerd/certs.d'
{{- if .nodeGroup.cri.containerd.restrictOOMScoreAdj }}

[plugins.'io.containerd.cri.v1.runtime']
  # cri.containerdV2.restrictOOMScoreAdj: no OOM score below containerd's own.
  restrict_oom_score_adj = true
{{- end }}

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
{{- else }}
version = 2

[plugins.'io.containerd.grpc.v1.cri']
  sandbox_image = {{ .versions.sandboxImage | quote }}
  max_concurrent_downloads = {{ .nodeGroup.cri.containerd.maxConcurrentDownloads }}
{{- if .nodeGroup.cri.containerd.restrictOOMScoreAdj }}
  # cri.containerd.restrictOOMScoreAdj: no OOM score below containerd's own.
  restrict_oom_score_adj = true
{{- end }}
  [plugins.'io.containerd.grpc.v1.cri'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins.'io.containerd.grpc.v1.cri'.registry]
    config_path = '/etc/containerd/certs.d'
{{- end }}
TOML

# Registry mirrors: one directory per registry host under certs.d, marked
# as node-manager's; a marked directory of a host no longer listed goes.
# containerd reads these at every pull: no restart.
certs=/etc/containerd/certs.d
mkdir -p "$certs"
wanted_hosts=()
{{- range .registry.mirrors }}
{{- $host := .host }}
{{- $ca := .ca }}
{{- $auth := .auth }}
dir="$certs/"{{ .host | squote }}
wanted_hosts+=({{ .host | squote }})
: | bb-write-if-changed "$dir/.node-manager" 0644
{{- if .ca }}
bb-write-if-changed "$dir/ca.crt" 0644 <<'PEM'
{{ .ca | trimSuffix "\n" }}
PEM
{{- else }}
bb-remove "$dir/ca.crt"
{{- end }}
bb-write-if-changed "$dir/hosts.toml" {{ if .auth }}0600{{ else }}0644{{ end }} <<'TOML'
# Managed by node-manager: pulls from {{ .host }} go to its mirrors first.
server = 'https://{{ .host }}'
{{- range .endpoints }}

[host.'{{ . }}']
  capabilities = ['pull', 'resolve']
{{- if $ca }}
  ca = '/etc/containerd/certs.d/{{ $host }}/ca.crt'
{{- end }}
{{- if $auth }}
  [host.'{{ . }}'.header]
    Authorization = ['Basic {{ $auth }}']
{{- end }}
{{- end }}
TOML
{{- end }}
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
{{- end }}
