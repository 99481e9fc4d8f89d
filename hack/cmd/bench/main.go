// Command bench is what `make bench` runs: it measures bashible-apiserver
// on this machine and prints one figure per line as `name: value unit`.
//
//   - render_full: rendering 100 node groups with 30 NodeGroupConfigurations
//     from scratch, in process;
//   - render_one_ngc: re-rendering after one NGC that selects one group changed;
//   - the same two with NodeGroupConfigurations rendered in the sandbox
//     (templates/sandbox, as bashible-apiserver does), one group at a time
//     (_sandboxed) and two at a time with two workers (_sandboxed_2_workers),
//     sandbox_worker_start (starting one worker process) and
//     sandbox_worker_rss_anon (an idle worker's own memory);
//   - local_stack_*: bashible-apiserver's memory serving the local stack's
//     groups (manifests/examples, the conditions Deckhouse's own server was
//     measured in) after clients fetched them: _rss, _rss_anon, _rss_file
//     (from /proc/<pid>/status), _workers and _workers_rss (its render
//     workers, child processes) and _rss_with_workers; then the same as
//     local_stack_idle_* once the workers, idle for 10 s, have stopped;
//   - get_{direct,aggregated,configmap}_{p50,p99,rps,errors}: GETs of a
//     cached bundle by 100 concurrent clients (each its own connection),
//     straight from bashible-apiserver, through kube-apiserver's aggregator,
//     and, for scale, of a ConfigMap of the same size from kube-apiserver;
//     get_{direct,aggregated}_server_cpu_per_1000: bashible-apiserver's CPU
//     time per 1,000 of those requests;
//   - serving_100_groups_*: the same memory figures serving 100 groups (and
//     the local stack's two) after that load, and rss_100_groups, the
//     server's and its workers' resident memory together;
//   - ngc_change_to_served: from the update of a NodeGroupConfiguration
//     that selects one group to a watch of that group's nodegroupbundle
//     delivering the changed step;
//   - serving_100_groups_idle_* and rss_100_groups_idle: the 100 groups'
//     memory figures again once the render workers, idle, have stopped
//     (what the server holds between changes);
//   - apply_200_ngcs_webhook_{off,on,ratio}: one `kubectl create` of a List
//     of 200 small NodeGroupConfigurations, without and with the preview
//     webhook (-apply-only runs only this one, on the same cluster), and
//     delete_200_ngcs_webhook_{off,on}: deleting them until they are gone.
//
// The server runs with the GOGC and GOMEMLIMIT of its Deployment
// (manifests/bashible-apiserver); -server-env tries others, -serve-only
// skips the render and apply benchmarks, and -profile DIR saves its heap
// profile, MemStats and smaps at each memory figure.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/procstat"
	"github.com/node-manager/node-manager/hack/stack"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

const (
	groups  = 100
	configs = 30
	clients = 100
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long each GET load runs")
	renderOnly := flag.Bool("render-only", false, "run only the render benchmarks (no control plane)")
	applyOnly := flag.Bool("apply-only", false, "run only the kubectl create of 200 NodeGroupConfigurations, webhook off and on")
	flag.BoolVar(&applyAllGroups, "apply-all-groups", false, "with -apply-only: each NodeGroupConfiguration selects every group (\"*\")")
	flag.BoolVar(&serveOnly, "serve-only", false, "run only the serving benchmarks and memory figures (no render or apply benchmarks)")
	flag.Var(&serverEnv, "server-env", "NAME=VALUE set in bashible-apiserver's environment after the Deployment's (repeatable; for trying GOGC or GOMEMLIMIT)")
	flag.StringVar(&profileDir, "profile", "", "write bashible-apiserver's heap profile and smaps to this directory at each memory figure")
	flag.Parse()
	if err := run(*duration, *renderOnly, *applyOnly); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func figure(name string, value float64, unit string) {
	fmt.Printf("%s: %s %s\n", name, strconv.FormatFloat(value, 'f', 2, 64), unit)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// nodeGroups and nodeGroupConfigurations are the benchmark's cluster:
// groups with varied settings, and NGCs selecting all groups, some groups
// or one group.
func nodeGroups() []*deckhousev1.NodeGroup {
	out := make([]*deckhousev1.NodeGroup, 0, groups)
	for i := range groups {
		ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("group-%03d", i)},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic,
				Kubelet:      &deckhousev1.KubeletSpec{MaxPods: ptr.To(int32(100 + i))},
				NodeTemplate: &deckhousev1.NodeTemplate{Labels: map[string]string{"example.com/index": strconv.Itoa(i)}},
			}}
		out = append(out, ng)
	}
	return out
}

