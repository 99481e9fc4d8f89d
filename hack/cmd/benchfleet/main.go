// Command benchfleet is what `make bench-fleet` runs: a fleet of simulated
// nodes against one bashible-apiserver and one node-manager-controller on
// the local control plane, printing one figure per line as `name: value
// unit`, like `make bench`.
//
// The fleet is -nodes Node objects (each with its Instance and its Lease in
// kube-node-lease, renewed as a kubelet would) in -groups NodeGroups: the
// group "rollout" holds a fifth of them, the rest share the other groups.
// Each node is a goroutine with its own client certificate
// (system:node:<name>) that does what bashible.sh's timer does, with a
// minute compressed to -period: once per period, at a random moment of
// it, a GET of bashibles/<group> through kube-apiserver's aggregator on a
// new TLS connection (curl's way), and a GET of the group's
// nodegroupbundle when the checksum there differs from its own.
//
// The phases, and their figures:
//
//   - quiet (one period, no fleet): the CPU kube-apiserver, bashible-apiserver
//     and node-manager-controller use with the nodes just existing;
//   - fleet (two periods or until the change below is seen): bashibles GET
//     latency, errors, bashible-apiserver's CPU per 1,000 requests, and
//     kube-apiserver's extra CPU (fleet minus quiet); after the first period
//     the steps of two groups change, and ngc_change_* say when the new
//     checksum was served and when every node of the two groups had seen it
//     through its polling GET (as the real bashible learns of a change: a
//     GET once a minute, no watch), so that figure is up to one period
//     plus the serve time;
//   - compare (two periods): every node also GETs a ConfigMap of the same
//     size as its Bashible, once per period, through the same
//     authorizers: the p50/p99 of both side by side;
//   - rollout: the rollout group's step changes; in-process agents play
//     each node's side of the approval protocol (hack/e2e/framework's
//     Agent, driven by one informer) taking -update-time per update; the
//     time until every node has applied it beside the ideal,
//     ceil(nodes / maxConcurrent) × update time;
//   - watches: every node opens a watch of its bashibles through the
//     aggregator (a 429 is tried again after its Retry-After, at most
//     watchAttempts times in all, as client-go would; watches_retried_429
//     counts those tries); the resident memory each costs bashible-apiserver and
//     kube-apiserver, and the time from a change of a step every group
//     has until every watcher got its event (watch_change_to_all_watchers,
//     measured through watch events; watches_ended_early counts streams
//     the server closed before it).
//
// bashible-apiserver's and node-manager-controller's resident memory is
// read at the end of the compare phase.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/procstat"
	"github.com/node-manager/node-manager/hack/stack"
)

type config struct {
	nodes, groups int
	period        time.Duration
	updateTime    time.Duration
	leaseEvery    time.Duration
	kubeletStatus bool
	watches       bool
	profileDir    string
}

func main() {
	var c config
	flag.IntVar(&c.nodes, "nodes", 5000, "simulated nodes")
	flag.IntVar(&c.groups, "groups", 50, "node groups (the rollout group holds a fifth of the nodes)")
	flag.DurationVar(&c.period, "period", 30*time.Second, "bashible's one-minute timer, compressed")
	flag.DurationVar(&c.updateTime, "update-time", 3*time.Second, "how long a node of the rollout takes to apply an update")
	flag.DurationVar(&c.leaseEvery, "lease-every", 30*time.Second, "how often each node's Lease is renewed")
	flag.BoolVar(&c.kubeletStatus, "kubelet-status", true, "report a node Ready again 10 s after kube-controller-manager marked it otherwise, as a live kubelet's status loop does (false: a node marked NotReady stays so)")
	flag.BoolVar(&c.watches, "watches", true, "open a watch per node at the end and measure what it costs")
	flag.StringVar(&c.profileDir, "profile-dir", "", "write bashible-apiserver's heap and CPU profiles and node-manager-controller's heap profile of the fleet phase here")
	flag.Parse()
	if c.nodes < 10 || c.groups < 2 {
		fmt.Fprintln(os.Stderr, "bench-fleet: -nodes must be at least 10 and -groups at least 2")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "bench-fleet: %v\n", err)
		os.Exit(1)
	}
}

