package bundles

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
	"github.com/node-manager/node-manager/templates"
)

const testNamespace = "bundles"

// publisher is a Controller on fake clients with its informers running,
// driven one sync at a time.
type publisher struct {
	*Controller
	t    *testing.T
	ctx  context.Context
	kube *kubefake.Clientset
	nm   *nmfake.Clientset
}

// fakeNodeManager is a fake node-manager clientset that also takes the
// server-side apply of a NodeGroup's status conditions, which the fake's
// object tracker cannot.
func fakeNodeManager(objs ...runtime.Object) *nmfake.Clientset {
	nm := nmfake.NewSimpleClientset(objs...)
	gvr := deckhousev1.SchemeGroupVersion.WithResource("nodegroups")
	nm.PrependReactor("patch", "nodegroups", func(action k8stesting.Action) (bool, runtime.Object, error) {
		patch := action.(k8stesting.PatchAction)
		if patch.GetSubresource() != "status" || patch.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var applied deckhousev1.NodeGroup
		if err := json.Unmarshal(patch.GetPatch(), &applied); err != nil {
			return true, nil, err
		}
		obj, err := nm.Tracker().Get(gvr, "", patch.GetName())
		if err != nil {
			return true, nil, err
		}
		ng := obj.(*deckhousev1.NodeGroup).DeepCopy()
		for _, c := range applied.Status.Conditions {
			meta.SetStatusCondition(&ng.Status.Conditions, c)
		}
		return true, ng, nm.Tracker().Update(gvr, ng, "")
	})
	return nm
}

// lastResourceVersion is shared by every fake, so a Secret copied from one
// into another never meets its own resourceVersion again.
var lastResourceVersion atomic.Int64

// fakeKube is a fake clientset that, like the API, gives every written
// Secret a new resourceVersion (the store orders changes by it).
func fakeKube(objs ...runtime.Object) *kubefake.Clientset {
	kube := kubefake.NewClientset(objs...)
	stampResourceVersions(kube)
	return kube
}

// stampResourceVersions makes kube give every Secret it creates or updates
// a new resourceVersion; added last, it runs before the other reactors.
func stampResourceVersions(kube *kubefake.Clientset) {
	stamp := func(action k8stesting.Action) (bool, runtime.Object, error) {
		if obj, ok := action.(k8stesting.CreateAction); ok {
			if s, ok := obj.GetObject().(*corev1.Secret); ok {
				s.ResourceVersion = strconv.FormatInt(lastResourceVersion.Add(1), 10)
			}
		}
		return false, nil, nil
	}
	kube.PrependReactor("create", "secrets", stamp)
	kube.PrependReactor("update", "secrets", stamp)
}

func newPublisher(t *testing.T, kube *kubefake.Clientset, nm *nmfake.Clientset) *publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c := NewController(ControllerConfig{Kube: kube, NodeMgr: nm, Namespace: testNamespace, Identity: "test",
		Renderer: newRenderer(t), Store: NewStore(nil), Metrics: NewMetrics()})
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("informers did not sync")
	}
	c.cfg.Store.MarkSynced()
	return &publisher{Controller: c, t: t, ctx: ctx, kube: kube, nm: nm}
}

// lead makes the controller the leader, as OnStartedLeading does after
// the Lease was taken.
func (p *publisher) lead() {
	p.term.renewed(time.Now().Add(time.Hour), resourcelock.LeaderElectionRecord{HolderIdentity: p.term.Identity()}, nil)
	p.lastGood.setLeading(true)
	p.leaderCtx.Store(&p.ctx)
	p.leading.Store(true)
}

// sync renders every group the controller knows, as the render workers
// would, then publishes as the leader's publish worker would.
func (p *publisher) sync() {
	p.t.Helper()
	groups := map[string]bool{}
	ngs, err := p.nodeGroups.List(labels.Everything())
	if err != nil {
		p.t.Fatalf("list node groups: %v", err)
	}
	for _, ng := range ngs {
		groups[ng.Name] = true
	}
	p.resultsMu.Lock()
	for g := range p.results {
		groups[g] = true
	}
	p.resultsMu.Unlock()
	for g := range groups {
		if err := p.renderOne(context.Background(), g); err != nil {
			p.t.Fatalf("render %s: %v", g, err)
		}
	}
	if err := p.publishLatest(); err != nil {
		p.t.Fatalf("publish: %v", err)
	}
}

