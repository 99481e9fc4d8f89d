// Package clusterapi wires node groups to upstream Cluster API, on which
// Cluster API Provider Static (CAPS) joins StaticInstances over SSH, as
// Deckhouse does (reference §8.2). In the namespace d8-cloud-instance-manager
// it keeps:
//
//   - the one Cluster "static" every static group shares, its StaticCluster
//     and externally managed StaticControlPlane (whose status CAPS fills), and
//     its kubeconfig Secret static-kubeconfig, through which Cluster API
//     reaches this cluster's Nodes;
//   - per Static or CloudStatic group with spec.staticInstances, a
//     MachineDeployment <group> with staticInstances.count replicas whose
//     Machines take their bootstrap data from manual-bootstrap-for-<group>
//     (no bootstrap provider) and clone their StaticMachine from the
//     StaticMachineTemplate <group>, which carries the group's
//     staticInstances.labelSelector. Changing the count scales through Cluster
//     API; removing staticInstances (or the group) removes both objects.
//   - the Role CAPSBootstrapDataRole, which grants caps-controller-manager
//     get on exactly those manual-bootstrap-for-<group> Secrets by name
//     (bootstrapdata.go): it reads no other Secret of the namespace.
//   - on the Instance of a node a Machine backs, status.machineRef and
//     status.bootstrapStatus and a finalizer: deleting such an Instance
//     deletes its Machine, so Cluster API drains and deletes the Node and CAPS
//     cleans and releases the host; the Instance goes once the Machine has.
//
// It runs only with --cluster-api (Cluster API's CRDs and
// capi-controller-manager must be installed). Cluster API's objects are read
// through a dynamic informer on the namespace and converted to the typed
// objects of sigs.k8s.io/cluster-api/api (the API types only: no Cluster API
// controller code is linked in); all writes are server-side applies with the
// field manager ClusterAPIFieldManager, made only when the object differs
// from what is wanted. The decisions are pure functions in objects.go and
// instance.go.
package clusterapi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/loop"
	"github.com/node-manager/node-manager/controllers/manager"
	nmlisters "github.com/node-manager/node-manager/generated/listers/deckhouse/v1"
	nmlistersv1alpha1 "github.com/node-manager/node-manager/generated/listers/deckhouse/v1alpha1"
	infralisters "github.com/node-manager/node-manager/generated/listers/infrastructure/v1alpha1"
)

// Name is the controller's name: its queue, its logs and the controller
// label of the loop metrics.
const Name = "clusterapi"

// Cluster API's resources, in the version v1.14 stores.
var (
	clustersResource            = clusterv1.GroupVersion.WithResource("clusters")
	machineDeploymentsResource  = clusterv1.GroupVersion.WithResource("machinedeployments")
	machinesResource            = clusterv1.GroupVersion.WithResource("machines")
	machineSetsResource         = clusterv1.GroupVersion.WithResource("machinesets")
	machineHealthChecksResource = clusterv1.GroupVersion.WithResource("machinehealthchecks")
)

// Keys of the queue: the Cluster object set, CAPS's bootstrap-data Role, the
// autoscaler's priority expander ConfigMap, a group, a group's chaos, a
// MachineDeployment to roll for replacements, or an Instance.
const (
	clusterKey     = "cluster"
	roleKey        = "bootstrap-data-role"
	prioritiesKey  = "priority-expander"
	groupPrefix    = "group/"
	chaosPrefix    = "chaos/"
	rolloutPrefix  = "rollout/"
	instancePrefix = "instance/"
)

// Controller keeps the Cluster API objects of static groups.
type Controller struct {
	d         *manager.Deps
	opts      Options
	enabled   bool
	groups    nmlisters.NodeGroupLister
	instances nmlistersv1alpha1.InstanceLister
	templates infralisters.StaticMachineTemplateLister
	secrets   corelisters.SecretLister
	capi      dynamicinformer.DynamicSharedInformerFactory
	clusters  cache.GenericLister
	mds       cache.GenericLister
	machines  cache.GenericLister
	// classes are the cloud provider's machine templates (nil without
	// --cloud-cluster): the instance classes and node-manager's copies.
	classes  cache.GenericLister
	classGVR schema.GroupVersionResource
	// machineSets say which copies of a class are still cloned from, and
	// deployments hold the standby holders (nil without --cloud-cluster).
	machineSets cache.GenericLister
	deployments appsinformers.DeploymentInformer
	synced      []cache.InformerSynced
	queue       *loop.Loop
	// roleMu serializes the writes of the bootstrap-data Role.
	roleMu sync.Mutex
	// chaosVictims counts the machines chaos deleted, per group;
	// chaosHeld is why chaos last held back, per group.
	chaosVictims *prometheus.CounterVec
	chaosHeld    heldReasons
	chaosMarks   chaosMarks
}