func figure(name string, value float64, unit string) {
	fmt.Printf("%s: %s %s\n", name, strconv.FormatFloat(value, 'f', 2, 64), unit)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-fleet %s: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// cpuMeter reads the CPU time of the processes measured.
type cpuMeter map[string]int

func (m cpuMeter) read() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range m {
		out[name] = procstat.TreeCPU(pid)
	}
	return out
}

// since is each process's CPU use since before, in cores.
func (m cpuMeter) since(before map[string]time.Duration, elapsed time.Duration) map[string]float64 {
	now := m.read()
	out := map[string]float64{}
	for name := range m {
		out[name] = (now[name] - before[name]).Seconds() / elapsed.Seconds()
	}
	return out
}

func run(c config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	setupStart := time.Now()
	if err := stack.Build(); err != nil {
		return err
	}
	env, err := stack.NewEnvironment(ctx)
	if err != nil {
		return err
	}
	cp := env.CP
	defer cp.StopOnSignal()()
	defer func() { _ = cp.Stop() }()
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	kube := kubernetes.NewForConfigOrDie(cfg)
	nm := versioned.NewForConfigOrDie(cfg)

	l := newLayout(c.nodes, c.groups)
	if err := createGroups(ctx, nm, l); err != nil {
		return err
	}
	// bashible-apiserver runs with its Deployment's GOGC and GOMEMLIMIT.
	shipped, err := stack.ShippedRuntimeEnv(env.Root)
	if err != nil {
		return err
	}
	server, err := env.StartRegistered(ctx, stack.APIServerOptions{Env: shipped})
	if err != nil {
		return err
	}
	checksums, err := servedChecksums(ctx, nm)
	if err != nil {
		return err
	}
	logf("%d groups served; creating %d nodes", len(checksums), c.nodes)
	if err := createNodes(ctx, kube, nm, l, checksums, 16); err != nil {
		return err
	}
	leaseCtx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	passes := &leasePasses{}
	go renewLeases(leaseCtx, kube, l, c.leaseEvery, passes)
	kl, err := runKubelets(leaseCtx, kube, kubeletStatusEvery, c.kubeletStatus)
	if err != nil {
		return err
	}

	configMapURL, size, err := sameSizeConfigMap(ctx, cp, kube, l.groups[1])
	if err != nil {
		return err
	}
	// The e2e suites' Lease of 4 s is lost on a loaded machine, and the
	// controller exits when it loses it: the benchmark gives it the
	// defaults' order of magnitude.
	controller, err := env.StartController(ctx, stack.ControllerOptions{ExtraArgs: []string{
		"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=2s", "--profiling"}})
	if err != nil {
		return err
	}
	f, err := newFleet(cp, l, checksums)
	if err != nil {
		return err
	}
	kas, err := pidOf(cp, "kube-apiserver")
	if err != nil {
		return err
	}
	cpu := cpuMeter{"kube-apiserver": kas, "server": server.PID(), "controller": controller.PID()}
	figure("fleet_nodes", float64(c.nodes), "nodes")
	figure("fleet_groups", float64(c.groups), "groups")
	figure("fleet_period", c.period.Seconds(), "s")
	figure("bashible_object_size", float64(size), "bytes")
	figure("setup", time.Since(setupStart).Seconds(), "s")

	// Quiet: the nodes exist, nobody polls.
	logf("quiet phase (%s)", c.period)
	before, start := cpu.read(), time.Now()
	if !sleep(ctx, c.period) {
		return ctx.Err()
	}
	quiet := cpu.since(before, time.Since(start))
	figure("kube_apiserver_cpu_quiet", quiet["kube-apiserver"], "cores")
	figure("bashible_apiserver_cpu_quiet", quiet["server"], "cores")
	figure("controller_cpu_quiet", quiet["controller"], "cores")

	if err := fleetPhase(ctx, c, f, nm, cpu, quiet, l); err != nil {
		return err
	}
	if c.profileDir != "" {
		// A CPU profile of bashible-apiserver over the compare phase.
		go func() {
			path := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(c.period.Seconds()))
			if err := saveProfile(ctx, cp, server, c.profileDir, "cpu", path); err != nil {
				logf("CPU profile: %v", err)
			}
		}()
	}
	if err := comparePhase(ctx, c, f, cpu, configMapURL); err != nil {
		return err
	}
	logf("after the compare phase: %d of %d nodes not Ready, %d marked not Ready so far; %s",
		kl.notReady(), len(l.nodes), kl.marked.Load(), passes)
	figure("lease_pass_longest", time.Duration(passes.longest.Load()).Seconds(), "s")
	for name, pid := range map[string]int{"bashible_apiserver_rss": server.PID(), "controller_rss": controller.PID(), "kube_apiserver_rss": kas} {
		rss, err := procstat.Resident(pid)
		if err != nil {
			logf("%s: %v (the process exited; its log is in the control plane's directory)", name, err)
			continue
		}
		figure(name, float64(rss)/(1<<20), "MiB")
	}
	// The server's render workers count with it while they live (10 s
	// after a render).
	if tree, err := procstat.MemoryTree(server.PID()); err != nil {
		logf("bashible_apiserver_rss_with_workers: %v", err)
	} else {
		figure("bashible_apiserver_workers", float64(len(tree.Children)), "count")
		figure("bashible_apiserver_rss_with_workers", float64(tree.Total)/(1<<20), "MiB")
	}
	if c.profileDir != "" {
		if err := profile(ctx, cp, server, c.profileDir); err != nil {
			return err
		}
		if err := controllerProfile(ctx, controller, c.profileDir); err != nil {
			return err
		}
	}
	if err := rolloutPhase(ctx, c, kube, nm, cpu, l, kl, passes); err != nil {
		return err
	}
	if c.watches {
		return watchPhase(ctx, f, nm, cpu, server.PID(), kas)
	}
	return nil
}