func (p *publisher) waitFor(what string, cond func() bool) {
	p.t.Helper()
	if err := wait.PollUntilContextTimeout(p.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		p.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// served is the checksum the store serves for group, "" for none.
func (p *publisher) served(group string) string {
	if b, ok := p.cfg.Store.Get(group); ok {
		return b.Checksum
	}
	return ""
}

// secret is the group's published Secret in the API, nil when there is none.
func (p *publisher) secret(group string) *corev1.Secret {
	p.t.Helper()
	s, err := p.kube.CoreV1().Secrets(testNamespace).Get(p.ctx, deckhousev1.PublishedBundleSecretPrefix+group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// forge overwrites group's published Secret as a writer who knows the
// format would: new content, a correctly recomputed checksum.
func (p *publisher) forge(group string) string {
	p.t.Helper()
	steps := map[string]string{"000_forged.sh": "touch /tmp/owned\n"}
	forged := &Published{Group: group, NodeType: "Static", Bashible: NewScript("#!/usr/bin/env bash\n"), Steps: steps,
		Checksum: templates.Checksum("#!/usr/bin/env bash\n", steps)}
	data, err := encodeSecretData(forged)
	if err != nil {
		p.t.Fatal(err)
	}
	s := p.secret(group)
	s.Data = data
	if _, err := p.kube.CoreV1().Secrets(testNamespace).Update(p.ctx, s, metav1.UpdateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("the store to load the forged bundle", func() bool { return p.served(group) == forged.Checksum })
	return forged.Checksum
}

func (p *publisher) addConfig(ngc *deckhousev1alpha1.NodeGroupConfiguration) {
	p.t.Helper()
	if _, err := p.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(p.ctx, ngc, metav1.CreateOptions{}); err != nil {
		p.t.Fatal(err)
	}
	p.waitFor("the informer to see "+ngc.Name, func() bool { _, err := p.configs.Get(ngc.Name); return err == nil })
}

func TestLeaderRestoresATamperedBundleWhileTheGroupFailsToRender(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("worker")))
	p.lead()
	p.sync()
	p.waitFor("the first bundle", func() bool { return p.served("worker") != "" })
	good := p.served("worker")

	p.addConfig(config("broken.sh", []string{"worker"}, `{{ fail "not ready" }}`))
	p.sync()
	if p.served("worker") != good {
		t.Fatal("a failing render must leave the last good bundle")
	}

	forged := p.forge("worker")
	p.sync()
	p.waitFor("the leader to restore the last good bundle", func() bool { return p.served("worker") == good })
	if sum := p.secret("worker").Annotations[bashiblev1alpha1.ChecksumAnnotation]; sum != good {
		t.Errorf("the Secret's checksum annotation is %s, want the good %s (forged was %s)", sum, good, forged)
	}

	if err := p.kube.CoreV1().Secrets(testNamespace).Delete(p.ctx, deckhousev1.PublishedBundleSecretPrefix+"worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the store to see the deletion", func() bool { return p.served("worker") == "" })
	p.sync()
	p.waitFor("the leader to re-create the deleted bundle", func() bool { return p.served("worker") == good })
}

// TestAPublishInALateRenewalsGapIsRetried: client-go keeps a term until
// renewals have failed for RenewDeadline, while the leader stops writing
// RenewDeadline after its last renewal began; a publish in between, on a
// loaded machine, must wait for the late renewal, not be dropped (it was,
// and a group's change then waited for some other group's render: CI
// caught TestAGroupWithATemplateBombDoesNotDelayAnotherGroupsChange so).
func TestAPublishInALateRenewalsGapIsRetried(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("worker")))
	t.Cleanup(p.publishQ.ShutDown)
	p.lead()
	p.term.validUntil.Store(time.Now().Add(-time.Millisecond).UnixNano()) // the renewal is late
	if err := p.renderOne(context.Background(), "worker"); err != nil {
		t.Fatal(err)
	}
	// One turn of the publish worker, while the renewal is late.
	key, _ := p.publishQ.Get()
	if err := p.publishLatest(); err != nil {
		t.Fatal(err)
	}
	p.publishQ.Done(key)
	if p.served("worker") != "" {
		t.Fatal("published outside the term")
	}
	p.term.renewed(time.Now(), resourcelock.LeaderElectionRecord{HolderIdentity: p.term.Identity()}, nil)
	go wait.UntilWithContext(p.ctx, p.publishWorker, time.Second)
	p.waitFor("the publish after the late renewal", func() bool { return p.served("worker") != "" })
}

// TestANewConfigurationIsReportedOnlyFromRendersThatReadIt: the informer's
// cache shows a new NodeGroupConfiguration before its handler queues the
// renders; a publish in between saw every group settled and reported the
// configuration from renders that predate it ("No node group matches
// spec.nodeGroups"), as CI caught in
// TestAConfigurationsStatusWaitsForEveryGroupItSelects.
func TestANewConfigurationIsReportedOnlyFromRendersThatReadIt(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("worker")))
	// settle waits for a handler to mark the group unsettled and takes the
	// mark away, as if the render it queued had run.
	settle := func(what string) {
		p.waitFor(what, func() bool {
			p.resultsMu.Lock()
			defer p.resultsMu.Unlock()
			if !p.dirty["worker"] {
				return false
			}
			delete(p.dirty, "worker")
			return true
		})
	}
	p.lead()
	p.sync()
	settle("the group's first status to come back from the API")
	p.addConfig(config("new.sh", []string{"worker"}, "echo new"))
	// The informer's cache has new.sh; as if its handler had not run yet,
	// nothing marks the group unsettled.
	settle("the handler to mark the group unsettled")
	if err := p.publishLatest(); err != nil {
		t.Fatal(err)
	}
	rendered := func() *metav1.Condition {
		ngc, err := p.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(p.ctx, "new.sh", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(ngc.Status.Conditions, ConditionRendered)
	}
	if c := rendered(); c != nil {
		t.Fatalf("new.sh was reported before any render read it: %q", c.Message)
	}
	// The group's own status changes with its bundle and queues it again,
	// so render and publish until the report comes.
	p.waitFor("new.sh's report from a render that read it", func() bool {
		p.sync()
		c := rendered()
		return c != nil && c.Message == "Rendered for node groups worker"
	})
}

