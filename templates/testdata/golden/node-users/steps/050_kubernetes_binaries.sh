#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The kubelet and kubectl of Kubernetes 1.36.3 from the package source,
# each verified against the version map; nothing is downloaded when the
# installed file already has the recorded sum. A new kubelet is restarted
# by the kubelet step.
# bashible-timeout: 3600

version='1.36.3'
arch=$(bb-arch)
declare -A kubelet_sums=([amd64]='46707a53209f826ad0f0d62371ac69cd00e78fd9a8176cf5f6f87f18f7f8b718' [arm64]='57205a5daf5883873d87b4914e1e00bdd7707acd075714788cfb0fc1f60bc414')
declare -A kubectl_sums=([amd64]='ebbd080e7c2e275093b55915722043257eb24004363e20acb3c4d71919f88336' [arm64]='3d86f24401c41ae5a46ac50eef8865fe891d3647d324a0836f6c63757a126e62')
base='https://dl.k8s.io/release'"/v$version/bin/linux/$arch"
bb-download "$base/kubelet" "${kubelet_sums[$arch]}" /usr/local/bin/kubelet 0755 kubelet
bb-download "$base/kubectl" "${kubectl_sums[$arch]}" /usr/local/bin/kubectl 0755
