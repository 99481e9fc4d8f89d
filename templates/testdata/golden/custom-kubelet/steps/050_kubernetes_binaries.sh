#!/usr/bin/env bash
# Managed by node-manager for node group databases; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The kubelet and kubectl of Kubernetes 1.35.4 from the package source,
# each verified against the version map; nothing is downloaded when the
# installed file already has the recorded sum. A new kubelet is restarted
# by the kubelet step.
# bashible-timeout: 3600

version='1.35.4'
arch=$(bb-arch)
declare -A kubelet_sums=([amd64]='983a6ba5a49823dcdd745c674e5e2416377dd27d6ad1b42d2befa0fb961a19f6' [arm64]='d710eef03bb4ad164bb77af9be5b11b44f874e2fc08153c7d383420d685f73e8')
declare -A kubectl_sums=([amd64]='b529430df69a688fd61b64ad2299edb5fd71cb58be2a4779dba624c7d3510efd' [arm64]='6a5a4cc4e396d7626a7a693a3044b51c75520f81db30fe6816c2554e53be336f')
base='https://dl.k8s.io/release'"/v$version/bin/linux/$arch"
bb-download "$base/kubelet" "${kubelet_sums[$arch]}" /usr/local/bin/kubelet 0755 kubelet
bb-download "$base/kubectl" "${kubectl_sums[$arch]}" /usr/local/bin/kubectl 0755
