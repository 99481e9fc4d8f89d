// Package access narrows what a caller of bashible-apiserver may read,
// beyond RBAC: a node (system:node:<name>) may read only the objects of its
// own group, and a bootstrap token (system:bootstrap:<id>) only the group its
// token Secret is labelled with. Other callers that RBAC let through
// (administrators, controllers) read every group.
//
// A node's group comes from its Instance's node.deckhouse.io/group label
// when the Instance exists: Instances are written by node-manager, and a
// node may change only their status. Until node-manager has created the
// Instance, the Node's own label is used; a kubelet can edit that label on
// its own Node, so the Instance is what makes the narrowing hold against a
// compromised node.
package access

import (
	"context"
	"fmt"
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

	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Fixed names (DESIGN.md §3).
const (
	NodeGroupLabel      = "node.deckhouse.io/group"
	TokenNodeGroupLabel = "node-manager.deckhouse.io/node-group"
	nodeUserPrefix      = "system:node:"
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
	nodes     corelisters.NodeLister
	instances nmlisters.InstanceLister
	tokens    corelisters.SecretLister
	synced    []cache.InformerSynced
	starters  []interface{ Start(<-chan struct{}) }
}

// NewNarrower watches Nodes, Instances and kube-system bootstrap-token Secrets.
func NewNarrower(client kubernetes.Interface, nm versioned.Interface) *Narrower {
	nodes := informers.NewSharedInformerFactory(client, 0)
	tokens := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeBootstrapToken)).String()
		}))
	instances := nminformers.NewSharedInformerFactory(nm, 0)
	n := &Narrower{
		nodes:     nodes.Core().V1().Nodes().Lister(),
		instances: instances.Deckhouse().V1alpha1().Instances().Lister(),
		tokens:    tokens.Core().V1().Secrets().Lister(),
		starters:  []interface{ Start(<-chan struct{}) }{nodes, tokens, instances},
	}
	n.synced = []cache.InformerSynced{
		nodes.Core().V1().Nodes().Informer().HasSynced,
		tokens.Core().V1().Secrets().Informer().HasSynced,
		instances.Deckhouse().V1alpha1().Instances().Informer().HasSynced,
	}
	return n
}

// Start starts the informers.
func (n *Narrower) Start(stop <-chan struct{}) {
	for _, f := range n.starters {
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
	case strings.HasPrefix(username, nodeUserPrefix):
		// Narrowed by the name alone: a user named like a node is treated
		// as one whatever its groups, so a missing group never widens access.
		nodeName := strings.TrimPrefix(username, nodeUserPrefix)
		if inst, err := n.instances.Get(nodeName); err == nil && inst.Labels[NodeGroupLabel] != "" {
			return Scope{Group: inst.Labels[NodeGroupLabel]}, nil
		} else if err != nil && !apierrors.IsNotFound(err) {
			return Scope{}, apierrors.NewInternalError(err)
		}
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
