package drills

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// unavailableSeries is the series of kube-apiserver's /metrics the
// BashibleAPIServiceUnavailable alert reads.
const unavailableSeries = `aggregator_unavailable_apiservice{name="` + bashiblev1alpha1.APIServiceName + `"}`

// aggregatorMetric is the value of unavailableSeries now ("" when absent).
func aggregatorMetric(ctx context.Context) string {
	rt, err := rest.TransportFor(f.CP.AdminConfig())
	if err != nil {
		return ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.CP.APIServerURL+"/metrics", nil)
	if err != nil {
		return ""
	}
	resp, err := (&http.Client{Transport: rt, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, unavailableSeries+" "); ok {
			return v
		}
	}
	return ""
}

// TestBothReplicasDown: with no replica, the aggregator marks the
// APIService unavailable (and sets the series the alert reads), a
// namespace's deletion waits on the discovery failure, and once the
// replicas are back both recover by themselves; the drill measures how
// long each takes.
func TestBothReplicasDown(t *testing.T) {
	waitAvailable(t)
	waitInService(t)
	dyn := dynamic.NewForConfigOrDie(f.CP.AdminConfig())
	down := time.Now()
	for i := range replicas {
		replicas[i].Kill()
	}
	var reason string
	framework.Poll(t, "the aggregator marks the APIService unavailable", func(ctx context.Context) (bool, error) {
		status, r, err := apiServiceAvailable(ctx, dyn)
		reason = r
		return err == nil && status == "False", nil
	})
	unavailableAfter := time.Since(down)
	framework.Poll(t, unavailableSeries+" 1", func(ctx context.Context) (bool, error) {
		return aggregatorMetric(ctx) == "1", nil
	})
	if _, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(framework.Context(t), readGroup, metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a GET with both replicas down: %v; want 503 Service Unavailable", err)
	}

	const ns = "drill-outage"
	if _, err := f.Kube.CoreV1().Namespaces().Create(framework.Context(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Kube.CoreV1().Namespaces().Delete(framework.Context(t), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var failure string
	framework.Poll(t, "namespace deletion waits on the discovery failure", func(ctx context.Context) (bool, error) {
		got, err := f.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.NamespaceDeletionDiscoveryFailure && c.Status == corev1.ConditionTrue {
				failure = c.Message
				return true, nil
			}
		}
		return false, nil
	})

	back := time.Now()
	for i := range replicas {
		restartReplica(t, i, false)
	}
	replicasReady := time.Since(back)
	framework.Poll(t, "the APIService Available again", func(ctx context.Context) (bool, error) {
		status, _, err := apiServiceAvailable(ctx, dyn)
		return err == nil && status == "True", nil
	})
	availableAfter := time.Since(back)
	framework.Poll(t, "namespace "+ns+" deleted after the recovery", func(ctx context.Context) (bool, error) {
		_, err := f.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	nsAfter := time.Since(back)
	framework.Poll(t, unavailableSeries+" 0", func(ctx context.Context) (bool, error) {
		return aggregatorMetric(ctx) == "0", nil
	})
	t.Logf("DRILL both replicas down (kill -9 of both): APIService Available=False %s after (%s), GETs 503, namespace deletion stuck (%s); "+
		"after both restarted: replicas ready in %s, APIService Available %s after, namespace deleted %s after",
		unavailableAfter.Round(100*time.Millisecond), reason, failure, replicasReady.Round(100*time.Millisecond),
		availableAfter.Round(100*time.Millisecond), nsAfter.Round(100*time.Millisecond))
}
