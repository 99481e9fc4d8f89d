package staticmachines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
)

var everything = labels.Everything()

// syncCluster reports the StaticCluster provisioned and the
// StaticControlPlane initialized and externally managed: the hosts and the
// control plane already exist, and Cluster API needs both flags before it
// looks for, drains or deletes any Machine's Node.
func (c *Controller) syncCluster(ctx context.Context, ns, name string) error {
	infra := c.d.NodeManager.InfrastructureV1alpha1()
	if sc, err := c.clusters.StaticClusters(ns).Get(name); err == nil {
		want := sc.DeepCopy()
		want.Status.Ready = true
		want.Status.Initialization.Provisioned = ptr.To(true)
		if !equality.Semantic.DeepEqual(sc.Status, want.Status) {
			if _, err := infra.StaticClusters(ns).UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
				return fmt.Errorf("reporting StaticCluster %s/%s provisioned: %w", ns, name, err)
			}
			c.writes.WithLabelValues("StaticCluster").Inc()
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if cp, err := c.planes.StaticControlPlanes(ns).Get(name); err == nil {
		want := cp.DeepCopy()
		want.Status.Ready, want.Status.Initialized, want.Status.ExternalManagedControlPlane = true, true, true
		want.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
		if !equality.Semantic.DeepEqual(cp.Status, want.Status) {
			if _, err := infra.StaticControlPlanes(ns).UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
				return fmt.Errorf("reporting StaticControlPlane %s/%s initialized: %w", ns, name, err)
			}
			c.writes.WithLabelValues("StaticControlPlane").Inc()
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// syncMachine backs one StaticMachine with a host and moves the host on.
func (c *Controller) syncMachine(ctx context.Context, key, ns, name string) error {
	sm, err := c.machines.StaticMachines(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	deleting := sm.DeletionTimestamp != nil
	held := slices.Contains(sm.Finalizers, infrav1alpha1.StaticMachineFinalizer)
	if deleting && !held {
		return nil
	}
	if !held {
		// The finalizer first: a Machine deleted from now on waits for the cleanup.
		sm = sm.DeepCopy()
		sm.Finalizers = append(sm.Finalizers, infrav1alpha1.StaticMachineFinalizer)
		_, err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(ns).Update(ctx, sm, metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName})
		if err == nil {
			c.writes.WithLabelValues("StaticMachine").Inc()
		}
		return err
	}
	now := c.d.Clock.Now()
	inst := c.boundInstance(sm)
	if inst == nil {
		if deleting {
			return c.removeFinalizer(ctx, sm)
		}
		if inst, err = c.bind(ctx, key, sm, now); err != nil || inst == nil {
			return err
		}
	}
	// The machine's providerID names its instance, written after the
	// binding and checked on every sync: a write refused (Cluster API
	// updates a new StaticMachine too) is made again here, never skipped,
	// so the bootstrap never writes an empty provider id to the host.
	if want := providerIDOf(inst); sm.Spec.ProviderID != want {
		sm = sm.DeepCopy()
		sm.Spec.ProviderID = want
		if sm, err = c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(sm.Namespace).Update(ctx, sm, metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
			return fmt.Errorf("setting the providerID of StaticMachine %s/%s: %w", ns, name, err)
		}
		c.writes.WithLabelValues("StaticMachine").Inc()
	}
	return c.advance(ctx, key, sm, inst, now)
}

// providerIDOf is the providerID of the machine inst backs.
func providerIDOf(inst *deckhousev1alpha2.StaticInstance) string {
	return infrav1alpha1.ProviderIDPrefix + string(inst.UID)
}

// boundInstance is the instance whose machineRef is sm (nil: none).
func (c *Controller) boundInstance(sm *infrav1alpha1.StaticMachine) *deckhousev1alpha2.StaticInstance {
	all, err := c.instances.List(everything)
	if err != nil {
		return nil
	}
	for _, inst := range all {
		if ref := inst.Status.MachineRef; ref != nil && ref.UID == sm.UID && ref.Name == sm.Name && ref.Namespace == sm.Namespace {
			return inst
		}
	}
	return nil
}

// bind picks a free instance for sm and binds it: the instance's
// machineRef is written first, with the resourceVersion read (two machines
// that pick the same instance: one write fails with a conflict and that
// machine picks again); syncMachine then writes the machine's providerID.
// No free instance: look again in a minute (an instance in Error becomes
// free after a while) or when one is freed.
func (c *Controller) bind(ctx context.Context, key string, sm *infrav1alpha1.StaticMachine, now time.Time) (*deckhousev1alpha2.StaticInstance, error) {
	sel, err := instanceSelector(sm.Spec.LabelSelector)
	if err != nil {
		klog.FromContext(ctx).Error(err, "StaticMachine's labelSelector is invalid; it gets no host until its group's staticInstances.labelSelector is fixed", "staticMachine", klog.KObj(sm))
		return nil, nil
	}
	// The pick must see every free host, one created a moment ago too, so
	// the instances are read from the API, not from the informer: under
	// load the informer lagged long enough for a machine to get the host
	// just released rather than the one waiting longest. A bind is rare
	// (once per machine, or a minute apart while none is free).
	list, err := c.d.NodeManager.DeckhouseV1alpha2().StaticInstances().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list StaticInstances to pick a host for StaticMachine %s/%s: %w", sm.Namespace, sm.Name, err)
	}
	candidates := make([]*deckhousev1alpha2.StaticInstance, 0, len(list.Items))
	for i := range list.Items {
		inst := &list.Items[i]
		// A host that already is a node or another instance's, or whose
		// host key is not trusted, is never bound (address.go, hostkey.go;
		// syncFree reports it). An adoption CAPS
		// refuses (a control-plane node without allow-control-plane) is
		// no candidate either: picking it would refuse and release it
		// over and over.
		if inst.Status.MachineRef == nil && (c.addressConflict(inst) != nil || !hostKeyTrusted(inst)) {
			continue
		}
		if _, adopt := inst.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation]; adopt {
			if n := c.findNode("", inst.Spec.Address, true); n != nil && isControlPlane(n) && !allowsControlPlane(inst) {
				continue
			}
		}
		candidates = append(candidates, inst)
	}
	pick := pickInstance(candidates, sel, now)
	if pick == nil {
		c.queue.AddAfter(key, time.Minute)
		return nil, nil
	}
	inst := pick.DeepCopy()
	inst.Status.MachineRef = &corev1.ObjectReference{APIVersion: infrav1alpha1.SchemeGroupVersion.String(), Kind: "StaticMachine",
		Namespace: sm.Namespace, Name: sm.Name, UID: sm.UID}
	inst.Status.NodeRef = nil
	inst, err = c.d.NodeManager.DeckhouseV1alpha2().StaticInstances().UpdateStatus(ctx, inst, metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName})
	if err != nil {
		return nil, fmt.Errorf("binding StaticInstance %s to StaticMachine %s/%s: %w", pick.Name, sm.Namespace, sm.Name, err)
	}
	c.writes.WithLabelValues("StaticInstance").Inc()
	klog.FromContext(ctx).Info("StaticInstance picked", "staticInstance", inst.Name, "staticMachine", klog.KObj(sm), "address", inst.Spec.Address)
	return inst, nil
}

