// Package staticmachines is Cluster API Provider Static's infrastructure
// provider for StaticMachines, the heart of caps-controller-manager.
//
// Cluster API clones a StaticMachine from a group's StaticMachineTemplate
// for each Machine. This controller backs it with a host: it picks a free
// StaticInstance matching the machine's labelSelector (never one labelled
// allow-bootstrap=false; select.go), binds it (the instance's machineRef, the
// machine's providerID static:///<instance UID>), and then walks the
// instance through its phases (decide.go): Bootstrapping runs the group's
// bootstrap script on the host over SSH (hostssh) until the Node with that
// providerID joins and bashible has configured it; Running reports the
// machine provisioned with the Node's addresses; when the Machine goes,
// Cleaning runs cleanup_static_node.sh and the instance is Pending again.
// SSH operations take minutes, so they run off the queue (tasks.go), one per
// StaticInstance within a leadership term (not per host: see
// docs/operations/static-nodes.md); a sync only reads how the last one ended. Nothing about an
// operation in progress is kept but in memory: after a restart, or when the
// SSH session dropped, the phase in the instance's status is enough to run
// the operation again, and the scripts are made to be run again (resume).
//
// It also reports the Cluster's StaticCluster provisioned and its
// StaticControlPlane initialized and externally managed, without which
// Cluster API neither finds, drains nor deletes the machines' Nodes.
//
// Every status write is made only when the status differs from what is
// there (Deckhouse's CAPS rewrote statuses in a hot loop), and counted in
// caps_status_writes_total, so a loop would show.
package staticmachines

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha2"
	infralisters "github.com/node-manager/node-manager/generated/listers/infrastructure/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "staticmachines"

// Keys of the queue: a StaticMachine, the Cluster's StaticCluster and
// StaticControlPlane (both named infrav1alpha1.StaticClusterName), or a
// StaticInstance bound to no machine, whose address is checked.
const (
	machinePrefix  = "machine/"
	clusterPrefix  = "cluster/"
	instancePrefix = "instance/"
)

// Indexes: Nodes by providerID and by each of their addresses,
// StaticInstances by address.
const (
	byProviderID = "providerID"
	byAddress    = "address"
	byInstance   = "address"
)

// machinesResource is Cluster API's Machine, in the version v1.14 stores.
var machinesResource = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}

// Controller is the StaticMachine infrastructure provider.
type Controller struct {
	d         *manager.Deps
	opts      Options
	machines  infralisters.StaticMachineLister
	clusters  infralisters.StaticClusterLister
	planes    infralisters.StaticControlPlaneLister
	instances nmlisters.StaticInstanceLister
	// atAddress: the instances by spec.address.
	atAddress cache.Indexer
	creds     nmlisters.SSHCredentialsLister
	nodes     cache.Indexer
	synced    []cache.InformerSynced
	queue     *loop.Loop
	tasks     *tasks
	writes    *prometheus.CounterVec
	// refusals counts, per instance, the syncs in a row that refused to
	// clean its host (in memory: a restart starts the backoff over).
	refusals counts
}

// counts is a map of counters safe for the workers.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// set counts one more for key when more, else forgets key.
func (c *counts) set(key string, more bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !more {
		delete(c.m, key)
		return
	}
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[key]++
}

// New wires the controller: a StaticMachine queues itself; a
// StaticInstance queues the machine it is bound to, and a free one every
// machine still waiting for a host; a Node queues the machine of its
// providerID; the StaticCluster and StaticControlPlane queue the cluster key.
func New(d *manager.Deps, opts Options) *Controller {
	c := &Controller{d: d, opts: opts}
	c.queue = loop.New(Name, d.Loops, c.sync)
	c.tasks = newTasks(d.Clock.Now, c.taskDone)
	c.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "caps_status_writes_total",
		Help: "Status (and metadata) writes of caps-controller-manager, by object kind. It grows only when something changed: a steady rise in a quiet cluster is a hot loop.",
	}, []string{"kind"})
	d.Registry.MustRegister(c.writes)

	infra := d.Informers.NodeManager.Infrastructure().V1alpha1()
	dh := d.Informers.NodeManager.Deckhouse().V1alpha2()
	machines, clusters, planes := infra.StaticMachines(), infra.StaticClusters(), infra.StaticControlPlanes()
	instances, creds := dh.StaticInstances(), dh.SSHCredentialses()
	nodes := d.Informers.Cluster.Core().V1().Nodes().Informer()
	_ = nodes.AddIndexers(cache.Indexers{byProviderID: nodeProviderID, byAddress: nodeAddresses})
	c.machines, c.clusters, c.planes = machines.Lister(), clusters.Lister(), planes.Lister()
	_ = instances.Informer().AddIndexers(cache.Indexers{byInstance: instanceAddress})
	c.instances, c.creds, c.nodes = instances.Lister(), creds.Lister(), nodes.GetIndexer()
	c.atAddress = instances.Informer().GetIndexer()
	c.synced = []cache.InformerSynced{machines.Informer().HasSynced, clusters.Informer().HasSynced, planes.Informer().HasSynced,
		instances.Informer().HasSynced, creds.Informer().HasSynced, nodes.HasSynced}

	_, _ = machines.Informer().AddEventHandler(c.queue.Handler(objectKey(machinePrefix)))
	_, _ = clusters.Informer().AddEventHandler(c.queue.Handler(objectKey(clusterPrefix)))
	_, _ = planes.Informer().AddEventHandler(c.queue.Handler(objectKey(clusterPrefix)))
	_, _ = instances.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.instanceChanged,
		UpdateFunc: func(_, cur any) { c.instanceChanged(cur) },
		DeleteFunc: c.instanceChanged,
	})
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.nodeChanged,
		UpdateFunc: func(old, cur any) { c.nodeChanged(old); c.nodeChanged(cur) },
		DeleteFunc: c.nodeChanged,
	})
	return c
}

