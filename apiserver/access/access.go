// Package access narrows what a caller of bashible-apiserver may read,
// beyond RBAC: a node (system:node:<name>) may read only the objects of the
// group in its Node's node.deckhouse.io/group label, and a bootstrap token
// (system:bootstrap:<id>) only the group its token Secret is labelled with.
// Other callers that RBAC let through (administrators, controllers) read
// every group.
package access

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Fixed names (DESIGN.md §3).
const (
	NodeGroupLabel      = "node.deckhouse.io/group"
	TokenNodeGroupLabel = "node-manager.deckhouse.io/node-group"
	nodeUserPrefix      = "system:node:"
	nodesGroup          = "system:nodes"
	bootstrapUserPrefix = "system:bootstrap:"
)

// Scope is what a caller may read: every group, or exactly one.
type Scope struct {
	All   bool
	Group string
}

// Allows reports whether the scope includes group.
func (s Scope) Allows(group string) bool { return s.All || s.Group == group }

// Narrower resolves a caller's scope from Nodes and bootstrap-token Secrets.
type Narrower struct {
	nodes   corelisters.NodeLister
	tokens  corelisters.SecretLister
	synced  []cache.InformerSynced
	factory []informers.SharedInformerFactory
}

// NewNarrower watches Nodes and kube-system bootstrap-token Secrets.
func NewNarrower(client kubernetes.Interface) *Narrower {
	nodes := informers.NewSharedInformerFactory(client, 0)
	tokens := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeBootstrapToken)).String()
		}))
	n := &Narrower{
		nodes:   nodes.Core().V1().Nodes().Lister(),
		tokens:  tokens.Core().V1().Secrets().Lister(),
		factory: []informers.SharedInformerFactory{nodes, tokens},
	}
	n.synced = []cache.InformerSynced{nodes.Core().V1().Nodes().Informer().HasSynced, tokens.Core().V1().Secrets().Informer().HasSynced}
	return n
}

// Start starts the informers.
func (n *Narrower) Start(stop <-chan struct{}) {
	for _, f := range n.factory {
		f.Start(stop)
	}
}

// HasSynced reports whether Nodes and tokens are loaded.
func (n *Narrower) HasSynced() bool {
	for _, s := range n.synced {
		if !s() {
			return false
		}
	}
	return true
}

// ScopeFor resolves the scope of the request's user, or returns a 403 that
// says why the caller may read nothing.
func (n *Narrower) ScopeFor(ctx context.Context, resource schema.GroupResource, name string) (Scope, error) {
	u, ok := genericrequest.UserFrom(ctx)
	if !ok {
		return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("no user in the request"))
	}
	return n.scopeForUser(u, resource, name)
}

func (n *Narrower) scopeForUser(u user.Info, resource schema.GroupResource, name string) (Scope, error) {
	username := u.GetName()
	switch {
	case strings.HasPrefix(username, nodeUserPrefix) && slices.Contains(u.GetGroups(), nodesGroup):
		nodeName := strings.TrimPrefix(username, nodeUserPrefix)
		node, err := n.nodes.Get(nodeName)
		if apierrors.IsNotFound(err) {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("node %q has no Node object, so its node group is unknown", nodeName))
		}
		if err != nil {
			return Scope{}, apierrors.NewInternalError(err)
		}
		group := node.Labels[NodeGroupLabel]
		if group == "" {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("node %q has no %s label, so it may read no node group's bundle", nodeName, NodeGroupLabel))
		}
		return Scope{Group: group}, nil
	case strings.HasPrefix(username, bootstrapUserPrefix):
		id := strings.TrimPrefix(username, bootstrapUserPrefix)
		secret, err := n.tokens.Secrets(metav1.NamespaceSystem).Get("bootstrap-token-" + id)
		if apierrors.IsNotFound(err) {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("bootstrap token %q is not known to bashible-apiserver", id))
		}
		if err != nil {
			return Scope{}, apierrors.NewInternalError(err)
		}
		group := secret.Labels[TokenNodeGroupLabel]
		if group == "" {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("bootstrap token %q has no %s label, so it may read no node group's bundle", id, TokenNodeGroupLabel))
		}
		return Scope{Group: group}, nil
	default:
		return Scope{All: true}, nil
	}
}