func TestNewLeaderRestoresTheBundleItLoadedWhenTheGroupFailsToRender(t *testing.T) {
	first := newPublisher(t, fakeKube(), fakeNodeManager(group("worker")))
	first.lead()
	first.sync()
	first.waitFor("the first bundle", func() bool { return first.served("worker") != "" })
	good := first.served("worker")
	published := first.secret("worker")

	// A second replica starts with the group already failing: the only good
	// bundle it knows is the one it loaded.
	broken := config("broken.sh", []string{"worker"}, `{{ fail "not ready" }}`)
	second := newPublisher(t, fakeKube(published), fakeNodeManager(group("worker"), broken))
	if second.served("worker") != good {
		t.Fatalf("the second replica loaded %q, want %s", second.served("worker"), good)
	}
	second.lead()
	second.forge("worker")
	second.sync()
	second.waitFor("the new leader to restore the bundle it loaded", func() bool { return second.served("worker") == good })
}

func TestBundlesAreDeletedOnlyWhenTheAPIConfirmsTheirGroupIsGone(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("a"), group("b")))
	p.lead()
	p.sync()
	p.waitFor("both bundles", func() bool { return p.served("a") != "" && p.served("b") != "" })

	// The NodeGroup informer shows no groups for a moment (a relist):
	// every render is missing, but the API still has both groups.
	if err := p.publish(p.ctx, Inputs{}, map[string]*Result{}); err != nil {
		t.Fatal(err)
	}
	if p.secret("a") == nil || p.secret("b") == nil {
		t.Fatal("a transiently empty group list deleted published bundles of groups that still exist")
	}

	if err := p.nm.DeckhouseV1().NodeGroups().Delete(p.ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.publish(p.ctx, Inputs{}, map[string]*Result{}); err != nil {
		t.Fatal(err)
	}
	if p.secret("a") == nil {
		t.Error("the bundle of group a, which exists, was deleted")
	}
	if p.secret("b") != nil {
		t.Error("the bundle of group b, whose NodeGroup is gone, was kept")
	}
}

