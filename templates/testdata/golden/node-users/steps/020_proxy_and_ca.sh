#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# The cluster's HTTP proxy and extra CA certificates. The proxy settings
# live in /etc/node-manager/proxy.env: the package installs and downloads
# of later steps use it (bb-with-proxy sources it), and so do containerd and
# the kubelet (their units read it as an EnvironmentFile), which restart
# when it changes. Every value is single-quoted, which bash and systemd
# both take literally; the server admits only URLs and no_proxy entries
# without quotes or shell metacharacters, and the render fails if one got
# through all the same. The file is readable by root only: a proxy URL may
# carry a password.

# A file an earlier version left readable by all is made private first: a
# new mode alone restarts nothing.
if [[ -f /etc/node-manager/proxy.env ]]; then
  chmod 0600 /etc/node-manager/proxy.env
fi
bb-write-if-changed /etc/node-manager/proxy.env 0600 proxy <<'ENV'
# Managed by node-manager: the cluster's proxy (ClusterConfiguration proxy).
# No proxy is set.
ENV
if bb-changed proxy; then
  bb-mark-changed containerd
  bb-mark-changed kubelet
  bb-changed-clear proxy
fi

# Extra CA certificates join the OS's trust store, each in its own file;
# files of certificates no longer listed are removed.
case "$(bb-bundle)" in
  centos) anchors=/etc/pki/ca-trust/source/anchors; update=(update-ca-trust extract) ;;
  *) anchors=/usr/local/share/ca-certificates; update=(update-ca-certificates) ;;
esac
mkdir -p "$anchors"
wanted=()
for file in "$anchors"/node-manager-*.crt; do
  [[ -e "$file" ]] || continue
  if [[ ! " ${wanted[*]} " == *" $(basename "$file") "* ]]; then
    bb-remove "$file" ca-trust
  fi
done
if bb-changed ca-trust; then
  if ! command -v "${update[0]}" > /dev/null; then
    bb-package-install ca-certificates
  fi
  "${update[@]}" > /dev/null
  bb-log "the trusted CA certificates changed"
  bb-mark-changed containerd
  bb-changed-clear ca-trust
fi
