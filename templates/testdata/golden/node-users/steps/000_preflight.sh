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
# The room is a condition for joining, checked on the node's first run
# only: later runs must not be held up by it (the kubelet's image garbage
# collection keeps a busy node's disk near full, and the update that would
# fix the disk has to get through), so they only warn.
need_mib=2048
free_mib=$(( $(df --output=avail -k /var | tail -n 1 | tr -d ' ') / 1024 ))
if (( free_mib < need_mib )); then
  if [[ -e "$BASHIBLE_DIR/first_run" ]]; then
    bb-log "not enough disk space to join: /var has ${free_mib} MiB free, a new node needs at least ${need_mib} MiB there (containerd's images, the kubelet's pods, the binaries); free space on /var or grow it, and bashible retries"
    exit 1
  fi
  bb-log "warning: /var has only ${free_mib} MiB free (a new node needs ${need_mib} MiB); the update goes on"
fi
