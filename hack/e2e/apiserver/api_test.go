package apiserver

import (
	"context"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

func TestDiscoveryListsTheThreeResourcesWithGetListWatch(t *testing.T) {
	out := f.Kubectl(t, "api-resources", "--api-group=bashible.deckhouse.io", "-o", "wide")
	for _, want := range []string{"bashibles", "nodegroupbundles", "bootstrap"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			fields := strings.Fields(line)
			if len(fields) > 0 && fields[0] == want {
				found = true
				if !strings.Contains(line, "get,list,watch") || !strings.Contains(line, "false") {
					t.Errorf("%s: want cluster-scoped with verbs get,list,watch: %q", want, line)
				}
			}
		}
		if !found {
			t.Errorf("kubectl api-resources does not list %s:\n%s", want, out)
		}
	}
	if out := f.Kubectl(t, "get", "apiservice", bashiblev1alpha1.APIServiceName); !strings.Contains(out, "True") {
		t.Errorf("APIService should be Available:\n%s", out)
	}
}

func TestKubectlTablesAndExplain(t *testing.T) {
	for _, resource := range []string{"bashibles", "nodegroupbundles", "bootstrap"} {
		out := f.Kubectl(t, "get", resource)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Join(strings.Fields(lines[0]), " "); got != "NAME TYPE CHECKSUM REVISION STEPS SIZE AGE" {
			t.Errorf("kubectl get %s header = %q", resource, got)
		}
		if !strings.Contains(out, "worker   Static") {
			t.Errorf("kubectl get %s should show the worker group:\n%s", resource, out)
		}
		// The group's bundle may still change as the suite's inputs settle
		// (a new checksum between the two reads): the wide table must show
		// the checksum served just before it was read.
		var wide, served string
		framework.Poll(t, "kubectl get "+resource+" worker -o wide showing the served checksum", func(context.Context) (bool, error) {
			served = f.Checksum(t, "worker")
			wide = f.Kubectl(t, "get", resource, "worker", "-o", "wide")
			return strings.Contains(wide, served), nil
		})
		for _, want := range []string{"KUBERNETES", "CRI", "FULL-CHECKSUM", "1.36", "Containerd"} {
			if !strings.Contains(wide, want) {
				t.Errorf("kubectl get %s -o wide should show %q:\n%s", resource, want, wide)
			}
		}
	}
	out := f.Kubectl(t, "get", "nodegroupbundles", "worker")
	if fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1]); len(fields) < 4 || fields[3] == "0" || fields[3] == "-" {
		t.Errorf("nodegroupbundles should count the steps: %q", out)
	}
	// The aggregator fetches an extension server's OpenAPI in the
	// background after registration, so explain may need a moment.
	for field, want := range map[string]string{"nodegroupbundle.data": "<NNN>_<step>.sh", "bootstrap.bootstrap": "Bootstrap is the script"} {
		var out string
		framework.Poll(t, "kubectl explain "+field, func(context.Context) (bool, error) {
			var err error
			out, err = f.KubectlErr(t, "explain", field)
			return err == nil, nil
		})
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain %s should show %q:\n%s", field, want, out)
		}
	}
}

