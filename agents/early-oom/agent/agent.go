// Package agent runs the early-oom agent, a DaemonSet on
// every node that frees memory before the kernel's OOM killer or the
// kubelet's node-pressure eviction would, choosing its victim the way the
// kubelet does. Its command is agents/cmd/early-oom; the pieces, each a
// package named for its one job:
//
//   - psi reads /proc/pressure/memory (the kernel's Pressure Stall
//     Information); a kernel without it makes the agent idle, not crash;
//   - meminfo reads MemAvailable from /proc/meminfo, the second trigger,
//     and MemTotal, which bounds the MemAvailable floor;
//   - attribute takes out of the pressure the stalls of pods at their own
//     memory limit, so that a pod thrashing inside its limit evicts none
//     of its neighbours, and says which pods are under pressure;
//   - detect decides, sample by sample, when pressure has lasted long
//     enough to act and when to wait after an action (a pure function of
//     the samples and the thresholds);
//   - settings resolves the thresholds and the mode (Evict, Observe, Disabled)
//     for the node's group from the early-oom ConfigMap over the flags;
//   - cgroup reads each pod's memory working set from the kubelet's pod
//     cgroups (v1 and v2, cgroupfs and systemd drivers), and on v2 the
//     pods' and their parent's memory pressure and who is at its limit;
//   - rank orders the node's pods as the kubelet's memory-pressure
//     eviction does and leaves out those it must never touch;
//   - evict deletes the victim through the API (or, observing, only says
//     it would) and records Events on the pod and the node;
//   - agent (this package) wires them: it samples every --interval, asks
//     detect, ranks (preferring the pods under pressure), acts within the
//     node's eviction budget, and serves /healthz, /readyz and /metrics.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/agents/early-oom/attribute"
	"github.com/node-manager/node-manager/agents/early-oom/cgroup"
	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/evict"
	"github.com/node-manager/node-manager/agents/early-oom/meminfo"
	"github.com/node-manager/node-manager/agents/early-oom/psi"
	"github.com/node-manager/node-manager/agents/early-oom/rank"
	"github.com/node-manager/node-manager/agents/early-oom/settings"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// Reasons of the agent's Warning Events on its node.
const (
	// ReasonPSIUnavailable: the kernel offers no memory PSI and the agent
	// idles.
	ReasonPSIUnavailable = "PSIUnavailable"
	// ReasonSettingsInvalid: the settings ConfigMap cannot be used on this
	// node; the flags' settings apply.
	ReasonSettingsInvalid = "SettingsInvalid"
	// ReasonEvictionBudgetExhausted: the node's agent has deleted
	// maxEvictions pods within evictionWindow and deletes no more until
	// the oldest leaves the window.
	ReasonEvictionBudgetExhausted = "EvictionBudgetExhausted"
)

// Agent is one node's early-oom.
type Agent struct {
	opts     *Options
	base     settings.Settings
	client   kubernetes.Interface
	m        *metrics
	detector *detect.Detector

	// Set by Run.
	pods       corelisters.PodLister
	configMaps corelisters.ConfigMapNamespaceLister
	group      string
	evictor    *evict.Evictor
	recorder   events.EventRecorder
	node       *corev1.Node
	// memTotal is the node's RAM (0: unknown), which bounds the floor.
	memTotal int64
	// budget records this node's evictions (settings' maxEvictions per
	// evictionWindow).
	budget detect.Budget

	// notReady is why /readyz fails; empty once the agent samples.
	notReady atomic.Pointer[string]
	// lastSettingsError avoids logging the same bad ConfigMap every sample.
	lastSettingsError string
	// parsed (or parseErr) is the ConfigMap's settings.yaml at
	// parsedVersion, its resourceVersion.
	parsed        settings.File
	parseErr      error
	parsedVersion string
}

// New is an agent with opts (validated), talking to the API as client and
// registering its metrics with reg.
func New(opts *Options, client kubernetes.Interface, reg prometheus.Registerer) (*Agent, error) {
	base, err := opts.Baseline()
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, base: base, client: client, m: newMetrics(reg), detector: detect.New(base.Thresholds)}
	a.setNotReady("starting: the pod and settings caches have not synced yet")
	a.m.setMode(base.Mode)
	return a, nil
}

