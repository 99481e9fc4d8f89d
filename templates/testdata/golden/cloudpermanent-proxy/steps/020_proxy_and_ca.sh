#!/usr/bin/env bash
# Managed by node-manager for node group frontend; changes are overwritten.
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
HTTP_PROXY='http://proxy.corp:3128'
http_proxy='http://proxy.corp:3128'
HTTPS_PROXY='http://proxy.corp:3128'
https_proxy='http://proxy.corp:3128'
NO_PROXY='127.0.0.1,169.254.169.254,corp.local,10.111.0.0/16,10.222.0.0/16,.corp,10.0.0.0/8'
no_proxy='127.0.0.1,169.254.169.254,corp.local,10.111.0.0/16,10.222.0.0/16,.corp,10.0.0.0/8'
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
bb-write-if-changed "$anchors/node-manager-0.crt" 0644 ca-trust <<'PEM'
-----BEGIN CERTIFICATE-----
MIIBiDCCAS2gAwIBAgIUA4lOlBTqZf0CPBtNunIyI6Ej8WgwCgYIKoZIzj0EAwIw
GDEWMBQGA1UEAwwNY29ycC1wcm94eS1jYTAgFw0yNjExMjEwNzUwMDdaGA8yMTI2
MTAyODA3NTAwN1owGDEWMBQGA1UEAwwNY29ycC1wcm94eS1jYTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABGZvJFXk/AmjYdK/1pybx6F+zc1lwaxD/XcuxJtxMTwH
vV35FQjydQaabcNk6Pk2ak3RnM5Makrzt4/vYl2RzS+jUzBRMB0GA1UdDgQWBBSM
5cAIvMTweMa0RalrqBbGZGqG/zAfBgNVHSMEGDAWgBSM5cAIvMTweMa0RalrqBbG
ZGqG/zAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCbYvdO3R2T
47VjzH0TW3RRrAaFGYBIsLAsjyS+WYJXYAIhAIZkQ23ECo4HHaphT6rn94rmo3bQ
iyw8FZeK+iPwSBpC
-----END CERTIFICATE-----
PEM
wanted+=("node-manager-0.crt")
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