func pidOf(cp *controlplane.ControlPlane, name string) (int, error) {
	for _, p := range cp.Processes() {
		if p.Name == name {
			return p.PID, nil
		}
	}
	return 0, fmt.Errorf("the control plane runs no %s", name)
}

// servedChecksums is each group's served configuration checksum. A
// loaded aggregator answers 503 now and then (the fleet counts those as
// errors); the benchmark's own reads retry for a minute.
func servedChecksums(ctx context.Context, nm versioned.Interface) (map[string]string, error) {
	var list *bashiblev1alpha1.BashibleList
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, last = nm.BashibleV1alpha1().Bashibles().List(ctx, metav1.ListOptions{})
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list bashibles: %w (last: %v)", err, last)
	}
	out := map[string]string{}
	for _, b := range list.Items {
		out[b.Name] = b.Annotations[bashiblev1alpha1.ChecksumAnnotation]
	}
	return out, nil
}

// waitServed waits until every group in groups is served with a checksum
// other than before's.
func waitServed(ctx context.Context, nm versioned.Interface, before map[string]string, groups ...string) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := servedChecksums(ctx, nm)
		if err != nil {
			return false, nil
		}
		for _, g := range groups {
			if now[g] == before[g] {
				return false, nil
			}
		}
		return true, nil
	})
}

