package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestRenderLimitsAreValidatedWithTheFlagsName(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Render.Workers = 0 }, "--render-workers 0 must be at least 1"},
		{func(o *Options) { o.Render.Timeout = 100 * time.Millisecond }, "--render-timeout 100ms must be at least 1s"},
		{func(o *Options) { o.Render.WorkerMemory = "lots" }, `--render-worker-memory "lots"`},
		{func(o *Options) { o.Render.WorkerMemory = "8Mi" }, "--render-worker-memory 8Mi is below 16Mi"},
		{func(o *Options) { o.Render.WorkerIdleTimeout = -time.Second }, "--render-worker-idle-timeout -1s must not be negative"},
		{func(o *Options) { o.Render.WorkerBinary = "/nonexistent/worker" }, "--render-worker-binary: stat /nonexistent/worker"},
		{func(o *Options) { o.Render.WorkerBinary = notExecutable }, "--render-worker-binary: " + notExecutable + " is not an executable file"},
	} {
		o := NewOptions()
		tc.change(o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
	o := NewOptions()
	// The default is the render worker beside this executable, which a
	// test binary does not have.
	want := "render workers run " + deckhousev1.BashibleRenderWorkerName + ", which is missing or not executable beside " + deckhousev1.BashibleAPIServerName
	if _, err := o.renderWorkerBinary(); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--render-worker-binary") {
		t.Errorf("without a render worker beside the executable: %v, want an error that says what to do", err)
	}
	// A relative path is run from where it was found, not looked up in $PATH.
	o.Render.WorkerBinary = "worker"
	if got, err := o.renderWorkerBinary(); err != nil || !filepath.IsAbs(got) {
		t.Errorf("--render-worker-binary=worker gives %q (%v), want an absolute path", got, err)
	}
	if mem, err := o.workerMemory(); err != nil || mem != 128<<20 || o.Render.Workers != 2 || o.Render.Timeout != 10*time.Second {
		t.Errorf("defaults: %d workers, %s, %d bytes (%v); want 2, 10s, 128Mi", o.Render.Workers, o.Render.Timeout, mem, err)
	}
}

// A renew deadline at or above the lease duration would let a cut-off
// leader keep publishing after another replica took the Lease.
func TestLeaderElectionTimesMustKeepOnePublisher(t *testing.T) {
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.LeaderElection.RenewDeadline = 15 * time.Second }, "--leader-elect-renew-deadline (15s) < --leader-elect-lease-duration (15s)"},
		{func(o *Options) { o.LeaderElection.RetryPeriod = 10 * time.Second }, "--leader-elect-retry-period (10s) < --leader-elect-renew-deadline (10s)"},
		{func(o *Options) { o.ShutdownDelay = -time.Second }, "--shutdown-delay-duration -1s must not be negative"},
	} {
		o := NewOptions()
		tc.change(o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
	if err := NewOptions().Validate(); err != nil && strings.Contains(err.Error(), "leader") {
		t.Errorf("the default Lease times are refused: %v", err)
	}
}

// The server's clients of the cluster get --kube-api-qps and
// --kube-api-burst, not client-go's defaults (5 and 10), which held a
// publish at 100 groups seconds behind its status writes.
func TestTheClientsGetTheAPIRateFlags(t *testing.T) {
	o := NewOptions()
	if o.APIQPS != 50 || o.APIBurst != 100 {
		t.Errorf("defaults: --kube-api-qps=%g --kube-api-burst=%d, want 50 and 100", o.APIQPS, o.APIBurst)
	}
	o.APIQPS, o.APIBurst = 0, 100
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-api-qps=0 and --kube-api-burst=100: both must be positive") {
		t.Errorf("a zero --kube-api-qps: got %v", err)
	}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o = NewOptions()
	o.Generic.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	o.Generic.Authentication, o.Generic.Authorization = nil, nil
	o.Generic.SecureServing.BindPort = 0
	o.Generic.SecureServing.ServerCert.CertDirectory = dir
	o.APIQPS, o.APIBurst = 7, 9
	o.Render.WorkerBinary = kubeconfig // any file: Config does not start workers
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Generic.ClientConfig; got.QPS != 7 || got.Burst != 9 {
		t.Errorf("the clients' rate: QPS %g, burst %d; want 7 and 9", got.QPS, got.Burst)
	}
}

// TestResponsesAreCompressedOnlyWithTheFlag serializes an object above
// k8s.io/apiserver's 128 KB compression threshold for a client that asks
// for gzip, as kube-apiserver's aggregator does for every request it
// proxies.
func TestResponsesAreCompressedOnlyWithTheFlag(t *testing.T) {
	t.Cleanup(func() {
		if err := NewOptions().applyFeatureGates(); err != nil {
			t.Error(err)
		}
	})
	big := &bashiblev1alpha1.NodeGroupBundle{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Data: map[string]string{"step.sh": strings.Repeat("echo step\n", 20<<10)}}
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, ""}, {[]string{"--response-compression"}, "gzip"}, {[]string{"--response-compression=false"}, ""}} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := o.applyFeatureGates(); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/worker", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		responsewriters.SerializeObject("application/json", Codecs.LegacyCodec(bashiblev1alpha1.SchemeGroupVersion), rec, req, http.StatusOK, big)
		if got := rec.Result().Header.Get("Content-Encoding"); got != tc.want {
			t.Errorf("flags %q: Content-Encoding %q, want %q", tc.args, got, tc.want)
		}
		if tc.want == "" && rec.Body.Len() < 200<<10 {
			t.Errorf("flags %q: %d bytes, want the object uncompressed", tc.args, rec.Body.Len())
		}
	}
}

func TestTheNodeInformerKeepsLabelsOnly(t *testing.T) {
	node := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}, ObjectMeta: metav1.ObjectMeta{
		Name: "n1", UID: "u1", ResourceVersion: "7", Labels: map[string]string{deckhousev1.NodeGroupLabel: "worker"},
		Annotations:   map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
	}}
	got, err := nodeLabelsOnly(node)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: node.Labels}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kept %+v, want %+v", got, want)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: want}
	if got, _ := nodeLabelsOnly(tomb); !reflect.DeepEqual(got, tomb) {
		t.Errorf("a tombstone became %+v", got)
	}
}
