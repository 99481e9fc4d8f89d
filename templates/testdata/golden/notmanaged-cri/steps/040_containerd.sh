#!/usr/bin/env bash
# Managed by node-manager for node group crio; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# cri.type is NotManaged: the container runtime is not node-manager's. The
# kubelet talks to it at the group's cri.notManaged.criSocketPath.
bb-changed-clear containerd
exit 0