func (a *Agent) setNotReady(why string) { a.notReady.Store(&why) }

// readMemTotal reads the node's RAM, which bounds the MemAvailable floor
// of the flags (an error: the DaemonSet is wrong for this node) and of
// the ConfigMap (reported by settings), the one check the API cannot
// make. Unreadable, it is logged and the floor is not checked against it.
func (a *Agent) readMemTotal() error {
	total, err := meminfo.ReadTotal(a.opts.MeminfoPath)
	if err != nil {
		klog.ErrorS(err, "Reading MemTotal; the MemAvailable floor is not checked against the node's RAM")
		return nil
	}
	a.memTotal = total
	if err := a.base.ValidateFor(total); err != nil {
		return fmt.Errorf("the flags' settings on this node: %w", err)
	}
	return nil
}

// Handler serves /metrics, /healthz and /readyz. /healthz is always ok
// while the process runs (a kernel without PSI is no reason to restart);
// /readyz fails, saying why, until the agent samples: while its caches
// sync, and for good when the kernel has no memory PSI.
func (a *Agent) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := *a.notReady.Load(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Run samples until ctx ends. Without memory PSI it idles: not ready,
// early_oom_psi_unavailable 1, a Warning Event PSIUnavailable on the node,
// and no error (an error would restart the pod into the same kernel, a
// crash loop).
func (a *Agent) Run(ctx context.Context) error {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: a.client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(kubescheme.Scheme, deckhousev1.EarlyOOMName)
	a.recorder = recorder
	if err := a.readMemTotal(); err != nil {
		return err
	}

	if _, err := psi.Read(a.opts.PSIPath); errors.Is(err, psi.ErrUnavailable) {
		a.m.psiUnavailable.Set(1)
		a.setNotReady(fmt.Sprintf("idle: %v", err))
		klog.ErrorS(err, "Idling: without memory pressure information early-oom cannot act on this node", "path", a.opts.PSIPath)
		if node, nerr := a.getNode(ctx); nerr == nil {
			recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonPSIUnavailable, "Idle",
				"early-oom idles on this node and will not act on memory pressure: %v", err)
		}
		<-ctx.Done()
		return nil
	}
	node, err := a.getNode(ctx)
	if err != nil {
		return err
	}
	a.node = node
	// The group is read once: a node does not change groups in its life
	// (node-manager pins it at join).
	a.group = node.Labels[deckhousev1.NodeGroupLabel]

	onNode := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.opts.NodeName).String()
	}))
	a.pods = onNode.Core().V1().Pods().Lister()
	onNode.Start(ctx.Done())
	defer onNode.Shutdown()
	if a.opts.SettingsConfigMap != "" {
		own := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithNamespace(a.opts.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.SettingsConfigMap).String()
			}))
		a.configMaps = own.Core().V1().ConfigMaps().Lister().ConfigMaps(a.opts.Namespace)
		own.Start(ctx.Done())
		defer own.Shutdown()
		for typ, ok := range own.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("the %s cache did not sync: %w", typ, ctx.Err())
			}
		}
	}
	for typ, ok := range onNode.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the %s cache did not sync: %w", typ, ctx.Err())
		}
	}

	a.evictor = &evict.Evictor{
		Client:      a.client,
		Recorder:    recorder,
		Node:        node,
		GracePeriod: a.opts.GracePeriod,
	}

	a.setNotReady("")
	klog.InfoS("Sampling memory pressure", "node", a.opts.NodeName, "group", a.group, "interval", a.opts.Interval)
	ticker := time.NewTicker(a.opts.Interval)
	defer ticker.Stop()
	for {
		a.sample(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// getNode reads the agent's Node (its group label, and the subject of the
// node's Events), retrying while the API is unreachable.
func (a *Agent) getNode(ctx context.Context) (*corev1.Node, error) {
	var node *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			klog.ErrorS(err, "Reading the agent's Node; retrying", "node", a.opts.NodeName)
			return false, nil
		}
		node = n
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", a.opts.NodeName, err)
	}
	return node, nil
}

