package templates

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// fakeAPI is just enough of the API for one run of bashible.sh: the group's
// NodeGroupBundle, and the node's Node with compare-and-set merge patches of
// its annotations. With instance set, the node's Instance too, whose status
// applies are kept by field manager and whose conditions a GET shows;
// without, Instances are 404 (bashible reports on them best effort). With
// bashibles set, the group's Bashible too, and the run updates itself from
// it as on a node (otherwise it skips that). Everything else is 404.
type fakeAPI struct {
	mu          sync.Mutex
	bundle      map[string]any
	bashibles   map[string]any
	requests    []string // "METHOD path" of each request, in order
	annotations map[string]any
	rv          int
	instance    bool
	applied     map[string]map[string]any // field manager -> the status it applied
	events      []map[string]any          // the Events it was sent, decoded
	// nodeMissing GETs of the Node are answered 404 before it exists: a
	// kubelet that has its client certificate and has not registered yet.
	nodeMissing int
	// Watches of the Node (fieldSelector metadata.name=n1) each get a
	// MODIFIED event whenever its annotations change; with forbidWatch
	// they are refused (403), as an API without the node's watch would.
	watchers    []chan []byte
	forbidWatch bool
	// env is the run's environment beyond runScriptOn's own.
	env []string
}

// node is the Node as the fake serves it; f.mu held.
func (f *fakeAPI) node() map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{
		"name": "n1", "resourceVersion": strconv.Itoa(f.rv), "annotations": maps.Clone(f.annotations)}}
}

// annotateLocked sets a Node annotation as someone else would (node-manager, a
// person), and tells the watches; f.mu held.
func (f *fakeAPI) annotateLocked(key string, value any) {
	f.annotations[key] = value
	f.modified()
}

// modified is a new version of the Node, sent to every watch open now (a
// watch does not replay what came before it); f.mu held.
func (f *fakeAPI) modified() {
	f.rv++
	event, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": f.node()})
	event = append(event, '\n')
	for _, ch := range f.watchers {
		select {
		case ch <- event:
		default:
		}
	}
}

