#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
write_if_changed() {
  local path=$1 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat > "$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$path"
  echo "updated $path"
}
# bashible runs every minute from a systemd timer; a run may take at most
# three hours (systemd stops it after that).

units=${BASHIBLE_ROOT}/etc/systemd/system
mkdir -p "$units"
changed=no
if write_if_changed "$units/bashible.service" <<'UNIT'
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
then
  changed=yes
fi
if write_if_changed "$units/bashible.timer" <<'UNIT'
[Unit]
Description=bashible every minute

[Timer]
OnBootSec=1min
OnUnitInactiveSec=1min

[Install]
WantedBy=timers.target
UNIT
then
  changed=yes
fi
# Only on a real machine: a test node under BASHIBLE_ROOT has no systemd.
if [[ "$changed" == yes && -z "$BASHIBLE_ROOT" ]] && command -v systemctl > /dev/null; then
  systemctl daemon-reload
  systemctl enable bashible.timer
  systemctl restart bashible.timer
fi
