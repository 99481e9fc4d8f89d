// Package registry holds the REST storage of bashible.deckhouse.io/v1alpha1,
// one file per resource: bashibles (bashible.go), nodegroupbundles
// (nodegroupbundle.go) and bootstrap (bootstrap.go). The objects are
// computed (see apiserver/bundles); the storages only read them — get,
// list and watch, with a table for kubectl — through what rest.go (get,
// list, filters), watch.go and table.go share.
//
// A request's way: the aggregator proxies it here; objectname.Parse reads
// the object name (a group, or the legacy <os>.<group>); the Narrower says
// which groups the caller may read (a node or a bootstrap token its own
// only); the BundleSource answers with the group's published bundle, which
// becomes the served object. Both are interfaces of this package
// (interfaces.go), implemented by access.Narrower and bundles.Store, so
// the storages are tested against a fake source (rest_test.go).
package registry
