package manager

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	nmscheme "github.com/node-manager/node-manager/generated/clientset/versioned/scheme"
)

// recorder keeps the broadcaster so the manager can start and stop it.
type recorder struct {
	events.EventRecorder
	broadcaster events.EventBroadcaster
}

// StartEvents starts sending the Events of d's recorder to the API until
// ctx ends (a term does once its informers have synced; Start, for tests,
// does it with the informers). The term shuts the
// broadcaster down when it ends.
func (d *Deps) StartEvents(ctx context.Context) {
	if r, ok := d.Recorder.(*recorder); ok {
		r.broadcaster.StartRecordingToSink(ctx.Done())
	}
}

// scheme knows the core and node-manager types, so events can refer to
// Nodes, NodeGroups and Secrets.
func eventScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = kubescheme.AddToScheme(s)
	_ = nmscheme.AddToScheme(s)
	_ = corev1.AddToScheme(s)
	return s
}

// Start starts everything a term starts for its controllers — every
// informer factory and the event recorder — until ctx ends, and waits for
// the caches in synced, as a test that drives a controller's sync itself
// needs; false if ctx ended first.
func (d *Deps) Start(ctx context.Context, name string, synced ...cache.InformerSynced) bool {
	d.Informers.start(ctx.Done())
	d.StartEvents(ctx)
	return HasSynced(ctx, name, synced...)
}
