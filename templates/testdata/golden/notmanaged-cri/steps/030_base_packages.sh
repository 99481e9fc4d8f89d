#!/usr/bin/env bash
# Managed by node-manager for node group crio; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# Packages from the OS's repositories that every node needs; installed
# ones are left as they are.
# bashible-timeout: 3600

case "$(bb-bundle)" in
  centos) bb-package-install ca-certificates jq conntrack-tools ethtool iproute iptables-nft kmod socat runc haproxy tar ;;
  debian) bb-package-install ca-certificates curl jq conntrack ethtool iproute2 iptables kmod socat runc haproxy ;;
  ubuntu-lts) bb-package-install ca-certificates curl jq conntrack ethtool iproute2 iptables kmod socat runc haproxy ;;
  *) bb-log "no base packages are listed for bundle $(bb-bundle)"; exit 1 ;;
esac
