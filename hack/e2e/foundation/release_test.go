package foundation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/release"
)

// TestReleaseAppliesWithServerSideDryRun: the release `make release`
// generates from this repository (with made-up digests) passes
// kube-apiserver's admission and validation of every object, applied as the
// install applies it (kubectl apply --server-side), in a server-side dry
// run: its CRDs (node-manager's, already installed here, and Cluster API's
// with their conversion webhook), RBAC, Deployments, DaemonSet, Services,
// APIService, webhook configurations and admission policies. A dry run
// creates nothing, so the release's namespaces, which its namespaced
// objects need, are created for real first (and deleted afterwards).
func TestReleaseAppliesWithServerSideDryRun(t *testing.T) {
	ctx := framework.Context(t)
	dir := t.TempDir()
	digestsFile, err := release.WriteFakeDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	digests, err := release.ReadDigests(digestsFile)
	if err != nil {
		t.Fatal(err)
	}
	module, _, err := release.ClusterAPIModule(ctx, f.Root)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := release.Build(ctx, release.Options{Root: f.Root, Kubectl: filepath.Join(f.Root, "bin", "kubectl"),
		ClusterAPIModule: module, Registry: "registry.example/node-manager", Digests: digests})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "node-manager.yaml")
	write(t, file, objs)

	var namespaces []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o)
		}
	}
	if len(namespaces) == 0 {
		t.Fatal("the release creates no namespace")
	}
	nsFile := filepath.Join(dir, "namespaces.yaml")
	write(t, nsFile, namespaces)
	f.Kubectl(t, "apply", "--server-side", "-f", nsFile)
	t.Cleanup(func() {
		for _, ns := range namespaces {
			if err := f.Kube.CoreV1().Namespaces().Delete(framework.Context(t), ns.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete namespace %s: %v", ns.GetName(), err)
			}
		}
	})

	out := f.Kubectl(t, "apply", "--server-side", "--dry-run=server", "-f", file)
	if n := strings.Count(out, "serverside-applied (server dry run)"); n != len(objs) {
		t.Errorf("kubectl applied %d of the release's %d objects in the dry run:\n%s", n, len(objs), out)
	}
	// Nothing but the namespaces was created.
	for _, o := range objs {
		if o.GetKind() != "APIService" {
			continue
		}
		if out, err := f.KubectlErr(t, "get", "apiservice", o.GetName()); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("after a dry run, APIService %s: %v %s", o.GetName(), err, out)
		}
	}
	t.Logf("the release's %d objects pass a server-side dry run", len(objs))
}

func write(t *testing.T, path string, objs []*unstructured.Unstructured) {
	t.Helper()
	data, err := release.Encode("e2e", objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