// addressConflict is what keeps the free inst from being bound because of
// its address (nil: nothing), from the caches.
func (c *Controller) addressConflict(inst *deckhousev1alpha2.StaticInstance) *conflict {
	_, adopt := inst.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation]
	var others []*deckhousev1alpha2.StaticInstance
	objs, _ := c.atAddress.ByIndex(byInstance, inst.Spec.Address)
	for _, obj := range objs {
		if o, ok := obj.(*deckhousev1alpha2.StaticInstance); ok {
			others = append(others, o)
		}
	}
	return addressConflict(inst, adopt, c.nodesAt(inst.Spec.Address), others)
}

// nodesAt is the Nodes with address among theirs.
func (c *Controller) nodesAt(address string) []*corev1.Node {
	objs, _ := c.nodes.ByIndex(byAddress, address)
	out := make([]*corev1.Node, 0, len(objs))
	for _, obj := range objs {
		if n, ok := obj.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// syncFree checks the address of a StaticInstance bound to no machine:
// refused while a Node or another instance has it, Pending again once
// not (decideFree). A bound instance is its machine's business.
func (c *Controller) syncFree(ctx context.Context, name string) error {
	inst, err := c.instances.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if inst.Status.MachineRef != nil || inst.DeletionTimestamp != nil {
		return nil
	}
	conflict := c.addressConflict(inst)
	trusted := hostKeyTrusted(inst)
	address := decideFree(phaseOf(inst), addressCondition(inst), conflict)
	hostKey := decideHostKey(phaseOf(inst), hostKeyCondition(inst), trusted)
	if address.condition == nil && hostKey.condition == nil {
		return nil
	}
	// Error while either refuses; Pending again only once neither does.
	phase := address.phase
	if phase == "" {
		phase = hostKey.phase
	}
	if conflict != nil || !trusted {
		phase = deckhousev1alpha2.StaticInstanceError
	}
	obj := inst.DeepCopy()
	now := metav1.NewTime(c.d.Clock.Now())
	if phase != "" && phase != phaseOf(inst) {
		obj.Status.CurrentStatus = &deckhousev1alpha2.StaticInstanceCurrentStatus{Phase: phase, LastUpdateTime: &now}
	}
	for _, cc := range []*conditionChange{address.condition, hostKey.condition} {
		if cc == nil {
			continue
		}
		cond := metav1.Condition{Type: cc.Type, Status: metav1.ConditionFalse, Reason: cc.Reason, Message: cc.Message, ObservedGeneration: inst.Generation}
		if cc.True {
			cond.Status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&obj.Status.Conditions, cond)
	}
	if !equality.Semantic.DeepEqual(inst.Status, obj.Status) {
		if _, err := c.d.NodeManager.DeckhouseV1alpha2().StaticInstances().UpdateStatus(ctx, obj,
			metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
			return fmt.Errorf("updating the status of StaticInstance %s: %w", inst.Name, err)
		}
		c.writes.WithLabelValues("StaticInstance").Inc()
	}
	switch {
	case address.condition == nil:
	case conflict != nil:
		klog.FromContext(ctx).Info("StaticInstance refused: its address is in use", "staticInstance", inst.Name, "address", inst.Spec.Address, "holder", conflict.holder())
	default:
		klog.FromContext(ctx).Info("StaticInstance's address is free again", "staticInstance", inst.Name, "address", inst.Spec.Address)
	}
	switch {
	case hostKey.condition == nil:
	case !trusted:
		klog.FromContext(ctx).Info("StaticInstance refused: its host key is not pinned and trust on first use is not allowed", "staticInstance", inst.Name, "address", inst.Spec.Address)
	default:
		klog.FromContext(ctx).Info("StaticInstance's host key is trusted", "staticInstance", inst.Name, "address", inst.Spec.Address)
	}
	for _, e := range []*eventNote{address.event, hostKey.event} {
		if e == nil {
			continue
		}
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		c.d.Recorder.Eventf(inst, nil, typ, e.Reason, "bind", "%s", e.Note)
	}
	return nil
}

// adopted reports whether inst is, or was last bound as, an adoption: it
// carries skip-bootstrap-phase, or its last binding adopted the node (the
// annotation goes once the node is adopted; the Bootstrapped condition
// says Adopted until the next binding starts over).
func adopted(inst *deckhousev1alpha2.StaticInstance) bool {
	if _, ok := inst.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation]; ok {
		return true
	}
	cond := meta.FindStatusCondition(inst.Status.Conditions, condBootstrapped)
	return cond != nil && cond.Reason == reasonAdopted
}

// foreignNode is a Node at inst's address other than own, this machine's
// Node ("": none): a host that is another node is never bootstrapped,
// adopted or cleaned for this machine.
func (c *Controller) foreignNode(inst *deckhousev1alpha2.StaticInstance, own *corev1.Node) string {
	var names []string
	for _, n := range c.nodesAt(inst.Spec.Address) {
		if own == nil || n.UID != own.UID || n.Name != own.Name {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// advance reads the bound instance's situation, decides, and carries the
// step out.
func (c *Controller) advance(ctx context.Context, key string, sm *infrav1alpha1.StaticMachine, inst *deckhousev1alpha2.StaticInstance, now time.Time) error {
	_, adopt := inst.Annotations[deckhousev1.SkipBootstrapPhaseAnnotation]
	sel, err := instanceSelector(sm.Spec.LabelSelector)
	matches := err == nil && sel.Matches(labels.Set(inst.Labels))
	node := c.findNode(sm.Spec.ProviderID, inst.Spec.Address, adopted(inst))
	phase := phaseOf(inst)
	kind := taskOf(phase, adopt)
	o, finished, message, _ := c.tasks.state(inst.Name, kind)
	hostKey := c.tasks.seenHostKey(inst.Name)
	s := situation{
		now:               now,
		deleting:          sm.DeletionTimestamp != nil,
		phase:             phase,
		since:             phaseSince(inst),
		adopt:             adopt,
		matches:           matches,
		nodeReady:         node != nil && node.Annotations[deckhousev1.ConfigurationChecksumAnnotation] != "",
		controlPlane:      node != nil && isControlPlane(node),
		allowControlPlane: allowsControlPlane(inst),
		foreignNode:       c.foreignNode(inst, node),
		hostKeyNotPinned:  !hostKeyTrusted(inst),
		address:           inst.Spec.Address,
		refusals:          c.refusals.get(inst.Name),
		task:              o,
		taskFinished:      finished,
		taskMessage:       message,
		bootstrapTimeout:  c.opts.BootstrapTimeout,
		cleanupTimeout:    c.opts.CleanupTimeout,
	}
	st := decide(s)
	c.refusals.set(inst.Name, st.refused)
	klog.FromContext(ctx).V(4).Info("Decided", "staticMachine", klog.KObj(sm), "staticInstance", inst.Name, "phase", phase, "step", describe(st))
	return c.carryOut(ctx, key, sm, inst, node, s, st, hostKey)
}

// taskOf is the SSH operation a phase is about.
func taskOf(phase deckhousev1alpha2.StaticInstancePhase, adopt bool) taskKind {
	switch phase {
	case deckhousev1alpha2.StaticInstanceBootstrapping:
		if adopt {
			return taskAdopt
		}
		return taskBootstrap
	case deckhousev1alpha2.StaticInstanceCleaning:
		return taskCleanup
	}
	return taskNone
}

// eventAction is the action of an Event about the instance in s, which
// events.k8s.io/v1 requires (an Event without one is refused): the SSH
// operation of the phase; outside one, "cleanup" for a machine being
// deleted (its host is to be cleaned, or refused to be) and "release"
// otherwise (a Running instance whose labels stopped matching: its machine
// is deleted).
func eventAction(s situation) string {
	if kind := taskOf(s.phase, s.adopt); kind != taskNone {
		return string(kind)
	}
	if s.deleting {
		return string(taskCleanup)
	}
	return "release"
}

// carryOut writes what st changes, each object only when it differs, and
// starts the SSH operation st asks for.
func (c *Controller) carryOut(ctx context.Context, key string, sm *infrav1alpha1.StaticMachine, inst *deckhousev1alpha2.StaticInstance,
	node *corev1.Node, s situation, st step, hostKey string) error {
	instances := c.d.NodeManager.DeckhouseV1alpha2().StaticInstances()
	update := metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}

	// The instance's metadata: the host key seen on first use is pinned
	// (where an admin allowed trust on first use), and an adoption's
	// annotation goes once it is done.
	meta2 := inst.DeepCopy()
	if hostKey != "" && pinnedKey(meta2) == "" && trustOnFirstUse(meta2) {
		if meta2.Annotations == nil {
			meta2.Annotations = map[string]string{}
		}
		meta2.Annotations[deckhousev1.SSHHostKeyAnnotation] = hostKey
	}
	if st.dropAdoption {
		delete(meta2.Annotations, deckhousev1.SkipBootstrapPhaseAnnotation)
	}
	latest := inst
	if !equality.Semantic.DeepEqual(inst.Annotations, meta2.Annotations) {
		var err error
		if latest, err = instances.Update(ctx, meta2, update); err != nil {
			return fmt.Errorf("updating the annotations of StaticInstance %s: %w", inst.Name, err)
		}
		c.writes.WithLabelValues("StaticInstance").Inc()
	}

	// The operation first, so that the phase it belongs to is written
	// only once it runs.
	if st.run != "" {
		if err := c.startTask(ctx, st.run, sm, inst, s, st); err != nil {
			// Not started: the phase stays, the machine says why, and the
			// queue tries again (with backoff) until the data is readable.
			if _, rerr := c.setMachineCondition(ctx, sm, &conditionChange{Type: condMachineReady,
				Reason: infrav1alpha1.BootstrapDataUnavailableReason, Message: err.Error() + "; trying again"}); rerr != nil {
				klog.FromContext(ctx).Error(rerr, "Reporting the unreadable bootstrap data", "staticMachine", klog.KObj(sm))
			}
			return err
		}
	}

	status := inst.Status.DeepCopy()
	now := metav1.NewTime(s.now)
	if st.phase != "" && st.phase != s.phase {
		status.CurrentStatus = &deckhousev1alpha2.StaticInstanceCurrentStatus{Phase: st.phase, LastUpdateTime: &now}
		klog.FromContext(ctx).Info("StaticInstance phase changed", "staticInstance", inst.Name, "from", s.phase, "to", st.phase, "staticMachine", klog.KObj(sm))
	}
	if cc := st.condition; cc != nil {
		cond := metav1.Condition{Type: cc.Type, Status: metav1.ConditionFalse, Reason: cc.Reason, Message: cc.Message, ObservedGeneration: inst.Generation}
		if cc.True {
			cond.Status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, cond)
	}
	if st.provisioned && node != nil {
		status.NodeRef = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	}
	if st.release {
		status.MachineRef, status.NodeRef = nil, nil
		c.tasks.forget(inst.Name)
	}
	if !equality.Semantic.DeepEqual(inst.Status, *status) {
		obj := latest.DeepCopy()
		obj.Status = *status
		if _, err := instances.UpdateStatus(ctx, obj, update); err != nil {
			return fmt.Errorf("updating the status of StaticInstance %s: %w", inst.Name, err)
		}
		c.writes.WithLabelValues("StaticInstance").Inc()
	}
	if e := st.event; e != nil {
		typ := corev1.EventTypeNormal
		if e.Warning {
			typ = corev1.EventTypeWarning
		}
		c.d.Recorder.Eventf(inst, sm, typ, e.Reason, eventAction(s), "%s", e.Note)
		if st.refused {
			c.d.Recorder.Eventf(sm, inst, typ, e.Reason, eventAction(s), "%s", e.Note)
		}
	}

	if mc := st.machineCondition; mc != nil {
		var err error
		if sm, err = c.setMachineCondition(ctx, sm, mc); err != nil {
			return err
		}
	}
	if st.provisioned && node != nil {
		if err := c.provision(ctx, sm, node); err != nil {
			return err
		}
	}
	if st.deleteMachine {
		if err := c.deleteMachine(ctx, sm); err != nil {
			return err
		}
	}
	switch {
	case st.removeFinalizer:
		if err := c.removeFinalizer(ctx, sm); err != nil {
			return err
		}
	case st.release && sm.DeletionTimestamp == nil:
		// The machine looks for another host: its providerID goes with
		// the one it had (Cluster API copies it only once provisioned).
		if sm.Spec.ProviderID != "" && !ptr.Deref(sm.Status.Initialization.Provisioned, false) {
			obj := sm.DeepCopy()
			obj.Spec.ProviderID = ""
			if _, err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(sm.Namespace).Update(ctx, obj, update); err != nil {
				return fmt.Errorf("clearing the providerID of StaticMachine %s/%s: %w", sm.Namespace, sm.Name, err)
			}
			c.writes.WithLabelValues("StaticMachine").Inc()
		}
		c.queue.Add(key)
	}
	if st.requeue > 0 {
		c.queue.AddAfter(key, st.requeue)
	}
	return nil
}

// setMachineCondition sets a False condition on sm's status (written only
// when it changes) and returns the StaticMachine as stored.
func (c *Controller) setMachineCondition(ctx context.Context, sm *infrav1alpha1.StaticMachine, mc *conditionChange) (*infrav1alpha1.StaticMachine, error) {
	want := sm.DeepCopy()
	meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{Type: mc.Type, Status: metav1.ConditionFalse, Reason: mc.Reason,
		Message: mc.Message, ObservedGeneration: sm.Generation})
	if equality.Semantic.DeepEqual(sm.Status, want.Status) {
		return sm, nil
	}
	updated, err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(sm.Namespace).UpdateStatus(ctx, want,
		metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName})
	if err != nil {
		return sm, fmt.Errorf("reporting on StaticMachine %s/%s: %w", sm.Namespace, sm.Name, err)
	}
	c.writes.WithLabelValues("StaticMachine").Inc()
	return updated, nil
}

// provision reports sm provisioned with node's addresses. A node that
// registered without a providerID (an adopted one) gets the machine's, so
// that Cluster API finds it (a Node's providerID may be set once).
func (c *Controller) provision(ctx context.Context, sm *infrav1alpha1.StaticMachine, node *corev1.Node) error {
	if node.Spec.ProviderID == "" && sm.Spec.ProviderID != "" {
		patch := fmt.Appendf(nil, `{"spec":{"providerID":%q}}`, sm.Spec.ProviderID)
		if _, err := c.d.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
			return fmt.Errorf("setting the providerID of adopted Node %s: %w", node.Name, err)
		}
	}
	want := sm.DeepCopy()
	want.Status.Ready = true
	want.Status.Initialization.Provisioned = ptr.To(true)
	want.Status.Addresses = nil
	for _, a := range node.Status.Addresses {
		want.Status.Addresses = append(want.Status.Addresses, infrav1alpha1.MachineAddress{Type: infrav1alpha1.MachineAddressType(a.Type), Address: a.Address})
	}
	meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "NodeJoined",
		Message: "the host's Node " + node.Name + " joined", ObservedGeneration: sm.Generation})
	if equality.Semantic.DeepEqual(sm.Status, want.Status) {
		return nil
	}
	if _, err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(sm.Namespace).UpdateStatus(ctx, want,
		metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil {
		return fmt.Errorf("reporting StaticMachine %s/%s provisioned: %w", sm.Namespace, sm.Name, err)
	}
	c.writes.WithLabelValues("StaticMachine").Inc()
	return nil
}

