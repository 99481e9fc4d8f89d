package controllers

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// TestMetricsNeedAnAuthorizedIdentity: node-manager-controller's /metrics
// refuses a caller without credentials, with a token the API server does
// not know and with an identity not allowed to get /metrics; the probes
// stay open; and the identity manifests/monitoring/rbac.yaml binds (the
// Prometheus operator's prometheus-k8s ServiceAccount) scrapes it with its
// token, as Prometheus does.
func TestMetricsNeedAnAuthorizedIdentity(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	const namespace, prometheus, stranger = "monitoring", "prometheus-k8s", "stranger"
	if _, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{})
		f.Kubectl(t, "delete", "-f", filepath.Join(f.Root, "manifests", "monitoring", "rbac.yaml"), "--ignore-not-found")
	})
	f.Kubectl(t, "apply", "-f", filepath.Join(f.Root, "manifests", "monitoring", "rbac.yaml"))
	token := func(sa string) string {
		t.Helper()
		if _, err := f.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := f.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a token for ServiceAccount %s/%s: %v", namespace, sa, err)
		}
		return tr.Status.Token
	}

	for _, c := range []struct {
		who  string
		path string
		cred stack.Credentials
		want []int
	}{
		{"no credentials", "/metrics", stack.Credentials{}, []int{http.StatusUnauthorized, http.StatusForbidden}},
		{"an unknown token", "/metrics", stack.Credentials{Token: "not-a-token"}, []int{http.StatusUnauthorized}},
		{"a ServiceAccount without the metrics-reader role", "/metrics", stack.Credentials{Token: token(stranger)}, []int{http.StatusForbidden}},
		{"no credentials, the liveness probe", "/healthz", stack.Credentials{}, []int{http.StatusOK}},
		{"no credentials, the readiness probe", "/readyz", stack.Credentials{}, []int{http.StatusOK}},
	} {
		code, body, err := ctrl.GetAs(ctx, c.path, c.cred)
		if err != nil {
			t.Fatalf("GET %s with %s: %v", c.path, c.who, err)
		}
		ok := false
		for _, w := range c.want {
			ok = ok || code == w
		}
		if !ok {
			t.Errorf("GET %s with %s: %d, want one of %v (body: %.200s)", c.path, c.who, code, c.want, body)
		}
		if c.path == "/metrics" && strings.Contains(body, "node_manager_leader") {
			t.Errorf("GET /metrics with %s returned metrics", c.who)
		}
	}

	allowed := token(prometheus)
	// The binding may take a moment to reach the authorizer's cache (a
	// denial is cached for 10 s).
	framework.Poll(t, "a scrape as "+namespace+"/"+prometheus, func(ctx context.Context) (bool, error) {
		code, body, err := ctrl.GetAs(ctx, "/metrics", stack.Credentials{Token: allowed})
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			t.Logf("GET /metrics as %s: %d %.200s", prometheus, code, body)
			return false, nil
		}
		for _, want := range []string{"node_manager_leader", "node_manager_reconcile_total"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics as %s lacks %s", prometheus, want)
			}
		}
		return true, nil
	})
}