// sameSizeConfigMap creates a ConfigMap as large as group's Bashible
// object, readable by every node, and returns its URL and that size.
func sameSizeConfigMap(ctx context.Context, cp *controlplane.ControlPlane, kube kubernetes.Interface, group string) (string, int, error) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath(apiPath, "bashibles", group).DoRaw(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("get bashibles/%s: %w", group, err)
	}
	const name = "bench-fleet-same-size"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Data: map[string]string{"payload": strings.Repeat("x", max(0, len(raw)-200))}}
	if _, err := kube.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return "", 0, fmt.Errorf("create ConfigMap %s: %w", name, err)
	}
	if err := allowConfigMapRead(ctx, kube, metav1.NamespaceDefault, name); err != nil {
		return "", 0, err
	}
	return cp.APIServerURL + "/api/v1/namespaces/default/configmaps/" + name, len(raw), nil
}

// fleetPhase polls for two periods (longer if the change is not yet seen
// everywhere) and changes two groups' steps after the first.
func fleetPhase(ctx context.Context, c config, f *fleet, nm versioned.Interface, cpu cpuMeter, quiet map[string]float64, l layout) error {
	logf("fleet phase (%s)", 2*c.period)
	pollCtx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.poll(pollCtx, c.period, "") }()
	before, start := cpu.read(), time.Now()
	if !sleep(ctx, c.period) {
		stopPoll()
		return ctx.Err()
	}
	changed := []string{l.groups[1], l.groups[2]}
	sums, err := servedChecksums(ctx, nm)
	if err != nil {
		stopPoll()
		return err
	}
	f.expect(changed...)
	changeAt := time.Now()
	for _, g := range changed {
		if err := changeStep(ctx, nm, stepName(g), "fleet change"); err != nil {
			stopPoll()
			return err
		}
	}
	if err := waitServed(ctx, nm, sums, changed...); err != nil {
		stopPoll()
		return fmt.Errorf("the changed groups were not served anew: %w", err)
	}
	servedAt := time.Now()
	var seenAt time.Time
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*c.period, true, func(context.Context) (bool, error) {
		var ok bool
		seenAt, ok = f.lastSeen(changed...)
		return ok, nil
	})
	if rest := 2*c.period - time.Since(start); rest > 0 {
		sleep(ctx, rest)
	}
	stopPoll()
	wg.Wait()
	elapsed := time.Since(start)
	used := cpu.since(before, elapsed)
	lat, errs := f.bashibles.take()
	bundles, bundleErrs := f.bundles.take()
	requests := len(lat) + errs + len(bundles) + bundleErrs
	figure("fleet_requests", float64(requests), "count")
	figure("fleet_request_rate", float64(requests)/elapsed.Seconds(), "req/s")
	figure("get_bashibles_aggregated_p50", ms(percentile(lat, 0.5)), "ms")
	figure("get_bashibles_aggregated_p99", ms(percentile(lat, 0.99)), "ms")
	figure("get_bashibles_aggregated_errors", float64(errs), "count")
	figure("get_bundle_aggregated_p50", ms(percentile(bundles, 0.5)), "ms")
	figure("get_bundle_aggregated_p99", ms(percentile(bundles, 0.99)), "ms")
	figure("get_bundle_aggregated_errors", float64(bundleErrs), "count")
	figure("bashible_apiserver_cpu_per_1000_requests", used["server"]*elapsed.Seconds()/float64(max(1, requests))*1000, "s")
	figure("kube_apiserver_cpu_with_fleet", used["kube-apiserver"], "cores")
	figure("kube_apiserver_cpu_extra", used["kube-apiserver"]-quiet["kube-apiserver"], "cores")
	figure("kube_apiserver_cpu_extra_per_1000_requests", (used["kube-apiserver"]-quiet["kube-apiserver"])*elapsed.Seconds()/float64(max(1, requests))*1000, "s")
	figure("controller_cpu_with_fleet", used["controller"], "cores")
	figure("ngc_change_to_served", servedAt.Sub(changeAt).Seconds(), "s")
	if err != nil {
		// The fleet could not keep pace (a loaded machine): say how far
		// it got rather than nothing.
		figure("ngc_change_nodes_seen_within_3_periods", f.seenFraction(changed...)*100, "%")
		return nil
	}
	figure("ngc_change_to_all_nodes_seen", seenAt.Sub(changeAt).Seconds(), "s")
	return nil
}

