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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodes"
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
