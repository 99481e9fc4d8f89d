package corpus

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"mvdan.cc/sh/v3/syntax"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/hack/shelltest"
	"github.com/node-manager/node-manager/templates"
)

// refusal is why Deckhouse's own API refuses a published object too, and
// what the refusal here must say.
type refusal struct{ Why, With string }

// refusedAsInDeckhouse are the published objects that no API takes as
// published, by testdata file: the page shows a fragment to explain one
// field, or a template for the reader's shell to fill in, and Deckhouse's
// API refuses it for the same reason as node-manager's. Everything else
// must be accepted.
var refusedAsInDeckhouse = map[string]refusal{
	"node-manager-faq-02-ready-nodegroup.yaml": {
		Why:  "the FAQ shows the group to explain its Ready condition and leaves out cloudInstances.classReference, which Deckhouse's schema requires too",
		With: "spec.cloudInstances.classReference: Required value",
	},
	"node-manager-faq-03-not-ready-nodegroup.yaml": {
		Why:  "the FAQ shows the group to explain its Ready condition and leaves out cloudInstances.classReference, which Deckhouse's schema requires too",
		With: "spec.cloudInstances.classReference: Required value",
	},
	"node-management-01-worker-cloud-nodegroup.yaml": {
		Why: "the page shows the group to explain updates and leaves out cloudInstances.minPerZone and maxPerZone, which Deckhouse's schema requires too " +
			"(its kind, AnotherCloudInstanceClass, is no class Deckhouse's enum lists either)",
		With: "spec.cloudInstances.minPerZone: Required value",
	},
	"migrating-01-containerdv2-nodegroup.yaml": {
		Why:  "the page shows spec.cri.type alone and leaves out spec.nodeType, which Deckhouse's schema requires too",
		With: "spec.nodeType: Required value",
	},
	"faq-02-containerd-edition-config.yaml": {
		Why: "the page's here-document is for the reader's shell, which puts the edition into the name (containerd-$NEW_EDITION-config.sh); " +
			"as published the name is no valid object name, for Deckhouse's API too",
		With: "metadata.name: Invalid value",
	},
}

// refusedHereOnly are the published objects that Deckhouse's API stores
// and node-manager's refuses, by testdata file: a value Deckhouse writes to
// a node's files unchecked and node-manager validates first
// (docs/operations/deckhouse-compatibility.md lists each difference).
var refusedHereOnly = map[string]refusal{
	"node-manager-examples-07-nodeuser.yaml": {
		Why: "the page's <SSH_PUBLIC_KEY> and <PASSWORD_HASH> are placeholders for the reader; Deckhouse's schema gives keys and hashes no format, " +
			"so it stores them and writes them into authorized_keys and /etc/shadow, where node-manager requires an authorized_keys line and a crypt(3) hash",
		With: "spec.sshPublicKeys[0]: Invalid value",
	},
}

// TestEveryPublishedNodeGroupIsAccepted: the API accepts every NodeGroup
// the documentation publishes, as published and at the version published,
// but for the ones Deckhouse refuses too (refusedAsInDeckhouse), which must
// be refused for that reason; what it warns about is logged.
func TestEveryPublishedNodeGroupIsAccepted(t *testing.T) { checkAccepted(t, "NodeGroup") }

// TestEveryPublishedNodeUserIsAccepted: the same for NodeUsers, which
// node-manager validates where Deckhouse does not (refusedHereOnly).
func TestEveryPublishedNodeUserIsAccepted(t *testing.T) { checkAccepted(t, "NodeUser") }

