#!/usr/bin/env bash
# Managed by node-manager for node group database; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# A CloudPermanent machine is removed by deleting it: no cleanup script.
bb-remove /var/lib/bashible/cleanup_static_node.sh
