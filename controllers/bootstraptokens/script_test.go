package bootstraptokens

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/shelltest"
)

func testManual(t *testing.T, expires time.Time, endpoints ...string) Manual {
	if len(endpoints) == 0 {
		endpoints = []string{"10.0.0.1:6443", "[fd00::1]:6443", "api.example.com:443"}
	}
	return Manual{
		Namespace: deckhousev1.Namespace, Group: "worker", CA: testCA(t), Endpoints: endpoints,
		Token: Token{Name: "bootstrap-token-abc123", ID: "abc123", Secret: "0123456789abcdef", Expires: expires},
	}
}

func TestScriptPassesShellcheck(t *testing.T) {
	sh, err := testManual(t, t0).Script()
	if err != nil {
		t.Fatal(err)
	}
	shelltest.Check(t, "bootstrap.sh", sh)
	for _, want := range []string{"set -Eeuo pipefail", "valid until 2031-05-06T07:00:00Z", "TOKEN_EXPIRES_EPOCH=" + "1935817200",
		`kubectl -n d8-cloud-instance-manager get secret manual-bootstrap-for-worker -o json | jq -r '.data["bootstrap.sh"]' | base64 -d`} {
		if !strings.Contains(sh, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if !strings.HasPrefix(sh, "#!/usr/bin/env bash\n") {
		t.Error("no bash shebang")
	}
}

func TestScriptRefusesBadInput(t *testing.T) {
	m := testManual(t, t0)
	m.CA = "not a certificate"
	if _, err := m.Script(); err == nil {
		t.Error("a CA that is not PEM was accepted")
	}
	m = testManual(t, t0)
	m.CA += "CLUSTER_CA\n"
	if _, err := m.Script(); err == nil {
		t.Error("a CA that ends the here-document was accepted")
	}
	m = testManual(t, t0)
	m.Endpoints = nil
	if _, err := m.Script(); err == nil {
		t.Error("a script without endpoints was rendered")
	}
	if got := ValidEndpoints([]string{"10.0.0.1:6443", "$(reboot):1", "a b:1", "[fd00::1]:443", "host:"}); strings.Join(got, ",") != "10.0.0.1:6443,[fd00::1]:443" {
		t.Errorf("ValidEndpoints = %v", got)
	}
}

// runScript runs a script as a node would, with root redirected to a temp
// directory ("" leaves it as the environment has it); extraEnv is added
// (or replaces PATH).
func runScript(t *testing.T, script, root string, extraEnv ...string) (string, int) {
	t.Helper()
	if root != "" {
		extraEnv = append(slices.Clip(extraEnv), "BASHIBLE_ROOT="+root)
	}
	return shelltest.Run(t, "bootstrap.sh", script, extraEnv...)
}

// The controller running on a clock in the past writes a script whose
// token has expired by the real clock: it refuses with a clear message and
// changes nothing.
func TestExpiredScriptRefusesToRun(t *testing.T) {
	past := time.Now().Add(-5 * time.Hour).Truncate(time.Second)
	h := newHarness(t, past, group("worker", deckhousev1.NodeTypeStatic))
	h.sync("worker")
	sh := string(h.manualSecret("worker").Data["bootstrap.sh"])
	shelltest.Check(t, "bootstrap.sh", sh)

	root := t.TempDir()
	out, code := runScript(t, sh, root)
	if code == 0 {
		t.Fatalf("an expired script ran:\n%s", out)
	}
	expiredAt := past.Add(TokenTTL).UTC().Format(time.RFC3339)
	for _, want := range []string{
		"valid until " + expiredAt,
		"the bootstrap token in this script expired at " + expiredAt,
		`kubectl -n d8-cloud-instance-manager get secret manual-bootstrap-for-worker -o json | jq -r '.data["bootstrap.sh"]' | base64 -d`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("the expired script wrote to the node: %v", entries)
	}
}

// fakeBin is a directory of commands; each name maps to a script body or,
// when it starts with "/", a real program to link.
func fakeBin(t *testing.T, cmds map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range cmds {
		p := filepath.Join(dir, name)
		if strings.HasPrefix(body, "/") {
			if err := os.Symlink(body, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed: %v", name, err)
	}
	return p
}

func TestScriptLeavesManagedNodeAlone(t *testing.T) {
	sh, err := testManual(t, time.Now().Add(time.Hour)).Script()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	bin := fakeBin(t, map[string]string{"systemctl": `[ "$1 $2 $3" = "is-active --quiet bashible.timer" ]`})
	out, code := runScript(t, sh, root, "PATH="+bin+":"+os.Getenv("PATH"))
	if code != 0 || !strings.Contains(out, "managed by bashible (bashible.timer is active); nothing to do") {
		t.Errorf("with bashible.timer active: exit %d\n%s", code, out)
	}

	// Already configured, and an expired token: still nothing to do.
	sh, err = testManual(t, time.Now().Add(-time.Hour)).Script()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib/bashible"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/bashible/configuration_checksum"), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, sh, root)
	if code != 0 || !strings.Contains(out, "already been configured") {
		t.Errorf("on a configured machine: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/bashible/bootstrap-token")); err == nil {
		t.Error("a token was written on a configured machine")
	}
}

func TestScriptRefusesNonRoot(t *testing.T) {
	sh, err := testManual(t, time.Now().Add(time.Hour)).Script()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/lib/bashible/configuration_checksum"); err == nil {
		t.Skip("this machine is a configured node; the script would exit early")
	}
	bin := fakeBin(t, map[string]string{"id": `echo 1000`, "systemctl": `exit 3`})
	out, code := runScript(t, sh, "", "PATH="+bin+":"+os.Getenv("PATH"), "BASHIBLE_ROOT=")
	if code == 0 || !strings.Contains(out, "run this script as root") {
		t.Errorf("as uid 1000 without BASHIBLE_ROOT: exit %d\n%s", code, out)
	}
}

func TestScriptNeedsJqAndCurl(t *testing.T) {
	sh, err := testManual(t, time.Now().Add(time.Hour)).Script()
	if err != nil {
		t.Fatal(err)
	}
	// Only what the script needs before it checks its tools; no jq, and no
	// package manager to install it with.
	bin := fakeBin(t, map[string]string{"date": lookPath(t, "date"), "id": lookPath(t, "id"), "curl": lookPath(t, "curl")})
	root := t.TempDir()
	out, code := runScript(t, sh, root, "PATH="+bin)
	if code == 0 || !strings.Contains(out, "jq missing and neither apt-get, dnf nor yum is available") {
		t.Errorf("without jq: exit %d\n%s", code, out)
	}

	// With a package manager, the missing tool is installed.
	bin = fakeBin(t, map[string]string{"date": lookPath(t, "date"), "id": lookPath(t, "id"), "curl": lookPath(t, "curl"),
		"dnf": `echo "dnf $*" >> "$BASHIBLE_ROOT/dnf.log"; exit 1`})
	out, code = runScript(t, sh, root, "PATH="+bin)
	log, _ := os.ReadFile(filepath.Join(root, "dnf.log"))
	if code == 0 || string(log) != "dnf install -y -q jq\n" {
		t.Errorf("dnf was not asked for jq (log %q), or its failure was ignored: exit %d\n%s", log, code, out)
	}
}

// apiServer serves bootstrap/worker to the token's bearer and 401 to
// anyone else, like kube-apiserver with the aggregator.
func apiServer(t *testing.T, token string, served string) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/apis/bashible.deckhouse.io/v1alpha1/bootstrap/worker" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"kind": "Bootstrap", "bootstrap": served})
	}))
	t.Cleanup(srv.Close)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return srv, ca
}