func (c *Controller) removeFinalizer(ctx context.Context, sm *infrav1alpha1.StaticMachine) error {
	obj := sm.DeepCopy()
	obj.Finalizers = slices.DeleteFunc(obj.Finalizers, func(f string) bool { return f == infrav1alpha1.StaticMachineFinalizer })
	if _, err := c.d.NodeManager.InfrastructureV1alpha1().StaticMachines(sm.Namespace).Update(ctx, obj,
		metav1.UpdateOptions{FieldManager: deckhousev1.CAPSControllerManagerName}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of StaticMachine %s/%s: %w", sm.Namespace, sm.Name, err)
	}
	c.writes.WithLabelValues("StaticMachine").Inc()
	return nil
}

// machineOf is the name of the Machine that owns sm ("" before Cluster API
// set the owner reference).
func machineOf(sm *infrav1alpha1.StaticMachine) string {
	for _, o := range sm.OwnerReferences {
		if o.Kind == "Machine" {
			return o.Name
		}
	}
	return ""
}

func (c *Controller) deleteMachine(ctx context.Context, sm *infrav1alpha1.StaticMachine) error {
	name := machineOf(sm)
	if name == "" {
		return nil
	}
	err := c.d.Dynamic.Resource(machinesResource).Namespace(sm.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Machine %s/%s: %w", sm.Namespace, name, err)
	}
	return nil
}