func checkAccepted(t *testing.T, kind string) {
	list := ofKind(kind)
	if len(list) == 0 {
		t.Fatalf("the corpus holds no %s", kind)
	}
	accepted, refused, refusedHere := 0, 0, 0
	for _, e := range list {
		want, asInDeckhouse := refusedAsInDeckhouse[e.File]
		wantHere, hereOnly := refusedHereOnly[e.File]
		if asInDeckhouse || hereOnly {
			if hereOnly {
				want = wantHere
			}
			if e.CreateErr == nil || !strings.Contains(e.CreateErr.Error(), want.With) {
				t.Errorf("%s: %s %s should be refused (%s) saying %q; the API answered %v", e.File, kind, e.Published, want.Why, want.With, e.CreateErr)
				continue
			}
			if hereOnly {
				refusedHere++
				t.Logf("%s: %s %s refused, where Deckhouse stores it: %s", e.File, kind, e.Published, want.Why)
				continue
			}
			refused++
			t.Logf("%s: %s %s refused, as by Deckhouse: %s", e.File, kind, e.Published, want.Why)
			continue
		}
		if e.CreateErr != nil {
			t.Errorf("%s: %s %s (%s, %s) was refused: %v", e.File, kind, e.Published, e.Object.GetAPIVersion(), e.Source, e.CreateErr)
			continue
		}
		accepted++
		for _, w := range e.Warnings {
			t.Logf("%s: %s %s accepted with the warning: %s", e.File, kind, e.Name, w)
		}
	}
	t.Logf("%ss accepted: %d of %d; %d more refused as Deckhouse refuses them, %d refused where Deckhouse stores them", kind, accepted, len(list), refused, refusedHere)
	t.Logf("per page: %s", perPage(list, func(e *example) bool { return e.CreateErr == nil }))
	t.Logf("per version: %s", perVersion(list, func(e *example) bool { return e.CreateErr == nil }))
}

// perVersion counts the examples for which ok holds, by the API version
// they are published at.
func perVersion(list []*example, ok func(*example) bool) string {
	return countBy(list, func(e *example) string { return e.Object.GetAPIVersion() }, ok)
}

// page is the documentation page of a testdata file: its name up to the
// example's number (cloud-node, node-manager-faq...).
func page(file string) string {
	parts := strings.Split(file, "-")
	for i, p := range parts {
		if len(p) == 2 && p[0] >= '0' && p[0] <= '9' {
			return strings.Join(parts[:i], "-")
		}
	}
	return file
}

// perPage counts the examples for which ok holds, by page, in the pages'
// name order: "cloud-node 8/8, ...".
func perPage(list []*example, ok func(*example) bool) string {
	return countBy(list, func(e *example) string { return page(e.File) }, ok)
}

// countBy counts the examples for which ok holds, by key, in the keys'
// order: "cloud-node 8/8, ...".
func countBy(list []*example, key func(*example) string, ok func(*example) bool) string {
	type count struct{ ok, all int }
	counts := map[string]*count{}
	var keys []string
	for _, e := range list {
		k := key(e)
		if counts[k] == nil {
			counts[k] = &count{}
			keys = append(keys, k)
		}
		counts[k].all++
		if ok(e) {
			counts[k].ok++
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d/%d", k, counts[k].ok, counts[k].all)
	}
	return strings.Join(parts, ", ")
}

// rendered is a configuration's step as the API serves it.
type rendered struct {
	*example
	// Spec is the configuration as stored (defaults applied).
	Spec deckhousev1alpha1.NodeGroupConfigurationSpec
	// Step is the step's file name; Group the group it was read from, and
	// Script its text there.
	Step, Group, Script string
}

// steps caches renderedSteps: the first test to ask waits for the
// configurations and reports their failures; the others use its answer.
var steps struct {
	sync.Once
	list []rendered
}

// renderedSteps waits until every configuration of the corpus reports
// Rendered=True and its step is in the served bundle of every group it
// selects, and returns the steps; a configuration that fails either is an
// error of the test that asked first, and is left out.
func renderedSteps(t *testing.T) []rendered {
	t.Helper()
	steps.Do(func() { steps.list = waitRendered(t) })
	return steps.list
}

func waitRendered(t *testing.T) []rendered {
	t.Helper()
	var out []rendered
	for _, e := range ofKind("NodeGroupConfiguration") {
		if want, ok := refusedAsInDeckhouse[e.File]; ok {
			if e.CreateErr == nil || !strings.Contains(e.CreateErr.Error(), want.With) {
				t.Errorf("%s: NodeGroupConfiguration %s should be refused (%s) saying %q; the API answered %v", e.File, e.Published, want.Why, want.With, e.CreateErr)
			} else {
				t.Logf("%s: NodeGroupConfiguration %s refused, as by Deckhouse: %s", e.File, e.Published, want.Why)
			}
			continue
		}
		if e.CreateErr != nil {
			t.Errorf("%s: NodeGroupConfiguration %s (%s) was refused: %v", e.File, e.Published, e.Source, e.CreateErr)
			continue
		}
		var ngc *deckhousev1alpha1.NodeGroupConfiguration
		var cond *metav1.Condition
		err := wait.PollUntilContextTimeout(framework.Context(t), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			if ngc, err = f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, e.Name, metav1.GetOptions{}); err != nil {
				return false, err
			}
			cond = meta.FindStatusCondition(ngc.Status.Conditions, bundles.ConditionRendered)
			return cond != nil && cond.ObservedGeneration == ngc.Generation, nil
		})
		if err != nil {
			t.Errorf("%s: NodeGroupConfiguration %s got no Rendered condition for its generation: %v (conditions %+v)", e.File, e.Name, err, ngc.Status.Conditions)
			continue
		}
		if cond.Status != metav1.ConditionTrue || cond.Reason != "Rendered" {
			t.Errorf("%s: NodeGroupConfiguration %s: Rendered=%s %s: %s", e.File, e.Name, cond.Status, cond.Reason, cond.Message)
			continue
		}
		step := templates.CustomStep{Name: e.Name, Weight: ngc.Spec.Weight}.FileName()
		r := rendered{example: e, Spec: ngc.Spec, Step: step}
		ok := true
		groups := selectedGroups(ngc.Spec.NodeGroups)
		if len(groups) == 0 {
			t.Errorf("%s: NodeGroupConfiguration %s selects %v, none of the groups of the corpus or the cluster's own %v", e.File, e.Name, ngc.Spec.NodeGroups, clusterGroups)
			continue
		}
		for _, group := range groups {
			script, found := f.Bundle(t, group).Data[step]
			if !found {
				t.Errorf("%s: step %s is not in the served nodegroupbundles/%s", e.File, step, group)
				ok = false
				continue
			}
			if r.Script == "" {
				r.Group, r.Script = group, script
			}
		}
		if ok && r.Script != "" {
			out = append(out, r)
		}
	}
	return out
}

