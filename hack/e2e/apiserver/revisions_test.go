package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestPinRollsAGroupBackToAKeptRevision: three configurations published
// are listed as revisions by kubectl; a pin to revision 1 makes the
// group's bashibles and nodegroupbundles serve revision 1's checksum and
// bundle (also after a restart, the revisions live in the cluster); an
// unpin resumes the current configuration; a pin to a pruned revision
// changes nothing and says why.
func TestPinRollsAGroupBackToAKeptRevision(t *testing.T) {
	const group = "rollback"
	ctx := framework.Context(t)
	f.TestGroup(t, framework.NewGroup(group))
	sums := []string{f.WaitChecksum(t, group, func(s string) bool { return s != "" })}

	// Revisions 2 and 3: a step added, then edited.
	ngc := f.TestConfiguration(t, "rollback-step.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{group}, Bundles: []string{"*"}, Weight: 70, Content: "echo two\n",
	})
	sums = append(sums, f.WaitChecksum(t, group, func(s string) bool { return s != sums[0] }))
	editStep := func(content string) string {
		t.Helper()
		prev := f.Checksum(t, group)
		// bashible-apiserver writes the status meanwhile: retry conflicts.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, ngc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Content = content
			_, err = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return f.WaitChecksum(t, group, func(s string) bool { return s != prev })
	}
	sums = append(sums, editStep("echo three\n"))

	b := kubectlBundle(t, group)
	if got := revisionChecksums(b); !slices.Equal(got, sums) {
		t.Fatalf("kubectl get nodegroupbundles %s -o yaml lists revisions with checksums %v, want %v", group, got, sums)
	}
	for i, r := range b.Revisions {
		if r.Revision != int64(i+1) || r.PublishedAt.IsZero() {
			t.Errorf("revision #%d: number %d, published %v", i, r.Revision, r.PublishedAt)
		}
	}
	if changed := b.Revisions[2].ChangedSteps; !slices.Equal(changed, []string{"070_rollback-step.sh"}) {
		t.Errorf("revision 3 lists changed steps %v, want the edited 070_rollback-step.sh", changed)
	}
	if out := f.Kubectl(t, "get", "nodegroupbundles", group); !strings.Contains(rowOf(out, group), " 3 ") {
		t.Errorf("kubectl get nodegroupbundles %s shows no REVISION 3:\n%s", group, out)
	}

	// Pin to revision 1: the nodes' objects carry revision 1.
	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":1}}}`)
	f.WaitChecksum(t, group, func(s string) bool { return s == sums[0] })
	assertServesRevision(t, group, sums[0], 1, true)
	waitPinned(t, group, metav1.ConditionTrue, bundles.ReasonRevisionServed)
	if out := f.Kubectl(t, "get", "ng", group); !strings.Contains(out, "PINNED") || !strings.Contains(rowOf(out, group), " 1 ") {
		t.Errorf("kubectl get ng %s shows no pin:\n%s", group, out)
	}
	if out := f.Kubectl(t, "get", "nodegroupbundles", group); !strings.Contains(rowOf(out, group), "1 (pinned)") {
		t.Errorf("kubectl get nodegroupbundles %s does not show the pinned revision:\n%s", group, out)
	}
	if _, metrics := direct(t, replica.Port, "/metrics"); !strings.Contains(string(metrics), `bashible_apiserver_pinned_revision{group="`+group+`"} 1`) {
		t.Error("/metrics has no bashible_apiserver_pinned_revision 1 for the pinned group")
	}

	// The revisions and the pin survive a restart: they live in the cluster.
	restarted, err := replica.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica = restarted
	// The aggregator answers 503 until the Service in front of the replica
	// has probed it ready again (every second): wait for the API, not a time.
	framework.Poll(t, "the group served through the aggregator after the restart", func(ctx context.Context) (bool, error) {
		_, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, group, metav1.GetOptions{})
		return err == nil, nil
	})
	assertServesRevision(t, group, sums[0], 1, true)
	if got := revisionChecksums(kubectlBundle(t, group)); !slices.Equal(got, sums) {
		t.Errorf("after a restart the revisions are %v, want %v", got, sums)
	}

	// Unpin: the current configuration again, and the condition goes.
	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":null}}}`)
	f.WaitChecksum(t, group, func(s string) bool { return s == sums[2] })
	assertServesRevision(t, group, sums[2], 3, false)
	waitPinned(t, group, "", "")

	// Four more configurations: the default --revision-history of 5 keeps
	// revisions 3 to 7, so a pin to 1 finds nothing and changes nothing.
	for i := 4; i <= 7; i++ {
		sums = append(sums, editStep(fmt.Sprintf("echo %d\n", i)))
	}
	if got := revisionChecksums(kubectlBundle(t, group)); !slices.Equal(got, sums[2:]) {
		t.Fatalf("after 7 configurations the revisions are %v, want the newest five %v", got, sums[2:])
	}
	f.Kubectl(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":1}}}`)
	cond := waitPinned(t, group, metav1.ConditionFalse, bundles.ReasonRevisionNotFound)
	if !strings.Contains(cond.Message, "pinnedRevision 1 is not a kept revision of the group (kept: 3, 4, 5, 6, 7)") {
		t.Errorf("Pinned condition message %q does not say which revisions are kept", cond.Message)
	}
	assertServesRevision(t, group, sums[6], 7, false)

	// A pin must be a revision number.
	if out, err := f.KubectlErr(t, "patch", "nodegroup", group, "--type=merge", "-p", `{"spec":{"update":{"pinnedRevision":0}}}`); err == nil ||
		!strings.Contains(out, "update.pinnedRevision must be a revision number") {
		t.Errorf("a pin to revision 0 was not refused with the rule's message: %v %s", err, out)
	}

	// A deleted group's revisions go with its bundle.
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the revisions of the deleted group to be deleted", func(ctx context.Context) (bool, error) {
		l, err := f.Kube.CoreV1().Secrets(deckhousev1.BundlesNamespace).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.RevisionOfLabel + "=" + group})
		return err == nil && len(l.Items) == 0, err
	})
}

