#!/usr/bin/env bash
# Managed by node-manager for node group frontend; changes are overwritten.
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
declare -A kubelet_sums=([amd64]='' [arm64]='')
declare -A kubectl_sums=([amd64]='' [arm64]='')
base="https://dl.k8s.io/release/v$version/bin/linux/$arch"
bb-download "$base/kubelet" "${kubelet_sums[$arch]}" /usr/local/bin/kubelet 0755 kubelet
bb-download "$base/kubectl" "${kubectl_sums[$arch]}" /usr/local/bin/kubectl 0755
