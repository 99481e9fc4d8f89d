// Package controllers lists every controller node-manager-controller runs
// (All). Each lives in a package of its own, with the same parts in the
// same files:
//
//   - controller.go: the package's story; Name, the controller's name in
//     its queue, its logs and the controller label of the loop metrics;
//     the Controller type; New(d *manager.Deps), which wires the shared
//     informers' events to the controller's queue (a *loop.Loop); and Run,
//     which waits for the caches and works the queue.
//   - sync.go: sync(ctx, key), which reconciles one key (a group, a node,
//     a CSR), and its helpers.
//   - pure decisions in files of their own, tested without a cluster:
//     approval/plan.go, csrapproval/decide.go, nodetemplate/template.go,
//     drain/outcome.go, status/status.go, instances/instance.go,
//     fencing/decide.go, clusterapi/objects.go, stephistory/history.go,
//     certificates/decide.go.
//
// A controller keyed by node group that looks at the group, its nodes and
// its checksum gets its events from manager.WatchGroups; the others say in
// New what queues a key. A controller with settings owns them in its
// options.go (Options, AddFlags, Validate; gathered in Options here) and
// gets them in New. What they share is in manager (clients, informers, the
// process's flags, the Lease, the event recorder), loop (the queue and its
// metrics) and nodes (the node protocol and the Node cache that includes
// the controllers' own writes).
package controllers

import (
	"github.com/node-manager/node-manager/controllers/approval"
	"github.com/node-manager/node-manager/controllers/bootstraptokens"
	"github.com/node-manager/node-manager/controllers/certificates"
	"github.com/node-manager/node-manager/controllers/checksums"
	"github.com/node-manager/node-manager/controllers/clusterapi"
	"github.com/node-manager/node-manager/controllers/crdmigration"
	"github.com/node-manager/node-manager/controllers/csrapproval"
	"github.com/node-manager/node-manager/controllers/drain"
	"github.com/node-manager/node-manager/controllers/fencing"
	"github.com/node-manager/node-manager/controllers/fencingagents"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/manager"
	"github.com/node-manager/node-manager/controllers/nodetemplate"
	"github.com/node-manager/node-manager/controllers/status"
	"github.com/node-manager/node-manager/controllers/stephistory"
)

// All builds every controller node-manager-controller runs, wired to the
// shared informers of d, each with its options from o; build them before
// the manager starts the informers. A new controller is added here, and nowhere else.
func All(d *manager.Deps, o *Options) []manager.Controller {
	capi := clusterapi.New(d, o.ClusterAPI)
	return []manager.Controller{
		// NodeGroup status and the node-state metrics (group).
		status.New(d, status.Components{ClusterAPI: o.ClusterAPI.Enabled, CloudMachines: o.ClusterAPI.Enabled && o.ClusterAPI.CloudCluster != "",
			CloudSizes: capi.CloudSizes()}),
		// Update and disruption approval, the update protocol (group).
		approval.New(d, o.Approval),
		// Cordons and drains nodes annotated draining (node).
		drain.New(d, o.Drain),
		// The configuration-checksums Secret (one key).
		checksums.New(d),
		// Every node's Instance: status, adoption, deletion (node).
		instances.New(d),
		// bashible's per-step history on Instances, as metrics (node).
		stephistory.New(d),
		// Joining nodes' kubelet client certificates (CSR).
		csrapproval.New(d),
		// The group's node template on its nodes (node).
		nodetemplate.New(d),
		// Bootstrap tokens and manual-bootstrap Secrets (group).
		bootstraptokens.New(d),
		// Frees the pods of dead fenced nodes (one key: the cluster).
		fencing.New(d, o.Fencing),
		// The fencing agents' DaemonSet of each fenced group (group).
		fencingagents.New(d, o.FencingAgents),
		// Cluster API objects of static groups, Instances' Machines
		// (group, Instance; only with --cluster-api).
		capi,
		// The CA, the serving certificates and the caBundles (one key;
		// only with --manage-certificates).
		certificates.New(d, o.Certificates),
		// The objects of node-manager-controller's deckhouse.io CRDs
		// stored at an older version (a cluster that ran Deckhouse),
		// rewritten at the storage version (CRD); caps-controller-manager
		// migrates its own (SSHCredentials, StaticInstances).
		crdmigration.New(d, crdmigration.NodeManagerControllerResources),
	}
}