// selectedGroups are the cluster's own groups and the accepted groups of
// the corpus that nodeGroups selects ("*" all of them), by the names they
// were created with.
func selectedGroups(nodeGroups []string) []string {
	var out []string
	for _, name := range clusterGroups {
		if slices.Contains(nodeGroups, "*") || slices.Contains(nodeGroups, name) {
			out = append(out, name)
		}
	}
	for _, e := range ofKind("NodeGroup") {
		if e.CreateErr == nil && (slices.Contains(nodeGroups, "*") || slices.Contains(nodeGroups, e.Name)) {
			out = append(out, e.Name)
		}
	}
	return out
}

// TestEveryPublishedConfigurationRenders: every NodeGroupConfiguration is
// accepted, its Rendered condition is True, and its step is served to
// every group it selects.
func TestEveryPublishedConfigurationRenders(t *testing.T) {
	steps := renderedSteps(t)
	configurations := ofKind("NodeGroupConfiguration")
	refused := 0
	for _, e := range configurations {
		if _, ok := refusedAsInDeckhouse[e.File]; ok {
			refused++
		}
	}
	t.Logf("NodeGroupConfigurations rendered: %d of %d; %d more refused as Deckhouse refuses them", len(steps), len(configurations), refused)
	t.Logf("per page: %s", perPage(configurations, func(e *example) bool {
		return slices.ContainsFunc(steps, func(r rendered) bool { return r.example == e })
	}))
}

