package templates

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDWXs6ivnQQ1yIwbmB4Om9p0CXUsImyNTFBYpTdnkZKl user@host"

func nodeUser(name string, uid int64, groups ...string) *deckhousev1.NodeUser {
	return &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: deckhousev1.NodeUserSpec{
		UID: uid, SSHPublicKeys: []string{testKey}, PasswordHash: "$6$salt$hash", NodeGroups: groups}}
}

// TestNodeUsersForSelectsTheirGroups: a group's context carries the
// NodeUsers naming it, those with "*" and those without nodeGroups (the
// CRD's default is "*"), sorted by name, in Deckhouse's shape.
func TestNodeUsersForSelectsTheirGroups(t *testing.T) {
	users := []*deckhousev1.NodeUser{nodeUser("zed", 1100, "worker"), nodeUser("all", 1101, "*"), nodeUser("master-only", 1102, "master"),
		nodeUser("unset", 1103), nodeUser("both", 1104, "master", "worker")}
	got, err := NodeUsersFor("worker", users)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range got {
		names = append(names, u.Name)
	}
	if strings.Join(names, " ") != "all both unset zed" {
		t.Errorf("worker's users: %v, want all both unset zed", names)
	}
	if got, _ := NodeUsersFor("other", users); len(got) != 2 {
		t.Errorf("a group named by none gets the users of every group only: %+v", got)
	}
	if got, _ := NodeUsersFor("other", nil); got == nil || len(got) != 0 {
		t.Errorf("no NodeUsers must give an empty list, not null: %#v", got)
	}
	// Deckhouse's shape, as a template reads it.
	ctx := workerContext(t, nil)
	ctx.NodeUsers, _ = NodeUsersFor("worker", []*deckhousev1.NodeUser{nodeUser("unset", 1103)})
	values, err := ctx.Values()
	if err != nil {
		t.Fatal(err)
	}
	u := values["nodeUsers"].([]any)[0].(map[string]any)
	spec := u["spec"].(map[string]any)
	if u["name"] != "unset" || spec["uid"] != float64(1103) || spec["isSudoer"] != false || len(spec["nodeGroups"].([]any)) != 1 ||
		spec["passwordHash"] != "$6$salt$hash" || len(spec["extraGroups"].([]any)) != 0 {
		t.Errorf("nodeUsers[0] = %v", u)
	}
	if _, ok := spec["sshPublicKey"]; ok {
		t.Error("the deprecated sshPublicKey must be absent when the object does not set it, as in Deckhouse")
	}
}

// TestNodeUsersForRefusesHostileValues: what the CRD refuses, the renderer
// refuses again (a stored object may predate a rule), naming the NodeUser.
func TestNodeUsersForRefusesHostileValues(t *testing.T) {
	for name, mutate := range map[string]func(*deckhousev1.NodeUser){
		"a path in the name":        func(u *deckhousev1.NodeUser) { u.Name = "../etc" },
		"a newline in the name":     func(u *deckhousev1.NodeUser) { u.Name = "a\nb" },
		"a name too long":           func(u *deckhousev1.NodeUser) { u.Name = strings.Repeat("a", 33) },
		"uid 0":                     func(u *deckhousev1.NodeUser) { u.Spec.UID = 0 },
		"a system uid":              func(u *deckhousev1.NodeUser) { u.Spec.UID = 1000 },
		"nobody's uid":              func(u *deckhousev1.NodeUser) { u.Spec.UID = 65534 },
		"a newline in a key":        func(u *deckhousev1.NodeUser) { u.Spec.SSHPublicKeys = []string{testKey + "\nssh-rsa AAAA evil"} },
		"an unknown key type":       func(u *deckhousev1.NodeUser) { u.Spec.SSHPublicKeys = []string{"ssh-foo AAAA"} },
		"a newline in the old key":  func(u *deckhousev1.NodeUser) { u.Spec.SSHPublicKeys, u.Spec.SSHPublicKey = nil, "ssh-rsa AAAA\nx" },
		"no key":                    func(u *deckhousev1.NodeUser) { u.Spec.SSHPublicKeys = nil },
		"a colon in the hash":       func(u *deckhousev1.NodeUser) { u.Spec.PasswordHash = "$6$salt$hash:0:0" },
		"a newline in the hash":     func(u *deckhousev1.NodeUser) { u.Spec.PasswordHash = "$6$salt$hash\nroot" },
		"a plain password":          func(u *deckhousev1.NodeUser) { u.Spec.PasswordHash = "secret" },
		"a quote in a group":        func(u *deckhousev1.NodeUser) { u.Spec.ExtraGroups = []string{"docker'x"} },
		"a comma in a group":        func(u *deckhousev1.NodeUser) { u.Spec.ExtraGroups = []string{"docker,root"} },
		"a newline in a node group": func(u *deckhousev1.NodeUser) { u.Spec.NodeGroups = []string{"*", "a\nb"} },
	} {
		u := nodeUser("alice", 1100, "*")
		mutate(u)
		if _, err := NodeUsersFor("worker", []*deckhousev1.NodeUser{u}); err == nil || !strings.Contains(err.Error(), "NodeUser "+u.Name) {
			t.Errorf("%s: got %v, want a refusal naming the NodeUser", name, err)
		}
	}
	// Deckhouse's documented example is accepted.
	doc := &deckhousev1.NodeUser{ObjectMeta: metav1.ObjectMeta{Name: "testuser"}, Spec: deckhousev1.NodeUserSpec{UID: 1001,
		SSHPublicKey: "ssh-rsa xxx", PasswordHash: "$2a$10$GAwx2h0D1jiEeBt.JECSEenGvShJbu.mOSQ/jaRk1ly9c31TcHjim", IsSudoer: true, ExtraGroups: []string{"docker"}}}
	if _, err := NodeUsersFor("worker", []*deckhousev1.NodeUser{doc}); err != nil {
		t.Errorf("Deckhouse's documented NodeUser: %v", err)
	}
}

