#!/usr/bin/env bash
# Managed by node-manager for node group databases; changes are overwritten.
set -Eeuo pipefail
# Reboots when a step asked for it (bb-flag-set reboot), once the
# disruption is approved (see bb-disruption-gate). BASHIBLE_REBOOT_COMMAND
# replaces the reboot where the machine must not really reboot (tests).

if ! bb-flag-is-set reboot; then
  exit 0
fi
bb-disruption-gate
bb-flag-unset reboot
bb-log "rebooting, as a step asked"
bb-event Normal BashibleReboot "rebooting, as a step asked"
${BASHIBLE_REBOOT_COMMAND:-systemctl reboot}