// comparePhase polls for two periods with every node also GETting the
// ConfigMap of the same size.
func comparePhase(ctx context.Context, c config, f *fleet, cpu cpuMeter, configMapURL string) error {
	logf("compare phase (%s)", 2*c.period)
	pollCtx, stop := context.WithTimeout(ctx, 2*c.period)
	defer stop()
	f.poll(pollCtx, c.period, configMapURL)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	lat, errs := f.bashibles.take()
	_, _ = f.bundles.take()
	cms, cmErrs := f.configMaps.take()
	figure("compare_get_bashibles_aggregated_p50", ms(percentile(lat, 0.5)), "ms")
	figure("compare_get_bashibles_aggregated_p99", ms(percentile(lat, 0.99)), "ms")
	figure("compare_get_bashibles_aggregated_errors", float64(errs), "count")
	figure("compare_get_configmap_p50", ms(percentile(cms, 0.5)), "ms")
	figure("compare_get_configmap_p99", ms(percentile(cms, 0.99)), "ms")
	figure("compare_get_configmap_errors", float64(cmErrs), "count")
	if p := percentile(cms, 0.99); p > 0 {
		figure("compare_p99_ratio", float64(percentile(lat, 0.99))/float64(p), "x")
	}
	return nil
}

// rolloutPhase changes the rollout group's step and times the rollout.
// Every 10 s it logs where the group's nodes stand and how many of the
// fleet's are not Ready; a rollout that does not finish in time is
// reported with that state and what holds it.
func rolloutPhase(ctx context.Context, c config, kube kubernetes.Interface, nm versioned.Interface, cpu cpuMeter, l layout, kl *kubelets, passes *leasePasses) error {
	members := l.members[rolloutGroup]
	logf("rollout phase (%d nodes; %d of the fleet's %d nodes not Ready, %d marked not Ready so far; %s)",
		len(members), kl.notReady(), len(l.nodes), kl.marked.Load(), passes)
	figure("rollout_start_fleet_not_ready", float64(kl.notReady()), "nodes")
	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	a, informer, err := runAgents(agentCtx, kube, rolloutGroup, c.updateTime)
	if err != nil {
		return err
	}
	sums, err := servedChecksums(ctx, nm)
	if err != nil {
		return err
	}
	a.setTarget(sums[rolloutGroup], nil)
	before, start := cpu.read(), time.Now()
	if err := changeStep(ctx, nm, stepName(rolloutGroup), "rollout"); err != nil {
		return err
	}
	if err := waitServed(ctx, nm, sums, rolloutGroup); err != nil {
		return err
	}
	now, err := servedChecksums(ctx, nm)
	if err != nil {
		return err
	}
	target := now[rolloutGroup]
	servedAt := time.Now()
	markedBefore := kl.marked.Load()
	a.setTarget(target, members)
	perBatch := max(1, len(members)*10/100)
	batches := math.Ceil(float64(len(members)) / float64(perBatch))
	ideal := time.Duration(batches) * c.updateTime
	limit := 4*ideal + time.Minute
	var maxNotReady int
	next := time.Now()
	slots := newSlotClock(servedAt)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(context.Context) (bool, error) {
		slots.observe(time.Now(), countRollout(informer.GetStore(), target, perBatch))
		if time.Now().After(next) {
			next = time.Now().Add(10 * time.Second)
			fleetNotReady := kl.notReady()
			maxNotReady = max(maxNotReady, fleetNotReady)
			logf("rollout after %s: %s; fleet: %d of %d not Ready, %s", time.Since(servedAt).Round(time.Second),
				countRollout(informer.GetStore(), target, perBatch), fleetNotReady, len(l.nodes), passes)
		}
		return rolledOut(informer.GetStore(), target, len(members)), nil
	})
	figure("rollout_fleet_marked_not_ready", float64(kl.marked.Load()-markedBefore), "count")
	figure("rollout_fleet_max_not_ready", float64(maxNotReady), "nodes")
	if err != nil {
		state := countRollout(informer.GetStore(), target, perBatch)
		figure("rollout_nodes_done_within_limit", float64(countApplied(informer.GetStore(), target)), "nodes")
		figure("rollout_stalled_nodes_not_ready", float64(state.notReady), "nodes")
		figure("rollout_stalled_nodes_approved", float64(state.approved), "nodes")
		figure("rollout_stalled_nodes_applied_not_ready", float64(state.appliedNotReady), "nodes")
		figure("rollout_stalled_nodes_waiting", float64(state.waiting), "nodes")
		logf("the rollout over %d nodes did not finish within %s: %s. Why: %s. The group: %s",
			len(members), limit, state, state.why(), groupState(ctx, nm))
		return nil
	}
	took := time.Since(servedAt)
	used := cpu.since(before, time.Since(start))
	figure("rollout_nodes", float64(len(members)), "nodes")
	figure("rollout_update_time", c.updateTime.Seconds(), "s")
	figure("rollout_seconds", took.Seconds(), "s")
	figure("rollout_ideal_seconds", ideal.Seconds(), "s")
	figure("rollout_over_ideal", took.Seconds()/ideal.Seconds(), "x")
	figure("rollout_render_seconds", servedAt.Sub(start).Seconds(), "s")
	// Where the time over the ideal went: update slots free while nodes
	// still had the update ahead, before the first approval and after it.
	// And slots held by nodes that were done, until update approval
	// released them.
	lostStart, lostLater, releasing := slots.lost(perBatch)
	figure("rollout_first_approval_seconds", slots.firstApproval.Seconds(), "s")
	figure("rollout_slots_free_at_start", lostStart.Seconds(), "s")
	figure("rollout_slots_free_later", lostLater.Seconds(), "s")
	figure("rollout_slots_held_by_done_nodes", releasing.Seconds(), "s")
	figure("controller_cpu_rollout", used["controller"], "cores")
	return nil
}