// startTask starts the SSH operation kind on the instance's host, bounded
// by what is left of its phase's timeout. What the operation needs from
// the cluster (credentials, the bootstrap script) is read when it starts,
// so every attempt uses the current SSHCredentials and a fresh bootstrap
// token. The bootstrap script is read first, here: if it cannot be read
// (its Secret missing or not granted to caps-controller-manager), no
// operation starts and the error says what is missing.
func (c *Controller) startTask(ctx context.Context, kind taskKind, sm *infrav1alpha1.StaticMachine, inst *deckhousev1alpha2.StaticInstance, s situation, st step) error {
	if kind == taskBootstrap && machineOf(sm) == "" {
		// Cluster API sets the owner a moment after it creates the
		// StaticMachine; that update brings the machine back.
		return nil
	}
	var data []byte
	if kind == taskBootstrap {
		var err error
		if data, err = c.bootstrapData(ctx, sm); err != nil {
			return err
		}
	}
	timeout := c.opts.BootstrapTimeout
	if kind == taskCleanup {
		timeout = c.opts.CleanupTimeout
	}
	if st.phase == "" || st.phase == s.phase {
		timeout -= s.now.Sub(s.since)
	}
	timeout = max(timeout, time.Second)
	host := hostssh.Host{Address: inst.Spec.Address, PinnedKey: pinnedKey(inst), TrustOnFirstUse: trustOnFirstUse(inst)}
	credentials := ""
	if inst.Spec.CredentialsRef != nil {
		credentials = inst.Spec.CredentialsRef.Name
	}
	providerID, machineName := sm.Spec.ProviderID, machineOf(sm)
	if machineName == "" {
		machineName = sm.Name
	}
	op := func(ctx context.Context) (hostssh.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		creds, err := c.credentials(ctx, credentials)
		if err != nil {
			return hostssh.Result{}, &hostssh.Error{Host: host.Address, Stage: "credentials", Err: err}
		}
		switch kind {
		case taskAdopt:
			return hostssh.Run(ctx, host, creds, hostssh.AdoptScript(providerID, machineName))
		case taskBootstrap:
			return hostssh.Run(ctx, host, creds, hostssh.BootstrapScript(providerID, machineName, data))
		default:
			res, err := hostssh.Run(ctx, host, creds, hostssh.CleanupScript())
			if err == nil && res.ExitCode == hostssh.ExitNoCleanupScript {
				return hostssh.Run(ctx, host, creds, hostssh.CleanupIdentityScript())
			}
			return res, err
		}
	}
	started := c.tasks.start(ctx, inst.Name, kind, func(ctx context.Context) (hostssh.Result, error) {
		res, err := op(ctx)
		// What classify says is safe to log: the stage, the exit code or
		// the SSH library's reason; never the output or a credential.
		_, message := classify(kind, res, err)
		klog.FromContext(ctx).Info("SSH operation ended", "operation", kind, "staticInstance", inst.Name, "address", host.Address, "exitCode", res.ExitCode, "problem", message)
		return res, err
	})
	if started {
		klog.FromContext(ctx).Info("SSH operation started", "operation", kind, "staticInstance", inst.Name, "address", inst.Spec.Address,
			"staticMachine", klog.KObj(sm), "timeout", timeout)
	}
	return nil
}