// nodeChanged queues the machine of the Node (nodeMachine), and for each
// of the Node's addresses the StaticInstances there: a free one is refused
// or freed by the Node (its address check), a bound one's machine may be
// waiting for a cleanup refused because of it.
func (c *Controller) nodeChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if key := c.nodeMachine(obj); key != "" {
		c.queue.Add(key)
	}
	addresses, _ := nodeAddresses(obj)
	for _, address := range addresses {
		c.queueAt(address)
	}
}

// queueAt queues every StaticInstance at address: a free one's address
// check, a bound one's machine.
func (c *Controller) queueAt(address string) {
	objs, _ := c.atAddress.ByIndex(byInstance, address)
	for _, obj := range objs {
		inst, ok := obj.(*deckhousev1alpha2.StaticInstance)
		if !ok {
			continue
		}
		if ref := inst.Status.MachineRef; ref != nil {
			c.queue.Add(machinePrefix + ref.Namespace + "/" + ref.Name)
		} else {
			c.queue.Add(instancePrefix + inst.Name)
		}
	}
}

// objectKey keys a namespaced object as prefix + namespace/name.
func objectKey(prefix string) loop.Keyer {
	return func(obj any) string {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			return ""
		}
		return prefix + key
	}
}

// instanceChanged queues the machine an instance is bound to; a free
// instance queues its own address check and every machine without a host,
// which may now take it. Either way the instances at its address are
// queued too: one that another instance's address kept refused may be
// free now.
func (c *Controller) instanceChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	inst, ok := obj.(*deckhousev1alpha2.StaticInstance)
	if !ok {
		return
	}
	c.queueAt(inst.Spec.Address)
	if ref := inst.Status.MachineRef; ref != nil {
		c.queue.Add(machinePrefix + ref.Namespace + "/" + ref.Name)
		return
	}
	machines, err := c.machines.List(everything)
	if err != nil {
		return
	}
	for _, m := range machines {
		if m.Spec.ProviderID == "" {
			c.queue.Add(machinePrefix + m.Namespace + "/" + m.Name)
		}
	}
}

// nodeMachine keys a Node by the StaticMachine of its providerID; a Node
// without one (joined by hand, being adopted) by the machine of the bound
// instance at its address, which waits for it (findNode) to give it the
// machine's providerID: if that Node reached the informer only after the
// instance went Running, nothing else would queue the machine again.
func (c *Controller) nodeMachine(obj any) string {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return ""
	}
	if n.Spec.ProviderID == "" {
		ips, _ := nodeAddresses(n)
		for _, ip := range ips {
			objs, _ := c.atAddress.ByIndex(byInstance, ip)
			for _, obj := range objs {
				if inst, ok := obj.(*deckhousev1alpha2.StaticInstance); ok && inst.Status.MachineRef != nil {
					return machinePrefix + inst.Status.MachineRef.Namespace + "/" + inst.Status.MachineRef.Name
				}
			}
		}
		return ""
	}
	if !strings.HasPrefix(n.Spec.ProviderID, infrav1alpha1.ProviderIDPrefix) {
		return ""
	}
	machines, err := c.machines.List(everything)
	if err != nil {
		return ""
	}
	for _, m := range machines {
		if m.Spec.ProviderID == n.Spec.ProviderID {
			return machinePrefix + m.Namespace + "/" + m.Name
		}
	}
	return ""
}

// taskDone queues the machine of the host whose SSH operation ended.
func (c *Controller) taskDone(instance string) {
	inst, err := c.instances.Get(instance)
	if err != nil || inst.Status.MachineRef == nil {
		return
	}
	c.queue.Add(machinePrefix + inst.Status.MachineRef.Namespace + "/" + inst.Status.MachineRef.Name)
}

func nodeProviderID(obj any) ([]string, error) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Spec.ProviderID == "" {
		return nil, nil
	}
	return []string{n.Spec.ProviderID}, nil
}

// instanceAddress indexes a StaticInstance by its address.
func instanceAddress(obj any) ([]string, error) {
	if inst, ok := obj.(*deckhousev1alpha2.StaticInstance); ok {
		return []string{inst.Spec.Address}, nil
	}
	return nil, nil
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it waits for the caches, looks at
// every StaticMachine and the cluster objects once, and works the queue
// until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	klog.FromContext(ctx).Info("Cluster API Provider Static started", "bootstrapTimeout", c.opts.BootstrapTimeout, "cleanupTimeout", c.opts.CleanupTimeout)
	c.queue.Run(ctx, workers)
}

// sync reconciles one key.
func (c *Controller) sync(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, machinePrefix):
		ns, name, err := cache.SplitMetaNamespaceKey(strings.TrimPrefix(key, machinePrefix))
		if err != nil {
			return nil
		}
		return c.syncMachine(ctx, key, ns, name)
	case strings.HasPrefix(key, clusterPrefix):
		ns, name, err := cache.SplitMetaNamespaceKey(strings.TrimPrefix(key, clusterPrefix))
		if err != nil {
			return nil
		}
		return c.syncCluster(ctx, ns, name)
	case strings.HasPrefix(key, instancePrefix):
		return c.syncFree(ctx, strings.TrimPrefix(key, instancePrefix))
	}
	return fmt.Errorf("unknown key %q", key)
}
