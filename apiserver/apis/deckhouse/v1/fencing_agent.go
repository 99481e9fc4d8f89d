package v1

// FencingAgentUID is the user (and group) the fencing agent runs as, and
// the owner the node step 017_fencing_watchdog gives the watchdog device,
// mode 0600: the agent stays non-root with no capabilities and can still
// open (arm) the device. node-manager-controller's DaemonSets run the agent
// as it, and the step reads it from the render context
// (.nodeGroup.fencing.agentUID), so the two cannot disagree.
//
// It is the agent's own, not the 64535 the other node-manager images (and
// Deckhouse's modules) run as: whoever may open the device may arm it and
// then reset the node by never feeding it, so only the agent may. Any
// privileged container sees the host's /dev; with the device given to
// 64535, every privileged pod running as 64535 — and a Deckhouse node's
// own deckhouse user — could reset the node. 65100 is in the range Debian
// reserves and never gives to an account (65000-65533), below the 65536
// where the kubelet starts mapping user-namespaced pods, and apart from the
// UIDs images commonly use (65532 distroless' nonroot, 65534 nobody).
const FencingAgentUID = 65100