// New wires the controller: a group, its MachineDeployment or template
// queues the group; an Instance, or a Machine (by its node), queues the
// Instance; the Cluster or its Secret queues the Cluster set. Without
// --cluster-api it only says so when it runs, and registers no informer.
func New(d *manager.Deps, opts Options) *Controller {
	c := &Controller{d: d, opts: opts, enabled: opts.Enabled}
	c.queue = loop.New(Name, d.Loops, c.sync)
	if !c.enabled {
		return c
	}
	groups := d.Informers.NodeManager.Deckhouse().V1().NodeGroups()
	instances := d.Informers.NodeManager.Deckhouse().V1alpha1().Instances()
	templates := d.Informers.NodeManager.Infrastructure().V1alpha1().StaticMachineTemplates()
	secrets := d.Informers.Namespace.Core().V1().Secrets()
	c.capi = dynamicinformer.NewFilteredDynamicSharedInformerFactory(d.Dynamic, 0, d.Namespace, nil)
	clusters, mds, machines := c.capi.ForResource(clustersResource), c.capi.ForResource(machineDeploymentsResource), c.capi.ForResource(machinesResource)
	c.groups, c.instances, c.templates, c.secrets = groups.Lister(), instances.Lister(), templates.Lister(), secrets.Lister()
	c.clusters, c.mds, c.machines = clusters.Lister(), mds.Lister(), machines.Lister()
	c.synced = []cache.InformerSynced{groups.Informer().HasSynced, instances.Informer().HasSynced, templates.Informer().HasSynced,
		secrets.Informer().HasSynced, clusters.Informer().HasSynced, mds.Informer().HasSynced, machines.Informer().HasSynced}

	_, _ = groups.Informer().AddEventHandler(c.queue.Handler(prefixed(groupPrefix, loop.ByName)))
	_, _ = groups.Informer().AddEventHandler(c.queue.Handler(func(obj any) string {
		if ng, ok := obj.(*deckhousev1.NodeGroup); ok && c.chaosWanted(ng) {
			return chaosPrefix + ng.Name
		}
		return ""
	}))
	_, _ = groups.Informer().AddEventHandler(c.queue.Handler(func(any) string { return roleKey }))
	_, _ = groups.Informer().AddEventHandler(c.queue.Handler(func(any) string { return prioritiesKey }))
	_, _ = mds.Informer().AddEventHandler(c.queue.Handler(prefixed(groupPrefix, groupOf)))
	_, _ = templates.Informer().AddEventHandler(c.queue.Handler(prefixed(groupPrefix, groupOf)))
	_, _ = instances.Informer().AddEventHandler(c.queue.Handler(prefixed(instancePrefix, loop.ByName)))
	_, _ = machines.Informer().AddEventHandler(c.queue.Handler(prefixed(instancePrefix, machineNode)))
	_, _ = machines.Informer().AddEventHandler(c.queue.Handler(c.chaosKey))
	_, _ = d.Informers.Cluster.Core().V1().Nodes().Informer().AddEventHandler(c.queue.Handler(c.chaosKey))
	_, _ = d.Informers.Cluster.Core().V1().Nodes().Informer().AddEventHandler(c.queue.Handler(c.rolloutKey))
	_, _ = clusters.Informer().AddEventHandler(c.queue.Handler(clusterSet))
	_, _ = secrets.Informer().AddEventHandler(c.queue.Handler(clusterSet))
	if opts.CloudCluster != "" {
		c.classGVR, _ = opts.templateResource() // checked by Options.Validate
		classes := c.capi.ForResource(c.classGVR)
		c.classes = classes.Lister()
		c.deployments = d.Informers.Namespace.Apps().V1().Deployments()
		c.synced = append(c.synced, c.deployments.Informer().HasSynced)
		// A standby holder changed or deleted by someone else is put back.
		_, _ = c.deployments.Informer().AddEventHandler(c.queue.Handler(prefixed(groupPrefix, managedGroup)))
		sets := c.capi.ForResource(machineSetsResource)
		c.machineSets = sets.Lister()
		c.synced = append(c.synced, classes.Informer().HasSynced, sets.Informer().HasSynced)
		// A MachineSet gone may free a superseded copy of its group's class.
		_, _ = sets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, err := meta.Accessor(obj); err == nil && o.GetLabels()[deckhousev1.NodeGroupLabel] != "" {
				c.queue.Add(groupPrefix + o.GetLabels()[deckhousev1.NodeGroupLabel])
			}
		}})
		// A class queues the groups that name it; a copy, its group.
		_, _ = classes.Informer().AddEventHandler(c.queue.Handler(prefixed(groupPrefix, managedGroup)))
		_, _ = classes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.addGroupsOfClass,
			UpdateFunc: func(_, obj any) { c.addGroupsOfClass(obj) },
			DeleteFunc: c.addGroupsOfClass,
		})
		// The cloud Cluster's UID names the machines (without --cluster-uuid).
		_, _ = clusters.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.addCloudGroups,
			UpdateFunc: func(_, obj any) { c.addCloudGroups(obj) },
		})
	}
	d.Registry.MustRegister(newSeries(c))
	c.chaosVictims = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "node_manager_chaos_deleted_machines_total",
		Help: "Machines chaos (spec.chaos.mode DrainAndDelete) deleted, per group, since the controller started."}, []string{"node_group"})
	d.Registry.MustRegister(c.chaosVictims)
	return c
}

