#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
# bashible runs every minute from a systemd timer; a run may take at most
# three hours (systemd stops it after that).

units=${BASHIBLE_ROOT}/etc/systemd/system
bb-write-if-changed "$units/bashible.service" 0644 bashible.timer <<'UNIT'
[Unit]
Description=bashible: node configuration by node-manager
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
EnvironmentFile=-/etc/environment
ExecStart=/bin/bash --noprofile --norc /var/lib/bashible/bashible.sh --max-retries 10
RuntimeMaxSec=3h
UNIT
bb-write-if-changed "$units/bashible.timer" 0644 bashible.timer <<'UNIT'
[Unit]
Description=bashible every minute

[Timer]
OnBootSec=1min
OnUnitInactiveSec=1min

[Install]
WantedBy=timers.target
UNIT
# Only on a real machine: a test node under BASHIBLE_ROOT has no systemd.
if [[ -z "$BASHIBLE_ROOT" ]]; then
  bb-unit-converge bashible.timer
else
  bb-changed-clear bashible.timer
fi