// kubectlBundle is nodegroupbundles/<group> as kubectl get -o yaml prints it.
func kubectlBundle(t *testing.T, group string) *bashiblev1alpha1.NodeGroupBundle {
	t.Helper()
	var b bashiblev1alpha1.NodeGroupBundle
	if err := yaml.Unmarshal([]byte(f.Kubectl(t, "get", "nodegroupbundles", group, "-o", "yaml")), &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

// revisionChecksums are the checksums of b's revisions, oldest first.
func revisionChecksums(b *bashiblev1alpha1.NodeGroupBundle) []string {
	var out []string
	for _, r := range b.Revisions {
		out = append(out, r.Checksum)
	}
	return out
}

// rowOf is the line of a kubectl table that starts with name, spaces
// squeezed, with a space at either end.
func rowOf(table, name string) string {
	for _, line := range strings.Split(table, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && fields[0] == name {
			return " " + strings.Join(fields, " ") + " "
		}
	}
	return ""
}

// assertServesRevision checks what a node of group receives: bashibles
// and nodegroupbundles with checksum sum and revision rev (and the pin).
func assertServesRevision(t *testing.T, group, sum string, rev int64, pinned bool) {
	t.Helper()
	ctx := framework.Context(t)
	bashible, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle := f.Bundle(t, group)
	for name, a := range map[string]map[string]string{"bashibles": bashible.Annotations, "nodegroupbundles": bundle.Annotations} {
		wantPin := ""
		if pinned {
			wantPin = fmt.Sprint(rev)
		}
		if a[bashiblev1alpha1.ChecksumAnnotation] != sum || a[bashiblev1alpha1.RevisionAnnotation] != fmt.Sprint(rev) || a[bashiblev1alpha1.PinnedRevisionAnnotation] != wantPin {
			t.Errorf("%s/%s: checksum %s revision %q pinned %q; want %s, %d, %q", name, group,
				a[bashiblev1alpha1.ChecksumAnnotation], a[bashiblev1alpha1.RevisionAnnotation], a[bashiblev1alpha1.PinnedRevisionAnnotation], sum, rev, wantPin)
		}
	}
	if _, ok := bundle.Data["070_rollback-step.sh"]; ok != (rev > 1) {
		t.Errorf("nodegroupbundles/%s at revision %d: has the step added in revision 2: %t", group, rev, ok)
	}
}

// waitPinned waits until group's Pinned condition has status and reason
// for its current generation ("" for both: until it has none).
func waitPinned(t *testing.T, group string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	framework.Poll(t, fmt.Sprintf("Pinned condition of NodeGroup %s to be %q/%q", group, status, reason), func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(ng.Status.Conditions, bundles.ConditionPinned)
		if c == nil {
			return status == "", nil
		}
		got = *c
		return c.Status == status && c.Reason == reason && c.ObservedGeneration == ng.Generation, nil
	})
	return got
}