// sample reads the node once and acts when the detector says so.
func (a *Agent) sample(ctx context.Context, now time.Time) {
	s := a.settings()
	p, err := psi.Read(a.opts.PSIPath)
	if err != nil {
		a.m.readErrors.WithLabelValues("psi").Inc()
		klog.ErrorS(err, "Reading memory pressure")
		return
	}
	available, err := meminfo.ReadAvailable(a.opts.MeminfoPath)
	if err != nil {
		a.m.readErrors.WithLabelValues("meminfo").Inc()
		klog.ErrorS(err, "Reading MemAvailable; the floor is not checked this sample")
		available = -1
	} else {
		a.m.available.Set(float64(available))
	}
	a.m.pressure.WithLabelValues("some").Set(p.Some.Avg10)
	a.m.pressure.WithLabelValues("full").Set(p.Full.Avg10)
	tree, treeErr := cgroup.Reader{Root: a.opts.CgroupRoot}.ReadTree()
	if treeErr != nil {
		a.m.readErrors.WithLabelValues("cgroup").Inc()
	}
	pods, source := attribute.Pressure(p, tree)
	a.m.podsPressure.WithLabelValues("some").Set(pods.Some.Avg10)
	a.m.podsPressure.WithLabelValues("full").Set(pods.Full.Avg10)
	if s.Mode == settings.Disabled {
		return
	}
	a.detector.SetThresholds(s.Thresholds)
	smp := detect.Sample{Time: now, Pressure: pods, NodePressure: p, Available: available}
	// The pressure alone (Available -1: the floor is not what is compared).
	if _, nodeOver := a.detector.Over(detect.Sample{Pressure: p, Available: -1}); nodeOver && source == attribute.Pods && !a.detector.Paused(now) {
		if _, podsOver := a.detector.Over(detect.Sample{Pressure: pods, Available: -1}); !podsOver {
			// The node-wide figures are over the thresholds only by the
			// stalls of pods at their own limit: the node is not short.
			a.m.limitedPressure.Inc()
		}
	}
	reason, act := a.detector.Observe(smp)
	if !act {
		return
	}
	a.detector.Acted(now)
	a.act(ctx, s, tree, treeErr, evict.Evidence{Reason: reason, Sample: smp, Thresholds: s.Thresholds})
}

// settings are the ConfigMap's settings for the node's group over the
// flags', or the flags' when there is no usable ConfigMap.
func (a *Agent) settings() settings.Settings {
	s, err := a.resolve()
	if err == nil {
		err = s.ValidateFor(a.memTotal)
	}
	if err != nil {
		a.m.settingsInvalid.Set(1)
		if msg := err.Error(); msg != a.lastSettingsError {
			klog.ErrorS(err, "The settings ConfigMap cannot be used; the flags' settings apply until it is fixed",
				"configMap", a.opts.Namespace+"/"+a.opts.SettingsConfigMap, "group", a.group)
			if a.recorder != nil && a.node != nil {
				a.recorder.Eventf(a.node, nil, corev1.EventTypeWarning, ReasonSettingsInvalid, "Validate",
					"the early-oom settings (ConfigMap %s/%s) cannot be used on this node, its flags' settings apply until they are fixed: %v",
					a.opts.Namespace, a.opts.SettingsConfigMap, err)
			}
			a.lastSettingsError = msg
		}
		s = a.base
	} else {
		a.m.settingsInvalid.Set(0)
		a.lastSettingsError = ""
	}
	a.m.setMode(s.Mode)
	return s
}

