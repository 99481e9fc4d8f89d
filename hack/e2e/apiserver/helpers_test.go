package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/node-manager/node-manager/hack/stack"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

func createGroup(ctx context.Context, name string, mutate func(*deckhousev1.NodeGroup)) error {
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	if mutate != nil {
		mutate(ng)
	}
	_, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{})
	return err
}

// served is a group's bundle as the aggregator serves it to the admin.
func served(t *testing.T, group string) *bashiblev1alpha1.NodeGroupBundle {
	t.Helper()
	b, err := nm.BashibleV1alpha1().NodeGroupBundles().Get(stack.TestContext(t), group, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get nodegroupbundles/%s: %v", group, err)
	}
	return b
}

func checksum(t *testing.T, group string) string {
	t.Helper()
	return served(t, group).Annotations[bashiblev1alpha1.ChecksumAnnotation]
}

// waitChecksum waits until group serves a checksum for which ok is true.
func waitChecksum(t *testing.T, group string, ok func(string) bool) string {
	t.Helper()
	var got string
	stack.Poll(t, "checksum of "+group, func(ctx context.Context) (bool, error) {
		b, err := nm.BashibleV1alpha1().NodeGroupBundles().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
		return ok(got), nil
	})
	return got
}

// waitConfigProcessed waits until the server has reported on generation
// gen of NodeGroupConfiguration name and returns its Rendered condition.
func waitConfigProcessed(t *testing.T, name string, gen int64) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	stack.Poll(t, "Rendered condition of NodeGroupConfiguration "+name, func(ctx context.Context) (bool, error) {
		ngc, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, name, metav1.GetOptions{})
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
	stack.Poll(t, "Rendered condition of NodeGroup "+name, func(ctx context.Context) (bool, error) {
		ng, err := nm.DeckhouseV1().NodeGroups().Get(ctx, name, metav1.GetOptions{})
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

func createConfig(t *testing.T, name string, spec deckhousev1alpha1.NodeGroupConfigurationSpec) *deckhousev1alpha1.NodeGroupConfiguration {
	t.Helper()
	ngc, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(stack.TestContext(t), &deckhousev1alpha1.NodeGroupConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nm.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return ngc
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(t, args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return out
}

func kubectlErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	args = append([]string{"--kubeconfig", cp.KubeconfigPath()}, args...)
	out, err := exec.CommandContext(stack.TestContext(t), filepath.Join(repoRoot, "bin", "kubectl"), args...).CombinedOutput()
	return string(out), err
}

// direct GETs path from a replica itself (not through the aggregator),
// authenticated with the admin's client certificate.
func direct(t *testing.T, port int, path string) (int, []byte) {
	t.Helper()
	cfg := cp.AdminConfig()
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CACertPEM())
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