func nodeGroupConfigurations() []*deckhousev1alpha1.NodeGroupConfiguration {
	out := make([]*deckhousev1alpha1.NodeGroupConfiguration, 0, configs)
	for i := range configs {
		selector := []string{"*"}
		switch i % 3 {
		case 1:
			selector = []string{fmt.Sprintf("group-%03d", i), fmt.Sprintf("group-%03d", i+50)}
		case 2:
			selector = []string{fmt.Sprintf("group-%03d", i)}
		}
		content := fmt.Sprintf("# step %d\necho {{ .nodeGroup.name }} {{ .kubernetesVersion }}\n{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}echo {{ $k }}={{ $v }}\n{{ end }}%s", i, strings.Repeat("# padding line of a realistic step\n", 40))
		out = append(out, &deckhousev1alpha1.NodeGroupConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("step-%02d.sh", i), Generation: 1},
			Spec:       deckhousev1alpha1.NodeGroupConfigurationSpec{Weight: int32(200 + i), NodeGroups: selector, Bundles: []string{"*"}, Content: content},
		})
	}
	return out
}

func run(duration time.Duration, renderOnly, applyOnly bool) error {
	if applyOnly {
		return benchServe(duration, true)
	}
	if !serveOnly {
		if err := benchRender(); err != nil || renderOnly {
			return err
		}
	}
	return benchServe(duration, false)
}

func benchRender() error {
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		return err
	}
	if err := benchRenderWith(tree, 1, ""); err != nil {
		return err
	}
	worker, err := renderWorker()
	if err != nil {
		return err
	}
	for _, workers := range []int{1, 2} {
		pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: workers, Command: sandbox.Command(worker)})
		if err != nil {
			return err
		}
		suffix := "_sandboxed"
		if workers > 1 {
			suffix = fmt.Sprintf("_sandboxed_%d_workers", workers)
		}
		err = benchRenderWith(tree.WithSandbox(pool), workers, suffix)
		pool.Close()
		if err != nil {
			return err
		}
	}
	return benchWorker(tree, worker)
}

// renderWorker is the render workers' binary the server runs, built into
// bin/ as make build builds it.
func renderWorker() (string, error) {
	if err := stack.Build(); err != nil {
		return "", err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", deckhousev1.BashibleRenderWorkerName), nil
}

// benchRenderWith measures a full render and a one-NGC re-render.
func benchRenderWith(tree *templates.Tree, parallelism int, suffix string) error {
	in := bundles.Inputs{NodeGroups: nodeGroups(), Configs: nodeGroupConfigurations(), Endpoints: []string{"192.0.2.10:6443"}}
	const rounds = 5
	var full, one []time.Duration
	for range rounds {
		r := bundles.NewRenderer(tree)
		r.Parallelism = parallelism
		start := time.Now()
		res := r.RenderAll(in)
		full = append(full, time.Since(start))
		for g, rr := range res {
			if rr.Published == nil {
				return fmt.Errorf("group %s failed to render: %v", g, rr.Failures)
			}
		}
		// Change the NGC that selects only group-002.
		changed := slices.Clone(in.Configs)
		c := changed[2].DeepCopy()
		c.Spec.Content += "# changed\n"
		changed[2] = c
		start = time.Now()
		res = r.RenderAll(bundles.Inputs{NodeGroups: in.NodeGroups, Configs: changed, Endpoints: in.Endpoints})
		one = append(one, time.Since(start))
		rendered := 0
		for _, rr := range res {
			if !rr.Cached {
				rendered++
			}
		}
		if rendered != 1 {
			return fmt.Errorf("one NGC change re-rendered %d groups, want 1", rendered)
		}
	}
	slices.Sort(full)
	slices.Sort(one)
	figure("render_full_100_groups_30_ngcs"+suffix, ms(full[rounds/2]), "ms")
	figure("render_one_ngc_change"+suffix, ms(one[rounds/2]), "ms")
	return nil
}

// benchWorker measures starting a sandbox worker and its idle memory.
func benchWorker(tree *templates.Tree, exe string) error {
	const rounds = 5
	var starts []time.Duration
	var rssAnon int64
	for range rounds {
		var cmd *exec.Cmd
		pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: 1, Command: func() *exec.Cmd {
			cmd = sandbox.Command(exe)()
			return cmd
		}})
		if err != nil {
			return err
		}
		start := time.Now()
		_, err = pool.Render("start", "{{ \"ok\" }}", map[string]any{})
		starts = append(starts, time.Since(start))
		if err == nil {
			rssAnon, err = procstat.Memory(cmd.Process.Pid, "status", "RssAnon")
		}
		pool.Close()
		if err != nil {
			return err
		}
	}
	slices.Sort(starts)
	figure("sandbox_worker_start", ms(starts[rounds/2]), "ms")
	figure("sandbox_worker_rss_anon", mib(rssAnon), "MiB")
	return nil
}

