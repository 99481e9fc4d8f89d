#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# Packages from the OS's repositories that every node needs; installed
# ones are left as they are.
# bashible-timeout: 3600

# runc is for the containerd node-manager installs; a runtime that is not
# node-manager's (cri.type NotManaged), or a runc already on the machine
# (Docker's containerd.io ships one), is left alone.
packages=()
case "$(bb-bundle)" in
  'centos') packages=('ca-certificates' 'jq' 'conntrack-tools' 'ethtool' 'iproute' 'iptables-nft' 'kmod' 'socat' 'runc' 'haproxy' 'tar') ;;
  'debian') packages=('ca-certificates' 'curl' 'jq' 'conntrack' 'ethtool' 'iproute2' 'iptables' 'kmod' 'socat' 'runc' 'haproxy') ;;
  'ubuntu-lts') packages=('ca-certificates' 'curl' 'jq' 'conntrack' 'ethtool' 'iproute2' 'iptables' 'kmod' 'socat' 'runc' 'haproxy') ;;
  *) bb-log "no base packages are listed for bundle $(bb-bundle)"; exit 1 ;;
esac
skip_runc=no
if command -v runc > /dev/null; then
  skip_runc=yes
fi
if [[ "$skip_runc" == yes ]]; then
  for i in "${!packages[@]}"; do
    if [[ "${packages[$i]}" == runc ]]; then
      unset 'packages[i]'
    fi
  done
fi
bb-package-install "${packages[@]}"