func TestScriptFetchesAndRunsServedBootstrap(t *testing.T) {
	m := testManual(t, time.Now().Add(time.Hour))
	served := "#!/usr/bin/env bash\nset -eu\ncp \"$BASHIBLE_ROOT/var/lib/bashible/bootstrap-token\" \"$BASHIBLE_ROOT/seen-token\"\necho served bootstrap ran\n"
	srv, ca := apiServer(t, m.Token.String(), served)
	m.CA = ca
	m.Endpoints = []string{"127.0.0.1:1", strings.TrimPrefix(srv.URL, "https://")} // the first refuses connections
	sh, err := m.Script()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for run := 1; run <= 2; run++ { // idempotent: a second run does the same
		out, code := runScript(t, sh, root)
		if code != 0 || !strings.Contains(out, "could not reach 127.0.0.1:1") || !strings.Contains(out, "served bootstrap ran") {
			t.Fatalf("run %d: exit %d\n%s", run, code, out)
		}
	}
	dir := filepath.Join(root, "var/lib/bashible")
	for file, want := range map[string]string{
		"ca.crt":          ca,
		"bootstrap-token": m.Token.String() + "\n",
		"bootstrap.sh":    served,
	} {
		got, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", file, got, err, want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "bootstrap-token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("bootstrap-token mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "seen-token")); string(got) != m.Token.String()+"\n" {
		t.Errorf("the served script did not find the token: %q", got)
	}
}

func TestScriptReportsRefusedToken(t *testing.T) {
	m := testManual(t, time.Now().Add(time.Hour))
	srv, ca := apiServer(t, "other.token", "#!/usr/bin/env bash\nexit 0\n")
	m.CA = ca
	m.Endpoints = []string{strings.TrimPrefix(srv.URL, "https://")}
	sh, err := m.Script()
	if err != nil {
		t.Fatal(err)
	}
	out, code := runScript(t, sh, t.TempDir())
	if code == 0 || !strings.Contains(out, "refused the bootstrap token (401 Unauthorized)") ||
		!strings.Contains(out, deckhousev1.ManualBootstrapSecretPrefix+"worker") {
		t.Errorf("with a token the API refuses: exit %d\n%s", code, out)
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"", "worker", "it's", `a"b$c` + "`d`\\e'", "'''"} {
		out, err := exec.Command("bash", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shellQuote(%q) reads back as %q (%v)", s, out, err)
		}
	}
}
