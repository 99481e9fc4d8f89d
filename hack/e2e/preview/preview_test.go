// Package preview is the e2e suite of the preview of a change before it
// rolls: bashible-apiserver's admission webhook, called by the real
// kube-apiserver on `kubectl apply` (with and without --dry-run=server),
// and the nodegroupbundlepreviews resource through the real aggregator.
package preview

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

var (
	f       = framework.New(framework.Options{})
	replica *stack.APIServer
)

func TestMain(m *testing.M) { os.Exit(f.Run(m, setUp)) }

// setUp makes two groups, master (no nodes) and worker (two nodes, by
// their Instances), and starts bashible-apiserver with its webhook.
func setUp(ctx context.Context) (func(), error) {
	if err := stack.PublishAPIEndpoints(ctx, f.Kube, "192.0.2.10"); err != nil {
		return nil, err
	}
	for _, ng := range []string{"master", "worker"} {
		if _, err := f.CreateGroup(ctx, framework.NewGroup(ng)); err != nil {
			return nil, fmt.Errorf("create NodeGroup %s: %w", ng, err)
		}
	}
	for _, node := range []string{"worker-0", "worker-1"} {
		if _, err := f.NM.DeckhouseV1alpha1().Instances().Create(ctx, framework.NewInstance(node, "worker"), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create Instance %s: %w", node, err)
		}
	}
	var err error
	if replica, err = f.Env.StartRegistered(ctx, stack.APIServerOptions{Identity: "replica-1"}); err != nil {
		return nil, fmt.Errorf("start bashible-apiserver: %w", err)
	}
	if err := replica.RegisterPreviewWebhook(ctx); err != nil {
		return nil, fmt.Errorf("register the preview webhook: %w", err)
	}
	return nil, nil
}

// configuration is a NodeGroupConfiguration manifest for the worker group.
func configuration(name, content string) string {
	data, _ := json.Marshal(map[string]any{
		"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeGroups": []string{"worker"}, "bundles": []string{"*"}, "weight": 100, "content": content},
	})
	return string(data)
}

// applyOutput runs kubectl apply with extra arguments and returns its
// combined output and error.
func applyOutput(t *testing.T, manifest string, args ...string) (string, error) {
	t.Helper()
	cmd := f.KubectlCommand(framework.Context(t), append([]string{"apply", "-f", "-"}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dryRunWarnings applies manifest with --dry-run=server until the preview
// answers (the webhook configuration reaches kube-apiserver within
// moments) and returns kubectl's output.
func dryRunWarnings(t *testing.T, manifest string) string {
	t.Helper()
	var out string
	framework.Poll(t, "a dry-run apply answered by the preview webhook", func(context.Context) (bool, error) {
		var err error
		out, err = applyOutput(t, manifest, "--dry-run=server")
		if err != nil {
			return false, fmt.Errorf("kubectl apply --dry-run=server: %v\n%s", err, out)
		}
		return strings.Contains(out, "bashible preview:"), nil
	})
	return out
}

func TestDryRunApplyOfAConfigurationPrintsWhatChangesAndCreatesNothing(t *testing.T) {
	out := dryRunWarnings(t, configuration("preview-sysctl", "sysctl -w vm.swappiness=1\n"))
	t.Logf("kubectl apply --dry-run=server:\n%s", out)
	for _, want := range []string{
		"Warning: bashible preview: 1 node group(s) change, 0 of them disruptively",
		"Warning: bashible preview: group worker, 2 node(s): 1 step(s) change: 100_preview-sysctl.sh (added); not disruptive",
		"(server dry run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --dry-run=server printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "group master") {
		t.Errorf("the preview names group master, which the configuration does not select:\n%s", out)
	}
	_, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(framework.Context(t), "preview-sysctl", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run created NodeGroupConfiguration preview-sysctl (get: %v)", err)
	}
}

func TestDryRunApplyOfARebootingConfigurationSaysItIsDisruptive(t *testing.T) {
	out := dryRunWarnings(t, configuration("preview-reboot", "if [[ ! -e /etc/x ]]; then\n  touch /etc/x\n  bb-flag-set reboot\nfi\n"))
	for _, want := range []string{
		"Warning: bashible preview: group worker, 2 node(s): 1 step(s) change: 100_preview-reboot.sh (added); DISRUPTIVE (approvalMode Automatic)",
		"Warning: bashible preview: group worker: 100_preview-reboot.sh may disrupt workloads: it asks for a reboot (bb-flag-set reboot)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --dry-run=server printed no %q:\n%s", want, out)
		}
	}
}

func TestDryRunApplyOfANodeGroupChangeSaysWhichStepsChangeAndThatContainerdDisrupts(t *testing.T) {
	ng := `{"apiVersion":"deckhouse.io/v1","kind":"NodeGroup","metadata":{"name":"worker"},"spec":{"nodeType":"Static","cri":{"type":"ContainerdV2"}}}`
	out := dryRunWarnings(t, ng)
	t.Logf("kubectl apply --dry-run=server:\n%s", out)
	for _, want := range []string{
		"group worker, 2 node(s): 1 step(s) change: 040_containerd.sh (modified); DISRUPTIVE (approvalMode Automatic)",
		"group worker: 040_containerd.sh may disrupt workloads: the container runtime changes; it goes through the disruption gate (bb-disruption-gate)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply --dry-run=server printed no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "group master") {
		t.Errorf("a change of worker names group master:\n%s", out)
	}
	got, err := f.NM.DeckhouseV1().NodeGroups().Get(framework.Context(t), "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.CRI != nil && got.Spec.CRI.Type == "ContainerdV2" {
		t.Fatal("the dry run changed NodeGroup worker")
	}
}

func TestAConfigurationThatDoesNotRenderIsRefusedWithItsLine(t *testing.T) {
	dryRunWarnings(t, configuration("preview-probe", "true\n"))
	out, err := applyOutput(t, configuration("preview-broken", "echo one\necho {{ .nodeGroup.noSuchField }}\n"))
	if err == nil {
		t.Fatalf("kubectl apply accepted a configuration that does not render:\n%s", out)
	}
	t.Logf("kubectl apply of a configuration that does not render:\n%s", out)
	for _, want := range []string{
		`admission webhook "` + bashiblev1alpha1.PreviewWebhookName + `" denied the request`,
		"NodeGroupConfiguration preview-broken does not render for node group worker",
		"line 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if _, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(framework.Context(t), "preview-broken", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused configuration exists (get: %v)", err)
	}
}

