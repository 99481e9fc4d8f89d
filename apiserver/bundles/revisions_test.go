package bundles

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// publishConfigs publishes n new configurations of group worker, one
// NodeGroupConfiguration step each, and returns the checksum each served.
func (p *publisher) publishConfigs(from, n int) []string {
	p.t.Helper()
	var sums []string
	for i := from; i < from+n; i++ {
		prev := p.served("worker")
		p.addConfig(config(fmt.Sprintf("step-%d.sh", i), []string{"worker"}, fmt.Sprintf("echo %d\n", i)))
		p.sync()
		p.waitFor("configuration "+fmt.Sprint(i)+" to be served", func() bool { s := p.served("worker"); return s != "" && s != prev })
		sums = append(sums, p.served("worker"))
	}
	return sums
}

// kept are the revision numbers the served bundle lists, and those whose
// Secrets exist in the API.
func (p *publisher) kept(group string) (listed, inAPI []int64) {
	p.t.Helper()
	if b, ok := p.cfg.Store.Get(group); ok {
		for _, r := range b.Revisions {
			listed = append(listed, r.Revision)
		}
	}
	infos, err := p.revisions.list(p.ctx, group)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, r := range infos {
		inAPI = append(inAPI, r.Revision)
	}
	return listed, inAPI
}