func TestObjectsCarryChecksumLabelsAndScripts(t *testing.T) {
	ctx := framework.Context(t)
	c := f.NM.BashibleV1alpha1()
	b, err := c.Bashibles().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Data["bashible.sh"], "#!/usr/bin/env bash") || len(b.Data) != 1 {
		t.Errorf("bashibles/worker data: %v", keys(b.Data))
	}
	bundle := f.Bundle(t, "worker")
	boot, err := c.Bootstraps().Get(ctx, "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{
		"bashibles":        b.Annotations[bashiblev1alpha1.ChecksumAnnotation],
		"nodegroupbundles": bundle.Annotations[bashiblev1alpha1.ChecksumAnnotation],
		"bootstrap":        boot.Annotations[bashiblev1alpha1.ChecksumAnnotation],
	}
	for resource, sum := range sums {
		if len(sum) != 64 || sum != sums["nodegroupbundles"] {
			t.Errorf("%s checksum annotation %q, want the group's sha256 on all three", resource, sum)
		}
	}
	if bundle.Labels[deckhousev1.NodeGroupLabel] != "worker" || bundle.Labels[deckhousev1.NodeTypeLabel] != "Static" {
		t.Errorf("labels: %v", bundle.Labels)
	}
	if bundle.CreationTimestamp.IsZero() || bundle.ResourceVersion == "" {
		t.Errorf("creationTimestamp %v, resourceVersion %q", bundle.CreationTimestamp, bundle.ResourceVersion)
	}
	again := f.Bundle(t, "worker")
	if !again.CreationTimestamp.Equal(&bundle.CreationTimestamp) {
		t.Errorf("creationTimestamp is not stable: %v then %v", bundle.CreationTimestamp, again.CreationTimestamp)
	}
	if !strings.Contains(bundle.Data["000_preflight.sh"], "set -Eeuo pipefail") {
		t.Errorf("the preflight step should be served: %v", keys(bundle.Data))
	}
	if !strings.Contains(b.Data["bashible.sh"], "192.0.2.10:6443 192.0.2.11:6443") {
		t.Errorf("bashible.sh should carry the API endpoints from the EndpointSlice")
	}
	// Labels select.
	list, err := c.NodeGroupBundles().List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.NodeGroupLabel + "=master"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "master" {
		t.Errorf("label selector: got %d items", len(list.Items))
	}
}

func TestErrorsAreTypedAndHelpful(t *testing.T) {
	ctx := framework.Context(t)
	c := f.NM.BashibleV1alpha1().NodeGroupBundles()
	_, err := c.Get(ctx, "no-such-group", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("unknown group: want 404 NotFound, got %v", err)
	}
	for _, bad := range []string{"Worker", "a.b.c", "-x", strings.Repeat("a", 43)} {
		_, err := c.Get(ctx, bad, metav1.GetOptions{})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "a valid name is") {
			t.Errorf("malformed name %q: want 400 saying what a valid name is, got %v", bad, err)
		}
	}
	legacy, err := c.Get(ctx, "ubuntu-lts.worker", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("legacy <os>.<group> name: %v", err)
	}
	if legacy.Name != "ubuntu-lts.worker" || legacy.Annotations[bashiblev1alpha1.ChecksumAnnotation] != f.Checksum(t, "worker") {
		t.Errorf("legacy name serves %q with checksum %q", legacy.Name, legacy.Annotations[bashiblev1alpha1.ChecksumAnnotation])
	}
	anonymous := versioned.NewForConfigOrDie(f.CP.AnonymousConfig()).BashibleV1alpha1()
	if _, err := anonymous.NodeGroupBundles().Get(ctx, "worker", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("anonymous get: want 403, got %v", err)
	}
	if _, err := anonymous.NodeGroupBundles().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("anonymous list: want 403, got %v", err)
	}
	if _, err := c.List(ctx, metav1.ListOptions{FieldSelector: "spec.x=y"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: want 400, got %v", err)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body := direct(t, replica.Port, path+"?verbose"); code != http.StatusOK {
			t.Errorf("%s: %d\n%s", path, code, body)
		}
	}
	_, body := direct(t, replica.Port, "/readyz?verbose")
	if !strings.Contains(string(body), "bashible-bundles ok") {
		t.Errorf("readyz should include the bundle check:\n%s", body)
	}
	f.Bundle(t, "worker")
	code, metrics := direct(t, replica.Port, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`bashible_apiserver_render_duration_seconds_bucket{group="worker"`,
		`bashible_apiserver_bundle_size_bytes{group="worker"}`,
		`bashible_apiserver_configuration_checksum{checksum="` + f.Checksum(t, "worker") + `",group="worker"} 1`,
		`bashible_apiserver_requests_total{resource="nodegroupbundles",verb="get"}`,
		`bashible_apiserver_leader 1`,
		`bashible_apiserver_render_cache_hits_total`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics should contain %s", want)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