// tolerated are the shellcheck findings of the published scripts, by
// testdata file, with the reason each is the users' own style rather than
// a fault of node-manager. Everything else shellcheck reports at the
// severity the project holds its own steps to (style) fails the test.
//
// SC2086 (info: an unquoted expansion) and SC1091 (info: /etc/os-release
// is sourced, which shellcheck cannot follow) are the published scripts'
// style; they do what they mean for the values they hold. The CentOS
// install-cuda.sh has a real fault, reported as warnings: its line
// "distribution=$(...) \" ends with a backslash, so the assignment becomes
// the environment of the next line's curl (SC2097, SC2098), and the URL
// that line builds never sees it (SC2154): on a node it fetches
// .../libnvidia-container//libnvidia-container.repo. The step runs here as
// it runs under Deckhouse, fault included; the finding is the page's. The
// FAQ's CentOS install-cuda.sh passes kernel-devel-$(uname -r) unquoted
// (SC2046, warning): uname -r prints one word, so it splits into nothing
// more. The FAQ's edition and CSE steps are here-documents for the
// reader's shell, which fills in $NEW_EDITION and $CSE_K8S_API_PROXY
// before the step exists; kept as published, the first leaves
// $NEW_EDITION unquoted (SC2086) and the second has it in sed's single
// quotes (SC2016), both info. The registry FAQ's custom-registry sets
// REGISTRY_SCHEME and never reads it (SC2034, warning).
var tolerated = map[string][]string{
	"cloud-node-04-add-custom-ca.yaml":               {"SC2086"},
	"cloud-node-05-add-custom-ca-containerd.yaml":    {"SC2086"},
	"node-customization-03-install-cuda-ubuntu.yaml": {"SC2086", "SC1091"},
	"node-customization-04-install-cuda-centos.yaml": {"SC2086", "SC1091", "SC2097", "SC2098", "SC2154"},
	"node-manager-examples-06-add-custom-ca.yaml":    {"SC2086"},
	"node-manager-faq-07-install-cuda-centos.yaml":   {"SC2046"},
	"faq-03-del-temp-config-edition.yaml":            {"SC2086"},
	"faq-05-cse-set-sha-images.yaml":                 {"SC2016"},
	"registry-faq-01-custom-registry.yaml":           {"SC2034"},
}

// TestRenderedStepsAreShellClean: every served step parses with bash -n and
// passes shellcheck at the project's severity, but for the findings listed
// in tolerated.
func TestRenderedStepsAreShellClean(t *testing.T) {
	steps := renderedSteps(t)
	clean := 0
	for _, r := range steps {
		if t.Run(r.File, func(t *testing.T) {
			shelltest.CheckTolerating(t, r.Step+" of "+r.Group+" ("+r.File+")", r.Script, tolerated[r.File]...)
		}) {
			clean++
		}
	}
	t.Logf("steps shell-clean: %d of %d (%d with tolerated findings)", clean, len(steps), len(tolerated))
}

// library is the shell library bashible.sh writes to lib.sh for group,
// as served.
func library(t *testing.T, group string) string {
	t.Helper()
	b, err := f.NM.BashibleV1alpha1().Bashibles().Get(framework.Context(t), group, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get bashibles/%s: %v", group, err)
	}
	script := b.Data["bashible.sh"]
	const start, end = "<<'BASHIBLE_LIB'\n", "\nBASHIBLE_LIB\n"
	i, j := strings.Index(script, start), strings.Index(script, end)
	if i < 0 || j < i {
		t.Fatalf("bashibles/%s does not carry the library where expected", group)
	}
	return script[i+len(start) : j+1]
}

// parseScript parses a bash script; the test fails when it does not parse.
func parseScript(t *testing.T, name, script string) *syntax.File {
	t.Helper()
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), name)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return file
}

