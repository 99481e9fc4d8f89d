{{ include "step-header" . }}
# Update approval, for a new configuration only: a node's first run needs
# none, nor does a converge of the configuration the node already has
# (forced by the reboot annotation or after a reboot). Otherwise the node asks
# with update.node.deckhouse.io/waiting-for-approval (removing its
# configuration checksum, so it no longer counts as up to date) and waits
# for update.node.deckhouse.io/approved, set by node-manager or a person.
# Waiting for a person has no time limit:
# bashible-timeout: 0

if [[ -e "$BASHIBLE_DIR/first_run" ]]; then
  exit 0
fi
if [[ "$(cat "$BASHIBLE_DIR/configuration_checksum" 2>/dev/null || true)" == "${BASHIBLE_CHECKSUM:-}" ]]; then
  exit 0
fi
node=$(bb-node-get)
if ! bb-node-has-annotation "$node" update.node.deckhouse.io/approved; then
  tries=0
  # Approval removes waiting-for-approval: an approval that lands between
  # the write and the re-read must not make the node ask again.
  until bb-node-has-annotation "$node" update.node.deckhouse.io/waiting-for-approval ||
      bb-node-has-annotation "$node" update.node.deckhouse.io/approved; do
    rv=$(jq -r '.metadata.resourceVersion' <<< "$node")
    rc=0
    bb-node-annotate-cas "$rv" '{"update.node.deckhouse.io/waiting-for-approval": "", "node.deckhouse.io/configuration-checksum": null}' || rc=$?
    if (( rc != 0 )); then
      # Only a conflict (someone else wrote the Node) is worth retrying.
      tries=$(( tries + 1 ))
      if (( rc != 9 || tries >= 30 )); then
        bb-log "could not ask for approval"
        exit 1
      fi
      sleep 1
    fi
    node=$(bb-node-get)
  done
  bb-instance-condition WaitingApproval True UpdateApprovalRequired \
    "approve with: kubectl annotate node $(bb-node-name) update.node.deckhouse.io/approved="
  bb-log "waiting for update.node.deckhouse.io/approved"
  until bb-node-has-annotation "$node" update.node.deckhouse.io/approved; do
    sleep "$BASHIBLE_POLL_SECONDS"
    node=$(bb-node-get) || true
  done
fi
bb-instance-condition WaitingApproval False Approved "the update is approved"