// incompressible is n bytes of valid shell that gzip cannot shrink much: a
// heredoc of random base64.
func incompressible(t *testing.T, n int) string {
	t.Helper()
	raw := make([]byte, n*3/4)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return "cat > /dev/null <<'EOF'\n" + base64.StdEncoding.EncodeToString(raw) + "\nEOF\n"
}

func TestBundleTooLargeForASecretIsReportedAndTheGroupKeepsItsLastGoodBundle(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("huge")))
	p.lead()
	p.sync()
	p.waitFor("the first bundle", func() bool { return p.served("huge") != "" })
	good := p.served("huge")

	// Each within the CRD's 512 KiB content limit; together, encoded, over
	// what a Secret holds.
	for _, name := range []string{"big-1.sh", "big-2.sh", "big-3.sh"} {
		p.addConfig(config(name, []string{"huge"}, incompressible(t, 500_000)))
	}
	p.sync()

	if got := p.secret("huge").Annotations[bashiblev1alpha1.ChecksumAnnotation]; got != good {
		t.Errorf("the published bundle changed to %s; an oversize bundle must never replace the last good one", got)
	}
	ng, err := p.nm.DeckhouseV1().NodeGroups().Get(p.ctx, "huge", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(ng.Status.Conditions, ConditionRendered)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonBundleTooLarge {
		t.Fatalf("NodeGroup huge: Rendered is %+v, want False %s", cond, ReasonBundleTooLarge)
	}
	for _, want := range []string{"bytes encoded", "1024000 bytes", "050_big-1.sh", "050_big-2.sh", "050_big-3.sh", "last good bundle"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("NodeGroup huge: the message should say %q: %s", want, cond.Message)
		}
	}
	for _, name := range []string{"big-1.sh", "big-2.sh", "big-3.sh"} {
		ngc, err := p.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(p.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(ngc.Status.Conditions, ConditionRendered)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonBundleTooLarge || !strings.Contains(cond.Message, "huge") {
			t.Errorf("NodeGroupConfiguration %s: Rendered is %+v, want False %s naming the group", name, cond, ReasonBundleTooLarge)
		}
	}
	if v := testutil.ToFloat64(p.cfg.Metrics.BundleTooLarge.WithLabelValues("huge")); v != 1 {
		t.Errorf("bashible_apiserver_bundle_too_large{group=huge} = %v, want 1", v)
	}
}

func TestBundleTooLargeErrorNamesTheLargestParts(t *testing.T) {
	p := &Published{Group: "g", Bashible: NewScript("bb"), Bootstrap: "b", Steps: map[string]string{"001_a.sh": "aaaa", "002_b.sh": "bbbbbbb", "003_c.sh": "c"}}
	err := checkEncodedSize(p, make([]byte, MaxEncodedBundleBytes+1))
	big, ok := err.(*BundleTooLargeError)
	if !ok {
		t.Fatalf("want a *BundleTooLargeError, got %v", err)
	}
	if big.Encoded != MaxEncodedBundleBytes+1 || len(big.Largest) != 3 || big.Largest[0].Name != "002_b.sh" || big.Largest[1].Name != "001_a.sh" || big.Largest[2].Name != "bashible.sh" {
		t.Errorf("%+v", big)
	}
	if checkEncodedSize(p, make([]byte, MaxEncodedBundleBytes)) != nil {
		t.Error("a bundle of exactly the limit must be published")
	}
}

func TestBundlesAreKeptWhenTheAPIDoesNotServeNodeGroupsAtAll(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("a")))
	p.lead()
	p.sync()
	p.waitFor("the bundle", func() bool { return p.served("a") != "" })

	// The CRD is being reinstalled: the informer shows no groups and the
	// API answers 404 for the resource, naming no object.
	p.nm.PrependReactor("get", "nodegroups", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewGenericServerResponse(404, "get", deckhousev1.Resource("nodegroups"), "", "the server could not find the requested resource", 0, false)
	})
	if err := p.publish(p.ctx, Inputs{}, map[string]*Result{}); err != nil {
		t.Logf("publish: %v", err)
	}
	if p.secret("a") == nil {
		t.Fatal("a 404 for the whole nodegroups resource deleted the bundle of a group it says nothing about")
	}
}

