package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/informers/externalversions"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// TestRestartServesIdenticalObjects: a restarted server comes back with
// the same objects, checksums and resourceVersions.
func TestRestartServesIdenticalObjects(t *testing.T) {
	before := map[string]*bashiblev1alpha1.NodeGroupBundle{"worker": f.Bundle(t, "worker"), "master": f.Bundle(t, "master")}
	restarted, err := replica.Restart(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	replica = restarted
	for group, b := range before {
		after := f.Bundle(t, group)
		if checksum0(after) != checksum0(b) || after.ResourceVersion != b.ResourceVersion || !after.CreationTimestamp.Equal(&b.CreationTimestamp) {
			t.Errorf("%s after restart: checksum %s rv %s created %v; before %s %s %v", group,
				checksum0(after), after.ResourceVersion, after.CreationTimestamp, checksum0(b), b.ResourceVersion, b.CreationTimestamp)
		}
	}
}

// TestTwoReplicasServeIdenticalObjects asks each replica directly.
func TestTwoReplicasServeIdenticalObjects(t *testing.T) {
	second, err := stack.StartAPIServer(framework.Context(t), f.CP, stack.APIServerOptions{Identity: "replica-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	for _, path := range []string{
		"/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/worker",
		"/apis/bashible.deckhouse.io/v1alpha1/bashibles/master",
		"/apis/bashible.deckhouse.io/v1alpha1/bootstrap/worker",
		"/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles",
	} {
		code1, body1 := direct(t, replica.Port, path)
		code2, body2 := direct(t, second.Port, path)
		if code1 != http.StatusOK || code2 != http.StatusOK {
			t.Fatalf("%s: %d and %d", path, code1, code2)
		}
		if !bytes.Equal(body1, body2) {
			t.Errorf("%s differs between replicas:\n%.300s\n%.300s", path, body1, body2)
		}
	}
	lease, err := f.Kube.CoordinationV1().Leases(deckhousev1.BundlesNamespace).Get(framework.Context(t), deckhousev1.BashibleAPIServerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "replica-1" {
		t.Errorf("exactly one replica publishes; the Lease holder is %v", lease.Spec.HolderIdentity)
	}
	if _, metrics := direct(t, second.Port, "/metrics"); !bytes.Contains(metrics, []byte("bashible_apiserver_leader 0")) {
		t.Error("the second replica should report bashible_apiserver_leader 0")
	}
}

// TestWatchResumesAndExpires: a watch from a list's resourceVersion sees
// later changes only; one from before the server's history gets 410 Gone.
func TestWatchResumesAndExpires(t *testing.T) {
	ctx := framework.Context(t)
	// A restarted replica's history starts at the newest bundle, so an
	// older resourceVersion cannot be resumed there.
	restarted, err := replica.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica = restarted
	c := f.NM.BashibleV1alpha1().NodeGroupBundles()
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = c.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"}); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a watch from resourceVersion 1 must get 410 Gone, got %v", err)
	}
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("nothing changed after the list, yet the watch sent %s", ev.Type)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := f.CreateGroup(ctx, framework.NewGroup("watched")); err != nil {
		t.Fatal(err)
	}
	expect := func(typ watch.EventType) {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			if m, ok := ev.Object.(metav1.Object); !ok || ev.Type != typ || m.GetName() != "watched" {
				t.Fatalf("want %s watched, got %s %v", typ, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s event for the new group", typ)
		}
	}
	expect(watch.Added)
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(watch.Deleted)
	if _, err := c.Get(ctx, "watched", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a deleted group's bundle: want 404, got %v", err)
	}
}

// TestWatchWithoutResourceVersionSeesChanges: a node watching its
// Bashible from no resourceVersion (as the fleet benchmark's nodes do, and
// `curl ...?watch=1`) gets its group's current object and then each change.
// k8s.io/apiserver turns such a watch into one with initial events but
// without bookmarks; an initial-events-end bookmark sent to it made the
// apiserver's watch handler panic, which ended every such stream right
// after the initial events.
func TestWatchWithoutResourceVersionSeesChanges(t *testing.T) {
	ctx := framework.Context(t)
	f.TestNode(t, framework.NewNode("node-watcher", "worker"))
	f.TestInstance(t, framework.NewInstance("node-watcher", "worker"))
	cfg, err := f.CP.NodeConfig("node-watcher")
	if err != nil {
		t.Fatal(err)
	}
	c := framework.BashibleClient(cfg)
	framework.Poll(t, "the narrower sees the Instance", func(ctx context.Context) (bool, error) {
		_, err := c.Bashibles().Get(ctx, "worker", metav1.GetOptions{})
		return err == nil, nil
	})
	w, err := c.Bashibles().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=worker"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := ""
	for before == "" {
		ev := nextEvent(t, w)
		if b, ok := ev.Object.(*bashiblev1alpha1.Bashible); ok && ev.Type == watch.Added && b.Name == "worker" {
			before = b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
		} else {
			t.Fatalf("want worker ADDED first, got %s %#v", ev.Type, ev.Object)
		}
	}
	ngc := f.TestConfiguration(t, "watched-without-rv.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 92, Content: "true\n",
	})
	waitConfigProcessed(t, ngc.Name, ngc.Generation)
	for {
		ev := nextEvent(t, w)
		b, ok := ev.Object.(*bashiblev1alpha1.Bashible)
		if !ok || ev.Type != watch.Modified || b.Name != "worker" {
			t.Fatalf("want only worker MODIFIED after the initial state, got %s %#v", ev.Type, ev.Object)
		}
		if b.Annotations[bashiblev1alpha1.ChecksumAnnotation] != before {
			return
		}
	}
}

// nextEvent is w's next event; the test fails when the watch ends or none
// comes within framework.Poll's bound.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(90 * time.Second):
		t.Fatal("no watch event within 90 s")
	}
	return watch.Event{}
}