func (a *Agent) resolve() (settings.Settings, error) {
	if a.configMaps == nil {
		return a.base, nil
	}
	cm, err := a.configMaps.Get(a.opts.SettingsConfigMap)
	if apierrors.IsNotFound(err) {
		return a.base, nil
	}
	if err != nil {
		return a.base, err
	}
	data, ok := cm.Data[deckhousev1.EarlyOOMSettingsKey]
	if !ok {
		return a.base, nil
	}
	// Parsed once per version of the ConfigMap, not every sample.
	if cm.ResourceVersion != a.parsedVersion || a.parsedVersion == "" {
		a.parsed, a.parseErr = settings.Parse([]byte(data))
		a.parsedVersion = cm.ResourceVersion
	}
	if a.parseErr != nil {
		return a.base, a.parseErr
	}
	return a.parsed.Resolve(a.base, a.group)
}

// act chooses the victim, among the pods under pressure when the tree
// tells them, and deletes or reports it, within the node's eviction
// budget. A victim that vanished or was replaced meanwhile gives way to
// the next one.
func (a *Agent) act(ctx context.Context, s settings.Settings, tree cgroup.Tree, treeErr error, ev evict.Evidence) {
	mode := s.Mode
	reason := string(ev.Reason)
	if treeErr != nil {
		a.m.actions.WithLabelValues(reason, ResultFailed).Inc()
		klog.ErrorS(treeErr, "Memory pressure, but the pods' usage cannot be read; nothing done", "reason", reason)
		return
	}
	now := ev.Sample.Time
	if mode == settings.Evict && !a.budget.Allow(now, s.MaxEvictions, s.EvictionWindow) {
		a.m.actions.WithLabelValues(reason, ResultBudgetExhausted).Inc()
		klog.ErrorS(nil, "Memory pressure, but this node's eviction budget is spent; nothing deleted",
			"reason", reason, "maxEvictions", s.MaxEvictions, "evictionWindow", s.EvictionWindow)
		a.recorder.Eventf(a.node, nil, corev1.EventTypeWarning, ReasonEvictionBudgetExhausted, "None",
			"early-oom deleted %d pods on this node within %s (maxEvictions) and deletes no more until the oldest deletion leaves the window; the memory pressure (%s) goes on",
			s.MaxEvictions, s.EvictionWindow, reason)
		return
	}
	usage := tree.Usage()
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		a.m.actions.WithLabelValues(reason, ResultFailed).Inc()
		klog.ErrorS(err, "Listing the node's pods")
		return
	}
	candidates := attribute.Prefer(rank.Rank(pods, usage, a.opts.Self(), int64(a.opts.GracePeriod/time.Second)), attribute.UnderPressure(tree))
	for _, v := range candidates {
		logArgs := []any{"pod", klog.KObj(v.Pod), "reason", reason, "fullAvg10", ev.Sample.Pressure.Full.Avg10,
			"someAvg10", ev.Sample.Pressure.Some.Avg10, "memAvailable", ev.Sample.Available,
			"usage", v.Usage, "request", v.Request, "qos", evict.QoS(v), "priority", v.Priority}
		if mode == settings.Observe {
			a.evictor.Report(v, ev)
			a.m.actions.WithLabelValues(reason, ResultWouldEvict).Inc()
			a.m.victims.WithLabelValues(evict.QoS(v), string(mode)).Inc()
			klog.InfoS("Memory pressure: would evict (observe mode, nothing deleted)", logArgs...)
			return
		}
		err := a.evictor.Evict(ctx, v, ev)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			klog.InfoS("The chosen pod is gone or was replaced; choosing the next", "pod", klog.KObj(v.Pod))
			continue
		}
		if err != nil {
			a.m.actions.WithLabelValues(reason, ResultFailed).Inc()
			klog.ErrorS(err, "Memory pressure: eviction failed", logArgs...)
			return
		}
		a.budget.Spend(now)
		a.m.actions.WithLabelValues(reason, ResultEvicted).Inc()
		a.m.victims.WithLabelValues(evict.QoS(v), string(mode)).Inc()
		klog.InfoS("Memory pressure: evicted", logArgs...)
		return
	}
	a.m.actions.WithLabelValues(reason, ResultNoVictim).Inc()
	klog.InfoS("Memory pressure, but no pod on the node may be evicted", "reason", reason, "pods", len(pods), "withUsage", len(usage))
}