// credentials decodes the SSHCredentials named, reading the Secrets it
// names (privateSSHKeySecretRef, sudoPasswordSecretRef) from
// deckhousev1.SSHCredentialsNamespace when the operation starts: they are
// not cached, so CAPS holds no key it is not about to use. Its errors name
// the object, the field and the Secret, never a value.
func (c *Controller) credentials(ctx context.Context, name string) (hostssh.Credentials, error) {
	if name == "" {
		return hostssh.Credentials{}, errors.New("spec.credentialsRef names no SSHCredentials")
	}
	sc, err := c.creds.Get(name)
	if err != nil {
		return hostssh.Credentials{}, fmt.Errorf("SSHCredentials %s: %w", name, err)
	}
	read := func(secret, key string) ([]byte, error) {
		s, err := c.d.Kube.CoreV1().Secrets(deckhousev1.SSHCredentialsNamespace).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", deckhousev1.SSHCredentialsNamespace, secret, err)
		}
		v, ok := s.Data[key]
		if !ok {
			return nil, fmt.Errorf("the Secret %s/%s has no key %s", deckhousev1.SSHCredentialsNamespace, secret, key)
		}
		return v, nil
	}
	creds, err := hostssh.FromSpec(sc.Spec, read)
	if err != nil {
		return hostssh.Credentials{}, fmt.Errorf("SSHCredentials %s: %w", name, err)
	}
	if creds.KeepAlive == 0 {
		creds.KeepAlive = 15 * time.Second
	}
	return creds, nil
}

