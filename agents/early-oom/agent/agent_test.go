package agent

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/node-manager/node-manager/agents/early-oom/settings"
)

func testOptions(t *testing.T, dir string) *Options {
	t.Helper()
	o := NewOptions()
	o.NodeName, o.PodUID, o.PodName, o.PodNamespace = "node-a", "uid-agent", "agent", "kube-system"
	o.PSIPath = filepath.Join(dir, "pressure", "memory")
	o.MeminfoPath = filepath.Join(dir, "meminfo")
	o.CgroupRoot = filepath.Join(dir, "cgroup")
	o.Interval = 20 * time.Millisecond
	o.Samples, o.FullAvg10 = 2, 30
	o.SettingsConfigMap = ""
	return o
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWithoutPSIItIdlesNotReadyAndSaysSo: no /proc/pressure/memory is no
// reason to exit (a restart would meet the same kernel): Run waits, /readyz
// says why, early_oom_psi_unavailable is 1.
func TestWithoutPSIItIdlesNotReadyAndSaysSo(t *testing.T) {
	o := testOptions(t, t.TempDir())
	reg := prometheus.NewRegistry()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	a, err := New(o, client, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	h := a.Handler(reg)
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code == 503 && strings.Contains(rec.Body.String(), "memory pressure stall information is unavailable"), nil
	})
	if err != nil {
		t.Fatalf("/readyz never said PSI is unavailable: %v", err)
	}
	if v := testutil.ToFloat64(a.m.psiUnavailable); v != 1 {
		t.Errorf("early_oom_psi_unavailable = %v; want 1", v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Errorf("/healthz = %d; want 200 (no restart into the same kernel)", rec.Code)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		for _, e := range list.Items {
			if e.Reason == ReasonPSIUnavailable && e.Regarding.Name == "node-a" && strings.Contains(e.Note, "will not act") {
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		t.Errorf("no PSIUnavailable Event on the node: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while PSI is unavailable; want it to idle", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v when stopped; want nil", err)
	}
}

// TestSustainedPressureDeletesTheRankedFirstPod runs the loop against a
// fake API and fake node files.
func TestSustainedPressureDeletesTheRankedFirstPod(t *testing.T) {
	for _, mode := range []settings.Mode{settings.Evict, settings.Observe} {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(t, dir)
			o.Mode = string(mode)
			writeFile(t, o.PSIPath, "some avg10=50.00 avg60=0 avg300=0 total=1\nfull avg10=45.00 avg60=0 avg300=0 total=1\n")
			writeFile(t, o.MeminfoPath, "MemAvailable: 1024 kB\n")
			writeFile(t, filepath.Join(o.CgroupRoot, "cgroup.controllers"), "memory\n")
			pod := func(name string, usage string) *corev1.Pod {
				uid := "0000000" + name
				writeFile(t, filepath.Join(o.CgroupRoot, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+uid+".slice/memory.current"), usage)
				return &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "p" + name, Namespace: "default", UID: ktypes.UID(uid)},
					Spec:       corev1.PodSpec{NodeName: "node-a"},
					Status:     corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort},
				}
			}
			client := fake.NewClientset(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
				pod("1", "1000"), pod("2", "9000"), pod("3", "5000"),
			)
			a, err := New(o, client, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = a.Run(ctx) }()
			err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				return testutil.ToFloat64(a.m.victims.WithLabelValues("BestEffort", string(mode))) == 1, nil
			})
			if err != nil {
				t.Fatalf("no victim counted: %v", err)
			}
			_, err = client.CoreV1().Pods("default").Get(ctx, "p2", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(err); deleted != (mode == settings.Evict) {
				t.Errorf("mode %s: p2 (the largest) deleted = %v", mode, deleted)
			}
			for _, other := range []string{"p1", "p3"} {
				if _, err := client.CoreV1().Pods("default").Get(ctx, other, metav1.GetOptions{}); err != nil {
					t.Errorf("%s was touched: %v", other, err)
				}
			}
		})
	}
}
