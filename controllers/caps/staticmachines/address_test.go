package staticmachines

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

func at10(name string, created time.Duration) *deckhousev1alpha2.StaticInstance {
	return &deckhousev1alpha2.StaticInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-created))},
		Spec:       deckhousev1alpha2.StaticInstanceSpec{Address: "10.0.0.5"},
	}
}

func nodeAt(name, providerID string, addresses ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID},
		Status: corev1.NodeStatus{Addresses: addresses}}
}

func TestAddressConflict(t *testing.T) {
	self := at10("worker-5", time.Hour)
	bound := at10("worker-5-again", 0)
	bound.Status.MachineRef = &corev1.ObjectReference{Name: "m"}
	olderTwin, sameSecondTwin, newerTwin := at10("old-twin", 2*time.Hour), at10("a-twin", time.Hour), at10("z-twin", 0)
	deletedTwin := at10("deleted-twin", 2*time.Hour)
	deletedTwin.DeletionTimestamp = &metav1.Time{Time: t0}
	elsewhere := at10("elsewhere", 2*time.Hour)
	elsewhere.Spec.Address = "10.0.0.6"
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}
	manual := nodeAt("manual-0", "", internal)
	master := nodeAt("master-0", infrav1alpha1.ProviderIDPrefix+"other", internal)
	master.Labels = map[string]string{deckhousev1.ControlPlaneRoleLabel: ""}
	own := nodeAt("worker-5", infrav1alpha1.ProviderIDPrefix+"uid-worker-5", internal)

	for _, c := range []struct {
		name   string
		adopt  bool
		nodes  []*corev1.Node
		others []*deckhousev1alpha2.StaticInstance
		// holder: "" for no conflict; want: words the message must hold.
		holder string
		want   []string
	}{
		{name: "a free address", others: []*deckhousev1alpha2.StaticInstance{self, elsewhere}},
		{name: "the instance's own Node (its earlier machine's) is no conflict", nodes: []*corev1.Node{own}},
		{name: "(b) a Node joined by hand, no providerID", nodes: []*corev1.Node{manual}, holder: "Node manual-0",
			want: []string{"10.0.0.5", "did not bootstrap", deckhousev1.SkipBootstrapPhaseAnnotation, deckhousev1.AllowControlPlaneAnnotation, "delete this StaticInstance"}},
		{name: "(a) a master with a providerID", nodes: []*corev1.Node{master}, holder: "Node master-0",
			want: []string{"10.0.0.5", infrav1alpha1.ProviderIDPrefix + "other", "delete the Node master-0 first"}},
		{name: "a Node whose ExternalIP is the address", holder: "Node ext",
			nodes: []*corev1.Node{nodeAt("ext", "", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.0.9"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.0.0.5"})}},
		{name: "a Node whose Hostname is the address", holder: "Node named",
			nodes: []*corev1.Node{nodeAt("named", "", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "10.0.0.5"})}},
		{name: "adoption of the one Node without a providerID", adopt: true, nodes: []*corev1.Node{manual}},
		{name: "adoption of a Node that already has a providerID", adopt: true, nodes: []*corev1.Node{master}, holder: "Node master-0",
			want: []string{"already belongs to a machine"}},
		{name: "adoption with two Nodes at the address", adopt: true, nodes: []*corev1.Node{manual, nodeAt("manual-1", "", internal)},
			holder: "Nodes manual-0, manual-1", want: []string{"cannot tell which one"}},
		{name: "a StaticInstance bound to the same address", others: []*deckhousev1alpha2.StaticInstance{self, bound}, holder: "StaticInstance worker-5-again",
			want: []string{"one host has one StaticInstance", "delete this StaticInstance"}},
		{name: "an older StaticInstance at the same address", others: []*deckhousev1alpha2.StaticInstance{olderTwin, self}, holder: "StaticInstance old-twin"},
		{name: "one created in the same second, first by name", others: []*deckhousev1alpha2.StaticInstance{sameSecondTwin}, holder: "StaticInstance a-twin"},
		{name: "a newer free StaticInstance does not hold it", others: []*deckhousev1alpha2.StaticInstance{newerTwin}},
		{name: "one being deleted does not hold it", others: []*deckhousev1alpha2.StaticInstance{deletedTwin}},
		{name: "another StaticInstance refuses an adoption too", adopt: true, nodes: []*corev1.Node{manual}, others: []*deckhousev1alpha2.StaticInstance{olderTwin},
			holder: "StaticInstance old-twin"},
	} {
		got := addressConflict(self, c.adopt, c.nodes, c.others)
		if (got == nil) != (c.holder == "") {
			t.Errorf("%s: conflict %+v, want holder %q", c.name, got, c.holder)
			continue
		}
		if got == nil {
			continue
		}
		if got.holder() != c.holder {
			t.Errorf("%s: holder %q, want %q", c.name, got.holder(), c.holder)
		}
		msg := got.message()
		if !strings.Contains(msg, c.holder[strings.Index(c.holder, " ")+1:]) || !strings.Contains(msg, "10.0.0.5") {
			t.Errorf("%s: the message names neither the holder nor the address: %s", c.name, msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: the message lacks %q: %s", c.name, w, msg)
			}
		}
	}
	// The newer twin is refused by self, which holds the address.
	if got := addressConflict(newerTwin, false, nil, []*deckhousev1alpha2.StaticInstance{self, newerTwin}); got == nil || got.instance != self.Name {
		t.Errorf("the newer of two free twins: %+v, want refused by %s", got, self.Name)
	}
}

