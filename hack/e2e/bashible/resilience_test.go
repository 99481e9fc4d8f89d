package bashible

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/stack"
)

// proxy is a TCP proxy to the API that a test can cut and restore, to play
// a network or control-plane outage between a node and the API.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *proxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

func TestAPIOutageFailsTheRunCleanly(t *testing.T) {
	t.Parallel()
	n := newNode(t, "outage-1", "sim")
	px := newProxy(t, n.Endpoint)
	n.Endpoint = px.addr

	// Down from the start: the run fails and writes no steps.
	px.cut()
	run, err := n.RunOnce(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if run.ExitCode == 0 || !strings.Contains(run.Output, "no API endpoint answered") {
		t.Fatalf("a run without the API should fail saying so (exit %d):\n%s", run.ExitCode, run.Output)
	}
	if n.Exists("var/lib/bashible/bundle_steps") {
		t.Error("no steps may be written when the bundle could not be fetched")
	}

	// Down in the middle: the run fails and records nothing.
	px.restore(t)
	if err := n.Control("slow", true); err != nil {
		t.Fatal(err)
	}
	cmd, out, err := n.Start(framework.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the run reaches its steps", func(context.Context) (bool, error) {
		return n.Exists("applied-group"), nil
	})
	px.cut()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("a run that lost the API should fail:\n%v\n%s", err, out)
	}
	// The steps had all run, so the node records locally what it applied,
	// but the cluster could not be told: no annotation yet.
	if _, ok := annotations(t, n)[checksumAnnotation]; ok {
		t.Error("a run that lost the API cannot have reported a checksum")
	}
	entries, _ := os.ReadDir(n.Path("var/lib/bashible"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "bundle_steps.new") {
			t.Errorf("a half-written bundle was left behind: %s", e.Name())
		}
	}

	// Back: the next run converges.
	px.restore(t)
	if err := n.Control("slow", false); err != nil {
		t.Fatal(err)
	}
	applied := n.Read("applied-checksums")
	mustRun(t, n)
	if annotations(t, n)[checksumAnnotation] != f.Checksum(t, "sim") {
		t.Error("after the outage the node should report its configuration")
	}
	if n.Read("applied-checksums") != applied {
		t.Error("a node in sync should only re-assert its checksum, not run its steps again")
	}
}

