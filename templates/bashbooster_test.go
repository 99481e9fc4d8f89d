package templates

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The bashbooster helpers are checked against what Deckhouse documents for
// them: each case runs steps the way bashible.sh does (a fresh bash, the
// library sourced, BASHIBLE_STEP set so the step's end fires its delayed
// events) in a directory standing in for the machine's root, with apt-get,
// dnf, yum, wget and friends replaced by stubs that record how they were
// called. Every case runs under both shell contracts: the users' (Deckhouse's
// -eEo pipefail) and the built-in steps' (-Eeuo pipefail), since the library
// must work under both.

// bbStub stands in for the package managers and downloaders: it records
// "<name> <args>" in $BASHIBLE_ROOT/calls, answers package queries from
// $BASHIBLE_ROOT/installed (one package a line) and writes what wget is
// asked to fetch.
const bbStub = `#!/usr/bin/env bash
name=$(basename "$0")
installed() { grep -qx -- "$1" "$BASHIBLE_ROOT/installed" 2> /dev/null; }
case "$name" in
  dpkg-query)
    pkg=${!#}
    installed "$pkg" || exit 1
    case "$*" in
      *Version*) printf '1.2-1' ;;
      *) if grep -qx -- "$pkg" "$BASHIBLE_ROOT/held" 2> /dev/null; then printf 'hold ok installed'; else printf 'install ok installed'; fi ;;
    esac
    exit 0
    ;;
  dnf|yum)
    if [[ " $* " == *" list installed "* ]]; then
      installed "${!#}"
      exit
    fi
    ;;
  getent)
    grep -q -- "^$2:" "$BASHIBLE_ROOT/getent-$1" 2> /dev/null
    exit
    ;;
  id)
    exit 1
    ;;
  wget)
    while (( $# > 0 )); do
      if [[ "$1" == -O ]]; then echo "fetched" > "$2"; fi
      shift
    done
    set -- "(args)"
    ;;
esac
printf '%s %s\n' "$name" "$*" >> "$BASHIBLE_ROOT/calls"
exit "${BB_STUB_EXIT:-0}"
`

// bbRun is one step: its script, and what it must do.
type bbRun struct {
	script string
	code   int
	// stdout is the step's whole output, trimmed.
	stdout string
	// stderr holds lines the log must have, noStderr lines it must not.
	stderr, noStderr []string
	// calls is what the stubs were called with during this step, in order.
	calls []string
}

type bbCase struct {
	name  string
	files map[string]string
	runs  []bbRun
}

