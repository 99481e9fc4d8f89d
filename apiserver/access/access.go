// Package access narrows what a caller of bashible-apiserver may read,
// beyond RBAC: a node (system:node:<name>) may read only the objects of its
// own group, and a bootstrap token (system:bootstrap:<id>) only the group it
// was issued for. Other callers that RBAC let through (administrators,
// controllers) read every group.
//
// Nothing here trusts what a node can write. A node's group is the
// node.deckhouse.io/group label of its Instance, which only node-manager
// writes (at join, when it approves the kubelet's certificate; a node may
// write only its own Instance's status): a node without an Instance reads
// nothing, whatever its Node's labels say. A bootstrap token's group is the
// group kube-apiserver authenticated it with,
// system:bootstrappers:d8-node-manager:<group> (its Secret's
// auth-extra-groups), so no Secret is read here.
package access

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	nminformers "github.com/node-manager/node-manager/generated/informers/externalversions"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
)

// Scope is what a caller may read: every group, or exactly one.
type Scope struct {
	All   bool
	Group string
}

// Allows reports whether the scope includes group.
func (s Scope) Allows(group string) bool { return s.All || s.Group == group }

// Narrower resolves a caller's scope from Instances and the caller's
// authenticated groups.
type Narrower struct {
	instances nmlisters.InstanceLister
	synced    cache.InformerSynced
	factory   nminformers.SharedInformerFactory
}

// NewNarrower watches Instances, keeping of each only what a scope is
// resolved from (onlyGroup): a fleet's Instances carry status conditions
// the narrower never reads.
func NewNarrower(nm versioned.Interface) *Narrower {
	f := nminformers.NewSharedInformerFactoryWithOptions(nm, 0, nminformers.WithTransform(onlyGroup))
	inst := f.Deckhouse().V1alpha1().Instances()
	return &Narrower{instances: inst.Lister(), synced: inst.Informer().HasSynced, factory: f}
}

// Instances is the informer's lister: every Instance's name and labels.
func (n *Narrower) Instances() nmlisters.InstanceLister { return n.instances }

// Start starts the informer.
func (n *Narrower) Start(stop <-chan struct{}) { n.factory.Start(stop) }

// HasSynced reports whether Instances are loaded.
func (n *Narrower) HasSynced() bool { return n.synced() }

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
	case strings.HasPrefix(username, deckhousev1.NodeUserPrefix):
		// Narrowed by the name alone: a user named like a node is treated
		// as one whatever its groups, so a missing group never widens access.
		nodeName := strings.TrimPrefix(username, deckhousev1.NodeUserPrefix)
		inst, err := n.instances.Get(nodeName)
		if apierrors.IsNotFound(err) {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf(
				"node %q has no Instance yet; node-manager creates it when the node joins (when it approves the kubelet's certificate), "+
					"and a node's group is its Instance's %s label, never its Node's", nodeName, deckhousev1.NodeGroupLabel))
		}
		if err != nil {
			return Scope{}, apierrors.NewInternalError(err)
		}
		group := inst.Labels[deckhousev1.NodeGroupLabel]
		if group == "" {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("the Instance of node %q has no %s label, so it may read no node group's bundle", nodeName, deckhousev1.NodeGroupLabel))
		}
		return Scope{Group: group}, nil
	case strings.HasPrefix(username, deckhousev1.BootstrapUserPrefix):
		group, err := deckhousev1.TokenGroup(u.GetGroups())
		if err != nil {
			return Scope{}, apierrors.NewForbidden(resource, name, fmt.Errorf("bootstrap token %q may read no node group's bundle: %w",
				strings.TrimPrefix(username, deckhousev1.BootstrapUserPrefix), err))
		}
		return Scope{Group: group}, nil
	default:
		return Scope{All: true}, nil
	}
}

// onlyGroup is the Narrower's informer transform: an Instance is cached
// with its name, identity, resourceVersion and labels (the group label is
// all a scope needs), not its status, annotations or managedFields.
func onlyGroup(obj any) (any, error) {
	inst, ok := obj.(*deckhousev1alpha1.Instance)
	if !ok {
		return obj, nil
	}
	return &deckhousev1alpha1.Instance{TypeMeta: inst.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: inst.Name, UID: inst.UID, ResourceVersion: inst.ResourceVersion, Labels: inst.Labels,
	}}, nil
}
