#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
# A reboot, when a step asked for one (bb-flag-set reboot) or a person did
# (the Node's update.node.deckhouse.io/reboot annotation: bashible.sh sets
# the flag), once the disruption is approved (see bb-disruption-gate).
# bashible.sh reboots at the very end of the run, after it has recorded the
# configuration, so the reboot cannot cut that short, and reports to the
# Node only after the reboot. BASHIBLE_REBOOT_COMMAND replaces the reboot
# where the machine must not really reboot (tests).

if ! bb-flag-is-set reboot; then
  exit 0
fi
bb-disruption-gate
bb-flag-unset reboot
bb-flag-set reboot-pending
bb-log "the node will reboot at the end of this run"
