{{ include "machine-step-header" . }}
{{- $k := .versions.kubernetes }}
# The kubelet and kubectl of Kubernetes {{ $k.version }} from the package source,
# each verified against the version map; nothing is downloaded when the
# installed file already has the recorded sum. A new kubelet is restarted
# by the kubelet step.
# bashible-timeout: 3600

version={{ $k.version | squote }}
arch=$(bb-arch)
declare -A kubelet_sums=([amd64]={{ $k.sha256.kubelet.amd64 | squote }} [arm64]={{ $k.sha256.kubelet.arm64 | squote }})
declare -A kubectl_sums=([amd64]={{ $k.sha256.kubectl.amd64 | squote }} [arm64]={{ $k.sha256.kubectl.arm64 | squote }})
base={{ .packageSource.kubernetes | squote }}"/v$version/bin/linux/$arch"
bb-download "$base/kubelet" "${kubelet_sums[$arch]}" /usr/local/bin/kubelet 0755 kubelet
bb-download "$base/kubectl" "${kubectl_sums[$arch]}" /usr/local/bin/kubectl 0755
