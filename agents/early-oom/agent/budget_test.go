package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/node-manager/node-manager/agents/early-oom/evict"
	"github.com/node-manager/node-manager/agents/early-oom/settings"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// wired is an agent whose Run would have set its caches, recorder and
// evictor: here from objs, without a watch, so that a test calls sample
// with the times it chooses.
func wired(t *testing.T, o *Options, objs ...*corev1.Pod) (*Agent, *fake.Clientset, *events.FakeRecorder, cache.Indexer) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.NodeName}}
	client := fake.NewClientset(node)
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range objs {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(o, client, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	a.pods = corelisters.NewPodLister(pods)
	a.recorder, a.node = rec, node
	a.evictor = &evict.Evictor{Client: client, Recorder: rec, Node: node, GracePeriod: o.GracePeriod}
	cms := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	a.configMaps = corelisters.NewConfigMapLister(cms).ConfigMaps(o.Namespace)
	return a, client, rec, cms
}

func besteffort(t *testing.T, o *Options, name, usage string) *corev1.Pod {
	t.Helper()
	uid := "0000000" + name
	writeFile(t, filepath.Join(o.CgroupRoot, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+uid+".slice/memory.current"), usage)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p" + name, Namespace: "default", UID: ktypes.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: o.NodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort},
	}
}

// deletions is how many of the four pods are gone from the API.
func deletions(t *testing.T, c *fake.Clientset) int {
	t.Helper()
	list, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return 4 - len(list.Items)
}

// TestTheEvictionBudgetStopsDeletions: with maxEvictions 2 per 10m, under
// pressure that never ends, the agent deletes two pods, then reports the
// spent budget (metric, Warning Event on the node) and deletes nothing
// more until the first deletion leaves the window.
func TestTheEvictionBudgetStopsDeletions(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.Samples, o.RecoveryPause, o.MaxEvictions, o.EvictionWindow = 1, 10*time.Second, 2, 10*time.Minute
	writeFile(t, o.PSIPath, "some avg10=50.00 avg60=0 avg300=0 total=1\nfull avg10=45.00 avg60=0 avg300=0 total=1\n")
	writeFile(t, o.MeminfoPath, "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n")
	writeFile(t, filepath.Join(o.CgroupRoot, "cgroup.controllers"), "memory\n")
	var pods []*corev1.Pod
	for i, name := range []string{"1", "2", "3", "4"} {
		pods = append(pods, besteffort(t, o, name, []string{"1000", "2000", "3000", "4000"}[i]))
	}
	// The cache is not told of deletions (no watch here): a deleted pod
	// chosen again gives way to the next, as after a real race.
	a, client, rec, _ := wired(t, o, pods...)
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	for i := range 4 {
		a.sample(ctx, t0.Add(time.Duration(i)*11*time.Second))
	}
	if got := deletions(t, client); got != 2 {
		t.Fatalf("%d pods deleted under endless pressure with maxEvictions 2; want 2", got)
	}
	if got := testutil.ToFloat64(a.m.actions.WithLabelValues("FullPressure", ResultBudgetExhausted)); got != 2 {
		t.Errorf("budget_exhausted counted %v; want 2", got)
	}
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonEvictionBudgetExhausted) && strings.Contains(e, "deleted 2 pods on this node within 10m0s") {
			found = true
		}
	}
	if !found {
		t.Error("no EvictionBudgetExhausted Event on the node")
	}
	a.sample(ctx, t0.Add(10*time.Minute+time.Second))
	if got := deletions(t, client); got != 3 {
		t.Errorf("%d pods deleted once the first deletion left the window; want 3", got)
	}
}

// TestDestructiveSettingsAreRefusedAndReported: a ConfigMap that sets
// recoveryPause 0s (which the API refuses too, but a ConfigMap written
// while bashible-apiserver was down gets in), or a MemAvailable floor
// above half the node's RAM (which only the node can judge: the API
// admits it), is not used: early_oom_settings_invalid is 1, a Warning
// Event on the node says why, and the flags' settings apply.
func TestDestructiveSettingsAreRefusedAndReported(t *testing.T) {
	for data, want := range map[string]string{
		"recoveryPause: 0s\n":        "recoveryPause 0s",
		"memAvailableFloor: 900Mi\n": "above 0.5 of this node's RAM",
	} {
		dir := t.TempDir()
		o := testOptions(t, dir)
		o.SettingsConfigMap = deckhousev1.EarlyOOMName
		writeFile(t, o.MeminfoPath, "MemTotal: 1048576 kB\nMemAvailable: 838860 kB\n")
		a, _, rec, cms := wired(t, o)
		// As Run does: the node's RAM (1Gi) from its meminfo.
		if err := a.readMemTotal(); err != nil || a.memTotal != 1<<30 {
			t.Fatalf("MemTotal %d, %v; want 1Gi", a.memTotal, err)
		}
		if err := cms.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.SettingsConfigMap, Namespace: o.Namespace, ResourceVersion: "1"},
			Data: map[string]string{deckhousev1.EarlyOOMSettingsKey: data}}); err != nil {
			t.Fatal(err)
		}
		// The API refuses what no node could use and admits the floor,
		// which only the node can judge.
		parsed, err := settings.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if apiErr := parsed.Validate(); (apiErr == nil) != strings.Contains(data, "memAvailableFloor") {
			t.Errorf("%q at the API: %v", data, apiErr)
		}
		s := a.settings()
		if s != a.base {
			t.Errorf("%q: settings %+v; want the flags' %+v", data, s, a.base)
		}
		if got := testutil.ToFloat64(a.m.settingsInvalid); got != 1 {
			t.Errorf("%q: early_oom_settings_invalid = %v; want 1", data, got)
		}
		select {
		case e := <-rec.Events:
			if !strings.Contains(e, ReasonSettingsInvalid) || !strings.Contains(e, want) {
				t.Errorf("%q: Event %q; want %s naming %q", data, e, ReasonSettingsInvalid, want)
			}
		default:
			t.Errorf("%q: no Event on the node", data)
		}
	}
}
