package access

import (
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

func narrowerWith(t *testing.T, instances ...*deckhousev1alpha1.Instance) *Narrower {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range instances {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return &Narrower{instances: nmlisters.NewInstanceLister(idx)}
}

func instance(name, group string) *deckhousev1alpha1.Instance {
	inst := &deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if group != "" {
		inst.Labels = map[string]string{deckhousev1.NodeGroupLabel: group}
	}
	return inst
}

func TestScopes(t *testing.T) {
	n := narrowerWith(t, instance("w1", "worker"), instance("unlabelled", ""))
	res := bashiblev1alpha1.Resource("nodegroupbundles")
	cases := []struct {
		name      string
		user      user.Info
		want      Scope
		forbidden string
	}{
		{"a node reads its Instance's group",
			&user.DefaultInfo{Name: "system:node:w1", Groups: []string{"system:nodes"}}, Scope{Group: "worker"}, ""},
		{"a user named like a node is narrowed as one even without the nodes group",
			&user.DefaultInfo{Name: "system:node:w1"}, Scope{Group: "worker"}, ""},
		{"a node without an Instance reads nothing, whatever its Node says",
			&user.DefaultInfo{Name: "system:node:fresh", Groups: []string{"system:nodes"}}, Scope{},
			`node "fresh" has no Instance yet; node-manager creates it when the node joins`},
		{"a node whose Instance has no group reads nothing",
			&user.DefaultInfo{Name: "system:node:unlabelled", Groups: []string{"system:nodes"}}, Scope{}, "has no node.deckhouse.io/group label"},
		{"a bootstrap token reads the group it was authenticated for",
			&user.DefaultInfo{Name: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers", deckhousev1.BootstrappersGroup, deckhousev1.BootstrapperGroup("master")}},
			Scope{Group: "master"}, ""},
		{"a bootstrap token without a node group reads nothing",
			&user.DefaultInfo{Name: "system:bootstrap:oldtok", Groups: []string{"system:bootstrappers", deckhousev1.BootstrappersGroup}}, Scope{},
			`bootstrap token "oldtok" may read no node group's bundle: it carries no system:bootstrappers:d8-node-manager:<group> group`},
		{"a bootstrap token with two node groups reads nothing",
			&user.DefaultInfo{Name: "system:bootstrap:twotwo", Groups: []string{deckhousev1.BootstrapperGroup("a"), deckhousev1.BootstrapperGroup("b")}}, Scope{},
			"carries 2 node groups (a, b)"},
		{"an administrator reads every group",
			&user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, Scope{All: true}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := n.scopeForUser(tc.user, res, "x")
			if tc.forbidden != "" {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden) {
					t.Fatalf("want 403 containing %q, got %v", tc.forbidden, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("scope %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if !(Scope{All: true}).Allows("x") || (Scope{Group: "a"}).Allows("b") || !(Scope{Group: "a"}).Allows("a") {
		t.Error("Allows")
	}
}

func TestBootstrapperGroupIsAValidBootstrapGroupForEveryNodeGroupName(t *testing.T) {
	// kube-apiserver's rule for auth-extra-groups (k8s.io/cluster-bootstrap
	// token/api.BootstrapGroupPattern): a token with any other group is
	// refused when it is created.
	pattern := regexp.MustCompile(`\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`)
	valid := pattern.MatchString
	for _, ng := range []string{"w", "worker", "a-b-c", strings.Repeat("x", 42)} {
		if g := deckhousev1.BootstrapperGroup(ng); !valid(g) {
			t.Errorf("%q is not a valid bootstrap group", g)
		}
	}
}
