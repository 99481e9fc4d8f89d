#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# Before anything changes: the step runs as root, on a supported OS and
# architecture, with the commands the steps need and room on /var.

if [[ $EUID -ne 0 ]]; then
  bb-log "bashible steps must run as root"
  exit 1
fi

bundle=$(bb-bundle)
bb-arch > /dev/null
# shellcheck disable=SC1091 # os-release is a shell fragment by definition
version=$(. /etc/os-release && echo "${VERSION_ID:-}")
case "$bundle:$version" in
  debian:12|debian:13) ;;
  ubuntu-lts:22.04|ubuntu-lts:24.04) ;;
  centos:9|centos:9.*) ;;
  *)
    bb-log "unsupported OS version: $bundle $version; supported are debian 12 and 13, ubuntu-lts 22.04 and 24.04, centos (RHEL family: Rocky, Alma, CentOS Stream) 9"
    exit 1
    ;;
esac

required=(curl jq flock timeout sha256sum tar gzip mktemp cmp stat systemctl)
case "$bundle" in
  centos) required+=(dnf rpm) ;;
  *) required+=(apt-get dpkg-query) ;;
esac
missing=()
for cmd in "${required[@]}"; do
  command -v "$cmd" > /dev/null || missing+=("$cmd")
done
if (( ${#missing[@]} > 0 )); then
  bb-log "missing commands: ${missing[*]}"
  exit 1
fi

# containerd's images, the kubelet's pods and the binaries all live on /var.
need_kib=$(( 2 * 1024 * 1024 ))
free_kib=$(df --output=avail -k /var | tail -n 1 | tr -d ' ')
if (( free_kib < need_kib )); then
  bb-log "only $(( free_kib / 1024 )) MiB free on /var; at least $(( need_kib / 1024 )) MiB are needed"
  exit 1
fi