func TestDecideFree(t *testing.T) {
	inUse := &conflict{address: "10.0.0.5", nodes: []string{"master-0"}, providerID: infrav1alpha1.ProviderIDPrefix + "x"}
	msg := inUse.message()
	refusedCond := &metav1.Condition{Type: condAddress, Status: metav1.ConditionFalse, Reason: reasonAddressUsed, Message: msg}
	refuse := freeStep{phase: errored, condition: &conditionChange{Type: condAddress, Reason: reasonAddressUsed, Message: msg},
		event: &eventNote{Warning: true, Reason: reasonAddressUsed, Note: msg}}
	freed := &conditionChange{Type: condAddress, True: true, Reason: reasonAddressFree,
		Message: "no Node and no other StaticInstance has the address any more (or the instance adopts the Node there)"}
	freedEvent := &eventNote{Reason: reasonAddressFree, Note: "the address is free again: the instance is Pending"}
	for _, c := range []struct {
		name     string
		phase    deckhousev1alpha2.StaticInstancePhase
		cond     *metav1.Condition
		conflict *conflict
		want     freeStep
	}{
		{"a free address, nothing to say", pending, nil, nil, freeStep{}},
		{"a new instance (no phase yet) at a used address is refused", "", nil, inUse, refuse},
		{"a Pending one is refused", pending, nil, inUse, refuse},
		{"an Error one (login refused) is refused for its address too", errored, nil, inUse, refuse},
		{"already refused with the same message: nothing to write", errored, refusedCond, inUse, freeStep{}},
		{"refused, another holder now: reported again", errored, refusedCond, &conflict{address: "10.0.0.5", instance: "other"},
			freeStep{phase: errored, condition: &conditionChange{Type: condAddress, Reason: reasonAddressUsed, Message: (&conflict{address: "10.0.0.5", instance: "other"}).message()},
				event: &eventNote{Warning: true, Reason: reasonAddressUsed, Note: (&conflict{address: "10.0.0.5", instance: "other"}).message()}}},
		{"refused, the conflict went: Pending again", errored, refusedCond, nil, freeStep{phase: pending, condition: freed, event: freedEvent}},
		{"an Error for another reason, no conflict: left alone", errored, &metav1.Condition{Type: condAddress, Status: metav1.ConditionTrue, Reason: reasonAddressFree}, nil, freeStep{}},
	} {
		got := decideFree(c.phase, c.cond, c.conflict)
		if got.phase != c.want.phase || (got.condition == nil) != (c.want.condition == nil) || (got.event == nil) != (c.want.event == nil) ||
			(got.condition != nil && *got.condition != *c.want.condition) || (got.event != nil && *got.event != *c.want.event) {
			t.Errorf("%s:\n got %+v %+v %+v\nwant %+v %+v %+v", c.name, got.phase, got.condition, got.event, c.want.phase, c.want.condition, c.want.event)
		}
	}
}

func TestNodeAddresses(t *testing.T) {
	n := nodeAt("n", "", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n"}, corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "n"})
	got, _ := nodeAddresses(n)
	if strings.Join(got, " ") != "10.0.0.5 203.0.113.5 n" {
		t.Errorf("indexed under %v", got)
	}
}
