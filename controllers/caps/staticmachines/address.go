package staticmachines

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// A host that already is a node, or that another StaticInstance already
// names, is never bound (issue 35): bootstrapping it would overwrite the
// running node's identity (and a bootstrap timeout then cleaned it), and
// finding its Node by address made the instance Running at once and gave
// the Node the machine's providerID, so a later scale-down wiped it.
// Deckhouse's CAPS wiped a single master that way. The check is the
// controller's: an admission policy cannot list Nodes or other
// StaticInstances, so it could not make the same guarantee.

// The condition that reports it and its reasons.
const (
	condAddress       = "AddressAvailable"
	reasonAddressUsed = "AddressInUse"
	reasonAddressFree = "AddressFree"
)

// conflict is what already has an instance's address.
type conflict struct {
	address string
	// instance: another StaticInstance names the address (one host, one
	// StaticInstance).
	instance string
	// nodes: Nodes at the address that are not the instance's own;
	// providerID the first one's.
	nodes      []string
	providerID string
	// adopt: the instance carries skip-bootstrap-phase.
	adopt bool
}

// holder names what has the address, for messages and tests.
func (c *conflict) holder() string {
	if c.instance != "" {
		return "StaticInstance " + c.instance
	}
	if len(c.nodes) == 1 {
		return "Node " + c.nodes[0]
	}
	return "Nodes " + strings.Join(c.nodes, ", ")
}

// message says what has the address, why CAPS refuses it, and what to do.
func (c *conflict) message() string {
	switch {
	case c.instance != "":
		return fmt.Sprintf("the address %s is already StaticInstance %s's: one host has one StaticInstance. "+
			"CAPS does not use this one while %s exists; delete this StaticInstance (or %s, once it is Pending, if this one is right)",
			c.address, c.instance, c.instance, c.instance)
	case len(c.nodes) > 1:
		return fmt.Sprintf("the address %s is the address of %s: CAPS cannot tell which one this host is and neither bootstraps nor adopts it; "+
			"delete the Nodes that no longer exist (kubectl delete node), or correct the address by creating this StaticInstance again",
			c.address, c.holder())
	case c.providerID != "":
		return fmt.Sprintf("the address %s is the address of Node %s, which already belongs to a machine (providerID %s): "+
			"CAPS would overwrite the running node's identity and later clean it, so it neither bootstraps nor adopts it. "+
			"If the address is wrong, delete this StaticInstance and create it with the host's address; if the host was reinstalled, delete the Node %s first",
			c.address, c.nodes[0], c.providerID, c.nodes[0])
	default:
		return fmt.Sprintf("the address %s is the address of Node %s, a running node CAPS did not bootstrap: "+
			"CAPS would overwrite its identity and later clean it, so it does not bootstrap it. "+
			"To hand that node over to CAPS, add the annotation %s to this StaticInstance (and %s: \"true\" if it is a control-plane node); "+
			"if the address is wrong, delete this StaticInstance and create it with the host's address",
			c.address, c.nodes[0], deckhousev1.SkipBootstrapPhaseAnnotation, deckhousev1.AllowControlPlaneAnnotation)
	}
}

// addressConflict is what keeps inst from being bound because of its
// address (nil: nothing). nodes are the Nodes with inst's address among
// theirs, others the StaticInstances with inst's address (inst may be
// among them). Not a conflict: inst's own Node (the providerID of inst's
// machines), a StaticInstance being deleted. Another StaticInstance holds
// the address when it is bound or older (created earlier, then by name);
// of two free ones the older may be used. For an adoption
// (skip-bootstrap-phase) one Node without a providerID at the address is
// the node to adopt; a Node with a providerID, or several, still conflict.
func addressConflict(inst *deckhousev1alpha2.StaticInstance, adopt bool, nodes []*corev1.Node, others []*deckhousev1alpha2.StaticInstance) *conflict {
	c := &conflict{address: inst.Spec.Address, adopt: adopt}
	sorted := slices.Clone(others)
	slices.SortFunc(sorted, func(a, b *deckhousev1alpha2.StaticInstance) int { return strings.Compare(a.Name, b.Name) })
	for _, o := range sorted {
		if o.Name == inst.Name || o.DeletionTimestamp != nil || o.Spec.Address != inst.Spec.Address {
			continue
		}
		if o.Status.MachineRef != nil || older(o, inst) {
			c.instance = o.Name
			return c
		}
	}
	own := providerIDOf(inst)
	var withID, without []*corev1.Node
	for _, n := range nodes {
		switch {
		case n.Spec.ProviderID == own:
		case n.Spec.ProviderID != "":
			withID = append(withID, n)
		default:
			without = append(without, n)
		}
	}
	foreign := append(withID, without...)
	if len(foreign) == 0 || (adopt && len(withID) == 0 && len(without) == 1) {
		return nil
	}
	slices.SortFunc(foreign, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range foreign {
		c.nodes = append(c.nodes, n.Name)
	}
	if len(foreign) == 1 {
		c.providerID = foreign[0].Spec.ProviderID
	}
	return c
}

// older reports whether a was created before b (by name within a second).
func older(a, b *deckhousev1alpha2.StaticInstance) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// freeStep is what sync does about a StaticInstance bound to no machine.
type freeStep struct {
	phase     deckhousev1alpha2.StaticInstancePhase
	condition *conditionChange
	event     *eventNote
}

// decideFree refuses a free instance whose address is in use (Error, its
// AddressAvailable condition False with reason AddressInUse, an Event) and
// lets it go back to Pending once nothing has the address. cond is the
// instance's AddressAvailable condition (nil: none). A zero step: nothing
// to change.
func decideFree(phase deckhousev1alpha2.StaticInstancePhase, cond *metav1.Condition, c *conflict) freeStep {
	refused := cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == reasonAddressUsed
	if c != nil {
		msg := c.message()
		if refused && cond.Message == msg && phase == deckhousev1alpha2.StaticInstanceError {
			return freeStep{}
		}
		return freeStep{phase: deckhousev1alpha2.StaticInstanceError,
			condition: &conditionChange{Type: condAddress, Reason: reasonAddressUsed, Message: msg},
			event:     &eventNote{Warning: true, Reason: reasonAddressUsed, Note: msg}}
	}
	if !refused {
		return freeStep{}
	}
	st := freeStep{condition: &conditionChange{Type: condAddress, True: true, Reason: reasonAddressFree,
		Message: "no Node and no other StaticInstance has the address any more (or the instance adopts the Node there)"},
		event: &eventNote{Reason: reasonAddressFree, Note: "the address is free again: the instance is Pending"}}
	if phase == deckhousev1alpha2.StaticInstanceError {
		st.phase = deckhousev1alpha2.StaticInstancePending
	}
	return st
}

// addressCondition is inst's AddressAvailable condition (nil: none).
func addressCondition(inst *deckhousev1alpha2.StaticInstance) *metav1.Condition {
	return meta.FindStatusCondition(inst.Status.Conditions, condAddress)
}

// nodeAddresses indexes a Node by each of its addresses (InternalIP,
// ExternalIP, Hostname and the DNS names): a StaticInstance's address is
// whatever CAPS dials, and any of them may be it.
func nodeAddresses(obj any) ([]string, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Address != "" && !slices.Contains(out, a.Address) {
			out = append(out, a.Address)
		}
	}
	return out, nil
}
