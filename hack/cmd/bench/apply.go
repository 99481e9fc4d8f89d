package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

// applyConfigs is how many NodeGroupConfigurations one `kubectl create`
// of a List carries in benchApply.
const applyConfigs = 200

// applyAllGroups makes every NodeGroupConfiguration of applyList select
// every group ("*", the default when none is named); by default each
// selects one.
var applyAllGroups = false

func selector(i int) string {
	if applyAllGroups {
		return "*"
	}
	return fmt.Sprintf("group-%03d", i%groups)
}

// applyList is a List of applyConfigs small NodeGroupConfigurations, each
// selecting one of the benchmark's groups (a GitOps sync of a
// configuration set).
func applyList() []byte {
	items := make([]any, 0, applyConfigs)
	for i := range applyConfigs {
		items = append(items, map[string]any{
			"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
			"metadata": map[string]any{"name": fmt.Sprintf("apply-%03d.sh", i)},
			"spec": map[string]any{"nodeGroups": []string{selector(i)}, "weight": 500,
				"content": fmt.Sprintf("sysctl -w net.core.somaxconn=%d\n", 1024+i)},
		})
	}
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	return data
}

// benchApply measures one `kubectl create` of applyList, with the preview
// webhook off and then on (apply_200_ngcs_webhook_{off,on}), and their
// ratio; the objects are deleted after each run, and the deletes timed
// (delete_200_ngcs_webhook_{off,on}).
func benchApply(ctx context.Context, cp *controlplane.ControlPlane, nm versioned.Interface, server *stack.APIServer) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	kubectl := func(stdin []byte, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath()}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	list := applyList()
	// once creates the List and deletes it again: how long the create
	// took, and the delete until the objects were gone.
	once := func() (created, deleted time.Duration, err error) {
		// The bench's configurations, and the local stack's one unless
		// -apply-only: the delete is done when this many are left.
		before, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		if _, err := kubectl(list, "create", "-f", "-"); err != nil {
			return 0, 0, err
		}
		created = time.Since(start)
		start = time.Now()
		if _, err := kubectl(list, "delete", "--wait=false", "-f", "-"); err != nil {
			return 0, 0, err
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == len(before.Items), nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("waiting for the %d NodeGroupConfigurations deleted to be gone: %w", applyConfigs, err)
		}
		return created, time.Since(start), nil
	}
	off, offDelete, err := once()
	if err != nil {
		return err
	}
	if err := server.RegisterPreviewWebhook(ctx); err != nil {
		return err
	}
	// The webhook configuration reaches kube-apiserver within moments.
	probe := []byte(`{"apiVersion":"deckhouse.io/v1alpha1","kind":"NodeGroupConfiguration","metadata":{"name":"probe.sh"},"spec":{"nodeGroups":["group-000"],"content":"true\n"}}`)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, err := kubectl(probe, "create", "--dry-run=server", "-f", "-")
		return err == nil && strings.Contains(out, "bashible preview:"), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the preview webhook to answer: %w", err)
	}
	callsBefore, err := webhookCreates(ctx, nm)
	if err != nil {
		return err
	}
	on, onDelete, err := once()
	if err != nil {
		return err
	}
	callsAfter, err := webhookCreates(ctx, nm)
	if err != nil {
		return err
	}
	// Each create was previewed, or the figure measures nothing.
	if calls := callsAfter - callsBefore; calls < applyConfigs {
		return fmt.Errorf("kube-apiserver called the preview webhook %v times for %d creates", calls, applyConfigs)
	}
	figure("apply_200_ngcs_webhook_off", ms(off), "ms")
	figure("apply_200_ngcs_webhook_on", ms(on), "ms")
	figure("apply_200_ngcs_webhook_ratio", float64(on)/float64(off), "x")
	// A delete is not sent to the webhook (its rules name CREATE and
	// UPDATE only): these two should be alike.
	figure("delete_200_ngcs_webhook_off", ms(offDelete), "ms")
	figure("delete_200_ngcs_webhook_on", ms(onDelete), "ms")
	return nil
}

// webhookCreates is how many CREATE reviews kube-apiserver has sent the
// preview webhook (apiserver_admission_webhook_request_total).
func webhookCreates(ctx context.Context, nm versioned.Interface) (float64, error) {
	raw, err := nm.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("read kube-apiserver's /metrics: %w", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_admission_webhook_request_total{") ||
			!strings.Contains(line, `name="`+bashiblev1alpha1.PreviewWebhookName+`"`) || !strings.Contains(line, `operation="CREATE"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("kube-apiserver's /metrics: %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
