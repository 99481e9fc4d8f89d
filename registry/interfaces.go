package registry

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/node-manager/node-manager/apiserver/access"
	"github.com/node-manager/node-manager/apiserver/bundles"
)

// BundleSource is where the served objects come from: the bundles the
// leader published, as this replica holds them. bundles.Store implements
// it; the registry's tests use a fake.
type BundleSource interface {
	// Synced reports whether the published bundles are loaded. Before
	// that a partial answer would look like missing groups, so requests
	// get 503.
	Synced() bool
	// Get returns one group's published bundle.
	Get(group string) (*bundles.Published, bool)
	// List returns every bundle, sorted by group, and the resourceVersion
	// of the list.
	List() ([]*bundles.Published, string)
	// Watch subscribes to changes after resourceVersion fromRV ("" or
	// "0": the current state first, as ADDED events). A resourceVersion
	// older than the source's history is answered with 410 Gone. With
	// initialEvents the current state comes first whatever fromRV says,
	// ended by a Bookmark event.
	Watch(fromRV string, initialEvents bool) (bundles.Subscription, error)
}

// Narrower resolves what the caller of a request may read: a node or a
// bootstrap token one group, anyone else RBAC let through every group.
// access.Narrower implements it.
type Narrower interface {
	// ScopeFor returns the scope of the request's user, or a 403 saying
	// why the caller may read nothing.
	ScopeFor(ctx context.Context, resource schema.GroupResource, name string) (access.Scope, error)
}
