package staticmachines

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// CAPS sends a sudo password and a bootstrap script with a live bootstrap
// token to the host it logs in to, so it contacts a host only when it can
// tell it from an impostor at the same address (issue 35): the host's key
// is pinned in the instance (deckhousev1.SSHHostKeyAnnotation), or an
// admin allowed trust on first use for this instance
// (deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation). Both annotations are
// writable only by admins (manifests/policies/static-instance-trust.yaml).
// An instance with neither is never bound (a free one is refused, Error
// with reason HostKeyNotPinned) and never contacted (hostssh.Run refuses it
// too, before it dials).

// The condition that reports it and its reasons.
const (
	condHostKey            = "HostKeyTrusted"
	reasonHostKeyNotPinned = "HostKeyNotPinned"
	reasonHostKeyPinned    = "HostKeyPinned"
)

// hostKeyNotPinnedMessage says why and what to do.
const hostKeyNotPinnedMessage = "the host's SSH key is not pinned and trust on first use is not allowed for this instance: " +
	"CAPS does not contact a host it cannot tell from an impostor at its address, which would receive the sudo password and a bootstrap token. " +
	"An admin sets the annotation " + deckhousev1.SSHHostKeyAnnotation + " to the host's public key in authorized_keys form " +
	"(the content of /etc/ssh/ssh_host_ed25519_key.pub on the host, checked out of band), or allows trust on first use with " +
	deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation + `: "true"`

// trustOnFirstUse reports whether an admin allowed CAPS to trust and pin
// the key inst's host shows on the first connection.
func trustOnFirstUse(inst *deckhousev1alpha2.StaticInstance) bool {
	return inst.Annotations[deckhousev1.SSHHostKeyTrustOnFirstUseAnnotation] == "true"
}

// pinnedKey is inst's pinned host key ("": none).
func pinnedKey(inst *deckhousev1alpha2.StaticInstance) string {
	return strings.TrimSpace(inst.Annotations[deckhousev1.SSHHostKeyAnnotation])
}

// hostKeyTrusted reports whether CAPS may contact inst's host.
func hostKeyTrusted(inst *deckhousev1alpha2.StaticInstance) bool {
	return pinnedKey(inst) != "" || trustOnFirstUse(inst)
}

// hostKeyCondition is inst's HostKeyTrusted condition (nil: none).
func hostKeyCondition(inst *deckhousev1alpha2.StaticInstance) *metav1.Condition {
	return meta.FindStatusCondition(inst.Status.Conditions, condHostKey)
}

// decideHostKey refuses a free instance CAPS may not contact (Error, its
// HostKeyTrusted condition False with reason HostKeyNotPinned, an Event)
// and lets it go back to Pending once an admin pinned its key or allowed
// trust on first use. A zero step: nothing to change.
func decideHostKey(phase deckhousev1alpha2.StaticInstancePhase, cond *metav1.Condition, trusted bool) freeStep {
	refused := cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == reasonHostKeyNotPinned
	if !trusted {
		if refused && cond.Message == hostKeyNotPinnedMessage && phase == deckhousev1alpha2.StaticInstanceError {
			return freeStep{}
		}
		return freeStep{phase: deckhousev1alpha2.StaticInstanceError,
			condition: &conditionChange{Type: condHostKey, Reason: reasonHostKeyNotPinned, Message: hostKeyNotPinnedMessage},
			event:     &eventNote{Warning: true, Reason: reasonHostKeyNotPinned, Note: hostKeyNotPinnedMessage}}
	}
	if !refused {
		return freeStep{}
	}
	st := freeStep{condition: &conditionChange{Type: condHostKey, True: true, Reason: reasonHostKeyPinned,
		Message: "the host's key is pinned, or an admin allowed trust on first use"},
		event: &eventNote{Reason: reasonHostKeyPinned, Note: "the host key is trusted: the instance may be used"}}
	if phase == deckhousev1alpha2.StaticInstanceError {
		st.phase = deckhousev1alpha2.StaticInstancePending
	}
	return st
}

// refuseUnpinned is the step of a bound instance whose host CAPS would
// contact now but may not: Error, released, never contacted.
func refuseUnpinned() step {
	return step{phase: deckhousev1alpha2.StaticInstanceError, release: true,
		condition: &conditionChange{Type: condHostKey, Reason: reasonHostKeyNotPinned, Message: hostKeyNotPinnedMessage},
		event:     &eventNote{Warning: true, Reason: reasonHostKeyNotPinned, Note: hostKeyNotPinnedMessage}}
}