// groupOf keys an object node-manager made for a group by the group's
// label, and anything else by its name (a static group's
// MachineDeployment is named after its group).
func groupOf(obj any) string {
	if g := managedGroup(obj); g != "" {
		return g
	}
	return loop.ByName(obj)
}

// managedGroup is the group of an object node-manager made for one, or "".
func managedGroup(obj any) string {
	o, err := meta.Accessor(obj)
	if err != nil || !managed(o.GetLabels()) {
		return ""
	}
	return o.GetLabels()[deckhousev1.NodeGroupLabel]
}

// addGroupsOfClass queues the CloudEphemeral groups whose class obj is.
func (c *Controller) addGroupsOfClass(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, err := meta.Accessor(obj)
	if err != nil || managed(o.GetLabels()) {
		return
	}
	c.addCloudGroupsWhere(func(ng *deckhousev1.NodeGroup) bool { return ng.Spec.CloudInstances.ClassReference.Name == o.GetName() })
}

// addCloudGroups queues every CloudEphemeral group when obj is the cloud
// provider's Cluster.
func (c *Controller) addCloudGroups(obj any) {
	if o, err := meta.Accessor(obj); err == nil && o.GetName() == c.opts.CloudCluster {
		c.addCloudGroupsWhere(func(*deckhousev1.NodeGroup) bool { return true })
	}
}

// addCloudGroupsWhere queues the CloudEphemeral groups for which pick says so.
func (c *Controller) addCloudGroupsWhere(pick func(*deckhousev1.NodeGroup) bool) {
	groups, err := c.groups.List(everything)
	if err != nil {
		return
	}
	for _, ng := range groups {
		if CloudWanted(ng) && pick(ng) {
			c.queue.Add(groupPrefix + ng.Name)
		}
	}
}

// prefixed puts prefix before the key keyer names ("" stays "").
func prefixed(prefix string, keyer loop.Keyer) loop.Keyer {
	return func(obj any) string {
		if k := keyer(obj); k != "" {
			return prefix + k
		}
		return ""
	}
}

// machineNode keys a Machine by the Node Cluster API found for it.
func machineNode(obj any) string {
	m, err := toMachine(obj)
	if err != nil {
		return ""
	}
	return m.Status.NodeRef.Name
}

// clusterSet keys the Cluster "static" and its kubeconfig Secret.
func clusterSet(obj any) string {
	if name := loop.ByName(obj); name == infrav1alpha1.StaticClusterName || name == infrav1alpha1.StaticKubeconfigSecret {
		return clusterKey
	}
	return ""
}

// Name implements manager.Controller.
func (c *Controller) Name() string { return Name }

// Run implements manager.Controller: it starts Cluster API's informers,
// waits for every cache and works the queue until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if !c.enabled {
		klog.FromContext(ctx).Info("Cluster API wiring is off (--cluster-api=false): static groups' staticInstances get no MachineDeployment")
		return
	}
	c.capi.Start(ctx.Done())
	if !manager.HasSynced(ctx, Name, c.synced...) {
		return
	}
	c.queue.Add(clusterKey)
	c.queue.Add(roleKey)
	c.queue.Add(prioritiesKey)
	c.queue.Run(ctx, workers)
}

// sync reconciles one key.
func (c *Controller) sync(ctx context.Context, key string) error {
	switch {
	case key == clusterKey:
		return c.syncCluster(ctx)
	case key == roleKey:
		return c.syncBootstrapDataRole(ctx)
	case key == prioritiesKey:
		return c.syncPriorityExpander(ctx)
	case strings.HasPrefix(key, rolloutPrefix):
		return c.syncRollout(ctx, strings.TrimPrefix(key, rolloutPrefix))
	case strings.HasPrefix(key, chaosPrefix):
		return c.syncChaos(ctx, strings.TrimPrefix(key, chaosPrefix))
	case strings.HasPrefix(key, groupPrefix):
		return c.syncGroup(ctx, strings.TrimPrefix(key, groupPrefix))
	case strings.HasPrefix(key, instancePrefix):
		return c.syncInstance(ctx, strings.TrimPrefix(key, instancePrefix))
	}
	return nil
}

// kubeconfig is what the Cluster's Secret holds (see Options.Kubeconfig).
func (c *Controller) kubeconfig() ([]byte, error) {
	path := c.opts.Kubeconfig
	if path == "" {
		return InClusterKubeconfig(InClusterServer(os.Getenv))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --cluster-api-kubeconfig: %w", err)
	}
	return b, nil
}

// toMachine converts what the dynamic informer holds (also a tombstone).
func toMachine(obj any) (*clusterv1.Machine, error) {
	m := &clusterv1.Machine{}
	return m, fromUnstructured(obj, m)
}

func fromUnstructured(obj any, into any) error {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T", obj)
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

var everything = labels.Everything()