// groupState is the rollout group's status in one line: its node counts
// and its conditions that are True.
func groupState(ctx context.Context, nm versioned.Interface) string {
	g, err := nm.DeckhouseV1().NodeGroups().Get(ctx, rolloutGroup, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("NodeGroup %s could not be read: %v", rolloutGroup, err)
	}
	out := fmt.Sprintf("nodes %d, ready %d, upToDate %d", g.Status.Nodes, g.Status.Ready, g.Status.UpToDate)
	for _, cond := range g.Status.Conditions {
		if cond.Status == metav1.ConditionTrue {
			out += fmt.Sprintf("; %s: %s", cond.Type, cond.Message)
		}
	}
	return out
}

// watchPhase opens a watch per node, measures what they cost, then the
// time for one change of every group to reach every watcher.
func watchPhase(ctx context.Context, f *fleet, nm versioned.Interface, cpu cpuMeter, serverPID, kasPID int) error {
	logf("watch phase (%d watches)", len(f.nodes))
	rss := func(pid int) int64 { n, _ := procstat.Resident(pid); return n }
	serverBefore, kasBefore := rss(serverPID), rss(kasPID)
	w := &watches{}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // open at most 64 at a time
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			go func() { time.Sleep(50 * time.Millisecond); <-sem }()
			f.watch(watchCtx, w, n)
		}()
	}
	want := int64(len(f.nodes))
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return w.opened.Load()+w.failed.Load() >= want, nil
	})
	opened := w.opened.Load()
	figure("watches_open", float64(opened), "count")
	figure("watches_failed", float64(w.failed.Load()), "count")
	figure("watches_retried_429", float64(w.retried429.Load()), "count")
	w.reasons.Range(func(k, v any) bool {
		f := v.(*watchFailure)
		figure("watches_failed_"+k.(string), float64(f.count.Load()), "count")
		logf("watches failed with %s, %d times; the first: %s", k, f.count.Load(), strings.TrimSpace(f.first))
		return true
	})
	if opened == 0 {
		return errors.Join(fmt.Errorf("none of %d watches opened", want), err)
	}
	sleep(ctx, 5*time.Second) // let the servers settle
	serverAfter, kasAfter := rss(serverPID), rss(kasPID)
	figure("bashible_apiserver_rss_with_watches", float64(serverAfter)/(1<<20), "MiB")
	figure("bashible_apiserver_memory_per_watch", float64(serverAfter-serverBefore)/float64(opened)/1024, "KiB")
	figure("kube_apiserver_memory_per_watch", float64(kasAfter-kasBefore)/float64(opened)/1024, "KiB")

	sums, err := servedChecksums(ctx, nm)
	if err != nil {
		return err
	}
	before, start := cpu.read(), time.Now()
	w.armed.Store(true)
	if err := changeStep(ctx, nm, "all-groups.sh", "every group"); err != nil {
		return err
	}
	groups := make([]string, 0, len(sums))
	for g := range sums {
		groups = append(groups, g)
	}
	if err := waitServed(ctx, nm, sums, groups...); err != nil {
		return err
	}
	served := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		n := 0
		w.got.Range(func(_, _ any) bool { n++; return true })
		return int64(n) >= opened, nil
	})
	took := time.Since(start)
	used := cpu.since(before, took)
	figure("watch_change_to_served", served.Seconds(), "s")
	figure("watch_change_to_all_watchers", took.Seconds(), "s")
	figure("bashible_apiserver_cpu_watch_fanout", used["server"]*took.Seconds(), "s")
	figure("watch_events_after_the_change", float64(w.events.Load()), "count")
	figure("watches_ended_early", float64(w.ended.Load()), "count")
	w.types.Range(func(k, v any) bool {
		figure("watch_events_"+strings.ToLower(k.(string)), float64(v.(*atomic.Int64).Load()), "count")
		return true
	})
	if err != nil {
		n := 0
		w.got.Range(func(_, _ any) bool { n++; return true })
		figure("watchers_with_the_change_within_2m", float64(n), "count")
	}
	stop()
	wg.Wait()
	return nil
}

