package access

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

func narrowerWith(t *testing.T, objs ...any) *Narrower {
	t.Helper()
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	instances := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	secrets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *corev1.Node:
			err = nodes.Add(o)
		case *corev1.Secret:
			err = secrets.Add(o)
		case *deckhousev1alpha1.Instance:
			err = instances.Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &Narrower{nodes: corelisters.NewNodeLister(nodes), tokens: corelisters.NewSecretLister(secrets),
		instances: nmlisters.NewInstanceLister(instances)}
}

func TestScopes(t *testing.T) {
	n := narrowerWith(t,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{NodeGroupLabel: "worker"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}},
		// The node relabelled itself; its Instance says otherwise.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Labels: map[string]string{NodeGroupLabel: "master"}}},
		&deckhousev1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Labels: map[string]string{NodeGroupLabel: "worker"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system", Labels: map[string]string{TokenNodeGroupLabel: "master"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-nolabl", Namespace: "kube-system"}},
	)
	res := bashiblev1alpha1.Resource("nodegroupbundles")
	cases := []struct {
		user      user.Info
		want      Scope
		forbidden string
	}{
		{&user.DefaultInfo{Name: "system:node:w1", Groups: []string{"system:nodes"}}, Scope{Group: "worker"}, ""},
		{&user.DefaultInfo{Name: "system:node:bare", Groups: []string{"system:nodes"}}, Scope{}, "has no node.deckhouse.io/group label"},
		{&user.DefaultInfo{Name: "system:node:ghost", Groups: []string{"system:nodes"}}, Scope{}, "has no Node object"},
		{&user.DefaultInfo{Name: "system:bootstrap:abcdef", Groups: []string{"system:bootstrappers"}}, Scope{Group: "master"}, ""},
		{&user.DefaultInfo{Name: "system:bootstrap:nolabl"}, Scope{}, "has no node-manager.deckhouse.io/node-group label"},
		{&user.DefaultInfo{Name: "system:bootstrap:zzzzzz"}, Scope{}, "is not known"},
		{&user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, Scope{All: true}, ""},
		{&user.DefaultInfo{Name: "system:node:sneaky", Groups: []string{"system:nodes"}}, Scope{Group: "worker"}, ""},
		// A user named like a node is narrowed as one even without the nodes group.
		{&user.DefaultInfo{Name: "system:node:w1"}, Scope{Group: "worker"}, ""},
	}
	for _, tc := range cases {
		got, err := n.scopeForUser(tc.user, res, "x")
		if tc.forbidden != "" {
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbidden) {
				t.Errorf("%s: want 403 containing %q, got %v", tc.user.GetName(), tc.forbidden, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: scope %+v, %v; want %+v", tc.user.GetName(), got, err, tc.want)
		}
	}
	if !(Scope{All: true}).Allows("x") || (Scope{Group: "a"}).Allows("b") || !(Scope{Group: "a"}).Allows("a") {
		t.Error("Allows")
	}
}
