{{ include "machine-step-header" . }}
{{- $fencing := .nodeGroup.fencing }}
{{- if and $fencing (eq $fencing.mode "Watchdog") }}
# Fencing, mode Watchdog: the fencing agent (a DaemonSet, running as a
# non-root user of its own) arms the kernel's software watchdog, softdog,
# and feeds it while the node is healthy. A node cut off from the API and
# from its group stops feeding it, and the group's
# spec.fencing.watchdog.timeout later (soft_margin below) softdog panics it
# (soft_panic=1); with kernel.panic = 0 (015_kernel) it stays down, and the
# fencing controller frees its pods.
#
# softdog is loaded with its options now and at every boot (modprobe.d and
# modules-load.d). The kernel does not show the options a loaded softdog
# runs with (its parameters are not in /sys/module/softdog/parameters), so
# this step goes by its own record: the options file's change mark
# (softdog), set when the file is written and cleared once softdog has been
# loaded with it. A softdog loaded before (by hand, by another tool, or with
# other options) is unloaded and loaded again, and so is one whose device is
# gone (Deckhouse's bug of 2026: modprobe of a loaded module does nothing,
# and the removed /dev/watchdog never came back). A softdog in use cannot be
# unloaded: its reload waits, remembered in /run, which a reboot empties, as
# softdog then loads with the options file.
softdog_options=(soft_margin={{ $fencing.watchdogTimeoutSeconds }} soft_panic=1)
watchdog_device=/dev/watchdog
agent_uid={{ $fencing.agentUID }}
reload_pending=/run/node-manager/softdog-reload-pending
# How long the device may take to appear after the module is loaded.
watchdog_device_wait_seconds=10

bb-write-if-changed /etc/modprobe.d/node-manager-softdog.conf 0644 softdog <<CONF
# Managed by node-manager: the fencing watchdog's options.
options softdog ${softdog_options[*]}
CONF
bb-write-if-changed /etc/modules-load.d/node-manager-softdog.conf 0644 <<'CONF'
# Managed by node-manager: the fencing watchdog, loaded at boot.
softdog
CONF

# The device is the fencing agent's alone: its user owns it, group root,
# mode 0600. Opening it arms the watchdog, so whoever may open it may reset
# the node; the agent runs as a user of its own (no other node-manager
# component uses it), with no capabilities. The udev rule gives it so
# whenever udev makes the device, with final assignments, so that no wider
# rule (such as Deckhouse's, which gives it to the deckhouse user, mode
# 0660) applies; the other watchdog devices stay root's (watchdog0 is the
# same watchdog as /dev/watchdog, others are hardware watchdogs). The step
# also gives the device itself on every run, once softdog is loaded
# (below): a machine without udev, a device made before the rule, or one
# someone changed since.
bb-write-if-changed /etc/udev/rules.d/10-node-manager-watchdog.rules 0644 watchdog-udev-rule <<RULES
# Managed by node-manager: /dev/watchdog is the fencing agent's (user ${agent_uid}),
# the other watchdog devices root's; opening one arms it.
KERNEL=="watchdog", OWNER:="${agent_uid}", GROUP:="root", MODE:="0600"
KERNEL=="watchdog?*", OWNER:="root", GROUP:="root", MODE:="0600"
RULES
if bb-changed watchdog-udev-rule; then
  # Without udev (a container, a chroot) the step's own chown below does it.
  if command -v udevadm > /dev/null; then
    udevadm control --reload
    udevadm trigger --action=add --sysname-match='watchdog*'
  fi
  bb-changed-clear watchdog-udev-rule
fi

load_softdog() {
  modprobe softdog "${softdog_options[@]}"
  local waited=0
  until [[ -e "$watchdog_device" ]]; do
    if (( waited >= watchdog_device_wait_seconds * 10 )); then
      bb-log "softdog is loaded, but $watchdog_device did not appear within ${watchdog_device_wait_seconds}s; see the kernel's log (dmesg | grep -i watchdog) and check that devtmpfs is mounted on /dev"
      exit 1
    fi
    sleep 0.1
    waited=$(( waited + 1 ))
  done
  bb-log "loaded softdog with ${softdog_options[*]}"
}

if [[ ! -d /sys/module/softdog ]]; then
  load_softdog
  bb-changed-clear softdog
  rm -f "$reload_pending"
else
  reason=
  if bb-changed softdog || [[ -e "$reload_pending" ]]; then
    reason="it may run with other options than ${softdog_options[*]}"
  elif [[ ! -e "$watchdog_device" ]]; then
    reason="$watchdog_device is missing"
  fi
  if [[ -n "$reason" ]]; then
    # modprobe -r refuses while the device is open (an armed watchdog is
    # never unloaded): the fencing agent holds it.
    if modprobe -r softdog; then
      bb-log "unloaded softdog: $reason"
      load_softdog
      bb-changed-clear softdog
      rm -f "$reload_pending"
    elif [[ -e "$watchdog_device" ]]; then
      bb-log "warning: softdog is loaded and $reason, but it cannot be unloaded now: it is in use (the fencing agent holds $watchdog_device) or built into the kernel. It keeps its options until it is free; a later run reloads it, and a reboot loads it with ${softdog_options[*]}"
      mkdir -p "${reload_pending%/*}"
      : > "$reload_pending"
      bb-changed-clear softdog
    else
      bb-log "softdog is loaded, $watchdog_device is missing, and softdog cannot be unloaded (in use or built into the kernel), so the device cannot be made again: reboot the machine"
      exit 1
    fi
  fi
fi

# The device the agent opens is its user's, mode 0600, whoever made it.
if [[ "$(stat -L -c '%u:%g %a' "$watchdog_device")" != "${agent_uid}:0 600" ]]; then
  chown "${agent_uid}:0" "$watchdog_device"
  chmod 0600 "$watchdog_device"
  bb-log "gave $watchdog_device to the fencing agent's user ${agent_uid}, mode 0600"
fi

# /dev/watchdog is the first watchdog the kernel registered; a hardware
# watchdog's driver may have come first, and softdog then is another device.
identity=/sys/class/watchdog/watchdog0/identity
if [[ -r "$identity" && "$(< "$identity")" != "Software Watchdog" ]]; then
  bb-log "warning: $watchdog_device is the watchdog '$(< "$identity")', not softdog: the fencing agent arms that one, with its own timeout and action"
fi
{{- else }}
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
{{- end }}