// previewStatus creates a NodeGroupBundlePreview with kubectl create -o
// json and returns its status.
func previewStatus(t *testing.T, spec map[string]any) bashiblev1alpha1.NodeGroupBundlePreviewStatus {
	t.Helper()
	manifest, _ := json.Marshal(map[string]any{
		"apiVersion": bashiblev1alpha1.SchemeGroupVersion.String(), "kind": "NodeGroupBundlePreview",
		"metadata": map[string]any{"name": "preview"}, "spec": spec,
	})
	cmd := f.KubectlCommand(framework.Context(t), "create", "-f", "-", "-o", "json")
	cmd.Stdin = strings.NewReader(string(manifest))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl create -f - -o json: %v\n%s", err, out)
	}
	var p bashiblev1alpha1.NodeGroupBundlePreview
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("decode the preview: %v\n%s", err, out)
	}
	return p.Status
}

func TestAPreviewObjectReturnsTheExactDiffOfTheChangedStepOnly(t *testing.T) {
	before := f.Checksum(t, "worker")
	masterBefore := f.Checksum(t, "master")
	f.TestConfiguration(t, "preview-diff", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 100,
		Content: "echo 1\necho 2\necho 3\necho 4\necho 5\n",
	})
	published := f.WaitChecksum(t, "worker", func(c string) bool { return c != before })

	st := previewStatus(t, map[string]any{"nodeGroupConfiguration": map[string]any{
		"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
		"metadata": map[string]any{"name": "preview-diff"},
		"spec":     map[string]any{"nodeGroups": []string{"worker"}, "content": "echo 1\necho 2\necho three\necho 4\necho 5\n"},
	}})
	if len(st.Failures) != 0 {
		t.Fatalf("failures: %+v", st.Failures)
	}
	if len(st.Groups) != 1 || st.Groups[0].Group != "worker" {
		t.Fatalf("groups: %+v; want only worker (master is untouched)", st.Groups)
	}
	g := st.Groups[0]
	if g.PreviousChecksum != published || g.Checksum == published || g.Checksum == "" {
		t.Errorf("checksums %s -> %s; want the published %s -> a new one", g.PreviousChecksum, g.Checksum, published)
	}
	if g.NodeCount != 2 || strings.Join(g.Nodes, ",") != "worker-0,worker-1" || g.Disruptive {
		t.Errorf("nodes %d %v, disruptive %v; want 2 [worker-0 worker-1], not disruptive", g.NodeCount, g.Nodes, g.Disruptive)
	}
	want := "--- a/100_preview-diff.sh\n+++ b/100_preview-diff.sh\n@@ -1,5 +1,5 @@\n echo 1\n echo 2\n-echo 3\n+echo three\n echo 4\n echo 5\n"
	if len(g.Steps) != 1 || g.Steps[0].Name != "100_preview-diff.sh" || g.Steps[0].Change != bashiblev1alpha1.StepModified || g.Steps[0].Diff != want {
		t.Fatalf("steps: %+v\nwant one Modified step 100_preview-diff.sh with diff\n%s", g.Steps, want)
	}
	if f.Checksum(t, "worker") != published || f.Checksum(t, "master") != masterBefore {
		t.Fatal("a preview changed what is published")
	}
}

