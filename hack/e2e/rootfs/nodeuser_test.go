package rootfs

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/templates"
)

// nodeUsersStep is the built-in step that manages NodeUsers.
const nodeUsersStep = "001_node_users.sh"

// userKey is an SSH key pair made for the test.
type userKey struct {
	signer     ssh.Signer
	authorized string
}

func newUserKey(t *testing.T, comment string) userKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return userKey{signer: signer, authorized: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " " + comment}
}

// runStep runs one installed step the way bashible.sh's run_step does.
func (n *node) runStep(step string) string {
	t := n.t
	t.Helper()
	const script = `umask 022
BASHIBLE_STEP=$1 bash --noprofile --norc -c 'set -Eeuo pipefail; source "$1"; cd "$2"; source "$3"' \
  bashible /var/lib/bashible/lib.sh /var/lib/bashible "/var/lib/bashible/bundle_steps/$1"`
	out, err := debianroot.Run(t, n.root, nil, "set -- "+step+"\n"+script)
	if err != nil {
		t.Fatalf("step %s: %v\n%s", step, err, tail(out, 40))
	}
	return out
}

// renderUsers renders the worker group with these NodeUsers.
func (n *node) renderUsers(users ...*deckhousev1.NodeUser) *templates.Bundle {
	t := n.t
	t.Helper()
	ng := &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "worker"}, Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}
	settings, err := templates.ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := templates.NewContext(ng, settings, []string{"10.0.0.10:6443"}, clusterCA)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.NodeUsers, err = templates.NodeUsersFor(ng.Name, users); err != nil {
		t.Fatal(err)
	}
	b, failures := n.tree.Render(&ctx, nil)
	if failures != nil {
		t.Fatalf("render: %v", failures)
	}
	return b
}