// pin sets worker's spec.update.pinnedRevision (0 removes it) and waits
// for the informer to see it.
func (p *publisher) pin(rev int64) {
	p.t.Helper()
	ng, err := p.nm.DeckhouseV1().NodeGroups().Get(p.ctx, "worker", metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	ng.Spec.Update = &deckhousev1.UpdateSpec{}
	if rev > 0 {
		ng.Spec.Update.PinnedRevision = ptr.To(rev)
	}
	if _, err := p.nm.DeckhouseV1().NodeGroups().Update(p.ctx, ng, metav1.UpdateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("the informer to see the pin", func() bool {
		got, err := p.nodeGroups.Get("worker")
		return err == nil && pinnedRevision(got) == rev
	})
}

// pinnedCondition is worker's Pinned condition, nil when there is none.
func (p *publisher) pinnedCondition() *metav1.Condition {
	p.t.Helper()
	ng, err := p.nm.DeckhouseV1().NodeGroups().Get(p.ctx, "worker", metav1.GetOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	return meta.FindStatusCondition(ng.Status.Conditions, ConditionPinned)
}

func TestRevisionsAreBoundedOrderedAndKeptAcrossARestart(t *testing.T) {
	kube := fakeKube()
	p := newPublisher(t, kube, fakeNodeManager(group("worker")))
	p.revisions = newRevisions(kube, testNamespace, 3)
	p.lead()
	p.sync()
	p.waitFor("the first bundle", func() bool { return p.served("worker") != "" })
	sums := append([]string{p.served("worker")}, p.publishConfigs(1, 4)...)

	p.waitFor("the served list to show revisions 3 to 5", func() bool {
		listed, _ := p.kept("worker")
		return slices.Equal(listed, []int64{3, 4, 5})
	})
	if _, inAPI := p.kept("worker"); !slices.Equal(inAPI, []int64{3, 4, 5}) {
		t.Fatalf("revision Secrets %v, want the newest three: 3, 4, 5", inAPI)
	}
	b, _ := p.cfg.Store.Get("worker")
	if b.Revision != 5 || b.PinnedRevision != 0 {
		t.Errorf("served revision %d (pinned %d), want 5, not pinned", b.Revision, b.PinnedRevision)
	}
	for i, r := range b.Revisions {
		if r.Checksum != sums[r.Revision-1] {
			t.Errorf("revision %d has checksum %s, want %s (what was served then)", r.Revision, r.Checksum, sums[r.Revision-1])
		}
		want := fmt.Sprintf("step-%d.sh", r.Revision-1)
		if len(r.ChangedSteps) != 1 || !strings.HasSuffix(r.ChangedSteps[0], want) {
			t.Errorf("revision %d (#%d) changed %v, want only the step of %s", r.Revision, i, r.ChangedSteps, want)
		}
	}

	// A restarted replica (another leader) starts from what the cluster
	// holds: it keeps the same revisions and numbers the next one 6. The
	// revision Secrets alone are enough: the group's published Secret,
	// which lists them, is left out here.
	secrets, err := kube.CoreV1().Secrets(testNamespace).List(p.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i := range secrets.Items {
		if secrets.Items[i].Name != deckhousev1.PublishedBundleSecretPrefix+"worker" {
			objs = append(objs, &secrets.Items[i])
		}
	}
	ngcs, err := p.nm.DeckhouseV1alpha1().NodeGroupConfigurations().List(p.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nmObjs := []runtime.Object{group("worker")}
	for i := range ngcs.Items {
		nmObjs = append(nmObjs, &ngcs.Items[i])
	}
	kube2 := fakeKube(objs...)
	second := newPublisher(t, kube2, fakeNodeManager(nmObjs...))
	second.revisions = newRevisions(kube2, testNamespace, 3)
	second.lead()
	second.sync()
	second.waitFor("the bundle to be published again", func() bool { return second.served("worker") == sums[4] })
	if listed, inAPI := second.kept("worker"); !slices.Equal(listed, []int64{3, 4, 5}) || !slices.Equal(inAPI, []int64{3, 4, 5}) {
		t.Fatalf("after a restart: served list %v, Secrets %v, want 3, 4, 5 both", listed, inAPI)
	}
	second.publishConfigs(5, 1)
	second.waitFor("revision 6 after the restart", func() bool {
		listed, _ := second.kept("worker")
		return slices.Equal(listed, []int64{4, 5, 6})
	})
}

func TestPinServesTheRevisionAndUnpinResumesTheCurrentOne(t *testing.T) {
	kube := fakeKube()
	p := newPublisher(t, kube, fakeNodeManager(group("worker")))
	p.revisions = newRevisions(kube, testNamespace, 3)
	p.cfg.Store.OnChange(p.cfg.Metrics.ServedChanged)
	p.lead()
	p.sync()
	p.waitFor("the first bundle", func() bool { return p.served("worker") != "" })
	first := p.served("worker")
	p.publishConfigs(1, 2)

	p.pin(1)
	p.sync()
	p.waitFor("revision 1 to be served", func() bool { return p.served("worker") == first })
	b, _ := p.cfg.Store.Get("worker")
	if b.Revision != 1 || b.PinnedRevision != 1 || len(b.Revisions) != 3 {
		t.Errorf("pinned: serving revision %d, pinned %d, %d revisions listed; want 1, 1, 3", b.Revision, b.PinnedRevision, len(b.Revisions))
	}
	if c := p.pinnedCondition(); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonRevisionServed || !strings.Contains(c.Message, "revision 1") {
		t.Errorf("Pinned condition %+v, want True/%s naming revision 1", c, ReasonRevisionServed)
	}
	if got := testutil.ToFloat64(p.cfg.Metrics.PinnedRevision.WithLabelValues("worker")); got != 1 {
		t.Errorf("bashible_apiserver_pinned_revision{group=worker} = %v, want 1", got)
	}

	// A new configuration while pinned is recorded, not served; the pinned
	// revision is kept although it is now older than the newest three.
	p.addConfig(config("step-3.sh", []string{"worker"}, "echo 3\n"))
	p.sync()
	p.waitFor("revision 4 to be listed", func() bool { listed, _ := p.kept("worker"); return slices.Contains(listed, 4) })
	if p.served("worker") != first {
		t.Fatal("a new configuration replaced the pinned revision")
	}
	if listed, inAPI := p.kept("worker"); !slices.Equal(listed, []int64{1, 2, 3, 4}) || !slices.Equal(inAPI, listed) {
		t.Errorf("kept %v (Secrets %v), want the pinned 1 and the newest three 2, 3, 4", listed, inAPI)
	}

	p.pin(0)
	p.sync()
	p.waitFor("the current revision to be served again", func() bool {
		b, _ := p.cfg.Store.Get("worker")
		return b.Revision == 4 && b.PinnedRevision == 0
	})
	if n := testutil.CollectAndCount(p.cfg.Metrics.PinnedRevision); n != 0 {
		t.Errorf("bashible_apiserver_pinned_revision has %d series after the unpin, want none", n)
	}

	// Unpinned, the next revision prunes revision 1; a pin to it then
	// changes nothing the nodes receive and says so.
	p.addConfig(config("step-4.sh", []string{"worker"}, "echo 4\n"))
	p.sync()
	p.waitFor("revisions 3 to 5", func() bool { listed, _ := p.kept("worker"); return slices.Equal(listed, []int64{3, 4, 5}) })
	current := p.served("worker")
	p.pin(1)
	p.sync()
	if got := p.served("worker"); got != current {
		t.Fatalf("a pin to a pruned revision changed what is served from %s to %s", current, got)
	}
	c := p.pinnedCondition()
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonRevisionNotFound || !strings.Contains(c.Message, "pinnedRevision 1 is not a kept revision") {
		t.Errorf("Pinned condition %+v, want False/%s", c, ReasonRevisionNotFound)
	}
}

func TestChangedStepsNamesAddedChangedAndRemovedSteps(t *testing.T) {
	prev := &Published{Bashible: NewScript("a"), Steps: map[string]string{"000_keep.sh": "k", "010_change.sh": "1", "020_gone.sh": "g", "030_empty.sh": ""}}
	cur := &Published{Bashible: NewScript("b"), Steps: map[string]string{"000_keep.sh": "k", "010_change.sh": "2", "040_new.sh": "n", "030_empty.sh": ""}}
	want := []string{"bashible.sh", "010_change.sh", "020_gone.sh", "040_new.sh"}
	if got := changedSteps(prev, cur); !slices.Equal(got, want) {
		t.Errorf("changed %v, want %v", got, want)
	}
	many := &Published{Bashible: NewScript("a"), Steps: map[string]string{}}
	for i := range maxChangedStepsShown + 5 {
		many.Steps[fmt.Sprintf("%03d_s.sh", i)] = "x"
	}
	got := changedSteps(&Published{Bashible: NewScript("a")}, many)
	if len(got) != maxChangedStepsShown+1 || got[maxChangedStepsShown] != "+5 more" {
		t.Errorf("changed steps are not bounded: %d entries, last %q", len(got), got[len(got)-1])
	}
}
