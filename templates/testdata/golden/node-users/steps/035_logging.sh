#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
# Logs: how long journald keeps the journal, where the kubelet, containerd,
# the API proxy and bashible itself log; and the rotation of the files
# bashible writes besides the journal. After the base packages, so a
# logrotate they bring is found.

# journald's limits are Deckhouse's (its bashible writes them into
# /etc/systemd/journald.conf): a journal file covers at most a day, and
# entries older than 14 days are removed; the size limits stay journald's
# own (10% of the file system, at most 4 GiB). A drop-in, so the
# distribution's journald.conf stays as it is. journald restarts only when
# the drop-in changed (services keep their log streams across it).
bb-write-if-changed /etc/systemd/journald.conf.d/node-manager.conf 0644 systemd-journald.service <<'CONF'
# Managed by node-manager: the journal's retention (Deckhouse's values).
[Journal]
MaxFileSec=24h
MaxRetentionSec=14day
CONF
if bb-changed systemd-journald.service; then
  systemctl restart systemd-journald.service
  bb-changed-clear systemd-journald.service
  bb-log "systemd-journald.service: restarted for its new limits"
fi

# bashible writes each step's output to /var/lib/bashible/step.log
# (appending, from empty at each attempt) and keeps the last failed one's in
# step.failed.log; everything else goes to the journal. One step's output
# can grow without bound (a NodeGroupConfiguration that loops, a traced
# attempt), so logrotate caps them: copytruncate, since bashible holds
# step.log open while the step runs. Without logrotate on the machine (the
# base packages do not bring it) nothing would read the file: none is
# written.
if command -v logrotate > /dev/null; then
  bb-write-if-changed /etc/logrotate.d/node-manager 0644 <<'CONF'
# Managed by node-manager: the step logs bashible keeps besides the journal.
/var/lib/bashible/step.log /var/lib/bashible/step.failed.log {
  size 10M
  rotate 2
  copytruncate
  compress
  missingok
  notifempty
}
CONF
else
  bb-remove /etc/logrotate.d/node-manager
  bb-log "logrotate is not installed: bashible's step logs are not rotated (each is emptied when the next step starts)"
fi
