package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
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
	m := New(d, opts, rc)
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