// watch serves a watch of the Node until the client goes or its
// timeoutSeconds pass.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, "WATCH "+r.URL.Path)
	if f.forbidWatch || r.URL.Query().Get("fieldSelector") != "metadata.name=n1" {
		f.mu.Unlock()
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","message":"nodes is forbidden"}`))
		return
	}
	ch := make(chan []byte, 16)
	f.watchers = append(f.watchers, ch)
	f.mu.Unlock()
	timeout, _ := strconv.Atoi(r.URL.Query().Get("timeoutSeconds"))
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for end := time.After(time.Duration(timeout) * time.Second); ; {
		select {
		case event := <-ch:
			_, _ = w.Write(event)
			w.(http.Flusher).Flush()
		case <-end:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true" {
		f.watch(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	node := f.node
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/worker":
		_ = json.NewEncoder(w).Encode(f.bundle)
	case f.bashibles != nil && r.Method == http.MethodGet && r.URL.Path == "/apis/bashible.deckhouse.io/v1alpha1/bashibles/worker":
		_ = json.NewEncoder(w).Encode(f.bashibles)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1" && f.nodeMissing > 0:
		f.nodeMissing--
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"nodes \"n1\" not found"}`))
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1":
		_ = json.NewEncoder(w).Encode(node())
	case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/n1":
		var p struct {
			Metadata struct {
				ResourceVersion string         `json:"resourceVersion"`
				Annotations     map[string]any `json:"annotations"`
			} `json:"metadata"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, `{"message":"bad patch"}`, http.StatusBadRequest)
			return
		}
		if p.Metadata.ResourceVersion != "" && p.Metadata.ResourceVersion != strconv.Itoa(f.rv) {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"message":"conflict"}`))
			return
		}
		for k, v := range p.Metadata.Annotations {
			if v == nil {
				delete(f.annotations, k)
			} else {
				f.annotations[k] = v
			}
		}
		f.modified()
		_ = json.NewEncoder(w).Encode(node())
	case r.Method == http.MethodPost && r.URL.Path == "/apis/events.k8s.io/v1/namespaces/default/events":
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, `{"message":"bad event"}`, http.StatusBadRequest)
			return
		}
		f.events = append(f.events, ev)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case f.instance && r.Method == http.MethodGet && r.URL.Path == "/apis/deckhouse.io/v1alpha1/instances/n1":
		var conditions []any
		for _, status := range f.applied {
			if cs, ok := status["conditions"].([]any); ok {
				conditions = append(conditions, cs...)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "deckhouse.io/v1alpha1", "kind": "Instance",
			"metadata": map[string]any{"name": "n1"}, "status": map[string]any{"conditions": conditions}})
	case f.instance && r.Method == http.MethodPatch && r.URL.Path == "/apis/deckhouse.io/v1alpha1/instances/n1/status":
		var p struct {
			Status map[string]any `json:"status"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &p); err != nil || r.Header.Get("Content-Type") != "application/apply-patch+yaml" {
			http.Error(w, `{"message":"bad apply"}`, http.StatusBadRequest)
			return
		}
		if f.applied == nil {
			f.applied = map[string]map[string]any{}
		}
		f.applied[r.URL.Query().Get("fieldManager")] = p.Status
		_, _ = w.Write(body)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"not found"}`))
	}
}

// runAgent runs the group's rendered bashible.sh once, as on a node that has
// run before (configuration "old"), against api, with --max-retries 1 unless
// args say otherwise; it returns the output, the node's root and whether
// the run succeeded.
func runAgent(t *testing.T, api *fakeAPI, args ...string) (string, string, bool) {
	t.Helper()
	return runScript(t, api, mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible, args...)
}

// runAgentAsJoinedNode is runAgent on a node that has its kubelet client
// certificate (a self-signed one: the fake API asks for none), so bashible
// also records Events.
func runAgentAsJoinedNode(t testing.TB, api *fakeAPI, args ...string) (string, string, bool) {
	t.Helper()
	return runScriptOn(t, api, mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible, map[string]string{
		"var/lib/kubelet/pki/kubelet-client-current.pem": selfSignedCertAndKey(t, "system:node:n1")}, args...)
}

// selfSignedCertAndKey returns a PEM certificate for cn followed by its key.
func selfSignedCertAndKey(t testing.TB, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) +
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// runScript is runAgent with the given bashible.sh.
func runScript(t *testing.T, api *fakeAPI, script string, args ...string) (string, string, bool) {
	t.Helper()
	return runScriptOn(t, api, script, nil, args...)
}

// runScriptOn is runScript on a node that also has extra's files.
func runScriptOn(t testing.TB, api *fakeAPI, script string, extra map[string]string, args ...string) (string, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, root := agentCommand(ctx, t, api, script, extra, args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("bashible.sh did not finish:\n%s", out)
	}
	return string(out), root, err == nil
}

// agentCommand lays out a node's root for a run of script against api,
// as runScriptOn describes, and returns the run's command and the root.
func agentCommand(ctx context.Context, t testing.TB, api *fakeAPI, script string, extra map[string]string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	srv := httptest.NewTLSServer(api)
	t.Cleanup(srv.Close)
	// First (cleanups run last in, first out): a watch left open by a run
	// killed while it waited would hold Close until its timeout.
	t.Cleanup(srv.CloseClientConnections)
	root := t.TempDir()
	files := map[string]string{
		"var/lib/bashible/bashible.sh":            script,
		"var/lib/bashible/ca.crt":                 string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})),
		"var/lib/bashible/bootstrap-token":        "abcdef.0123456789abcdef",
		"var/lib/bashible/configuration_checksum": "old\n",
		"var/lib/bashible/boot_id":                "boot-1\n",
		"proc/sys/kernel/random/boot_id":          "boot-1\n",
		"etc/os-release":                          "ID=debian\nVERSION_ID=12\n",
	}
	for name, content := range extra {
		files[name] = content
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if len(args) == 0 {
		args = []string{"--max-retries", "1"}
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "var/lib/bashible/bashible.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "BASHIBLE_ROOT="+root, "BASHIBLE_NODE_NAME=n1",
		"BASHIBLE_API_ENDPOINTS="+strings.TrimPrefix(srv.URL, "https://"), "BASHIBLE_POLL_SECONDS=1", "BASHIBLE_RETRY_DELAY=0")
	if api.bashibles == nil {
		cmd.Env = append(cmd.Env, "BASHIBLE_SKIP_UPDATE=yes")
	}
	cmd.Env = append(cmd.Env, api.env...)
	// What the run leaves running (a watch it did not close) does not
	// hold the test past the run's end.
	cmd.WaitDelay = 5 * time.Second
	return cmd, root
}

func bundleOf(steps map[string]string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": "worker",
		"annotations": map[string]any{bashiblev1alpha1.ChecksumAnnotation: "new"}}, "data": steps}
}

// A step whose content holds NUL bytes used to write a step of another name
// (the bundle was read as NUL-separated name/content pairs): here it
// replaces the step that stands for the approval with "exit 0", so the
// marker step would run without approval. The bundle must be refused whole,
// and no step run.
func TestAgentRefusesABundleThatCouldPoseAsAnotherStep(t *testing.T) {
	t.Parallel()
	for name, steps := range map[string]map[string]string{
		"NUL in a step": {
			"001_wait_for_approval.sh": "echo approval >> \"$BASHIBLE_ROOT/trace\"; exit 1\n",
			"020_marker.sh":            "echo marker >> \"$BASHIBLE_ROOT/trace\"\n",
			"500_evil.sh":              "true\x00001_wait_for_approval.sh\x00exit 0\n",
		},
		"newline in a name": {
			"020_marker.sh":                      "echo marker >> \"$BASHIBLE_ROOT/trace\"\n",
			"030_x.sh\n001_wait_for_approval.sh": "exit 0\n",
		},
	} {
		api := &fakeAPI{bundle: bundleOf(steps), annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old"}}
		out, root, ok := runAgent(t, api)
		trace, _ := os.ReadFile(filepath.Join(root, "trace"))
		if ok || strings.Contains(string(trace), "marker") {
			t.Errorf("%s: the bundle was run (success %v, steps that ran: %q):\n%s", name, ok, trace, out)
		}
		if !strings.Contains(out, "refusing the bundle") {
			t.Errorf("%s: the refusal should say why:\n%s", name, out)
		}
		if _, asked := api.annotations[deckhousev1.WaitingForApprovalAnnotation]; asked {
			t.Errorf("%s: a refused bundle asked for approval", name)
		}
	}
}

// Every step is written byte for byte as served, whatever its content (each
// is read back by its length in bytes), and the steps run only once the
// update is approved.
func TestAgentWritesEachStepAsServedAndRunsItApproved(t *testing.T) {
	t.Parallel()
	steps := map[string]string{
		"000_-odd.name_.sh": "echo first >> \"$BASHIBLE_ROOT/trace\"\n# $(not run) `nor this` \\ \"quoted\" ünïcode 日本\u2028\r\n",
		"020_marker.sh":     "echo marker >> \"$BASHIBLE_ROOT/trace\"", // no final newline
		"030_blank.sh":      "\n\n",
		"040_empty.sh":      "",
		"050_controls.sh":   "# \x01\x1b[0m\x7f\t\r\n# 020_marker.sh\n# 3\n# exit 1\n\n\n",
		"060_large.sh":      strings.Repeat("# a comment line of a large step, in which nothing runs\n", 4000),
	}
	api := &fakeAPI{bundle: bundleOf(steps), annotations: map[string]any{
		deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, root, ok := runAgent(t, api)
	if !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	for name, want := range steps {
		got, err := os.ReadFile(filepath.Join(root, "var/lib/bashible/bundle_steps", name))
		if err != nil || string(got) != want {
			t.Errorf("step %s written as %q (%v), served as %q", name, got, err, want)
		}
	}
	if trace, _ := os.ReadFile(filepath.Join(root, "trace")); string(trace) != "first\nmarker\n" {
		t.Errorf("steps that ran: %q", trace)
	}
	if api.annotations[deckhousev1.ConfigurationChecksumAnnotation] != "new" {
		t.Errorf("annotations after the run: %v", api.annotations)
	}
}

// A failing step's output reaches the API as it was printed: in the Event
// about the step and in the Instance's lastFailure, each a JSON document
// bashible builds itself (bb-json-string), whatever the output holds.
func TestAgentReportsAFailingStepsOutputWhateverItHolds(t *testing.T) {
	t.Parallel()
	output := `quotes " and \ backslashes, a tab	and a bell \a; {"injected": true}, ünïcode, 100%s`
	steps := map[string]string{
		"010_fails.sh": "printf '%s\\n' " + shellQuoteForTest(output) + "; printf 'the\\x07bell\\n'; exit 3\n",
	}
	api := &fakeAPI{instance: true, bundle: bundleOf(steps), annotations: map[string]any{
		deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, _, ok := runAgentAsJoinedNode(t, api)
	if ok {
		t.Fatalf("the run should fail:\n%s", out)
	}
	var failed []string
	for _, ev := range api.events {
		if ev["reason"] == "BashibleStepFailed" {
			failed = append(failed, fmt.Sprint(ev["note"]))
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], output) || !strings.Contains(failed[0], "the\abell") ||
		!strings.Contains(failed[0], "step 010_fails.sh failed with exit status 3") {
		t.Errorf("BashibleStepFailed notes %q, want one holding %q, then the bell line\n%s", failed, output, out)
	}
	last, _ := api.applied[deckhousev1.BashibleLastFailureFieldManager]["lastFailure"].(map[string]any)
	if msg := fmt.Sprint(last["message"]); !strings.Contains(msg, output) || last["failedStep"] != "010_fails.sh" {
		t.Errorf("Instance lastFailure %v, want step 010_fails.sh and a message holding %q", last, output)
	}
}

// A run that succeeds is three Events: Deckhouse's BashibleNodeUpdate
// "start" and "finish" (its watchers see them as before) and
// BashibleConverged, that says how many steps ran; each step's attempts
// and duration are in the Instance's lastRun, not in an Event per step (at
// 5,000 nodes of 40 steps that was 200,000 Events for one change).
func TestAgentReportsASuccessfulRunAsOneEvent(t *testing.T) {
	t.Parallel()
	steps := map[string]string{"010_a.sh": "true\n", "020_b.sh": "true\n", "030_c.sh": "true\n"}
	api := &fakeAPI{instance: true, bundle: bundleOf(steps), annotations: map[string]any{
		deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, _, ok := runAgentAsJoinedNode(t, api)
	if !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	var reasons, notes, actions []string
	for _, ev := range api.events {
		reasons = append(reasons, fmt.Sprint(ev["reason"]))
		notes = append(notes, fmt.Sprint(ev["note"]))
		actions = append(actions, fmt.Sprint(ev["action"]))
	}
	if want := []string{"BashibleNodeUpdate", "BashibleNodeUpdate", "BashibleConverged"}; !slices.Equal(reasons, want) {
		t.Fatalf("Events %q, notes %q; want %q\n%s", reasons, notes, want, out)
	}
	if notes[0] != "start steps update on n1" || notes[1] != "finish steps update on n1" || actions[0] != "BashibleStepExecution" || actions[1] != "BashibleStepExecution" {
		t.Errorf("BashibleNodeUpdate notes %q, actions %q; want Deckhouse's start and finish, action BashibleStepExecution", notes[:2], actions[:2])
	}
	if !strings.Contains(notes[2], "applied: 3 steps in ") || actions[2] != "Converge" {
		t.Errorf("BashibleConverged note %q, action %q; want it to say 3 steps ran", notes[2], actions[2])
	}
	last, _ := api.applied[deckhousev1.BashibleLastRunFieldManager]["lastRun"].(map[string]any)
	if ran, _ := last["steps"].([]any); len(ran) != 3 {
		t.Errorf("Instance lastRun %v, want its 3 steps", last)
	}
}

// shellQuoteForTest single-quotes s for bash.
func shellQuoteForTest(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Users' steps run with Deckhouse's shell options (-eEo pipefail, no
// nounset): a NodeGroupConfiguration that reads an unset variable works as
// it does in Deckhouse. A built-in step keeps nounset (its header sets it)
// and fails on the same line. A step's delayed bashbooster events fire
// once, when it ends.
func TestAgentRunsUserStepsWithDeckhouseShellOptions(t *testing.T) {
	t.Parallel()
	header := strings.Join(strings.SplitN(mustRender(t, builtinTree(t), workerContext(t, nil)).Steps["099_reboot.sh"], "\n", 4)[:3], "\n")
	if !strings.Contains(header, "set -Eeuo pipefail") {
		t.Fatalf("the built-in steps' header no longer sets nounset:\n%s", header)
	}
	user := `echo "user:[$UNSET_VAR]" >> "$BASHIBLE_ROOT/trace"
h() { echo "handled:$*" >> "$BASHIBLE_ROOT/trace"; }
bb-event-on restart h
printf 'x\n' | bb-sync-file "$BASHIBLE_ROOT/x.conf" - restart unit
bb-event-delay restart unit
echo "body done" >> "$BASHIBLE_ROOT/trace"
`
	api := &fakeAPI{bundle: bundleOf(map[string]string{"100_user.sh": user}), annotations: map[string]any{
		deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, root, ok := runAgent(t, api)
	if !ok {
		t.Fatalf("a user step reading an unset variable failed:\n%s", out)
	}
	if trace, _ := os.ReadFile(filepath.Join(root, "trace")); string(trace) != "user:[]\nbody done\nhandled:unit\n" {
		t.Errorf("what the user step did: %q", trace)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/bashible/bashbooster_unhandled_synced_files")); !os.IsNotExist(err) {
		t.Errorf("the run ended well, yet the synced file is still unhandled (%v)", err)
	}

	builtin := header + "\necho \"builtin:[$UNSET_VAR]\" >> \"$BASHIBLE_ROOT/trace\"\n"
	api = &fakeAPI{bundle: bundleOf(map[string]string{"050_builtin.sh": builtin}), annotations: map[string]any{
		deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
	out, root, ok = runAgent(t, api)
	if ok {
		t.Errorf("a built-in step reading an unset variable succeeded:\n%s", out)
	}
	if log, _ := os.ReadFile(filepath.Join(root, "var/lib/bashible/step.failed.log")); !strings.Contains(string(log), "UNSET_VAR: unbound variable") {
		t.Errorf("the step's log should name the unset variable:\n%s", log)
	}
	if trace, _ := os.ReadFile(filepath.Join(root, "trace")); len(trace) != 0 {
		t.Errorf("the built-in step went on past the unset variable: %q", trace)
	}
}

// BenchmarkAgentRun is one run of bashible.sh on a joined node that applies
// a new configuration of 40 steps which do nothing, against the fake API:
// what bashible itself costs a node per change (make bench prints it).
// Besides the time per run it reports the CPU of the run's processes.
func BenchmarkAgentRun(b *testing.B) {
	steps := map[string]string{}
	for i := range 40 {
		steps[fmt.Sprintf("%03d_step-%d.sh", i*10, i)] = "true\n"
	}
	script := mustRender(b, builtinTree(b), workerContext(b, nil)).Bashible
	cert := map[string]string{"var/lib/kubelet/pki/kubelet-client-current.pem": selfSignedCertAndKey(b, "system:node:n1")}
	var cpu time.Duration
	for b.Loop() {
		api := &fakeAPI{instance: true, bundle: bundleOf(steps), annotations: map[string]any{
			deckhousev1.ConfigurationChecksumAnnotation: "old", deckhousev1.ApprovedAnnotation: ""}}
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
		out, _, ok := runScriptOn(b, api, script, cert)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
		if !ok || len(api.events) != 3 {
			b.Fatalf("the run failed or recorded %d Events, not its BashibleNodeUpdate start and finish and BashibleConverged:\n%s", len(api.events), out)
		}
		cpu += time.Duration(after.Utime.Nano() - before.Utime.Nano() + after.Stime.Nano() - before.Stime.Nano())
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/run")
}

// A node waits for its approval by reading its Node every few seconds, for
// as long as a person takes: each read, in a subshell of its own, must
// leave no request files behind in the run's scratch space, however many
// there are. The run's own shell keeps one set for its next request.
func TestAgentRequestsLeaveNoFilesBehind(t *testing.T) {
	t.Parallel()
	lib := filepath.Join(t.TempDir(), "lib.sh")
	writeFile(t, lib, libraryOf(t))
	script := `#!/usr/bin/env bash
set -Eeuo pipefail
export LC_ALL=C BASHIBLE_RUN_TMP=$BASHIBLE_ROOT/var/lib/bashible/tmp
mkdir -p "$BASHIBLE_RUN_TMP"
source ` + shellQuoteForTest(lib) + `
for i in {1..25}; do
  node=$(bb-node-get)
  [[ "$node" == *'"name":"n1"'* ]]
done
bb-node-annotate '{"polled":"25"}'
bb-kube-api GET /api/v1/nodes/n1 > /dev/null
shopt -s nullglob dotglob
files=("$BASHIBLE_RUN_TMP"/api.*)
echo "request files: ${#files[@]}"
`
	api := &fakeAPI{annotations: map[string]any{}}
	out, _, ok := runScript(t, api, script)
	if !ok {
		t.Fatalf("the requests failed:\n%s", out)
	}
	if api.annotations["polled"] != "25" {
		t.Errorf("the node's annotations after the requests: %v\n%s", api.annotations, out)
	}
	if !strings.Contains(out, "request files: 3\n") {
		t.Errorf("after 28 requests the scratch space should hold only the shell's own three request files (its request's body, the answer and its status):\n%s", out)
	}
}

// A first run on a machine whose kubelet already has its client
// certificate, but has not registered its Node yet, waits for the Node
// before it records the configuration there. It did not wait once the
// certificate existed, and failed on the Node's 404 (the join e2e suite
// caught it on a fast boot).
func TestAFirstRunWaitsForTheNodeWhenTheCertificateCameFirst(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{"010_step.sh": "true\n"}),
		annotations: map[string]any{}, nodeMissing: 2}
	machine := map[string]string{
		"var/lib/bashible/first_run":                     "",
		"etc/kubernetes/bootstrap-kubelet.conf":          "apiVersion: v1\nkind: Config\n",
		"var/lib/kubelet/pki/kubelet-client-current.pem": selfSignedCertAndKey(t, "system:node:n1"),
	}
	out, _, ok := runScriptOn(t, api, script, machine)
	if !ok {
		t.Fatalf("the first run failed:\n%s", out)
	}
	if !strings.Contains(out, "waiting for the kubelet to join") {
		t.Errorf("the run did not say it waits for the kubelet to join:\n%s", out)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.nodeMissing != 0 || api.annotations[deckhousev1.ConfigurationChecksumAnnotation] == nil {
		t.Errorf("after the run: %d 404s left, the Node's annotations %v; want the configuration recorded once the Node exists\n%s",
			api.nodeMissing, api.annotations, out)
	}
}

// A first run on a machine whose kubelet has joined already (its
// certificate and its Node are there) waits for nothing and says nothing
// of a join.
func TestAFirstRunOfAJoinedKubeletWaitsForNothing(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{"010_step.sh": "true\n"}), annotations: map[string]any{}}
	out, _, ok := runScriptOn(t, api, script, map[string]string{
		"var/lib/bashible/first_run":                     "",
		"etc/kubernetes/bootstrap-kubelet.conf":          "apiVersion: v1\nkind: Config\n",
		"var/lib/kubelet/pki/kubelet-client-current.pem": selfSignedCertAndKey(t, "system:node:n1"),
	})
	if !ok {
		t.Fatalf("the first run failed:\n%s", out)
	}
	if strings.Contains(out, "kubelet to join") || strings.Contains(out, "kubelet has joined") {
		t.Errorf("a joined kubelet was waited for:\n%s", out)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.annotations[deckhousev1.ConfigurationChecksumAnnotation] == nil {
		t.Errorf("the configuration is not recorded on the Node: %v\n%s", api.annotations, out)
	}
}

// steadyAPI is the fake API of a node that has applied configuration
// "new" (a joined node, so it reports): the group's Bashible names served,
// its NodeGroupBundle carries bundled, and the node's Instance shows
// condition (nil: none).
func steadyAPI(t *testing.T, script, served, bundled string, condition map[string]any) *fakeAPI {
	t.Helper()
	bundle := bundleOf(map[string]string{"010_marker.sh": "touch \"$BASHIBLE_ROOT/marker\"\n"})
	bundle["metadata"].(map[string]any)["annotations"].(map[string]any)[bashiblev1alpha1.ChecksumAnnotation] = bundled
	api := &fakeAPI{instance: true, bundle: bundle,
		bashibles: map[string]any{"metadata": map[string]any{"name": "worker",
			"annotations": map[string]any{bashiblev1alpha1.ChecksumAnnotation: served}},
			"data": map[string]any{bashiblev1alpha1.BashibleScriptKey: script}},
		annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "new", deckhousev1.ApprovedAnnotation: ""}}
	if condition != nil {
		api.applied = map[string]map[string]any{"bashible-BashibleReady": {"conditions": []any{condition}}}
	}
	return api
}

// A run on a node that already runs the served configuration, as most runs
// are, reads the group's Bashible (it updates itself from it), the Node
// and the Instance, and nothing else: not the bundle, whose checksum the
// Bashible already names, and no write, since the Instance already says the
// configuration is applied.
func TestAgentInSyncReadsNoBundleAndWritesNothing(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	applied := map[string]any{"type": "BashibleReady", "status": "True", "reason": "StepsCompleted",
		"message": "configuration new is applied; nothing to do", "lastTransitionTime": "2026-01-02T03:04:05Z"}
	files := map[string]string{"var/lib/bashible/configuration_checksum": "new\n",
		"var/lib/kubelet/pki/kubelet-client-current.pem": selfSignedCertAndKey(t, "system:node:n1")}

	api := steadyAPI(t, script, "new", "new", applied)
	out, root, ok := runScriptOn(t, api, script, files)
	if !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	want := []string{"GET /apis/bashible.deckhouse.io/v1alpha1/bashibles/worker", "GET /api/v1/nodes/n1", "GET /apis/deckhouse.io/v1alpha1/instances/n1"}
	if strings.Join(api.requests, "\n") != strings.Join(want, "\n") {
		t.Errorf("an in-sync run made the requests\n%s\nwant\n%s\n%s", strings.Join(api.requests, "\n"), strings.Join(want, "\n"), out)
	}
	if _, err := os.Stat(filepath.Join(root, "marker")); err == nil {
		t.Errorf("an in-sync run ran the bundle's step")
	}

	// The first such run writes the condition, once.
	api = steadyAPI(t, script, "new", "new", nil)
	if out, _, ok := runScriptOn(t, api, script, files); !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	var writes int
	for _, r := range api.requests {
		if strings.HasPrefix(r, "PATCH /apis/deckhouse.io/v1alpha1/instances/n1/status") {
			writes++
		}
	}
	got, _ := api.applied["bashible-BashibleReady"]["conditions"].([]any)
	if writes != 1 || len(got) != 1 || got[0].(map[string]any)["message"] != applied["message"] {
		t.Errorf("%d Instance writes, conditions %v; want one, saying the configuration is applied", writes, got)
	}
}

// The bundle is fetched when the Bashible names a configuration the node
// does not run, and its own checksum decides what the run does: the one
// the node runs already (the group moved back between the two reads)
// needs no step.
func TestAgentFetchesTheBundleWhenTheServedChecksumMoved(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	for name, tc := range map[string]struct {
		stored, served, bundled string
		runs                    bool
	}{
		"a new configuration":           {stored: "old", served: "new", bundled: "new", runs: true},
		"back to the one the node runs": {stored: "new", served: "newer", bundled: "new", runs: false},
	} {
		t.Run(name, func(t *testing.T) {
			api := steadyAPI(t, script, tc.served, tc.bundled, nil)
			out, root, ok := runScriptOn(t, api, script, map[string]string{"var/lib/bashible/configuration_checksum": tc.stored + "\n"})
			if !ok {
				t.Fatalf("the run failed:\n%s", out)
			}
			if !slices.Contains(api.requests, "GET /apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/worker") {
				t.Errorf("the bundle was not fetched; requests:\n%s", strings.Join(api.requests, "\n"))
			}
			_, err := os.Stat(filepath.Join(root, "marker"))
			if ran := err == nil; ran != tc.runs {
				t.Errorf("the bundle's step ran: %t, want %t\n%s", ran, tc.runs, out)
			}
			if got := strings.TrimSpace(readFileT(t, filepath.Join(root, "var/lib/bashible/configuration_checksum"))); got != tc.bundled {
				t.Errorf("configuration_checksum %q, want the bundle's %q", got, tc.bundled)
			}
		})
	}
}

// approveWhenWaiting plays node-manager: once the node has asked for
// update approval and is waiting for it (it has tried to watch its Node),
// it approves it.
func approveWhenWaiting(t *testing.T, api *fakeAPI) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			api.mu.Lock()
			_, asked := api.annotations[deckhousev1.WaitingForApprovalAnnotation]
			asked = asked && slices.ContainsFunc(api.requests, func(r string) bool { return strings.HasPrefix(r, "WATCH ") })
			if asked {
				api.annotateLocked(deckhousev1.ApprovedAnnotation, "")
			}
			api.mu.Unlock()
			if asked {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// A node waiting for its update approval watches its Node: the approval
// is seen the moment it is given, not at the next poll (ten minutes
// apart here, longer than the test may take), and the watch is closed at
// once, not held to its timeout. An API that refuses the watch leaves the
// node polling, as before.
func TestAgentSeesItsApprovalTheMomentItIsGiven(t *testing.T) {
	t.Parallel()
	steps := map[string]string{"010_a.sh": "true\n"}
	for name, tc := range map[string]struct {
		forbid bool
		poll   string
	}{
		"watched":              {poll: "600"},
		"the watch is refused": {forbid: true, poll: "1"},
	} {
		t.Run(name, func(t *testing.T) {
			api := &fakeAPI{instance: true, bundle: bundleOf(steps), forbidWatch: tc.forbid,
				annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old"},
				env:         []string{"BASHIBLE_POLL_SECONDS=" + tc.poll}}
			approveWhenWaiting(t, api)
			began := time.Now()
			out, root, ok := runAgent(t, api)
			if !ok {
				t.Fatalf("the run failed:\n%s", out)
			}
			if got := strings.TrimSpace(readFileT(t, filepath.Join(root, "var/lib/bashible/configuration_checksum"))); got != "new" {
				t.Errorf("configuration_checksum %q after the approval, want new\n%s", got, out)
			}
			var watches int
			for _, r := range api.requests {
				if strings.HasPrefix(r, "WATCH ") {
					watches++
				}
			}
			if watches == 0 {
				t.Errorf("the node never watched its Node; requests:\n%s", strings.Join(api.requests, "\n"))
			}
			t.Logf("approved and converged in %s, %d watches", time.Since(began).Round(time.Millisecond), watches)
		})
	}
}

// A run killed while it waits for its approval (a test's deadline, an
// administrator's kill -9) leaves its watch running until the watch's
// timeout, but not holding the run's lock: the next run, a minute later,
// takes it and goes on.
func TestAgentKilledWhileWaitingLeavesTheLockFree(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{instance: true, bundle: bundleOf(map[string]string{"010_a.sh": "true\n"}),
		annotations: map[string]any{deckhousev1.ConfigurationChecksumAnnotation: "old"},
		env:         []string{"BASHIBLE_POLL_SECONDS=600"}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, root := agentCommand(ctx, t, api, mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible, nil)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for watching := false; !watching; time.Sleep(20 * time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatalf("the run never waited for its approval:\n%s", out.String())
		}
		api.mu.Lock()
		watching = slices.ContainsFunc(api.requests, func(r string) bool { return strings.HasPrefix(r, "WATCH ") })
		api.mu.Unlock()
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	lock := exec.CommandContext(ctx, "flock", "--nonblock", filepath.Join(root, "var/lock/bashible"), "true")
	if msg, err := lock.CombinedOutput(); err != nil {
		t.Errorf("the lock of a run killed while it waited is still held (%v %s); the next run would skip", err, msg)
	}
}

// The checksum a node reads from the Bashible is data, never shell: a
// hostile one (command substitutions, quotes, a second line) is compared,
// logged and sent as JSON like any text, and runs nothing.
func TestAgentServedChecksumIsInert(t *testing.T) {
	t.Parallel()
	script := mustRender(t, builtinTree(t), workerContext(t, nil)).Bashible
	hostile := "$(touch \"$BASHIBLE_ROOT/pwned\")`touch \"$BASHIBLE_ROOT/pwned\"`'\"\\\nnew"
	api := steadyAPI(t, script, hostile, "new", nil)
	out, root, ok := runScriptOn(t, api, script, map[string]string{"var/lib/bashible/configuration_checksum": "old\n"})
	if !ok {
		t.Fatalf("the run failed:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "pwned")); err == nil {
		t.Fatalf("the served checksum ran as shell:\n%s", out)
	}
	if got := strings.TrimSpace(readFileT(t, filepath.Join(root, "var/lib/bashible/configuration_checksum"))); got != "new" {
		t.Errorf("configuration_checksum %q, want the bundle's new", got)
	}
}
