package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

func TestValidateExplains(t *testing.T) {
	o := NewOptions()
	o.Identity, o.Workers, o.RenewDeadline = "", 0, o.LeaseDuration
	err := o.Validate()
	if err == nil {
		t.Fatal("invalid options passed")
	}
	for _, want := range []string{"--identity", "--workers=0", "--leader-elect-renew-deadline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if err := NewOptions().Validate(); err != nil && !strings.Contains(err.Error(), "--identity") {
		t.Errorf("defaults are invalid: %v", err)
	}
}

type recordingController struct{ ran chan struct{} }

func (r *recordingController) Name() string { return "recording" }
func (r *recordingController) Run(ctx context.Context, _ int) {
	close(r.ran)
	<-ctx.Done()
}

// TestControllersRunWhileBashibleAPIServerIsDown: the aggregated
// nodegroupbundles are not needed to start; drains, templates and tokens
// must not stop because bashible-apiserver is unavailable.
func TestControllersRunWhileBashibleAPIServerIsDown(t *testing.T) {
	nm := nmfake.NewClientset()
	nm.PrependReactor("list", "nodegroupbundles", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("bashible-apiserver is down")
	})
	opts := NewOptions()
	opts.Identity = "test"
	reg := prometheus.NewRegistry()
	d := NewDepsForClients(kubefake.NewClientset(), nm, opts, clock.RealClock{}, reg)
	_ = d.Informers.Bundles.Bashible().V1alpha1().NodeGroupBundles().Informer()
	_ = d.Informers.NodeManager.Deckhouse().V1().NodeGroups().Informer()
	rc := &recordingController{ran: make(chan struct{})}
	m := New(d, opts, func(*Deps) []Controller { return []Controller{rc} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-rc.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("controllers did not start while the bundles could not be listed")
	}
	rec := httptest.NewRecorder()
	m.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/readyz = %d", rec.Code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// TestValidateWithoutLeaderElectionNeedsNoIdentity: the identity and the
// Lease's timing are leader election's settings only.
func TestValidateWithoutLeaderElectionNeedsNoIdentity(t *testing.T) {
	o := NewOptions()
	o.LeaderElect, o.Identity, o.RenewDeadline = false, "", o.LeaseDuration
	if err := o.Validate(); err != nil {
		t.Errorf("--leader-elect=false: %v", err)
	}
}

// seeingController reads a Node from the shared informers and records an
// Event about it when it starts, as a controller's sync does.
type seeingController struct {
	d   *Deps
	saw chan error
}

func (s *seeingController) Name() string { return "seeing" }
func (s *seeingController) Run(ctx context.Context, _ int) {
	n, err := s.d.Nodes.Get("n1")
	if err == nil {
		s.d.Recorder.Eventf(n, nil, corev1.EventTypeNormal, "Seen", "Test", "node %s seen", n.Name)
	}
	s.saw <- err
	<-ctx.Done()
}

// TestControllersRunWithoutTheLeaseWhenLeaderElectionIsOff: with
// --leader-elect=false the manager starts and syncs the informers, records
// events to the API, and runs the controllers without touching a Lease (a
// test suite runs its controllers so).
func TestControllersRunWithoutTheLeaseWhenLeaderElectionIsOff(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	opts := NewOptions()
	opts.LeaderElect = false
	d := NewDepsForClients(kube, nmfake.NewClientset(), opts, clock.RealClock{}, prometheus.NewRegistry())
	c := &seeingController{d: d, saw: make(chan error, 1)}
	m := New(d, opts, func(*Deps) []Controller { return []Controller{c} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()

	select {
	case err := <-c.saw:
		if err != nil {
			t.Fatalf("the controller started before the informers had synced: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not start without the Lease")
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Reason == "Seen" && e.Regarding.Name == "n1" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the controller's Event did not reach the API: %v", err)
	}
	if m.Leading() {
		t.Error("Leading() = true without leader election")
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "leases" {
			t.Errorf("the manager used the Lease without leader election: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// termController is one term's controller: it says when it runs and when
// it has stopped, with the Deps it was built from.
type termController struct {
	d       *Deps
	running chan *Deps
	stopped chan *Deps
}

func (c *termController) Name() string { return "term" }
func (c *termController) Run(ctx context.Context, _ int) {
	c.running <- c.d
	<-ctx.Done()
	c.stopped <- c.d
}

// TestALostTermStopsTheControllersAndANewTermRunsThemAfresh: when the
// Lease cannot be renewed (kube-apiserver out of reach), the term's
// controllers stop and the process does not exit; once the Lease can be
// taken again, a new term runs controllers built from fresh Deps (new
// informers, Node cache and metrics), never while the old ones still run.
func TestALostTermStopsTheControllersAndANewTermRunsThemAfresh(t *testing.T) {
	kube := kubefake.NewClientset()
	var cutOff atomic.Bool
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cutOff.Load() {
			return true, nil, apierrors.NewServiceUnavailable("kube-apiserver out of reach")
		}
		return false, nil, nil
	})
	opts := NewOptions()
	opts.Identity, opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = "me", 2*time.Second, time.Second, 100*time.Millisecond
	reg := prometheus.NewRegistry()
	d := NewDepsForClients(kube, nmfake.NewClientset(), opts, clock.RealClock{}, reg)
	running, stopped := make(chan *Deps, 2), make(chan *Deps, 2)
	m := New(d, opts, func(d *Deps) []Controller {
		// A term's own metric: a second term registering it again panics
		// unless the first term's metrics were dropped.
		d.Registry.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "term_test_total"}))
		return []Controller{&termController{d: d, running: running, stopped: stopped}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	wait := func(ch chan *Deps, what string) *Deps {
		t.Helper()
		select {
		case d := <-ch:
			return d
		case err := <-done:
			t.Fatalf("Run returned (%v) while waiting for %s", err, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
		return nil
	}
	first := wait(running, "the first term")
	cutOff.Store(true)
	if got := wait(stopped, "the controllers to stop after the lost term"); got != first {
		t.Fatal("a controller of another term stopped")
	}
	// The controller says it stopped before its Run returns; the manager
	// stops leading once every Run has returned, a moment later.
	for deadline := time.Now().Add(30 * time.Second); m.Leading(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Leading() 30 s after the lost term's controllers stopped")
		}
	}
	select {
	case <-running:
		t.Fatal("a new term began while the Lease could not be renewed")
	case <-time.After(3 * opts.RetryPeriod):
	}
	cutOff.Store(false)
	second := wait(running, "a new term")
	if second == first || second.Informers == first.Informers || second.Nodes == first.Nodes || second.Loops == first.Loops {
		t.Error("the new term's controllers were built from the last term's Deps")
	}
	if !m.Leading() {
		t.Error("Leading() = false in the new term")
	}
	if n := testutil.ToFloat64(m.terms); n != 2 {
		t.Errorf("node_manager_leader_terms_total = %v after two terms", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
	if got := wait(stopped, "the second term to stop"); got != second {
		t.Error("a controller of another term stopped")
	}
}

// TestManagerFlagsAreOnlyTheManagers: a binary built on the manager
// (caps-controller-manager) offers the connection, leader election and
// serving flags, not node-manager-controller's draining, fencing and
// Cluster API ones, which mean nothing to it.
func TestManagerFlagsAreOnlyTheManagers(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("caps", pflag.ContinueOnError)
	o.AddFlags(fs)
	for _, name := range []string{"kubeconfig", "identity", "leader-elect", "listen-address", "workers", "authentication-kubeconfig"} {
		if fs.Lookup(name) == nil {
			t.Errorf("the manager's flags lack --%s", name)
		}
	}
	for _, name := range []string{"fencing-margin", "default-drain-timeout", "cluster-api", "node-name", "fencing-agent-image"} {
		if fs.Lookup(name) != nil {
			t.Errorf("the manager's flags offer node-manager-controller's --%s", name)
		}
	}
}

// TestProfilingIsServedOnlyWhenAskedFor: /debug/pprof is on the handler
// (behind the same authentication and authorization as /metrics) only with
// --profiling.
func TestProfilingIsServedOnlyWhenAskedFor(t *testing.T) {
	for _, on := range []bool{false, true} {
		opts := NewOptions()
		opts.Identity, opts.Profiling = "test", on
		reg := prometheus.NewRegistry()
		d := NewDepsForClients(kubefake.NewClientset(), nmfake.NewClientset(), opts, clock.RealClock{}, reg)
		m := New(d, opts, func(*Deps) []Controller { return nil })
		rec := httptest.NewRecorder()
		m.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("--profiling=%t: /debug/pprof/heap = %d, want %d", on, rec.Code, want)
		}
	}
}

// TestClientsSendAtTheConfiguredRate: client-go's default of 5 requests a
// second (burst 10) made every approval of a 1,000-node rollout wait
// behind the node template's writes; the clients NewDeps builds send
// --kube-api-burst requests at once.
func TestClientsSendAtTheConfiguredRate(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-0"}}`))
	}))
	defer srv.Close()
	opts := NewOptions()
	d, err := NewDeps(&rest.Config{Host: srv.URL}, opts, clock.RealClock{}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	const n = 40 // four seconds' worth at client-go's default rate
	start := time.Now()
	for range n {
		if _, err := d.Kube.CoreV1().Nodes().Get(context.Background(), "node-0", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 2*time.Second || requests.Load() != n {
		t.Errorf("%d requests took %s (%d served); with --kube-api-burst=%d they go at once", n, took, requests.Load(), opts.APIBurst)
	}
}
