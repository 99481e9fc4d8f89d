#!/usr/bin/env bash
# Builds the Debian root the rootfs, join and caps e2e suites run bundles
# in, once per package list: a minimal bookworm with what a machine has
# before bashible (curl, jq, ca-certificates: what the bootstrap script
# needs; logrotate, which Debian installs by default and the logging step
# configures; procps, whose sysctl the kernel step runs; systemd as init,
# with dbus, so that the join suite boots the root as a machine; openssh-server
# and sudo, so the caps suite reaches the root over SSH as Cluster API
# Provider Static reaches a host), plus the
# .deb files of the bundle's base packages downloaded but NOT installed, so
# the base-packages step really installs them, offline, during the test,
# and of containernetworking-plugins, which the join suite installs on the
# node as a cluster's network module would.
#
# All suites use this one package list: the cache keeps the root of one
# list only, and suites run in parallel.
#
# usage: build-root.sh DIR MIRROR PACKAGE...
# DIR must not exist; it is created with DIR/root inside. Run as root.
set -Eeuo pipefail

dir=$1 mirror=$2
shift 2
packages=("$@")
root=$dir/root

mkdir -p "$dir"
debootstrap --variant=minbase --include=ca-certificates,curl,jq,logrotate,procps,systemd,systemd-sysv,dbus,openssh-server,sudo bookworm "$root" "$mirror"

# apt inside the root, in namespaces of its own: a fresh /proc that goes
# away with them, the host's resolver for the download.
cp /etc/resolv.conf "$root/etc/resolv.conf"
# shellcheck disable=SC2016 # expanded by the inner bash
unshare --mount --pid --fork --propagation private bash -Eeuo pipefail -c '
  mount -t proc proc "$1/proc"
  chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    bash -Eeuo pipefail -c "apt-get clean && apt-get update -q && apt-get install -y -q --no-install-recommends --download-only \"\$@\"" apt "${@:2}"
' build "$root" "${packages[@]}" containernetworking-plugins
rm -f "$root/etc/resolv.conf"
echo "build-root.sh: $(find "$root/var/cache/apt/archives" -name '*.deb' | wc -l) packages downloaded, not installed"
