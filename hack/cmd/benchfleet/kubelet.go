package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// kubeletStatusEvery is the kubelet's nodeStatusUpdateFrequency: how often
// a live kubelet compares the Node's status in the API with its own and
// writes it back when they differ.
const kubeletStatusEvery = 10 * time.Second

// kubelets play the status loop of the fleet's kubelets. When
// kube-controller-manager marks a node's Ready condition Unknown (its Lease
// was renewed too late: the bench renews thousands of them, and a loaded
// machine falls behind), a live kubelet sees at its next status loop that
// the API's Ready differs from its own and reports Ready again. Without
// this a node marked once stays NotReady for the rest of the run, which no
// real node does, and update approval (rightly) never releases the update
// slot of a node that is not Ready.
type kubelets struct {
	kube  kubernetes.Interface
	store cache.Store
	queue workqueue.TypedDelayingInterface[string]
	// every is the delay between seeing a node not Ready and reporting
	// it Ready again (kubeletStatusEvery; shorter in tests).
	every time.Duration
	// restore false only watches: nodes marked NotReady stay so.
	restore bool

	// marked counts the moments a node was seen turning not Ready;
	// reported counts the Ready reports written.
	marked, reported atomic.Int64
}

// runKubelets starts the status loops of every fleet node (every Node with
// a NodeGroup label) until ctx ends.
func runKubelets(ctx context.Context, kube kubernetes.Interface, every time.Duration, restore bool) (*kubelets, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = deckhousev1.NodeGroupLabel }),
		informers.WithTransform(func(obj any) (any, error) {
			if n, ok := obj.(*corev1.Node); ok {
				n.ManagedFields = nil
			}
			return obj, nil
		}))
	informer := factory.Core().V1().Nodes().Informer()
	k := &kubelets{kube: kube, store: informer.GetStore(), every: every, restore: restore,
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "bench-fleet-kubelets"})}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.seen(nil, obj.(*corev1.Node)) },
		UpdateFunc: func(old, obj any) {
			k.seen(old.(*corev1.Node), obj.(*corev1.Node))
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("the fleet's Nodes did not sync")
	}
	go func() { <-ctx.Done(); k.queue.ShutDown() }()
	for range 4 {
		go k.work(ctx)
	}
	return k, nil
}

// seen counts a node turning not Ready and schedules its kubelet's next
// status loop. A node created without a Ready condition yet is not marked.
func (k *kubelets) seen(old, n *corev1.Node) {
	if nodes.IsReady(n) || readyCondition(n) == nil {
		return
	}
	if old == nil || nodes.IsReady(old) {
		k.marked.Add(1)
	}
	if k.restore {
		k.queue.AddAfter(n.Name, k.every)
	}
}

func (k *kubelets) work(ctx context.Context) {
	for {
		name, shutdown := k.queue.Get()
		if shutdown {
			return
		}
		k.report(ctx, name)
		k.queue.Done(name)
	}
}

// report writes the node's Ready condition back to True if it is still
// otherwise, as the kubelet's status loop would.
func (k *kubelets) report(ctx context.Context, name string) {
	obj, ok, err := k.store.GetByKey(name)
	if err != nil || !ok || nodes.IsReady(obj.(*corev1.Node)) {
		return
	}
	now := metav1.Now()
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "SimulatedKubelet",
		Message: "the simulated kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}}}})
	if _, err := k.kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		if ctx.Err() == nil {
			// The next loop tries again, as the kubelet's would.
			k.queue.AddAfter(name, k.every)
		}
		return
	}
	k.reported.Add(1)
}

// notReady is how many fleet nodes are not Ready now.
func (k *kubelets) notReady() int {
	c := 0
	for _, obj := range k.store.List() {
		if !nodes.IsReady(obj.(*corev1.Node)) {
			c++
		}
	}
	return c
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