// TestOnlyKubeAPIServerMayCallTheWebhook posts a review to each webhook
// (the preview's and early-oom settings') directly: without a client
// certificate, and as a node, the server's delegated authorization
// refuses; kube-apiserver's webhook client certificate is answered.
func TestOnlyKubeAPIServerMayCallTheWebhook(t *testing.T) {
	for _, path := range []string{bashiblev1alpha1.PreviewWebhookPath, bashiblev1alpha1.EarlyOOMSettingsWebhookPath} {
		t.Run(strings.TrimPrefix(path, "/admission/"), func(t *testing.T) { onlyKubeAPIServerMayPost(t, path) })
	}
}

func onlyKubeAPIServerMayPost(t *testing.T, path string) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CP.CACertPEM())
	post := func(certs []tls.Certificate) int {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}}
		req, err := http.NewRequestWithContext(framework.Context(t), http.MethodPost, replica.URL()+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("post to the webhook: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	cert := func(user string, groups ...string) []tls.Certificate {
		certPEM, keyPEM, err := f.CP.IssueClientCert(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	if code := post(nil); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Errorf("anonymous: %d, want 401 or 403", code)
	}
	if code := post(cert("system:node:worker-0", "system:nodes")); code != http.StatusForbidden {
		t.Errorf("a node: %d, want 403", code)
	}
	// An empty review is a bad request, but it got through authorization.
	if code := post(cert(bashiblev1alpha1.PreviewWebhookCallerUser)); code != http.StatusBadRequest {
		t.Errorf("kube-apiserver's webhook client: %d, want 400 for an empty review", code)
	}
}

// metricSum is the sum of kube-apiserver's series of metric whose labels
// include every one of labels (`name="value"`).
func metricSum(t *testing.T, metric string, labels ...string) float64 {
	t.Helper()
	raw, err := f.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(framework.Context(t))
	if err != nil {
		t.Fatalf("read kube-apiserver's /metrics: %v", err)
	}
	total := 0.0
lines:
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("kube-apiserver's /metrics: %q: %v", line, err)
		}
		total += v
	}
	return total
}

// previewCalls is how many reviews of operation kube-apiserver has sent
// the preview webhook.
func previewCalls(t *testing.T, operation string) float64 {
	t.Helper()
	return metricSum(t, "apiserver_admission_webhook_request_total",
		`name="`+bashiblev1alpha1.PreviewWebhookName+`"`, `operation="`+operation+`"`)
}

// TestAPreviewListsNoInstances: the nodes a preview names come from
// bashible-apiserver's Instance informer, not a LIST (a quorum read of the
// whole fleet) per preview.
func TestAPreviewListsNoInstances(t *testing.T) {
	dryRunWarnings(t, configuration("preview-probe", "true\n"))
	lists := func() float64 {
		return metricSum(t, "apiserver_request_total", `verb="LIST"`, `resource="instances"`)
	}
	before := lists()
	const previews = 3
	for i := range previews {
		out := dryRunWarnings(t, configuration(fmt.Sprintf("preview-lists-%d", i), "true\n"))
		if !strings.Contains(out, "group worker, 2 node(s)") {
			t.Fatalf("preview %d names no worker nodes:\n%s", i, out)
		}
	}
	// The informer may relist meanwhile, but not once per preview.
	if got := lists() - before; got >= previews {
		t.Errorf("%d previews made %v LISTs of Instances, want fewer than one each", previews, got)
	}
}

