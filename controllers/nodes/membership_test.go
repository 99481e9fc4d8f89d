package nodes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// TestAGroupIsItsInstancesNotItsLabels: a node's group is its Instance's.
// A node that labelled itself into master is not master's (and stays its
// own group's); a node without an Instance is nobody's; an Instance whose
// Node has not registered lists no Node.
func TestAGroupIsItsInstancesNotItsLabels(t *testing.T) {
	ns := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	is := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	node := func(name, label string) {
		if err := ns.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: label}}}); err != nil {
			t.Fatal(err)
		}
	}
	instance := func(name, group string) {
		if err := is.Add(&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{deckhousev1.NodeGroupLabel: group}}}); err != nil {
			t.Fatal(err)
		}
	}
	node("m-0", "master")
	instance("m-0", "master")
	node("w-0", "master") // relabelled itself
	instance("w-0", "worker")
	node("stray", "master")   // never admitted
	instance("w-1", "worker") // not registered yet
	c := NewCache(corelisters.NewNodeLister(ns), nmlisters.NewInstanceLister(is), clocktesting.NewFakeClock(time.Now()))

	names := func(group string) []string {
		got, err := c.InGroup(group)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range got {
			out = append(out, n.Name)
		}
		return out
	}
	if got := names("master"); len(got) != 1 || got[0] != "m-0" {
		t.Errorf("master's nodes: %v, want [m-0]", got)
	}
	if got := names("worker"); len(got) != 1 || got[0] != "w-0" {
		t.Errorf("worker's nodes: %v, want [w-0]", got)
	}
	for name, want := range map[string]string{"m-0": "master", "w-0": "worker", "stray": ""} {
		if got := c.GroupOf(name); got != want {
			t.Errorf("GroupOf(%s) = %q, want %q", name, got, want)
		}
	}
	if got := c.ByGroup(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Labels: map[string]string{deckhousev1.NodeGroupLabel: "master"}}}); got != "worker" {
		t.Errorf("a relabelled node's event queues group %q, want worker", got)
	}
	if got, err := c.Labelled("master"); err != nil || len(got) != 3 {
		t.Errorf("Labelled(master): %d nodes (%v), want the 3 labelled so", len(got), err)
	}
}