// TestNodeUsersEnterTheChecksumOfTheirGroupsOnly: a NodeUser changes the
// bundle (and checksum) of the groups it selects and of no other; its
// values reach the step single-quoted.
func TestNodeUsersEnterTheChecksumOfTheirGroupsOnly(t *testing.T) {
	tree := builtinTree(t)
	named := func(name string) func(*deckhousev1.NodeGroup) {
		return func(ng *deckhousev1.NodeGroup) { ng.Name = name }
	}
	render := func(group string, users ...*deckhousev1.NodeUser) *Bundle {
		ctx := workerContext(t, named(group))
		var err error
		if ctx.NodeUsers, err = NodeUsersFor(group, users); err != nil {
			t.Fatal(err)
		}
		return mustRender(t, tree, ctx)
	}
	worker0, master0 := render("worker"), render("master")
	u := nodeUser("alice", 1100, "worker")
	u.Spec.PasswordHash = "$y$j9T$salt$hash"
	worker1, master1 := render("worker", u), render("master", u)
	if worker1.Checksum == worker0.Checksum {
		t.Error("a NodeUser for worker must change worker's checksum")
	}
	if master1.Checksum != master0.Checksum {
		t.Error("a NodeUser for worker must not change master's checksum")
	}
	step := worker1.Steps["001_node_users.sh"]
	if want := `nu-user 'alice' 1100 no '$y$j9T$salt$hash' '' '` + testKey + `'`; !strings.Contains(step, want) {
		t.Errorf("the step lacks %q:\n%s", want, step)
	}
	if strings.Contains(master1.Steps["001_node_users.sh"], "nu-user '") {
		t.Error("master's step must make no user")
	}
	u2 := u.DeepCopy()
	u2.Spec.IsSudoer = true
	if render("worker", u2).Checksum == worker1.Checksum {
		t.Error("isSudoer must change the checksum")
	}
	big := nodeUser("big", 4294967294, "*")
	if !strings.Contains(render("worker", big).Steps["001_node_users.sh"], "nu-user 'big' 4294967294 ") {
		t.Error("a large uid must be written as an integer")
	}
}

// TestNodeUserPatternsMatchTheCRD keeps the renderer's second check equal
// to the CRD's schema.
func TestNodeUserPatternsMatchTheCRD(t *testing.T) {
	raw, err := manifests.FS.ReadFile("crds/deckhouse.io_nodeusers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	// Every served version (v1, and v1alpha1 for Deckhouse's older
	// manifests) is checked alike: a hostile value is refused at any.
	var names []string
	for _, v := range crd.Spec.Versions {
		names = append(names, v.Name)
		checkNodeUserSchema(t, v.Name, v.Schema.OpenAPIV3Schema)
	}
	if strings.Join(names, ",") != "v1,v1alpha1" {
		t.Fatalf("versions: %v, want v1 and v1alpha1", names)
	}
}

func checkNodeUserSchema(t *testing.T, version string, schema *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	spec := schema.Properties["spec"].Properties
	for field, want := range map[string]string{
		"sshPublicKey":  nodeUserKeyRE.String(),
		"sshPublicKeys": nodeUserKeyRE.String(),
		"passwordHash":  nodeUserHashRE.String(),
		"extraGroups":   nodeUserGroupRE.String(),
		"nodeGroups":    nodeUserSelectorRE.String(),
	} {
		p := spec[field]
		if p.Items != nil {
			p = *p.Items.Schema
		}
		if p.Pattern != want {
			t.Errorf("%s spec.%s: the CRD's pattern %q, the renderer's %q", version, field, p.Pattern, want)
		}
	}
	if uid := spec["uid"]; uid.Minimum == nil || uid.Maximum == nil || *uid.Minimum != MinNodeUserUID || *uid.Maximum != MaxNodeUserUID {
		t.Errorf("%s spec.uid: the CRD's range %v-%v, the renderer's %d-%d", version, uid.Minimum, uid.Maximum, MinNodeUserUID, MaxNodeUserUID)
	}
	rules := ""
	for _, r := range schema.XValidations {
		rules += r.Rule + "\n"
	}
	if !strings.Contains(rules, "'"+nodeUserNameRE.String()+"'") {
		t.Errorf("%s: the CRD's name rule does not use %s:\n%s", version, nodeUserNameRE, rules)
	}
}