// libraryOf returns the node library bashible.sh writes to lib.sh.
func libraryOf(t *testing.T) string {
	t.Helper()
	lib, err := renderLibrary()
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// renderLibrary renders the worker group's library once for every test
// that runs it: the render is the same each time.
var renderLibrary = sync.OnceValues(func() (string, error) {
	tree, err := loadBuiltinTree()
	if err != nil {
		return "", err
	}
	var ctx Context
	if ctx, err = newWorkerContext(nil); err != nil {
		return "", err
	}
	b, failures := tree.Render(&ctx, nil)
	if failures != nil {
		return "", fmt.Errorf("render: %v", failures)
	}
	for _, s := range embeddedScripts(b.Bashible) {
		if strings.Contains(s, "# Library of bashible") {
			return s, nil
		}
	}
	return "", errors.New("bashible.sh embeds no library")
})

func runBashbooster(t *testing.T, lib string, options string, c bbCase) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	stubs := filepath.Join(dir, "stubs")
	for _, d := range []string{root + "/var/lib/bashible", stubs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "lib.sh"), lib)
	writeFile(t, filepath.Join(stubs, "stub"), bbStub)
	for _, name := range []string{"apt-get", "apt-mark", "apt-cache", "dpkg-query", "dnf", "yum", "zypper", "rpm", "wget", "getent", "id", "groupadd", "useradd"} {
		if err := os.Symlink("stub", filepath.Join(stubs, name)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"etc/os-release": "ID=debian\nVERSION_ID=12\n"}
	for k, v := range c.files {
		files[k] = v
	}
	for name, content := range files {
		writeFile(t, filepath.Join(root, name), content)
	}
	for i, r := range c.runs {
		_ = os.Remove(filepath.Join(root, "calls"))
		writeFile(t, filepath.Join(dir, "step.sh"), r.script)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c",
			"set "+options+"; source \"$1\"; cd \"$2\"; source \"$3\"", "bashible",
			filepath.Join(dir, "lib.sh"), root+"/var/lib/bashible", filepath.Join(dir, "step.sh"))
		cmd.Env = []string{"PATH=" + stubs + ":" + os.Getenv("PATH"), "BASHIBLE_ROOT=" + root,
			"BASHIBLE_STEP=100_test.sh", "HOME=" + dir, "LC_ALL=C", "BASHIBLE_API_ENDPOINTS=127.0.0.1:1"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		where := func() string {
			return "run " + string(rune('1'+i)) + " (" + options + "):\n" + r.script + "\nstdout:\n" + stdout.String() + "\nstderr:\n" + stderr.String()
		}
		if code != r.code {
			t.Errorf("exit status %d, want %d; %s", code, r.code, where())
		}
		if got := strings.TrimSpace(stdout.String()); got != strings.TrimSpace(r.stdout) {
			t.Errorf("stdout %q, want %q; %s", got, strings.TrimSpace(r.stdout), where())
		}
		for _, want := range r.stderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("the log lacks %q; %s", want, where())
			}
		}
		for _, not := range r.noStderr {
			if strings.Contains(stderr.String(), not) {
				t.Errorf("the log has %q; %s", not, where())
			}
		}
		if strings.Contains(stderr.String(), "unbound variable") {
			t.Errorf("the library read an unset variable; %s", where())
		}
		calls, _ := os.ReadFile(filepath.Join(root, "calls"))
		if got, want := strings.TrimSpace(string(calls)), strings.Join(r.calls, "\n"); got != want {
			t.Errorf("the stubs were called as\n%s\nwant\n%s\n%s", got, want, where())
		}
		// Nothing of a step's scratch space outlives it.
		if left, _ := filepath.Glob(root + "/var/lib/bashible/.bb-workspace/tmp_*"); len(left) > 0 {
			t.Errorf("temporary directories left behind: %v; %s", left, where())
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

const aptInstall = "apt-get -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold install --allow-change-held-packages --allow-downgrades -y"

var bashboosterCases = []bbCase{
	{name: "log: format, levels and prefix", runs: []bbRun{{
		script: `bb-log-info "hello  world"; bb-log-debug hidden; bb-log-warning careful; bb-log-error broken
BB_LOG_LEVEL=DEBUG; bb-log-debug shown; BB_LOG_LEVEL=ERROR; bb-log-info quiet
BB_LOG_LEVEL=INFO; bb-flag-set x`,
		stderr:   []string{"100_test.sh [INFO] hello  world\n", "100_test.sh [WARNING] careful\n", "100_test.sh [ERROR] broken\n", "100_test.sh [DEBUG] shown\n", "bb-flag [INFO] Creating flag 'x'"},
		noStderr: []string{"hidden", "quiet"},
	}}},
	{name: "log: stream for dhctl, deprecation", runs: []bbRun{{
		script: `printf 'a\nb\n' | bb-log-stream-dhctl; old() { bb-log-deprecated new; }; old`,
		stdout: "=== Step output: a\n=== Step output: b",
		stderr: []string{"[WARNING] 'old' is deprecated, use 'new' instead"},
	}}},
	{name: "exit: status and message", runs: []bbRun{
		{script: `echo before; bb-exit 3 "gave up"; echo after`, code: 3, stdout: "before", stderr: []string{"[ERROR] gave up"}},
		{script: `bb-exit 0 "all done"; echo after`, code: 0, stderr: []string{"[INFO] all done"}},
		{script: `(exit 4) || bb-exit-on-error "it failed"; echo after`, code: 4, stderr: []string{"[ERROR] it failed"}},
		{script: `true; bb-exit-on-error "not this"; echo after`, stdout: "after", noStderr: []string{"not this"}},
	}},
	{name: "error and var", runs: []bbRun{{
		script: `(exit 5) || { bb-error? && echo "error $BB_ERROR"; }; true; bb-error? || echo "no error $BB_ERROR"
bb-var NEW default; echo "$NEW"; OLD=kept; bb-var OLD default; echo "$OLD"; bb-var Q "it's"; echo "$Q"`,
		stdout: "error 5\nno error 0\ndefault\nkept\nit's",
	}}},
	{name: "assert: exits 10 with the message", runs: []bbRun{
		{script: `bb-assert '[[ 1 == 1 ]]'; bb-assert-dir /; bb-assert-file /etc/os-release; V=x; bb-assert-var V; echo fine`, stdout: "fine"},
		{script: `bb-assert '[[ 1 == 2 ]]'; echo after`, code: 10, stderr: []string{"[ERROR] Assertion error '[[ 1 == 2 ]]'"}},
		{script: `bb-assert-file /nonexistent`, code: 10, stderr: []string{"[ERROR] File '/nonexistent' not found"}},
		{script: `bb-assert-var UNSET_ONE "need it"`, code: 10, stderr: []string{"[ERROR] need it"}},
	}},
	{name: "flags: set, test, unset, across steps", runs: []bbRun{
		{script: `bb-flag? f && echo set || echo unset; bb-flag-set f; bb-flag? f && echo set; bb-flag-is-set f && echo set; ls flags`, stdout: "unset\nset\nset\nf"},
		{script: `bb-flag? f && echo still; bb-flag-unset f; bb-flag? f || echo gone; bb-flag-unset f; echo again`, stdout: "still\ngone\nagain"},
	}},
	{name: "events: handlers run with the arguments, once each", runs: []bbRun{{
		script: `h() { echo "h:$#:$*"; }; g() { echo "g:$1"; }
bb-event-on ev h; bb-event-on ev h; bb-event-on ev g; bb-event-fire ev one "two words"
bb-event-off ev h; bb-event-fire ev three; bb-event-fire nobody; bb-event-fire`,
		stdout: "h:2:one two words\ng:one\ng:three",
		stderr: []string{"[INFO] Run handlers for event 'ev'"},
	}}},
	{name: "events: delayed ones fire once, when the step ends", runs: []bbRun{
		{script: `h() { echo "h:$*"; }; bb-event-on ev h; bb-event-delay ev a; bb-event-delay ev a; bb-event-delay ev b; echo end`, stdout: "end\nh:a\nh:b"},
		// A failing step still fires them, and keeps its exit status.
		{script: `h() { echo "h"; }; bb-event-on ev h; bb-event-delay ev; false; echo not`, code: 1, stdout: "h"},
		// A handler that delays another event: it fires too.
		{script: `h() { echo h; bb-event-delay ev2; }; h2() { echo h2; }; bb-event-on ev h; bb-event-on ev2 h2; bb-event-delay ev`, stdout: "h\nh2"},
		// bb-cleanup fires first.
		{script: `c() { echo cleanup; }; bb-event-on bb-cleanup c; echo body`, stdout: "body\ncleanup"},
	}},
	{name: "sync-file: the change event fires once per change", runs: []bbRun{
		// A new file: created with the content and SRC's mode, changed fires
		// with its path, the delayed event once at the end.
		{script: `chg() { echo "changed:${1#"$BASHIBLE_ROOT"}"; }; r() { echo "restart:$1"; }
bb-event-on bb-sync-file-changed chg; bb-event-on svc r
printf 'a\n' > src; chmod 0600 src
bb-sync-file "$BASHIBLE_ROOT/etc/x.conf" src svc unit1; echo "rc=$?"
bb-sync-file "$BASHIBLE_ROOT/etc/x.conf" src svc unit1
cat "$BASHIBLE_ROOT/etc/x.conf"; stat -c %a "$BASHIBLE_ROOT/etc/x.conf"`,
			stdout: "changed:/etc/x.conf\nrc=0\nchanged:/etc/x.conf\na\n600\nrestart:unit1"},
		// Not yet handled by a finished run: it counts as changed again.
		{script: `r() { echo "restart:$1"; }; bb-event-on svc r; printf 'a\n' | bb-sync-file "$BASHIBLE_ROOT/etc/x.conf" - svc unit1`, stdout: "restart:unit1"},
		// Once the run ended well (bashible.sh clears the list): unchanged, silent.
		{script: `rm -f "$BB_SYNC_UNHANDLED_FILES_STORE"; r() { echo "restart:$1"; }; bb-event-on svc r; printf 'a\n' | bb-sync-file "$BASHIBLE_ROOT/etc/x.conf" - svc unit1; echo "rc=$?"`, stdout: "rc=0"},
		// Changed content: the event again, and the new content.
		{script: `r() { echo "restart:$1"; }; bb-event-on svc r; printf 'b\n' | bb-sync-file "$BASHIBLE_ROOT/etc/x.conf" - svc unit1; cat "$BASHIBLE_ROOT/etc/x.conf"`, stdout: "b\nrestart:unit1"},
	}},
	{name: "sync-dir: two-way removes, one-way keeps", runs: []bbRun{{
		script: `mkdir -p src/sub dst/sub; echo 1 > src/a; echo 2 > src/sub/b; echo old > dst/extra; echo old > dst/sub/gone
ev() { echo "$1:${2#"$PWD/"}"; }
for e in bb-sync-file-changed bb-sync-file-removed bb-sync-dir-created bb-sync-dir-removed; do bb-event-on "$e" "ev $e"; done
bb-sync-dir -o dst src; ls dst | tr '\n' ' '; echo; rm "$BB_SYNC_UNHANDLED_FILES_STORE"
bb-sync-dir dst src done; ls dst dst/sub | tr '\n' ' '; echo
bb-sync-dir new src`,
		stdout: "bb-sync-file-changed:dst/a\nbb-sync-file-changed:dst/sub/b\na extra sub \n" +
			"bb-sync-file-removed:dst/sub/gone\nbb-sync-file-removed:dst/extra\ndst: a sub  dst/sub: b \n" +
			"bb-sync-dir-created:new\nbb-sync-file-changed:new/a\nbb-sync-dir-created:new/sub\nbb-sync-file-changed:new/sub/b",
	}}},
	{name: "tmp files: made in the workspace, removed when the step ends", runs: []bbRun{{
		script: `f=$(bb-tmp-file); d=$(bb-tmp-dir); [[ -f "$f" && -d "$d" ]] && echo made; stat -c %a "$f"
[[ "$f" == "$BASHIBLE_ROOT/var/lib/bashible/.bb-workspace/tmp_"* ]] && echo in-workspace; echo "$f" > "$BASHIBLE_ROOT/last"`,
		stdout: "made\n644\nin-workspace",
	}, {
		script: `[[ -e "$(cat "$BASHIBLE_ROOT/last")" ]] || echo gone; [[ -d "$BASHIBLE_ROOT/var/lib/bashible/.bb-workspace" ]] && echo workspace`,
		stdout: "gone\nworkspace",
	}}},
	{name: "apt: installs only what is missing, holds it, fires once",
		files: map[string]string{"installed": "curl\n"},
		runs: []bbRun{
			{script: `i() { echo "installed:$*"; }; bb-event-on bb-package-installed i; bb-apt-install curl jq; bb-apt-package? curl && echo has-curl`,
				stdout: "installed:jq\nhas-curl",
				stderr: []string{"bb-apt [INFO] Installing packages 'jq'"},
				calls:  []string{"apt-get update", aptInstall + " jq", "apt-mark hold jq"}},
			// Lists are refreshed once per run; the unhandled install still fires.
			{script: `echo jq >> "$BASHIBLE_ROOT/installed"; i() { echo "installed:$*"; }; bb-event-on bb-package-installed i; bb-apt-install curl jq wget`,
				stdout: "installed:wget",
				calls:  []string{aptInstall + " wget", "apt-mark hold wget"}},
			// Everything installed and handled: nothing at all.
			{script: `echo wget >> "$BASHIBLE_ROOT/installed"; rm -f "$BB_APT_UNHANDLED_PACKAGES_STORE"; bb-flag-unset apt-updated
i() { echo "installed:$*"; }; bb-event-on bb-package-installed i; bb-apt-install curl jq wget; echo done`,
				stdout: "done"},
			{script: `bb-apt-package? 'curl=1.2*' && echo v-ok; bb-apt-package? 'curl=2*' || echo v-no; bb-apt-package? nope || echo none`, stdout: "v-ok\nv-no\nnone"},
			{script: `r() { echo "removed:$1"; }; bb-event-on bb-package-removed r; bb-apt-remove curl nope`, stdout: "removed:curl",
				calls: []string{"apt-get remove -y --allow-change-held-packages curl"}},
			{script: `bb-flag-set apt-updated; BB_STUB_EXIT=100 bb-apt-install newpkg; echo after`, code: 100, stderr: []string{"[ERROR] Failed to install packages 'newpkg'"},
				calls: []string{aptInstall + " newpkg"}},
		}},
	{name: "apt: repositories and holds",
		files: map[string]string{"etc/apt/sources.list": "# deb http://old.example/x y main\ndeb http://deb.example.org/debian bookworm main\n", "installed": "a\nb\n", "held": "a\n"},
		runs: []bbRun{{
			script: `bb-apt-repo? deb.example.org && echo has; bb-apt-repo? old.example || echo commented
bb-apt-flag() { bb-flag? apt-updated && echo updated || echo stale; }; bb-flag-set apt-updated
bb-apt-repo-add deb http://deb.example.org/debian bookworm main; bb-apt-flag
bb-apt-repo-add deb https://pkgs.example.com/apt stable main; bb-apt-flag; cat "$BASHIBLE_ROOT/etc/apt/sources.list.d/pkgs.example.com.list"
bb-apt-hold? a && echo a-held; bb-apt-hold? b || echo b-free; bb-apt-hold b; bb-apt-unhold a`,
			stdout: "has\ncommented\nupdated\nstale\ndeb https://pkgs.example.com/apt stable main\na-held\nb-free",
			calls:  []string{"apt-mark hold b", "apt-mark unhold a"},
		}}},
	{name: "dnf and yum: install what is missing, fire the event",
		files: map[string]string{"installed": "vim\n", "etc/os-release": "ID=rocky\nVERSION_ID=9.4\n"},
		runs: []bbRun{
			{script: `i() { echo "installed:$*"; }; bb-event-on bb-package-installed i; BB_DNF_INSTALL_EXTRA_ARGS="--nogpgcheck -q"; bb-dnf-install vim tmux`,
				stdout: "installed:tmux",
				calls:  []string{"dnf clean all", "dnf makecache", "dnf install --nogpgcheck -q -y tmux"}},
			{script: `bb-yum-install vim nano; bb-yum-remove vim nano`,
				calls: []string{"yum clean all", "yum makecache", "yum install -y nano", "yum remove -y vim"}},
			{script: `bb-pkg install vim git; bb-pkg-mgr; bb-is-bundle; bb-is-family; bb-pkg frobnicate || echo "rc=$?"`,
				stdout: "dnf\ncentos\ncentos\nrc=1",
				stderr: []string{"action 'frobnicate' is not supported for package manager 'dnf'"},
				calls:  []string{"dnf install -y git"}},
		}},
	{name: "package-install: OS packages and registry packages",
		files: map[string]string{"installed": "curl\n"},
		runs: []bbRun{
			{script: `bb-package-install curl htop`, calls: []string{
				"apt-get install -y -q --no-install-recommends --no-remove -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confold -o Acquire::Retries=3 htop"}},
			{script: `bb-package-install jq:sha256:` + strings.Repeat("ab", 32), code: 1,
				stderr: []string{"node-manager serves none"}},
			{script: `bb-package-install jq:sha256:` + strings.Repeat("ab", 32) + ` curl`, code: 1, stderr: []string{"not both"}},
		}},
	{name: "download: Deckhouse's form into the workspace, node-manager's verified form", runs: []bbRun{
		{script: `p=$(bb-download https://example.com/files/tool.tgz); echo "${p#"$BASHIBLE_ROOT"}"; cat "$p"; bb-download https://example.com/files/tool.tgz > /dev/null`,
			stdout: "/var/lib/bashible/.bb-workspace/download/tool.tgz\nfetched", calls: []string{"wget (args)"}},
		{script: `bb-download https://example.com/files/tool.tgz other true > /dev/null; bb-download https://example.com/files/tool.tgz > /dev/null`,
			calls: []string{"wget (args)"}},
		{script: `bb-download https://example.com/x "" "$BASHIBLE_ROOT/x"`, code: 1, stderr: []string{"no sha256 is recorded"}},
	}},
	{name: "OS detection", files: map[string]string{"etc/os-release": "ID=ubuntu\nVERSION_ID=\"24.04\"\nUBUNTU_CODENAME=noble\n"}, runs: []bbRun{
		{script: `bb-is-bundle; bb-is-family; bb-pkg-mgr; bb-bundle; bb-is-ubuntu-version? 24.04 && echo yes; bb-is-ubuntu-version? 22.04 || echo no; bb-get-ubuntu-codename; bb-is-astra-version? '1\..*' || echo not-astra; bb-dvp-nesting-level`,
			stdout: "ubuntu-lts\ndebian\napt\nubuntu-lts\nyes\nno\nnoble\nnot-astra\n0"},
		{script: `echo ID=plan9 > "$BASHIBLE_ROOT/etc/os-release"; bb-is-bundle; bb-bundle || echo "rc=$?"`, stdout: "unknown\nrc=1", stderr: []string{"unsupported OS 'plan9': supported are debian"}},
	}},
	{name: "template, wait, exe, task", runs: []bbRun{
		{script: `printf 'name=$NAME "quoted" $(echo cmd)\n' > t; NAME=n1; bb-template t; bb-exe? bash && echo exe; bb-exe? no-such-cmd || echo none
bb-wait '[[ -e ready ]]' 2 || echo "timeout $?"; touch ready; bb-wait '[[ -e ready ]]' 2 && echo waited`,
			stdout: "name=n1 \"quoted\" cmd\nexe\nnone\ntimeout 1\nwaited", stderr: []string{"[ERROR] Timeout has been reached during wait for '[[ -e ready ]]'"}},
		{script: `a() { bb-task-depends b c; echo a; }; b() { bb-task-depends c; echo b; }; c() { echo c; }
bb-task-def a; bb-task-def b; bb-task-def c; bb-task-run a b; bb-task-run c`, stdout: "c\nb\na\nc"},
		{script: `bb-task-run nope`, code: 14, stderr: []string{"Undefined task 'nope'"}},
		{script: `bb-task-depends x`, code: 13},
	}},
	{name: "read settings files", runs: []bbRun{{
		script: `printf '# c\nname = web\nport: 80\nlong.key=a b\n' > p; bb-read-properties p P_; echo "$P_name $P_port $P_long_key"
printf '[main]\nHost = h1\n; c\n[other]\nx=1\n' > i; bb-read-ini i main I_; echo "$I_main_host ${I_other_x:-unset}"; bb-read-ini i '*' J_; echo "$J_other_x"
printf '{"a":{"b":[1,"x"]},"n":null}' > j; bb-read-json j J; echo "$J_a_b_len $J_a_b_0 $J_a_b_1 [$J_n]"
bb-read-json missing X || echo "rc=$?"`,
		stdout: "web 80 a b\nh1 unset\n1\n2 1 x []\nrc=1",
	}}},
	{name: "proxy", runs: []bbRun{{
		script: `export HTTP_PROXY=x https_proxy=y; bb-set-proxy; echo "[${HTTP_PROXY:-}${https_proxy:-}]"; export NO_PROXY=z; bb-unset-proxy; echo "[${NO_PROXY:-}]"`,
		stdout: "[]\n[]",
	}}},
	{name: "users and groups", files: map[string]string{"getent-group": "docker:x:999:\n", "getent-passwd": "1001:x\n"}, runs: []bbRun{
		{script: `bb-create_user_and_group app 2000 app 2000`, calls: []string{"groupadd -g 2000 app", "useradd -m -u 2000 -g app app"}},
		{script: `bb-create_user_and_group app 1001 docker 999`, stderr: []string{"Group docker already exists", "User ID 1001 is already exists"}},
	}},
	{name: "status and Events map onto node-manager's", runs: []bbRun{{
		script: `bb-instance-condition() { echo "condition $*"; }; bb-event() { echo "event $*"; }; export BASHIBLE_NODE_NAME=n1
bb-patch-instance-condition Ready True Fine; bb-bashible-ready-steps-completed 050_x; bb-bashible-ready-steps-failed 050_x oops
bb-waiting-approval-required hint; bb-disruption-approval-not-required
bb-event-create error 050_x; bb-event-info-create 050_x; echo "last lines" > step.log; bb-event-error-create 050_y
bb-d8-node-name; printf 'a\nb\n' | bb-indent-text '  '`,
		stdout: "condition Ready True Fine \ncondition BashibleReady True StepsCompleted Last successful step: 050_x\n" +
			"condition BashibleReady False StepsFailed 050_x: oops\ncondition WaitingApproval True UpdateApprovalRequired hint\n" +
			"condition WaitingDisruptionApproval False DisruptionApprovalNotRequired \n" +
			"event Warning BashibleStepFailed Bashible step 050_x failed on n1\nevent Normal BashibleNodeUpdate 050_x steps update on n1\n" +
			"event Warning BashibleStepFailed last lines\nn1\n  a\n  b",
	}}},
	{name: "node metadata patches", runs: []bbRun{{
		script: `bb-curl-kube() { echo "$1 $2 $3 $4 $5 $7"; }; bb-curl-kube-patch-node-metadata n1 labels --resource-version=42 a=b gone-`,
		stdout: `/api/v1/nodes/n1 -X PATCH -H Content-Type: application/strategic-merge-patch+json {"metadata":{"labels":{"a":"b","gone":null},"resourceVersion":"42"}}`,
	}}},
	{name: "python extensions and YAML", runs: []bbRun{{
		script: `bb-ext-python greet <<'PY'
import sys
print("hi " + sys.argv[1])
PY
greet there; printf 'a:\n  b: [x, y]\n' > y.yaml; if bb-read-yaml?; then bb-read-yaml y.yaml Y; echo "$Y_a_b_len $Y_a_b_1"; else echo "2 y"; fi`,
		stdout: "hi there\n2 y",
	}}},
	{name: "containerd registry sections", runs: []bbRun{{
		script: `printf '[plugins."io.containerd.grpc.v1.cri".registry.mirrors]\n' > v1; printf 'version = 3\n' > v2
bb-ctrd-v1-has-registry-fields v1 && echo v1; bb-ctrd-v2-has-registry-fields v2 || echo "none $?"; bb-ctrd-v1-has-registry-fields missing || echo "rc=$?"`,
		stdout: "v1\nnone 1\nrc=2",
	}}},
}

func TestBashboosterHelpers(t *testing.T) {
	lib := libraryOf(t)
	for _, c := range bashboosterCases {
		for _, options := range []string{"-eEo pipefail", "-Eeuo pipefail"} {
			t.Run(c.name+"/"+options, func(t *testing.T) {
				t.Parallel() // each case has its own root and stubs
				runBashbooster(t, lib, options, c)
			})
		}
	}
}

// A traced step (bashible traces from the third attempt) never shows the
// bootstrap token the cluster helpers use.
func TestBashboosterCredentialsStayOutOfTraces(t *testing.T) {
	lib := libraryOf(t)
	runBashbooster(t, lib, "-eEo pipefail", bbCase{
		name:  "traced bb-curl-kube",
		files: map[string]string{"var/lib/bashible/bootstrap-token": "abcdef.secrettokenvalue"},
		runs: []bbRun{{
			script: `set -x; bb-curl-kube-detect-auth; bb-curl-kube-build-curl-auth-args; set +x
cat "$BASHIBLE_DIR/bootstrap-token-header"; stat -c %a "$BASHIBLE_DIR/bootstrap-token-header"
set -x; echo token | bb-untraced bb-bearer-header h; set +x; cat h`,
			stdout:   "Authorization: Bearer abcdef.secrettokenvalue\n600\nAuthorization: Bearer token",
			noStderr: []string{"secrettokenvalue"},
		}},
	})
}

// Registry packages installed before are recognised by digest (tag), and
// removed by their own uninstall script, with the event.
func TestBashboosterRegistryPackagesRemove(t *testing.T) {
	lib := libraryOf(t)
	digest := "sha256:" + strings.Repeat("0f", 32)
	runBashbooster(t, lib, "-Eeuo pipefail", bbCase{
		name: "registry packages",
		files: map[string]string{
			"var/cache/registrypackages/jq/digest":    digest + "\n",
			"var/cache/registrypackages/jq/uninstall": "echo uninstalling jq\n",
			"var/cache/registrypackages/yq/tag":       "v4\n",
			"var/cache/registrypackages/yq/uninstall": "echo uninstalling yq\n",
		},
		runs: []bbRun{{
			script: `r() { echo "removed:$1"; }; bb-event-on bb-package-removed r
bb-package-or-image-is-installed? jq ` + digest + ` && echo jq-installed; bb-rp-is-installed? yq v4 && echo yq-installed; bb-rp-is-installed? yq v5 || echo not-v5
bb-package-install jq:` + digest + `; bb-package-remove jq nothing; bb-rp-remove yq; ls "$BASHIBLE_ROOT/var/cache/registrypackages"`,
			stdout: "jq-installed\nyq-installed\nnot-v5\nuninstalling jq\nremoved:jq\nuninstalling yq\nremoved:yq",
			stderr: []string{"already installed"},
		}},
	})
}
