package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// A sync that frees a batch's slots and grants the next batch's writes
// them patchConcurrency at a time, not one round trip after another; a
// write that fails is reported, and the others still land.
func TestASyncWritesItsNodesAtOnce(t *testing.T) {
	const count = 40
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	patched := map[string]bool{}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond) // a round trip
		name := path.Base(r.URL.Path)
		if r.Method != http.MethodPatch || name == "n07" {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused","code":500}`, http.StatusInternalServerError)
			return
		}
		mu.Lock()
		patched[name] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "2"}})
	}))
	defer api.Close()
	kube := kubernetes.NewForConfigOrDie(&rest.Config{Host: api.URL, QPS: -1})

	byName := map[string]*corev1.Node{}
	changes := map[string]*nodes.Change{}
	var names []string
	for i := range count {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", i), ResourceVersion: "1"}}
		byName[n.Name] = n
		changes[n.Name] = &nodes.Change{Annotations: map[string]*string{deckhousev1.ApprovedAnnotation: ptr.To("")}}
		names = append(names, n.Name)
	}
	c := &Controller{d: &manager.Deps{Kube: kube}}
	start := time.Now()
	written, errs := c.patchAll(context.Background(), "g", names, byName, changes, "test")
	took := time.Since(start)
	if len(written) != count-1 || written["n07"] || len(errs) != 1 {
		t.Fatalf("written %d (n07: %t), errors %v; want %d written and n07's error", len(written), written["n07"], errs, count-1)
	}
	if len(patched) != count-1 {
		t.Errorf("the API saw %d nodes patched, want %d", len(patched), count-1)
	}
	if m := most.Load(); m < 2 || m > patchConcurrency {
		t.Errorf("at most %d writes at once, want 2 to %d", m, patchConcurrency)
	}
	t.Logf("%d writes of 20 ms took %s, at most %d at once", count, took, most.Load())
}

// Grants are decided on a LIST until one LIST shows the same slots as the
// informer: a grant the informer has not delivered (here a previous
// leader's, which only the LIST shows) takes its slot and keeps the group
// listing. Once they agree, grants go without a LIST, with the informer's
// view and our own writes, until the informer is behind a write of ours by
// more than informerLagLimit (a lagging watch).
func TestGrantsListUntilTheInformerIsCurrentAndWhileItLags(t *testing.T) {
	const checksum = "new"
	var objs []runtime.Object
	nmObjs := []runtime.Object{group("g"), &bashiblev1alpha1.NodeGroupBundle{ObjectMeta: metav1.ObjectMeta{Name: "g",
		Annotations: map[string]string{bashiblev1alpha1.ChecksumAnnotation: checksum}}}}
	for i := range 3 {
		n := node(fmt.Sprintf("n%d", i), true, deckhousev1.WaitingForApprovalAnnotation, "")
		n.Labels = map[string]string{deckhousev1.NodeGroupLabel: "g"}
		n.ResourceVersion = "1"
		objs = append(objs, n)
		nmObjs = append(nmObjs, &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}})
	}
	kube := kubefake.NewClientset(objs...)
	// While unseen is set, the API's LIST shows n2 approved by someone
	// else, which the informer has not delivered.
	var unseen atomic.Bool
	kube.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !unseen.Load() {
			return false, nil, nil
		}
		obj, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node"), "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.NodeList).DeepCopy()
		for i := range list.Items {
			if list.Items[i].Name == "n2" {
				list.Items[i].Annotations[deckhousev1.ApprovedAnnotation] = ""
			}
		}
		return true, list, nil
	})
	nm := nmfake.NewClientset(nmObjs...)
	clk := clocktesting.NewFakeClock(noon)
	d := manager.NewDepsForClients(kube, nm, manager.NewOptions(), clk, prometheus.NewRegistry())
	c := New(d, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !d.Start(ctx, "test", c.watch.Synced...) {
		t.Fatal("informers did not sync")
	}
	nodeLists := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	informers := nodeLists()
	lists := func() int { return nodeLists() - informers }
	// approve syncs the group and says which nodes are approved.
	approve := func(step string) []string {
		t.Helper()
		if err := c.sync(ctx, "g"); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var got []string
		for i := range 3 {
			if n, err := kube.CoreV1().Nodes().Get(ctx, fmt.Sprintf("n%d", i), metav1.GetOptions{}); err == nil && nodes.Has(n, deckhousev1.ApprovedAnnotation) {
				got = append(got, n.Name)
			}
		}
		return got
	}
	// finish reports the approved node's update done, as bashible does, and
	// waits until the informer has it.
	finish := func(name string) {
		t.Helper()
		patch := `{"metadata":{"annotations":{"` + deckhousev1.ConfigurationChecksumAnnotation + `":"` + checksum + `"}}}`
		if _, err := kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
			n, err := d.Nodes.Get(name)
			return err == nil && n.Annotations[deckhousev1.ConfigurationChecksumAnnotation] == checksum, nil
		}); err != nil {
			t.Fatalf("the informer never delivered %s's report", name)
		}
	}

	unseen.Store(true)
	for i := range 2 {
		if got := approve("a grant the informer has not delivered"); len(got) != 0 || lists() != i+1 {
			t.Fatalf("with n2 approved only in the API: approved %v after %d LISTs; want none approved (maxConcurrent 1) and a LIST each time", got, lists())
		}
	}
	unseen.Store(false)
	got := approve("the first grant with the informer current")
	if len(got) != 1 || lists() != 3 {
		t.Fatalf("approved %v after %d LISTs; want one node and a third LIST", got, lists())
	}
	first := got[0]
	finish(first)
	got = approve("a grant after a LIST that matched the informer")
	if len(got) != 1 || got[0] == first || lists() != 3 {
		t.Fatalf("approved %v after %s with %d LISTs in all; want another node and no fourth LIST", got, first, lists())
	}
	// A write of ours the informer does not deliver: the watch lags.
	d.Nodes.Wrote(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", ResourceVersion: "7"}})
	clk.Step(informerLagLimit + time.Second)
	finish(got[0])
	if got = approve("a grant while the informer lags"); len(got) != 1 || lists() != 4 {
		t.Fatalf("a grant while the informer is %s behind our write: approved %v after %d LISTs in all; want one node and a fourth LIST", informerLagLimit+time.Second, got, lists())
	}
}