// TestMetadataOnlyUpdatesAndNodeManagersOwnWritesAreNotSentToTheWebhook
// counts kube-apiserver's calls of the webhook: an annotation patch (what
// node-manager-controller and GitOps tools write most) and a write as
// node-manager-controller's ServiceAccount, even one that changes spec,
// cost no call (the matchConditions); a change of spec by a user is
// still previewed.
func TestMetadataOnlyUpdatesAndNodeManagersOwnWritesAreNotSentToTheWebhook(t *testing.T) {
	ctx := framework.Context(t)
	dryRunWarnings(t, configuration("preview-probe", "true\n"))
	const name = "preview-metadata"
	if out, err := applyOutput(t, configuration(name, "true\n")); err != nil || !strings.Contains(out, "bashible preview:") {
		t.Fatalf("kubectl apply of a new configuration: %v, want a preview:\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	before := previewCalls(t, "UPDATE")

	if _, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/owner":"team-a"},"labels":{"example.com/tier":"base"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate NodeGroupConfiguration %s: %v", name, err)
	}
	if _, err := f.NM.DeckhouseV1().NodeGroups().Patch(ctx, "worker", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/owner":"team-a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate NodeGroup worker: %v", err)
	}
	if got := previewCalls(t, "UPDATE"); got != before {
		t.Errorf("metadata-only updates were sent to the webhook: %v UPDATE reviews, want %v", got, before)
	}

	// As node-manager-controller (impersonated, with the rights of an
	// administrator so the write is authorized and reaches admission): a
	// dry-run change of spec is not sent either.
	cfg := rest.CopyConfig(f.CP.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(deckhousev1.Namespace, deckhousev1.NodeManagerControllerName),
		Groups:   []string{"system:masters", "system:authenticated"},
	}
	controller, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.DeckhouseV1().NodeGroups().Patch(ctx, "worker", types.MergePatchType,
		[]byte(`{"spec":{"cri":{"type":"ContainerdV2"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("patch NodeGroup worker as node-manager-controller: %v", err)
	}
	if got := previewCalls(t, "UPDATE"); got != before {
		t.Errorf("node-manager-controller's write was sent to the webhook: %v UPDATE reviews, want %v", got, before)
	}

	// A user's change of spec is still previewed.
	out, err := applyOutput(t, configuration(name, "sysctl -w vm.swappiness=2\n"))
	if err != nil {
		t.Fatalf("kubectl apply of a changed configuration: %v\n%s", err, out)
	}
	if want := "group worker, 2 node(s): 1 step(s) change: 100_" + name + ".sh (modified)"; !strings.Contains(out, want) {
		t.Errorf("a change of spec printed no %q:\n%s", want, out)
	}
	if got := previewCalls(t, "UPDATE"); got != before+1 {
		t.Errorf("a change of spec: %v UPDATE reviews, want %v", got, before+1)
	}
}

// TestApplyWorksWhileBashibleAPIServerIsStopped runs last: it stops the
// replica, and restarts it at the end.
func TestApplyWorksWhileBashibleAPIServerIsStopped(t *testing.T) {
	dryRunWarnings(t, configuration("preview-probe", "true\n"))
	replica.Stop()
	t.Cleanup(func() {
		r, err := replica.Restart(context.Background())
		if err != nil {
			t.Errorf("restart bashible-apiserver: %v", err)
			return
		}
		replica = r
	})
	start := time.Now()
	out, err := applyOutput(t, configuration("preview-while-down", "true\n"))
	if err != nil {
		t.Fatalf("kubectl apply failed while bashible-apiserver was down:\n%s", out)
	}
	t.Cleanup(func() {
		_ = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(context.Background(), "preview-while-down", metav1.DeleteOptions{})
	})
	if strings.Contains(out, "bashible preview:") {
		t.Errorf("a preview answered while bashible-apiserver was down:\n%s", out)
	}
	if _, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(framework.Context(t), "preview-while-down", metav1.GetOptions{}); err != nil {
		t.Fatalf("the configuration applied while bashible-apiserver was down is not there: %v", err)
	}
	t.Logf("kubectl apply took %s with bashible-apiserver down", time.Since(start).Round(time.Millisecond))

	// early-oom's settings webhook fails open too: an operator can turn
	// early-oom off during an incident whatever bashible-apiserver's state.
	if out, err := applyOutput(t, settingsConfigMap(deckhousev1.Namespace, deckhousev1.EarlyOOMName, "mode: Disabled\n")); err != nil {
		t.Fatalf("kubectl apply of early-oom's settings failed while bashible-apiserver was down:\n%s", out)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().ConfigMaps(deckhousev1.Namespace).Delete(context.Background(), deckhousev1.EarlyOOMName, metav1.DeleteOptions{})
	})
}
