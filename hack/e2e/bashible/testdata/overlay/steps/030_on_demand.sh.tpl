{{ include "step-header" . }}
# Behaviour on demand, switched by files in the node's /control.
control=$BASHIBLE_ROOT/control
if [[ -e "$control/fail" ]]; then
  bb-node-get > /dev/null # an API call, traced on the third attempt
  echo "failing on demand" >&2
  exit 3
fi
if [[ -e "$control/flaky" ]]; then
  # Fails as many attempts as the file says, then succeeds.
  tries=$(( $(cat "$BASHIBLE_ROOT/flaky-tries" 2>/dev/null || echo 0) + 1 ))
  echo "$tries" > "$BASHIBLE_ROOT/flaky-tries"
  if (( tries <= $(cat "$control/flaky") )); then
    echo "flaky on demand (attempt $tries)" >&2
    exit 4
  fi
fi
if [[ -e "$control/hang" ]]; then
  echo "hanging on demand"
  sleep 600
fi
if [[ -e "$control/slow" ]]; then
  sleep 3
fi
if [[ -e "$control/disrupt" ]]; then
  bb-disruption-gate
  touch "$BASHIBLE_ROOT/disrupted"
fi
if [[ -e "$control/reboot" ]]; then
  bb-flag-set reboot
fi