// bootstrapData is the bootstrap script of sm's Machine: key bootstrap.sh
// of the Secret its spec.bootstrap.dataSecretName names (the group's
// manual-bootstrap Secret).
func (c *Controller) bootstrapData(ctx context.Context, sm *infrav1alpha1.StaticMachine) ([]byte, error) {
	name := machineOf(sm)
	if name == "" {
		return nil, fmt.Errorf("StaticMachine %s/%s has no owning Machine yet", sm.Namespace, sm.Name)
	}
	m, err := c.d.Dynamic.Resource(machinesResource).Namespace(sm.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Machine %s/%s: %w", sm.Namespace, name, err)
	}
	secret, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "dataSecretName")
	if secret == "" {
		return nil, fmt.Errorf("the Machine %s/%s has no spec.bootstrap.dataSecretName", sm.Namespace, name)
	}
	s, err := c.d.Kube.CoreV1().Secrets(sm.Namespace).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("caps-controller-manager may not read the bootstrap Secret %s/%s of Machine %s: it may read only the Secrets "+
			"Role %s/%s names, which node-manager-controller (--cluster-api) keeps to %s<group> of the static groups with staticInstances "+
			"(for a Machine made by hand, grant it get on this Secret by name): %w",
			sm.Namespace, secret, name, sm.Namespace, deckhousev1.CAPSBootstrapDataRole, deckhousev1.ManualBootstrapSecretPrefix, err)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the bootstrap Secret %s/%s of Machine %s does not exist yet (node-manager-controller writes %s<group> "+
			"once it knows the cluster CA and the API endpoints)", sm.Namespace, secret, name, deckhousev1.ManualBootstrapSecretPrefix)
	case err != nil:
		return nil, fmt.Errorf("reading the bootstrap Secret %s/%s of Machine %s: %w", sm.Namespace, secret, name, err)
	}
	data := s.Data[deckhousev1.ManualBootstrapScriptKey]
	if len(data) == 0 {
		return nil, fmt.Errorf("the bootstrap Secret %s/%s has no key %s", sm.Namespace, secret, deckhousev1.ManualBootstrapScriptKey)
	}
	return data, nil
}

