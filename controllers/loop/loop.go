// Package loop is the work loop every controller runs: a rate-limited
// workqueue of keys, a sync function per key, retries with backoff, and
// reconcile metrics. Controllers stay small: they say what to enqueue when
// and how to sync one key.
package loop

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Metrics of every loop; labels are the controller names, a fixed set.
type Metrics struct {
	Reconciles *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
	Depth      *prometheus.GaugeVec
}

// NewMetrics registers the loop metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "node_manager_reconcile_total",
			Help: "Reconciles by controller and result (success, error).",
		}, []string{"controller", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "node_manager_reconcile_duration_seconds",
			Help:    "How long one reconcile took, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"controller"}),
		Depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "node_manager_workqueue_depth",
			Help: "Keys waiting in a controller's queue.",
		}, []string{"controller"}),
	}
	reg.MustRegister(m.Reconciles, m.Duration, m.Depth)
	return m
}

// Loop is one controller's queue and workers.
type Loop struct {
	name    string
	sync    func(ctx context.Context, key string) error
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *Metrics
}

// New makes a loop that calls sync for each queued key.
func New(name string, metrics *Metrics, sync func(ctx context.Context, key string) error) *Loop {
	return &Loop{
		name:    name,
		sync:    sync,
		metrics: metrics,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
	}
}

// Name is the controller's name.
func (l *Loop) Name() string { return l.name }

// Add queues a key.
func (l *Loop) Add(key string) { l.queue.Add(key) }

// AddAfter queues a key after a delay (for time-driven work such as windows).
func (l *Loop) AddAfter(key string, d time.Duration) { l.queue.AddAfter(key, d) }

// Run works the queue with n workers until ctx ends.
func (l *Loop) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	var wg sync.WaitGroup
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, l.work, time.Second) })
	}
	klog.FromContext(ctx).Info("Controller started", "controller", l.name, "workers", workers)
	wg.Wait()
}

func (l *Loop) work(ctx context.Context) {
	for l.next(ctx) {
	}
}

func (l *Loop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	if l.metrics != nil {
		l.metrics.Depth.WithLabelValues(l.name).Set(float64(l.queue.Len()))
	}
	// Every line the sync logs through klog.FromContext says which
	// controller and key wrote it.
	logger := klog.FromContext(ctx).WithValues("controller", l.name, "key", key)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	err := l.safeSync(ctx, key)
	if l.metrics != nil {
		l.metrics.Duration.WithLabelValues(l.name).Observe(time.Since(start).Seconds())
	}
	if err == nil {
		l.queue.Forget(key)
		if l.metrics != nil {
			l.metrics.Reconciles.WithLabelValues(l.name, "success").Inc()
		}
		return true
	}
	if l.metrics != nil {
		l.metrics.Reconciles.WithLabelValues(l.name, "error").Inc()
	}
	switch {
	case ctx.Err() != nil:
	case apierrors.IsConflict(err):
		// Someone else wrote the object since we read it: routine, and the
		// retry decides again on the new state.
		logger.V(2).Info("Object changed meanwhile; deciding again", "err", err)
	default:
		logger.Error(err, "Reconcile failed; retrying with backoff", "attempt", l.queue.NumRequeues(key)+1)
	}
	l.queue.AddRateLimited(key)
	return true
}

func (l *Loop) safeSync(ctx context.Context, key string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in %s sync of %q: %v", l.name, key, r)
		}
	}()
	return l.sync(ctx, key)
}
