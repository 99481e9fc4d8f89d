package drills

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// nextVersionTemplates is a copy of the suite's template overlay with one
// step changed, as the next release's templates would be: a replica
// running them renders other bundles (another templates digest), so
// every published Secret says which of two replicas wrote it.
func nextVersionTemplates(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(f.OverlayDir(), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(f.OverlayDir(), path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == filepath.Join("steps", "020_harmless.sh.tpl") {
			data = append(data, []byte("echo next-version >> \"$BASHIBLE_ROOT/applied-versions\"\n")...)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// publishedDigest is the templates digest of readGroup's published Secret.
func publishedDigest(t *testing.T) string {
	t.Helper()
	sec, err := f.Kube.CoreV1().Secrets(deckhousev1.BundlesNamespace).Get(framework.Context(t), deckhousev1.PublishedBundleSecretPrefix+readGroup, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sec.Annotations[bashiblev1alpha1.TemplatesDigestAnnotation]
}

// apiServerLeaseHolder is who publishes bundles.
func apiServerLeaseHolder(ctx context.Context) string {
	return leaseHolder(ctx, deckhousev1.BundlesNamespace, deckhousev1.BashibleAPIServerName)
}

// TestLeaderCutOffLosesTheLeaseAndStopsPublishing runs last: it leaves a
// replica on other templates. The publishing replica is cut off from
// kube-apiserver for longer than its Lease; the other replica (on the
// next version's templates, as during an upgrade) takes the Lease and
// publishes its bundles; once the link is back the old leader writes
// nothing. Who wrote each Secret is read from its templates digest: in
// the Secrets' write history, no write of the old leader follows the
// first write of the new one.
func TestLeaderCutOffLosesTheLeaseAndStopsPublishing(t *testing.T) {
	waitAvailable(t)
	waitInService(t)
	var leader, other int
	framework.Poll(t, "a replica publishes", func(ctx context.Context) (bool, error) {
		holder := apiServerLeaseHolder(ctx)
		for i, r := range replicas {
			if r.Identity == holder {
				leader, other = i, 1-i
				return true, nil
			}
		}
		return false, nil
	})
	// The other replica restarts on the next version's templates; it
	// stands by while the leader holds the Lease.
	next, err := replicas[other].RestartWith(framework.Context(t), replicaOptions(other, nextVersionTemplates(t)))
	if err != nil {
		t.Fatal(err)
	}
	replicas[other] = next
	waitInService(t)
	oldDigest := publishedDigest(t)
	history := recordSecrets(t)

	cut := time.Now()
	links[leader].Cut()
	framework.Poll(t, replicas[other].Identity+" takes the Lease", func(ctx context.Context) (bool, error) {
		return apiServerLeaseHolder(ctx) == replicas[other].Identity, nil
	})
	takeover := time.Since(cut)
	// Losing the Lease stops only publishing: the cut-off replica keeps
	// running and serving reads of what it has (the admin's certificate
	// needs no kube-apiserver to be authorized).
	if code, _, err := replicas[leader].Get(framework.Context(t), "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/"+readGroup); err != nil || code != 200 || replicas[leader].Exited() {
		t.Errorf("%s cut off and no longer leading: GET %s answered %d (%v), exited %t; it must go on serving reads", replicas[leader].Identity, readGroup, code, err, replicas[leader].Exited())
	}
	var newDigest string
	framework.Poll(t, replicas[other].Identity+" publishes its bundles", func(context.Context) (bool, error) {
		for _, w := range history.all() {
			if w.templatesDigest != oldDigest {
				newDigest = w.templatesDigest
				return true, nil
			}
		}
		return false, nil
	})
	published := time.Since(cut)
	links[leader].Restore()
	restored := time.Since(cut)

	// With its link back, the old leader sees the Secrets it did not
	// write and a new change to render; as a standby it must write
	// neither. It has caught up once it serves the new leader's
	// bundle of the change.
	sum := f.NewConfiguration(t, readGroup, "echo after the cut\n")
	framework.Poll(t, replicas[leader].Identity+" serves the new leader's bundle", func(ctx context.Context) (bool, error) {
		_, body, err := replicas[leader].Get(ctx, "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/"+readGroup)
		return err == nil && strings.Contains(body, sum), nil
	})

	writes := history.all()
	firstNew, lastOld := -1, -1
	for i, w := range writes {
		switch {
		case w.templatesDigest == newDigest && firstNew < 0:
			firstNew = i
		case w.templatesDigest == oldDigest:
			lastOld = i
		}
	}
	var lines []string
	for _, w := range writes {
		lines = append(lines, w.at.Sub(cut).Round(time.Millisecond).String()+" "+string(w.typ)+" "+w.name+" rv "+w.rv+" digest "+w.templatesDigest[:min(12, len(w.templatesDigest))])
	}
	if lastOld > firstNew {
		t.Errorf("the old leader wrote after the new one had published: two publishers at once; writes since the cut:\n%s", strings.Join(lines, "\n"))
	}
	newWrites := len(writes) - firstNew
	t.Logf("DRILL leader cut off from kube-apiserver (until the other replica published, %s): the other replica held the Lease %s after the cut and published %s after it "+
		"(%d Secret writes, all by it); the old leader wrote nothing after that, before or after its link came back",
		restored.Round(100*time.Millisecond), takeover.Round(100*time.Millisecond), published.Round(100*time.Millisecond), newWrites)
	t.Logf("Secret writes since the cut:\n%s", strings.Join(lines, "\n"))
}
