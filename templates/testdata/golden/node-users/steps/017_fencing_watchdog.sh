#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# This group arms no watchdog (no fencing, or fencing mode Notify): what an earlier
# configuration in fencing mode Watchdog set up is taken away. softdog is
# unloaded only when this step had set it up, and only when it is free (an
# armed watchdog is never unloaded); otherwise it goes at the next reboot,
# as nothing loads it then.
bb-remove /etc/modules-load.d/node-manager-softdog.conf
bb-remove /etc/modprobe.d/node-manager-softdog.conf softdog-removed
bb-remove /etc/udev/rules.d/10-node-manager-watchdog.rules watchdog-udev-rule-removed
bb-changed-clear softdog
rm -f /run/node-manager/softdog-reload-pending
# The rule gave /dev/watchdog to the fencing agent's user: a device that
# stays (softdog in use, or another watchdog) is root's again, mode 0600, as
# the kernel makes it, and udev applies the rules that remain.
if bb-changed watchdog-udev-rule-removed; then
  if [[ -e /dev/watchdog ]]; then
    chown 0:0 /dev/watchdog
    chmod 0600 /dev/watchdog
    bb-log "gave /dev/watchdog back to root, mode 0600"
  fi
  if command -v udevadm > /dev/null; then
    udevadm control --reload
    udevadm trigger --action=add --sysname-match='watchdog*'
  fi
  bb-changed-clear watchdog-udev-rule-removed
fi
if bb-changed softdog-removed; then
  if [[ ! -d /sys/module/softdog ]]; then
    bb-changed-clear softdog-removed
  elif modprobe -r softdog; then
    bb-log "unloaded softdog"
    bb-changed-clear softdog-removed
  else
    bb-log "softdog stays loaded until it is free or the machine reboots: it is in use (the fencing agent holds /dev/watchdog until it stops)"
  fi
fi