// profile saves bashible-apiserver's heap profile into dir.
func profile(ctx context.Context, cp *controlplane.ControlPlane, server *stack.APIServer, dir string) error {
	return saveProfile(ctx, cp, server, dir, "heap", "/debug/pprof/heap")
}

// controllerProfile saves node-manager-controller's heap profile into dir
// (it serves /debug/pprof with --profiling).
func controllerProfile(ctx context.Context, controller *stack.Controller, dir string) error {
	code, body, err := controller.Get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("get node-manager-controller's /debug/pprof/heap: %d: %v", code, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, deckhousev1.NodeManagerControllerName+".heap.pprof")
	logf("wrote %s", file)
	return os.WriteFile(file, []byte(body), 0o644)
}

// saveProfile fetches one of bashible-apiserver's /debug/pprof endpoints
// (which the control plane's admin may read) into dir.
func saveProfile(ctx context.Context, cp *controlplane.ControlPlane, server *stack.APIServer, dir, name, path string) error {
	admin, err := tls.X509KeyPair(cp.AdminConfig().CertData, cp.AdminConfig().KeyData)
	if err != nil {
		return fmt.Errorf("reading the admin client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CACertPEM())
	c := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server.URL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %d %s: %v", path, resp.StatusCode, body, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, deckhousev1.BashibleAPIServerName+"."+name+".pprof")
	logf("wrote %s", file)
	return os.WriteFile(file, body, 0o644)
}