// TestInformersFollowGroups runs a generated client-go informer against the
// aggregated API.
func TestInformersFollowGroups(t *testing.T) {
	ctx, cancel := context.WithCancel(framework.Context(t))
	factory := externalversions.NewSharedInformerFactory(f.NM, 0)
	lister := factory.Bashible().V1alpha1().NodeGroupBundles().Lister()
	informer := factory.Bashible().V1alpha1().NodeGroupBundles().Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if _, err := lister.Get("worker"); err != nil {
		t.Fatalf("lister: %v", err)
	}
	if _, err := f.CreateGroup(ctx, framework.NewGroup("informed")); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the informer sees the new group", func(context.Context) (bool, error) {
		_, err := lister.Get("informed")
		return err == nil, nil
	})
	if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, "informed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the informer sees the group go", func(context.Context) (bool, error) {
		all, err := lister.List(labels.Everything())
		for _, b := range all {
			if b.Name == "informed" {
				return false, err
			}
		}
		return err == nil, err
	})
}

// TestManifestsApplyCleanly: the kustomized manifests pass server-side
// validation against the local control plane.
func TestManifestsApplyCleanly(t *testing.T) {
	out := f.Kubectl(t, "apply", "--dry-run=server", "-k", filepath.Join(f.Root, "manifests"))
	for _, want := range []string{
		"deployment.apps/bashible-apiserver", "apiservice.apiregistration.k8s.io/v1alpha1.bashible.deckhouse.io",
		"poddisruptionbudget.policy/bashible-apiserver", "clusterrole.rbac.authorization.k8s.io/d8:node-manager:bashible-apiserver:reader",
		"customresourcedefinition.apiextensions.k8s.io/nodegroups.deckhouse.io",
	} {
		if !bytes.Contains([]byte(out), []byte(want)) {
			t.Errorf("kubectl apply --dry-run=server -k manifests should include %s:\n%s", want, out)
		}
	}
}

// TestKubectlGetWatch: kubectl get -w prints a row when a bundle changes.
func TestKubectlGetWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(framework.Context(t), 30*time.Second)
	defer cancel()
	cmd := f.KubectlCommand(ctx, "get", "nodegroupbundles", "-w", "--output-watch-events")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	framework.Poll(t, "kubectl get -w lists the groups", func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "ADDED") && strings.Contains(out.String(), "worker"), nil
	})
	ngc := f.TestConfiguration(t, "watched-by-kubectl.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 91, Content: "true\n",
	})
	waitConfigProcessed(t, ngc.Name, ngc.Generation)
	sum := f.WaitChecksum(t, "worker", func(string) bool { return true })
	framework.Poll(t, "kubectl get -w prints the change", func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "MODIFIED") && strings.Contains(out.String(), sum[:12]), nil
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