func TestAFollowerKeepsTheLastGoodBundleOfAGroupWhoseSecretWasDeleted(t *testing.T) {
	leader := newPublisher(t, fakeKube(), fakeNodeManager(group("worker")))
	leader.lead()
	leader.sync()
	leader.waitFor("the first bundle", func() bool { return leader.served("worker") != "" })
	good := leader.served("worker")

	// A follower of the same cluster, whose group now fails to render, sees
	// someone delete the bundle while no replica leads.
	broken := config("broken.sh", []string{"worker"}, `{{ fail "not ready" }}`)
	follower := newPublisher(t, fakeKube(leader.secret("worker")), fakeNodeManager(group("worker"), broken))
	follower.waitFor("the follower to load the bundle", func() bool { return follower.served("worker") == good })
	if err := follower.kube.CoreV1().Secrets(testNamespace).Delete(follower.ctx, deckhousev1.PublishedBundleSecretPrefix+"worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	follower.waitFor("the follower to see the deletion", func() bool { return follower.served("worker") == "" })

	// It becomes the leader: the group still exists, so it restores the
	// bundle it last saw rather than leaving the group with none.
	follower.lead()
	follower.sync()
	follower.waitFor("the new leader to restore the deleted bundle", func() bool { return follower.served("worker") == good })
}

// TestEqualBundlesEncodeToEqualBytes: the Secret of a bundle is the same
// bytes however often and after whatever else it was encoded (the gzip
// writers are reused), so the leader never rewrites an unchanged bundle.
func TestEqualBundlesEncodeToEqualBytes(t *testing.T) {
	p := &Published{Group: "a", Checksum: "x", Bashible: NewScript("#!/bin/bash\n"), Steps: map[string]string{"000_a.sh": strings.Repeat("echo a\n", 500)}}
	first, err := encodeSecretData(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encodeSecretData(&Published{Group: "b", Checksum: "y", Bashible: NewScript(strings.Repeat("other\n", 9000))}); err != nil {
		t.Fatal(err)
	}
	again, err := encodeSecretData(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first[deckhousev1.PublishedBundleKey], again[deckhousev1.PublishedBundleKey]) {
		t.Error("the same bundle encoded to different bytes")
	}
	zr, err := gzip.NewReader(bytes.NewReader(again[deckhousev1.PublishedBundleKey]))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	want, _ := json.Marshal(p)
	if err != nil || !bytes.Equal(raw, want) {
		t.Errorf("the re-encoded bundle decompresses to %q (%v), want %q", raw, err, want)
	}
}

// eagerPublishQueue is a publish queue whose worker takes an item the
// moment it is added and publishes, as a publish worker that wins the race
// with the render worker would. Informers' handlers add to it too (a
// change of a published Secret), from their own goroutines.
type eagerPublishQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	p          *publisher
	mu         sync.Mutex
	publishing bool
}

func (q *eagerPublishQueue) Add(key string) {
	q.TypedRateLimitingInterface.Add(key)
	q.mu.Lock()
	if q.publishing {
		q.mu.Unlock()
		return // a publish that queues another: taken in turn, as by the worker
	}
	q.publishing = true
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.publishing = false
		q.mu.Unlock()
	}()
	got, _ := q.Get()
	if err := q.p.publishLatest(); err != nil {
		q.p.t.Errorf("publish: %v", err)
	}
	q.Done(got)
}

