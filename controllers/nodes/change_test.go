package nodes

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestPatchIsGuardedAndRemovesKeys(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "7", Annotations: map[string]string{deckhousev1.ApprovedAnnotation: ""}}}
	c := (&Change{}).Remove(n, deckhousev1.ApprovedAnnotation, deckhousev1.DrainingAnnotation).Set(deckhousev1.DrainedAnnotation, "bashible").SetUnschedulable(false)
	body, err := c.patch(n.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	meta := p["metadata"].(map[string]any)
	ann := meta["annotations"].(map[string]any)
	if meta["resourceVersion"] != "7" || ann[deckhousev1.ApprovedAnnotation] != nil || ann[deckhousev1.DrainedAnnotation] != "bashible" {
		t.Errorf("patch %s", body)
	}
	if _, ok := ann[deckhousev1.DrainingAnnotation]; ok {
		t.Errorf("removing an absent key should not be in the patch: %s", body)
	}
	if spec := p["spec"].(map[string]any); spec["unschedulable"] != nil {
		t.Errorf("uncordon must clear spec.unschedulable: %s", body)
	}
}

func TestCacheServesOwnWritesUntilTheInformerCatchesUp(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "5"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	lister := factory.Core().V1().Nodes().Lister()
	stale := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "5"}}
	if err := factory.Core().V1().Nodes().Informer().GetStore().Add(stale); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	c := NewCache(lister, nil, clk)
	written := stale.DeepCopy()
	written.ResourceVersion = "6"
	written.Annotations = map[string]string{deckhousev1.ApprovedAnnotation: ""}
	c.Wrote(written)
	if got, _ := c.Get("a"); !Has(got, deckhousev1.ApprovedAnnotation) {
		t.Fatal("the cache served the informer's stale copy over our own write")
	}
	if got, _ := c.List(labels.Everything()); len(got) != 1 || !Has(got[0], deckhousev1.ApprovedAnnotation) {
		t.Fatal("List served the stale copy")
	}
	c.Observe(written)
	if _, ok := c.written["a"]; ok {
		t.Error("the write is still shadowing after the informer delivered it")
	}
	c.Wrote(written)
	clk.Step(writeTTL + time.Second)
	if got, _ := c.Get("a"); Has(got, deckhousev1.ApprovedAnnotation) {
		t.Error("a write the informer never confirmed shadows forever")
	}
}

// Behind notices a write of ours the informer has not delivered for a
// while, even after writeTTL stopped it shadowing the informer's copy, and
// forgets it once the informer delivers it; a write whose version the
// informer already holds (its event came before the write's response) is
// not waited for.
func TestBehindTellsAWriteTheInformerHasNotDelivered(t *testing.T) {
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := store.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "5"}}); err != nil {
		t.Fatal(err)
	}
	if err := store.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", ResourceVersion: "9"}}); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	c := NewCache(corelisters.NewNodeLister(store), nil, clk)
	written := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "6"}}
	c.Wrote(written)
	if c.Behind(time.Second) {
		t.Fatal("behind at the moment of the write")
	}
	clk.Step(writeTTL + time.Second)
	if got, _ := c.Get("a"); got.ResourceVersion != "5" {
		t.Fatalf("the write still shadows after writeTTL: %s", got.ResourceVersion)
	}
	if !c.Behind(time.Second) {
		t.Fatal("a write undelivered for longer than writeTTL is not noticed")
	}
	c.Observe(written)
	if c.Behind(time.Second) {
		t.Fatal("still behind after the informer delivered the write")
	}
	c.Wrote(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", ResourceVersion: "9"}})
	clk.Step(time.Minute)
	if c.Behind(time.Second) {
		t.Fatal("waiting for a write the informer held before its response")
	}
	// Writes faster than the informer delivers them: the oldest counts.
	c.Wrote(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "10"}})
	clk.Step(3 * time.Second)
	c.Wrote(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "11"}})
	clk.Step(3 * time.Second)
	if !c.Behind(5 * time.Second) {
		t.Fatal("a second write hid how long the first has gone undelivered")
	}
	c.Observe(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "10"}})
	if _, waiting := c.written["a"]; !waiting {
		t.Fatal("the delivery of the first write cleared the second")
	}
	c.Forget("a")
	if c.Behind(5 * time.Second) {
		t.Fatal("waiting for a write to a Node that was deleted")
	}
}