func benchServe(duration time.Duration, applyOnly bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
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
	kube := kubernetes.NewForConfigOrDie(cfg)
	nm := versioned.NewForConfigOrDie(cfg)
	// The server runs with the Deployment's GOGC and GOMEMLIMIT, as it does
	// in a cluster, then -server-env.
	shipped, err := stack.ShippedRuntimeEnv(env.Root)
	if err != nil {
		return err
	}
	opts := stack.APIServerOptions{Env: append(shipped, serverEnv...)}
	var server *stack.APIServer
	if !applyOnly {
		// First the local stack's groups (manifests/examples), the
		// conditions Deckhouse's own server was measured in.
		if err := env.Applier.ApplyFiles(ctx, filepath.Join(env.Root, "manifests/examples")); err != nil {
			return err
		}
		if server, err = env.StartRegistered(ctx, opts); err != nil {
			return err
		}
		defer server.Stop()
		if err := serveLocalStack(cp, server); err != nil {
			return err
		}
	}
	for _, ng := range nodeGroups() {
		if _, err := nm.DeckhouseV1().NodeGroups().Create(ctx, ng, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, c := range nodeGroupConfigurations() {
		c.Generation = 0
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if server == nil {
		if server, err = env.StartRegistered(ctx, opts); err != nil {
			return err
		}
	}
	ngs, err := nm.DeckhouseV1().NodeGroups().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := nm.BashibleV1alpha1().NodeGroupBundles().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == len(ngs.Items), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d groups to be served: %w", len(ngs.Items), err)
	}
	if applyOnly {
		return benchApply(ctx, cp, nm, server)
	}

	path := "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/group-050"
	body, err := get(newClient(cp), cp.APIServerURL+path)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "same-size", Namespace: "default"}, Data: map[string]string{"payload": strings.Repeat("x", len(body)-150)}}
	if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	figure("bundle_object_size", float64(len(body)), "bytes")

	for _, target := range []struct{ name, url string }{
		{"direct", server.URL() + path},
		{"aggregated", cp.APIServerURL + path},
		{"configmap", cp.APIServerURL + "/api/v1/namespaces/default/configmaps/same-size"},
	} {
		cpu0 := procstat.TreeCPU(server.PID())
		res := load(cp, target.url, duration)
		cpu := procstat.TreeCPU(server.PID()) - cpu0
		if target.name != "configmap" && res.requests > 0 {
			// bashible-apiserver's CPU per 1,000 requests it answered.
			figure("get_"+target.name+"_server_cpu_per_1000", ms(cpu)*1000/float64(res.requests), "ms")
		}
		figure("get_"+target.name+"_p50", ms(res.p50), "ms")
		figure("get_"+target.name+"_p99", ms(res.p99), "ms")
		figure("get_"+target.name+"_throughput", res.rps, "req/s")
		figure("get_"+target.name+"_errors", float64(res.errors), "count")
	}
	rss, err := memoryFigures(cp, server, "serving_100_groups")
	if err != nil {
		return err
	}
	figure("rss_100_groups", rss, "MiB")
	if err := benchPropagation(ctx, nm); err != nil {
		return err
	}
	rss, err = idleMemoryFigures(cp, server, "serving_100_groups_idle")
	if err != nil {
		return err
	}
	figure("rss_100_groups_idle", rss, "MiB")
	if serveOnly {
		return nil
	}
	return benchApply(ctx, cp, nm, server)
}

// newClient is one client with its own connection, authenticated as the admin.
func newClient(cp *controlplane.ControlPlane) *http.Client {
	cfg := cp.AdminConfig()
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CACertPEM())
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}
}

func get(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

type loadResult struct {
	p50, p99 time.Duration
	rps      float64
	requests int
	errors   int
}

// load runs clients concurrent clients GETting url for d after a warm-up.
func load(cp *controlplane.ControlPlane, url string, d time.Duration) loadResult {
	cs := make([]*http.Client, clients)
	for i := range cs {
		cs[i] = newClient(cp)
		_, _ = get(cs[i], url) // connect and warm up
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for _, c := range cs {
		wg.Add(1)
		go func(c *http.Client) {
			defer wg.Done()
			var mine []time.Duration
			var bad int
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if _, err := get(c, url); err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			errs += bad
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, c := range cs {
		c.CloseIdleConnections()
	}
	slices.Sort(latencies)
	if len(latencies) == 0 {
		return loadResult{errors: errs}
	}
	pct := func(p float64) time.Duration { return latencies[int(float64(len(latencies)-1)*p)] }
	return loadResult{p50: pct(0.50), p99: pct(0.99), rps: float64(len(latencies)) / elapsed.Seconds(), requests: len(latencies), errors: errs}
}