// TestAPublishTakenAtOnceFindsTheRenderSettled: the publish a render
// queues is what tells its NodeGroupConfigurations' status, and the
// publish worker may take it the moment it is queued. It was queued while
// the render still counted as in flight, so such a publish found the
// group unsettled, told nothing, and nothing published again: a broken
// configuration's Rendered condition and RenderFailed Event were lost
// until the next change (a loaded machine showed it, in
// TestEachWayAConfigurationFailsIsItsOwnEvent).
func TestAPublishTakenAtOnceFindsTheRenderSettled(t *testing.T) {
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("worker"), config("broken.sh", []string{"*"}, `{{ fail "the mistake" }}`)))
	t.Cleanup(p.publishQ.ShutDown)
	p.lead()
	p.publishQ = &eagerPublishQueue{TypedRateLimitingInterface: p.publishQ, p: p}
	if err := p.renderOne(context.Background(), "worker"); err != nil {
		t.Fatal(err)
	}
	ngc, err := p.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(p.ctx, "broken.sh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(ngc.Status.Conditions, ConditionRendered)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "RenderFailed" || !strings.Contains(cond.Message, "the mistake") {
		t.Errorf("Rendered condition of broken.sh after its render and the publish it queued: %+v, want False, RenderFailed, naming the mistake", cond)
	}
}

// TestRenderAndPublishLinesNameTheGroup: the render and publish paths log
// through klog.FromContext, each line carrying the node group.
func TestRenderAndPublishLinesNameTheGroup(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	p := newPublisher(t, fakeKube(), fakeNodeManager(group("good"), group("broken"),
		config("bad.sh", []string{"broken"}, "{{ .nope }}")))
	t.Cleanup(p.publishQ.ShutDown)
	p.ctx = klog.NewContext(p.ctx, logger)
	p.lead()
	for _, g := range []string{"good", "broken"} {
		if err := p.renderOne(klog.NewContext(context.Background(), logger), g); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.publishLatest(); err != nil {
		t.Fatal(err)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for msg, group := range map[string]string{"Node group failed to render": "broken", "Published bundle": "good"} {
		line := ""
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, msg) {
				line = l
			}
		}
		if !strings.Contains(line, `group="`+group+`"`) {
			t.Errorf("the line %q (%q) does not name group %s; logs:\n%s", msg, line, group, logs)
		}
	}
}

// TestTheLeaderComparesBundlesByTheDigestsItsInformerKeeps runs the
// published-Secret informer with the Store's transform: the informer keeps
// the SHA-256 of a bundle, the Store serves the bundle, and the publish
// passes that a change of another group brings find the unchanged group's
// Secret up to date by its digest.
func TestTheLeaderComparesBundlesByTheDigestsItsInformerKeeps(t *testing.T) {
	r := runController(t, 10*time.Second, []string{"a", "b"}, config("step.sh", []string{"a"}, "echo one"))
	ctx := context.Background()
	waitPublished(t, r.kube, "a", time.Minute, func(sum string) bool { return sum != "" })
	waitPublished(t, r.kube, "b", time.Minute, func(sum string) bool { return sum != "" })
	name := deckhousev1.PublishedBundleSecretPrefix + "b"
	inAPI, err := r.kube.CoreV1().Secrets(testNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		p, ok := r.c.cfg.Store.Get("b")
		return ok && p.ResourceVersion == inAPI.ResourceVersion, nil
	})
	if err != nil {
		t.Fatalf("the Store does not serve group b's Secret at resourceVersion %s", inAPI.ResourceVersion)
	}
	cached, err := r.c.published.Secrets(testNamespace).Get(name)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(inAPI.Data[deckhousev1.PublishedBundleKey])
	if got := cached.Data[deckhousev1.PublishedBundleKey]; !bytes.Equal(got, want[:]) {
		t.Fatalf("the informer keeps %d bytes of group b's bundle, want its SHA-256", len(got))
	}

	// Two changes of group a, each published after a pass over both groups.
	for _, content := range []string{"echo two", "echo three"} {
		before := publishedChecksum(ctx, r.kube, "a")
		ngc, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, "step.sh", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ngc.Spec.Content = content
		if _, err := r.nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, ngc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPublished(t, r.kube, "a", time.Minute, func(sum string) bool { return sum != "" && sum != before })
	}
	writes := 0
	for _, a := range r.kube.Actions() {
		if w, ok := a.(k8stesting.CreateAction); ok && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			if s, ok := w.GetObject().(*corev1.Secret); ok && s.Name == name {
				writes++
			}
		}
	}
	if writes != 1 {
		t.Fatalf("group b's unchanged bundle was written %d times, want once", writes)
	}
}