// findNode is the Node with providerID or, for an adoption only, when
// there is none, the one Node at the host's address that registered
// without a providerID (a node joined by hand and now adopted): provision
// gives it the providerID. A bootstrapped host's Node is found by its
// providerID alone: a Node merely at its address is another node.
func (c *Controller) findNode(providerID, address string, adoption bool) *corev1.Node {
	if providerID != "" {
		if objs, err := c.nodes.ByIndex(byProviderID, providerID); err == nil && len(objs) > 0 {
			if n, ok := objs[0].(*corev1.Node); ok {
				return n
			}
		}
	}
	if !adoption {
		return nil
	}
	objs, err := c.nodes.ByIndex(byAddress, address)
	if err != nil || len(objs) != 1 {
		return nil
	}
	if n, ok := objs[0].(*corev1.Node); ok && n.Spec.ProviderID == "" {
		return n
	}
	return nil
}

func isControlPlane(n *corev1.Node) bool {
	_, role := n.Labels[deckhousev1.ControlPlaneRoleLabel]
	return role || n.Labels[deckhousev1.NodeGroupLabel] == deckhousev1.MasterNodeGroup
}

func allowsControlPlane(inst *deckhousev1alpha2.StaticInstance) bool {
	return inst.Annotations[deckhousev1.AllowControlPlaneAnnotation] == "true"
}