// calledHelpers are the bb-* commands a script runs: the literal first word
// of every simple command, command substitutions included (an event name in
// quotes is an argument, not a call).
func calledHelpers(file *syntax.File) []string {
	set := map[string]bool{}
	syntax.Walk(file, func(node syntax.Node) bool {
		if call, ok := node.(*syntax.CallExpr); ok && len(call.Args) > 0 {
			if name := call.Args[0].Lit(); strings.HasPrefix(name, "bb-") {
				set[name] = true
			}
		}
		return true
	})
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestEveryCalledHelperIsDefined: every bb-* command a published step runs
// is a function of the library the step runs with.
func TestEveryCalledHelperIsDefined(t *testing.T) {
	steps := renderedSteps(t)
	if len(steps) == 0 {
		t.Fatal("no rendered step")
	}
	defined := map[string]bool{}
	syntax.Walk(parseScript(t, "lib.sh", library(t, steps[0].Group)), func(node syntax.Node) bool {
		if fn, ok := node.(*syntax.FuncDecl); ok {
			defined[fn.Name.Value] = true
		}
		return true
	})
	calls, resolved := 0, 0
	for _, r := range steps {
		for _, helper := range calledHelpers(parseScript(t, r.Step, r.Script)) {
			calls++
			if !defined[helper] {
				t.Errorf("%s: %s calls %s, which the library does not define", r.File, r.Step, helper)
				continue
			}
			resolved++
		}
	}
	t.Logf("helper calls resolved: %d of %d (in %d steps)", resolved, calls, len(steps))
}

// debianOutcome is what running a step in the Debian root must do beyond
// exiting 0, by testdata file: a file it writes, a stub call it makes, or a
// documented failure.
type debianOutcome struct {
	// Files must exist in the root afterwards.
	Files []string
	// Calls must be among the stubs' calls.
	Calls []string
	// Contains maps a file of the root to text it must hold afterwards.
	Contains map[string]string
	// Fails, when set, is why the step fails here, and what its output
	// must say.
	Fails, FailsWith string
}

var debianOutcomes = map[string]debianOutcome{
	"node-customization-02-containerd-additional-config.yaml": {Files: []string{"etc/containerd/conf.d/nvidia_gpu.toml"}},
	"node-customization-05-containerd-option-config.yaml":     {Files: []string{"etc/containerd/conf.d/additional_option.toml"}},
	"node-customization-06-registry-auth-deprecated.yaml":     {Files: []string{"etc/containerd/conf.d/additional_registry.toml"}},
	"node-customization-07-registry-tls-deprecated.yaml":      {Files: []string{"var/lib/containerd/certs/private.registry.example.crt"}},
	"node-customization-08-registry-skip-tls-deprecated.yaml": {Files: []string{"etc/containerd/conf.d/additional_registry.toml"}},
	"node-customization-09-mirror-deprecated.yaml": {
		Fails:     "it edits Deckhouse's own built-in step 032_configure_containerd.sh with sed; node-manager's steps have other names (040_containerd.sh), so the file is not there",
		FailsWith: "032_configure_containerd.sh: No such file or directory",
	},
	"node-customization-10-registry-auth-actual.yaml":     {Files: []string{"etc/containerd/registry.d/private.registry.example/hosts.toml"}},
	"node-customization-11-registry-tls-actual.yaml":      {Files: []string{"etc/containerd/registry.d/private.registry.example/ca.crt"}},
	"node-customization-12-registry-skip-tls-actual.yaml": {Files: []string{"etc/containerd/registry.d/private.registry.example/hosts.toml"}},
	"node-customization-13-mirror-actual.yaml":            {Files: []string{"etc/containerd/registry.d/docker.io/hosts.toml", "etc/containerd/registry.d/gcr.io/hosts.toml"}},
	"cloud-node-03-sysctl-tune.yaml":                      {Calls: []string{"sysctl -w vm.max_map_count=262144"}},
	"cloud-node-06-install-kernel-debian.yaml":            {Calls: []string{"-y linux-image-5.15.0-53-generic"}, Files: []string{"var/lib/bashible/flags/reboot"}},
	"faq-01-profile-proxy.yaml":                           {},
	"node-manager-examples-05-add-cert-manager-plugin.yaml": {
		Calls: []string{"curl -L https://github.com/cert-manager/cert-manager/releases/download/v1.7.1/kubectl-cert_manager-linux-amd64.tar.gz -o -"},
		Files: []string{"usr/local/bin/kubectl-cert_manager"},
	},
	"node-manager-faq-06-install-cuda-debian.yaml": {
		Calls: []string{
			"wget https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb",
			"dpkg -i cuda-keyring_1.1-1_all.deb",
			"gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg",
			"curl -s -L https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list",
			"apt install -y cuda-drivers-575",
			"apt install -y nvidia-container-toolkit",
		},
		Files: []string{"etc/apt/sources.list.d/nvidia-container-toolkit.list"},
	},
	"ntp-01-enable-ntp-on-node.yaml": {Calls: []string{"systemctl enable systemd-timesyncd", "systemctl start systemd-timesyncd"}},
	"sdn-configure-01-hugepages-for-dpdk.yaml": {
		Calls:    []string{"sysctl -p /etc/sysctl.d/99-hugepages.conf"},
		Contains: map[string]string{"etc/sysctl.d/99-hugepages.conf": "vm.nr_hugepages = 4096"},
	},
	"faq-03-del-temp-config-edition.yaml": {},
	"faq-04-containerd-cse-config.yaml": {
		Files:    []string{"var/lib/bashible/flags/containerd-need-restart"},
		Contains: map[string]string{"etc/containerd/conf.d/cse-registry.toml": `auth = "$AUTH_STRING"`},
	},
	"faq-05-cse-set-sha-images.yaml": {
		Fails: "after writing cse-sandbox.toml it edits Deckhouse's own built-in step 051_pull_and_configure_kubernetes_api_proxy.sh with sed; " +
			"node-manager's steps have other names, so the file is not there",
		FailsWith: "051_pull_and_configure_kubernetes_api_proxy.sh: No such file or directory",
	},
	"faq-06-del-temp-config-cse.yaml": {},
	"faq-07-disable-ipv6.yaml": {
		Calls:    []string{"update-grub"},
		Contains: map[string]string{"etc/default/grub": `GRUB_CMDLINE_LINUX_DEFAULT="quiet ipv6.disable=1"`},
	},
	"registry-faq-01-custom-registry.yaml": {
		Contains: map[string]string{"etc/containerd/registry.d/registry.io/hosts.toml": `[host."https://registry.deckhouse.ru".auth]`},
	},
}

// debianMachine are files a Debian machine has that the minimal root
// lacks, which published steps edit or write beside: GRUB's defaults, and
// /etc/sysctl.d (procps ships it with this README; on a node
// node-manager's 015_kernel step also creates it, before any
// configuration's step runs).
var debianMachine = map[string]string{
	"etc/sysctl.d/README.sysctl": "Kernel system variables configuration files\n",
	"etc/default/grub":           "GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"\"\n",
}

// forOtherOS are published with bundles '*' but written for another OS, by
// testdata file: they are not run on Debian.
var forOtherOS = map[string]string{
	"cloud-node-07-install-kernel-centos.yaml": "the page's CentOS-based example (bb-dnf-install; Debian has no dnf)",
}

// debianStubs stand in for what needs the internet: apt records the
// request and installs nothing, and so do dpkg -i (of a package file the
// stubbed download did not bring; other uses of dpkg are the real one) and
// gpg; curl and wget record the request and serve the file of that name
// in /var/cache/stub-downloads (downloads), or nothing. update-grub, which
// would write the boot loader, is recorded. sudo runs its command: steps
// run as root already.
var debianStubs = map[string]string{
	"usr/local/sbin/apt-get":     "#!/bin/sh\necho \"apt-get $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/apt-mark":    "#!/bin/sh\necho \"apt-mark $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/apt":         "#!/bin/sh\necho \"apt $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/sudo":        "#!/bin/sh\nexec \"$@\"\n",
	"usr/local/sbin/update-grub": "#!/bin/sh\necho \"update-grub $*\" >> /var/log/stub-calls.log\n",
	"usr/local/sbin/dpkg": `#!/bin/sh
if [ "$1" = -i ]; then echo "dpkg $*" >> /var/log/stub-calls.log; exit 0; fi
exec /usr/bin/dpkg "$@"
`,
	"usr/local/sbin/gpg": `#!/bin/sh
echo "gpg $*" >> /var/log/stub-calls.log
cat > /dev/null
while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done
`,
	"usr/local/sbin/curl": `#!/bin/sh
echo "curl $*" >> /var/log/stub-calls.log
out=-; url=
while [ $# -gt 0 ]; do
  case $1 in -o) out=$2; shift ;; http://*|https://*) url=$1 ;; esac
  shift
done
file=/var/cache/stub-downloads/${url##*/}
[ -f "$file" ] || file=/dev/null
if [ "$out" = - ]; then cat "$file"; else cat "$file" > "$out"; fi
`,
	"usr/local/sbin/wget": `#!/bin/sh
echo "wget $*" >> /var/log/stub-calls.log
for url; do case $url in http://*|https://*)
  file=/var/cache/stub-downloads/${url##*/}; [ -f "$file" ] || file=/dev/null
  cat "$file" > "${url##*/}" ;;
esac; done
`,
}

// downloads are the files the stubbed curl and wget serve, by name: the
// cert-manager plugin's release archive, holding a stand-in for the
// plugin.
func downloads(t *testing.T) map[string][]byte {
	t.Helper()
	var archive bytes.Buffer
	gz := gzip.NewWriter(&archive)
	tw := tar.NewWriter(gz)
	plugin := []byte("#!/bin/sh\necho kubectl-cert_manager stand-in\n")
	if err := tw.WriteHeader(&tar.Header{Name: "kubectl-cert_manager", Mode: 0o755, Size: int64(len(plugin))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(plugin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"kubectl-cert_manager-linux-amd64.tar.gz": archive.Bytes()}
}

// TestDebianStepsRunInTheDebianRoot: every published step for Debian
// (bundles '*' or debian) runs in a Debian bookworm root as a fresh node's
// bashible runs it — after the library, in its own bash with Deckhouse's
// options, in name order — with package installs stubbed, and does what it
// is published to do.
func TestDebianStepsRunInTheDebianRoot(t *testing.T) {
	debianroot.RequireRoot(t)
	steps := renderedSteps(t)
	var debian []rendered
	for _, r := range steps {
		if !slices.Contains(r.Spec.Bundles, "*") && !slices.Contains(r.Spec.Bundles, "debian") {
			continue
		}
		if why, ok := forOtherOS[r.File]; ok {
			t.Logf("%s: not run on Debian: %s", r.File, why)
			continue
		}
		if _, ok := debianOutcomes[r.File]; !ok {
			t.Errorf("%s: a Debian step without an expected outcome in debianOutcomes", r.File)
			continue
		}
		debian = append(debian, r)
	}
	slices.SortFunc(debian, func(a, b rendered) int { return strings.Compare(a.Step, b.Step) })

	root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
	debianroot.InstallStubs(t, root)
	for path, content := range debianStubs {
		debianroot.WriteFile(t, filepath.Join(root, path), content, 0o755)
	}
	for path, content := range debianMachine {
		debianroot.WriteFile(t, filepath.Join(root, path), content, 0o644)
	}
	for name, content := range downloads(t) {
		debianroot.WriteFile(t, filepath.Join(root, "var/cache/stub-downloads", name), string(content), 0o644)
	}
	dir := filepath.Join(root, "var/lib/bashible")
	debianroot.WriteFile(t, filepath.Join(dir, "lib.sh"), library(t, debian[0].Group), 0o600)
	// A new machine's first run: disruptive steps are approved at once.
	debianroot.WriteFile(t, filepath.Join(dir, "first_run"), "", 0o600)

	ran := 0
	for _, r := range debian {
		debianroot.WriteFile(t, filepath.Join(dir, "bundle_steps", r.Step), r.Script, 0o600)
		_ = os.Remove(filepath.Join(root, "var/log/stub-calls.log"))
		out, err := debianroot.Run(t, root, []string{"BASHIBLE_BUNDLE=debian", "BASHIBLE_STEP=" + r.Step}, `umask 022
bash --noprofile --norc -c 'set -eEo pipefail; source "$1"; cd "$2"; source "$3"' bashible /var/lib/bashible/lib.sh /var/lib/bashible "/var/lib/bashible/bundle_steps/$BASHIBLE_STEP"`)
		want := debianOutcomes[r.File]
		if want.Fails != "" {
			if err == nil || !strings.Contains(out, want.FailsWith) {
				t.Errorf("%s: %s should fail here (%s) saying %q; err %v, output:\n%s", r.File, r.Step, want.Fails, want.FailsWith, err, out)
			} else {
				t.Logf("%s: %s fails here as expected: %s", r.File, r.Step, want.Fails)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %s failed in the Debian root: %v\n%s", r.File, r.Step, err, out)
			continue
		}
		callLog, _ := os.ReadFile(filepath.Join(root, "var/log/stub-calls.log"))
		calls := string(callLog)
		ok := true
		for _, file := range want.Files {
			if _, err := os.Stat(filepath.Join(root, file)); err != nil {
				t.Errorf("%s: %s did not write /%s\n%s", r.File, r.Step, file, out)
				ok = false
			}
		}
		for file, text := range want.Contains {
			if data, err := os.ReadFile(filepath.Join(root, file)); err != nil || !strings.Contains(string(data), text) {
				t.Errorf("%s: %s did not leave %q in /%s (err %v):\n%s", r.File, r.Step, text, file, err, data)
				ok = false
			}
		}
		for _, call := range want.Calls {
			if !strings.Contains(calls, call) {
				t.Errorf("%s: %s did not call %q; the stubs saw:\n%s", r.File, r.Step, call, calls)
				ok = false
			}
		}
		if ok {
			ran++
		}
	}
	t.Logf("Debian steps run as published: %d of %d; %d more fail here as documented", ran, len(debian), countFailing(debian))
}

func countFailing(steps []rendered) int {
	n := 0
	for _, r := range steps {
		if debianOutcomes[r.File].Fails != "" {
			n++
		}
	}
	return n
}
