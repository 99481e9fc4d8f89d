package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// waitConfigProcessed waits until the server has reported on generation
// gen of NodeGroupConfiguration name and returns its Rendered condition.
func waitConfigProcessed(t *testing.T, name string, gen int64) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	framework.Poll(t, "Rendered condition of NodeGroupConfiguration "+name, func(ctx context.Context) (bool, error) {
		ngc, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ngc.Status.Conditions, bundles.ConditionRendered)
		if c == nil || c.ObservedGeneration < gen {
			return false, nil
		}
		cond = *c
		return true, nil
	})
	return cond
}

// waitGroupProcessed waits until the server has reported on the current
// generation of NodeGroup name and returns its Rendered condition.
func waitGroupProcessed(t *testing.T, name string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	framework.Poll(t, "Rendered condition of NodeGroup "+name, func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ng.Status.Conditions, bundles.ConditionRendered)
		if c == nil || c.ObservedGeneration < ng.Generation {
			return false, nil
		}
		cond = *c
		return true, nil
	})
	return cond
}

// direct GETs path from a replica itself (not through the aggregator),
// authenticated with the admin's client certificate.
func direct(t *testing.T, port int, path string) (int, []byte) {
	t.Helper()
	cfg := f.CP.AdminConfig()
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CP.CACertPEM())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}}}
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
	if err != nil {
		t.Fatalf("GET %s from replica on port %d: %v", path, port, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}