func TestBootstrapWithTokenJoinsAndConverges(t *testing.T) {
	t.Parallel()
	ctx := framework.Context(t)
	n, err := stack.NewSimNode(ctx, f.CP, t.TempDir(), "boot-1", "sim")
	if err != nil {
		t.Fatal(err)
	}
	// Before join the machine has no kubelet certificate, only the group's
	// bootstrap token and the CA.
	cert := n.Path("var/lib/kubelet/pki/kubelet-client-current.pem")
	if err := os.Rename(cert, n.Path("control/kubelet-cert")); err != nil {
		t.Fatal(err)
	}
	tok, err := f.CP.CreateBootstrapToken(ctx, "sim", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Write("var/lib/bashible/bootstrap-token", tok.String()); err != nil {
		t.Fatal(err)
	}
	var script string
	framework.Poll(t, "the token can read bootstrap/sim", func(ctx context.Context) (bool, error) {
		cfg := f.CP.BootstrapTokenConfig(tok)
		b, err := framework.BashibleClient(cfg).Bootstraps().Get(ctx, "sim", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		script = b.Bootstrap
		return true, nil
	})
	path := filepath.Join(t.TempDir(), "bootstrap.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Env = append(os.Environ(), "BASHIBLE_ROOT="+n.Root, "BASHIBLE_API_ENDPOINTS="+n.Endpoint, "BASHIBLE_NODE_NAME="+n.Name,
		"BASHIBLE_RETRY_DELAY=1", "BASHIBLE_POLL_SECONDS=1")
	if !strings.HasPrefix(script, "#!/usr/bin/env bash") {
		t.Fatalf("bootstrap/sim serves %q", script)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	if !n.Exists("var/lib/kubelet/pki/kubelet-client-current.pem") || annotations(t, n)[checksumAnnotation] != f.Checksum(t, "sim") {
		t.Fatalf("the node should join and converge on its first run:\n%s", out)
	}
	if n.Exists("var/lib/bashible/first_run") || !n.Exists("var/lib/bashible/bashible.sh") {
		t.Error("after bootstrap: bashible.sh installed, first_run cleared")
	}
	if n.Exists("var/lib/bashible/bootstrap-token") || n.Exists("var/lib/bashible/bootstrap-token-header") {
		t.Error("once joined, the node must not keep its bootstrap token")
	}
	// Bootstrapping a configured machine again would skip approval: refused.
	again := exec.CommandContext(ctx, "bash", path)
	again.Env = cmd.Env
	if out, err := again.CombinedOutput(); err != nil || !strings.Contains(string(out), "already been configured") || n.Exists("var/lib/bashible/first_run") {
		t.Errorf("a second bootstrap should change nothing: %v\n%s", err, out)
	}
	if strings.Contains(string(out), tok.Secret) {
		t.Error("the bootstrap token appears in the output")
	}
}

// TestServedGarbageAgentIsRefused replaces the suite's bashible-apiserver,
// which every other test reads: it stays serial (Go runs the serial tests
// before the parallel ones), so that no other test fetches the garbage.
func TestServedGarbageAgentIsRefused(t *testing.T) {
	n := newNode(t, "garbage-1", "sim")
	mustRun(t, n)
	good := n.Read("var/lib/bashible/bashible.sh")
	e := newNode(t, "empty-1", "other")
	mustRun(t, e)
	goodOther := e.Read("var/lib/bashible/bashible.sh")

	// Only the leader publishes: replace the server with one whose
	// bashible.sh template renders garbage, then put the real one back.
	dir := t.TempDir()
	overlay := f.OverlayDir()
	if err := os.CopyFS(dir, os.DirFS(overlay)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bashible.sh.tpl"), []byte("{{ if ne .nodeGroup.name \"other\" }}this is not a script for {{ .nodeGroup.name }}\n{{ end }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	server.Stop()
	garbage, err := stack.StartAPIServer(framework.Context(t), f.CP, stack.APIServerOptions{Identity: "garbage", TemplatesDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		garbage.Stop()
		restored, err := server.Restart(context.Background())
		if err != nil {
			t.Fatalf("restore the server: %v", err)
		}
		server = restored
		if err := server.Register(context.Background()); err != nil {
			t.Fatalf("re-register the server: %v", err)
		}
		// The garbage stays published until the restored leader publishes
		// again: the next test must not fetch it.
		framework.Poll(t, "the real bashible.sh is served again", func(ctx context.Context) (bool, error) {
			b, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, "sim", metav1.GetOptions{})
			return err == nil && !strings.HasPrefix(b.Data["bashible.sh"], "this is not"), nil
		})
	}()
	if err := garbage.Register(framework.Context(t)); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "the garbage bashible.sh is served", func(ctx context.Context) (bool, error) {
		b, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, "sim", metav1.GetOptions{})
		return err == nil && strings.HasPrefix(b.Data["bashible.sh"], "this is not"), nil
	})
	// The checksum covers bashible.sh, so this is a new configuration: approve it.
	empty := ""
	if err := n.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	run := mustRun(t, n)
	if !strings.Contains(run.Output, "refusing the served bashible.sh") {
		t.Errorf("the garbage should be refused:\n%s", run.Output)
	}
	if n.Read("var/lib/bashible/bashible.sh") != good {
		t.Error("the node's bashible.sh must stay as it was")
	}
	if notes := f.EventNotes(t, n.Name, "BashibleUpdateRefused"); len(notes) == 0 {
		t.Error("the refusal should be reported as an Event")
	}

	// An empty script is refused the same way.
	if err := e.Annotate(framework.Context(t), f.CP, map[string]*string{deckhousev1.ApprovedAnnotation: &empty}); err != nil {
		t.Fatal(err)
	}
	if run := mustRun(t, e); !strings.Contains(run.Output, "refusing the served bashible.sh") || e.Read("var/lib/bashible/bashible.sh") != goodOther {
		t.Errorf("an empty served script should be refused and the node's kept:\n%s", run.Output)
	}
}

// TestSelfUpdateKeepsTheNewAgentOnlyIfItsRunSucceeds: a served bashible.sh
// that differs from the node's is run first, and replaces the node's only
// when that run succeeds.
func TestSelfUpdateKeepsTheNewAgentOnlyIfItsRunSucceeds(t *testing.T) {
	t.Parallel()
	n := newNode(t, "selfupdate-1", "sim")
	mustRun(t, n)
	served := n.Read("var/lib/bashible/bashible.sh")
	old := served + "# an older agent\n"
	if err := n.Write("var/lib/bashible/bashible.sh", old); err != nil {
		t.Fatal(err)
	}
	// A reboot since the last run forces a converge (without approval).
	if err := n.Write("proc/sys/kernel/random/boot_id", "00000000-0000-4000-8000-000000000002\n"); err != nil {
		t.Fatal(err)
	}
	// The new agent's run fails: the old one stays.
	if err := n.Control("fail", true); err != nil {
		t.Fatal(err)
	}
	run, err := n.RunOnce(framework.Context(t), "--max-retries", "1")
	if err != nil {
		t.Fatal(err)
	}
	if run.ExitCode == 0 || !strings.Contains(run.Output, "running the updated bashible.sh") {
		t.Fatalf("the updated agent should run and fail (exit %d):\n%s", run.ExitCode, run.Output)
	}
	if n.Read("var/lib/bashible/bashible.sh") != old {
		t.Fatal("an updated agent whose run failed must not replace the old one")
	}
	// It succeeds: it replaces the old one.
	if err := n.Control("fail", false); err != nil {
		t.Fatal(err)
	}
	mustRun(t, n)
	if n.Read("var/lib/bashible/bashible.sh") != served {
		t.Error("an updated agent whose run succeeded should replace the old one")
	}
}