// TestDebianNodeUsers runs the node-users step on Debian bookworm: the
// first run makes each NodeUser's user (uid, home, primary group,
// Deckhouse's marker), its authorized_keys, its groups (a group the node
// lacks skipped), its password hash in /etc/shadow and, for the sudoer
// only, the sudoers drop-in: sudo with the password works for the sudoer
// and is refused to the other; a second run changes nothing; the user logs
// in over SSH (Debian's sshd) with the key; a link the user plants in place
// of ~/.ssh makes root write nothing through it; a NodeUser removed and
// another changed, the next run removes the one (home too) and changes the
// other's keys and groups, and the drop-in goes with the last sudoer; a
// user not made by node-manager is never touched.
func TestDebianNodeUsers(t *testing.T) {
	debianroot.RequireRoot(t)
	root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
	debianroot.InstallStubs(t, root)
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, root: root, tree: tree}

	const password = "e2e-Pa55word"
	out, err := debianroot.Run(t, root, nil, "echo '127.0.1.1 e2e-worker' >> /etc/hosts && openssl passwd -6 -salt e2eSaltForUsers "+password+" && useradd -m -u 1200 -c 'made by hand' handmade")
	if err != nil {
		t.Fatalf("hash the password, make a user by hand: %v\n%s", err, out)
	}
	hash := strings.TrimSpace(strings.Split(out, "\n")[0])
	aliceKey, aliceKey2, bobKey := newUserKey(t, "alice@laptop"), newUserKey(t, "alice@desk"), newUserKey(t, "bob@laptop")
	alice := &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Spec: deckhousev1.NodeUserSpec{
		UID: 1100, SSHPublicKeys: []string{aliceKey.authorized}, PasswordHash: hash, IsSudoer: true,
		ExtraGroups: []string{"adm", "no-such-group"}, NodeGroups: []string{"*"}}}
	bob := &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: "bob"}, Spec: deckhousev1.NodeUserSpec{
		UID: 1101, SSHPublicKey: bobKey.authorized, PasswordHash: hash, NodeGroups: []string{"worker"}}}

	bundle := n.renderUsers(alice, bob)
	n.install(bundle)
	out = n.runStep(nodeUsersStep)
	if !strings.Contains(out, "group no-such-group does not exist on this node; skipped") {
		t.Errorf("a group the node lacks should be skipped with a warning:\n%s", out)
	}
	passwd := framework.ReadFile(t, filepath.Join(root, "etc/passwd"))
	for _, want := range []string{"alice:x:1100:100:created by deckhouse:/home/deckhouse/alice:/bin/bash\n",
		"bob:x:1101:100:created by deckhouse:/home/deckhouse/bob:/bin/bash\n"} {
		if !strings.Contains(passwd, want) {
			t.Errorf("/etc/passwd lacks %q:\n%s", want, passwd)
		}
	}
	shadow := framework.ReadFile(t, filepath.Join(root, "etc/shadow"))
	for _, user := range []string{"alice", "bob"} {
		if !strings.Contains(shadow, "\n"+user+":"+hash+":") {
			t.Errorf("/etc/shadow lacks %s's hash:\n%s", user, shadow)
		}
	}
	checkKeys := func(user string, uid int, keys ...string) {
		t.Helper()
		path := filepath.Join(root, "home/deckhouse", user, ".ssh/authorized_keys")
		if got, want := framework.ReadFile(t, path), strings.Join(keys, "\n")+"\n"; got != want {
			t.Errorf("%s's authorized_keys:\n%s\nwant:\n%s", user, got, want)
		}
		for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode() != mode || ownerOf(t, p) != uid {
				t.Errorf("%s: mode %v owner %d, want %v owned by %d", p, st.Mode(), ownerOf(t, p), mode, uid)
			}
		}
	}
	checkKeys("alice", 1100, aliceKey.authorized)
	checkKeys("bob", 1101, bobKey.authorized)
	groups := func(user string) string {
		t.Helper()
		out, err := debianroot.Run(t, root, nil, "id -nG "+user)
		if err != nil {
			t.Fatalf("id %s: %v\n%s", user, err, out)
		}
		return strings.TrimSpace(out)
	}
	if g := groups("alice"); g != "users adm nodeadmin" {
		t.Errorf("alice's groups: %q, want users adm nodeadmin", g)
	}
	if g := groups("bob"); g != "users" {
		t.Errorf("bob's groups: %q, want users", g)
	}
	sudoers := filepath.Join(root, "etc/sudoers.d/30-deckhouse-nodeadmins")
	if got := framework.ReadFile(t, sudoers); !strings.Contains(got, "\n%nodeadmin ALL=(ALL) ALL\n") {
		t.Errorf("the sudoers drop-in:\n%s", got)
	}
	// sudo with the password: the sudoer may, the other may not.
	sudo := func(user string) (string, error) {
		return debianroot.Run(t, root, nil, fmt.Sprintf("printf '%%s\\n' %s | runuser -u %s -- sudo -S -k -p '' id -u", password, user))
	}
	if out, err := sudo("alice"); err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("alice is a sudoer: sudo id -u gave %v\n%s", err, out)
	}
	if out, err := sudo("bob"); err == nil || !strings.Contains(out, "bob is not in the sudoers file") {
		t.Errorf("bob is no sudoer, yet sudo gave %v\n%s", err, out)
	}

	// A second run changes nothing.
	before := snapshot(t, root)
	out = n.runStep(nodeUsersStep)
	if changed := changedFiles(before, snapshot(t, root)); len(changed) > 0 {
		t.Errorf("the second run changed files: %v\n%s", changed, out)
	}

	// alice logs in over SSH with her key.
	port := framework.SSHPort(t, 1)
	host := framework.StartSSHHost(t, "e2e-worker", root, "127.0.0.2", port, framework.NewSSHLogins(t))
	cfg := &ssh.ClientConfig{User: "alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(aliceKey.signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	client, err := ssh.Dial("tcp", net.JoinHostPort(host.Address, strconv.Itoa(port)), cfg)
	if err != nil {
		t.Fatalf("alice cannot log in with her key: %v", err)
	}
	session, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := session.CombinedOutput("id -un; id -u"); err != nil || strings.TrimSpace(string(out)) != "alice\n1100" {
		t.Errorf("alice's session: %v %q", err, out)
	}
	_ = client.Close()
	bobAsAlice := &ssh.ClientConfig{User: "alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(bobKey.signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	if c, err := ssh.Dial("tcp", net.JoinHostPort(host.Address, strconv.Itoa(port)), bobAsAlice); err == nil {
		_ = c.Close()
		t.Error("bob's key logs in as alice")
	}
	host.Stop()

	// alice plants a link to root's .ssh in place of her own: a change of
	// her keys is written as her, so nothing is written through it.
	if out, err := debianroot.Run(t, root, nil, "install -d -m 0700 /root/.ssh && echo root-key > /root/.ssh/authorized_keys && "+
		"runuser -u alice -- bash -c 'rm -rf ~/.ssh && ln -s /root/.ssh ~/.ssh'"); err != nil {
		t.Fatalf("plant the link: %v\n%s", err, out)
	}
	alice.Spec.SSHPublicKeys = []string{aliceKey.authorized, aliceKey2.authorized}
	n.install(n.renderUsers(alice, bob))
	out = n.runStep(nodeUsersStep)
	if got := framework.ReadFile(t, filepath.Join(root, "root/.ssh/authorized_keys")); got != "root-key\n" {
		t.Errorf("root's authorized_keys was written through alice's link:\n%s", got)
	}
	if !strings.Contains(out, "error: node user alice: could not write /home/deckhouse/alice/.ssh/authorized_keys") {
		t.Errorf("the failed write should be reported:\n%s", out)
	}
	if out, err := debianroot.Run(t, root, nil, "rm /home/deckhouse/alice/.ssh"); err != nil {
		t.Fatalf("remove the link: %v\n%s", err, out)
	}

	// bob's NodeUser deleted, alice no longer a sudoer, with two keys.
	alice.Spec.IsSudoer = false
	n.install(n.renderUsers(alice))
	out = n.runStep(nodeUsersStep)
	passwd = framework.ReadFile(t, filepath.Join(root, "etc/passwd"))
	if strings.Contains(passwd, "\nbob:") || !strings.Contains(out, "removed node user bob (uid 1101)") {
		t.Errorf("bob should be removed:\n%s\n%s", passwd, out)
	}
	if _, err := os.Stat(filepath.Join(root, "home/deckhouse/bob")); !os.IsNotExist(err) {
		t.Errorf("bob's home should be removed: %v", err)
	}
	if !strings.Contains(passwd, "\nhandmade:x:1200:") {
		t.Errorf("the user made by hand must stay:\n%s", passwd)
	}
	checkKeys("alice", 1100, aliceKey.authorized, aliceKey2.authorized)
	if g := groups("alice"); g != "users adm" {
		t.Errorf("alice's groups: %q, want users adm", g)
	}
	if _, err := os.Stat(sudoers); !os.IsNotExist(err) {
		t.Errorf("the sudoers drop-in should go with the last sudoer: %v", err)
	}
	if out, err := sudo("alice"); err == nil {
		t.Errorf("alice is no sudoer any more, yet sudo worked:\n%s", out)
	}

	// And again nothing changes.
	before = snapshot(t, root)
	out = n.runStep(nodeUsersStep)
	if changed := changedFiles(before, snapshot(t, root)); len(changed) > 0 {
		t.Errorf("a run after the change changed files: %v\n%s", changed, out)
	}

	// No NodeUser left: alice goes too, the hand-made user stays.
	n.install(n.renderUsers())
	n.runStep(nodeUsersStep)
	passwd = framework.ReadFile(t, filepath.Join(root, "etc/passwd"))
	if strings.Contains(passwd, "\nalice:") || !strings.Contains(passwd, "\nhandmade:") {
		t.Errorf("with no NodeUser, alice should be gone and handmade stay:\n%s", passwd)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "home/deckhouse")); len(entries) != 0 {
		t.Errorf("homes left in /home/deckhouse: %d", len(entries))
	}
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}
