package drills

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// availability samples the APIService's Available condition every second,
// as a monitoring system would.
type availability struct {
	mu      sync.Mutex
	samples []sample
	stop    func()
}

type sample struct {
	at     time.Time
	status string // True, False, or "" when kube-apiserver did not answer
	reason string
}

// apiServiceAvailable is the APIService's Available condition now.
func apiServiceAvailable(ctx context.Context, dyn dynamic.Interface) (status, reason string, err error) {
	obj, err := dyn.Resource(apiServices).Get(ctx, bashiblev1alpha1.APIServiceName, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Available" {
			return fmt.Sprint(m["status"]), fmt.Sprintf("%v: %v", m["reason"], m["message"]), nil
		}
	}
	return "", "no Available condition", nil
}

func sampleAvailability(t *testing.T) *availability {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(f.CP.AdminConfig())
	ctx, cancel := context.WithCancel(context.Background())
	a := &availability{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			status, reason, err := apiServiceAvailable(rctx, dyn)
			rcancel()
			if err != nil {
				status, reason = "", err.Error()
			}
			a.mu.Lock()
			a.samples = append(a.samples, sample{at: time.Now(), status: status, reason: reason})
			a.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	a.stop = func() { cancel(); <-done }
	t.Cleanup(a.stop)
	return a
}

// unavailable are the samples that read Available other than True.
func (a *availability) unavailable() []sample {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []sample
	for _, s := range a.samples {
		if s.status != "" && s.status != "True" {
			out = append(out, s)
		}
	}
	return out
}

func (a *availability) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.samples)
}

// waitAvailable waits until the APIService is Available and readGroup is
// served: the state every drill starts from.
func waitAvailable(t *testing.T) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(f.CP.AdminConfig())
	framework.Poll(t, "APIService "+bashiblev1alpha1.APIServiceName+" Available", func(ctx context.Context) (bool, error) {
		status, _, err := apiServiceAvailable(ctx, dyn)
		return err == nil && status == "True", nil
	})
	f.WaitChecksum(t, readGroup, func(sum string) bool { return sum != "" })
}

// namespaceRoundTrip creates a namespace and deletes it, as any user or
// controller might during the fault, watches for it to go, and returns a
// function that waits for the outcome: how long the deletion took, or
// why the namespace was not gone within namespaceLimit. Deleting a
// namespace needs the discovery of every API group, aggregated ones
// included.
func namespaceRoundTrip(t *testing.T, name string) (wait func() (time.Duration, error)) {
	t.Helper()
	ctx := framework.Context(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	var err error
	framework.Poll(t, "create namespace "+name, func(ctx context.Context) (bool, error) {
		_, err = f.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	framework.Poll(t, "delete namespace "+name, func(ctx context.Context) (bool, error) {
		err = f.Kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
	deleted := time.Now()
	type outcome struct {
		took time.Duration
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		var last *corev1.Namespace
		for time.Since(deleted) < namespaceLimit {
			got, err := f.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				done <- outcome{took: time.Since(deleted)}
				return
			}
			if err == nil {
				last = got
			}
			select {
			case <-ctx.Done():
				done <- outcome{err: ctx.Err()}
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		done <- outcome{took: namespaceLimit, err: namespaceStuck(name, last)}
	}()
	return func() (time.Duration, error) {
		o := <-done
		return o.took, o.err
	}
}

// namespaceLimit is how long a namespace deletion may take before a drill
// calls it hung: six times what it takes with nothing injected.
const namespaceLimit = 30 * time.Second

// namespaceStuck says why a namespace is not gone: its conditions, and
// what kube-controller-manager's namespace controller logged.
func namespaceStuck(name string, last *corev1.Namespace) error {
	var conds []string
	if last != nil {
		for _, c := range last.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s: %s", c.Type, c.Status, c.Message))
		}
	}
	var said []string
	data, _ := os.ReadFile(filepath.Join(f.CP.Dir(), "kube-controller-manager.log"))
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, name) {
			said = append(said, line)
		}
	}
	return fmt.Errorf("namespace %s was still there %s after its deletion: %v; kube-controller-manager said:\n%s",
		name, namespaceLimit, conds, strings.Join(said[max(0, len(said)-10):], "\n"))
}

// load is 64 clients GETting one bundle through the aggregator in a
// loop, as nodes do, each body compared with the expected one.
type load struct {
	mu                    sync.Mutex
	ok, wrong             int
	errors                map[string]int
	firstError, lastError time.Time
	stop                  func()
}

const loadClients = 64

// retryAfter marks, added to a status code, a response with Retry-After.
const retryAfter = 1000

func startLoad(t *testing.T, group string) *load {
	t.Helper()
	rt, err := rest.TransportFor(f.CP.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	url := f.CP.APIServerURL + "/apis/" + bashiblev1alpha1.GroupName + "/v1alpha1/nodegroupbundles/" + group
	get := func(ctx context.Context) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if resp.Header.Get("Retry-After") != "" {
			// client-go waits and retries these by itself.
			return resp.StatusCode + retryAfter, body, err
		}
		return resp.StatusCode, body, err
	}
	code, body, err := get(framework.Context(t))
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s before the drill: %d %v", url, code, err)
	}
	want := sha256.Sum256(body)
	l := &load{errors: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range loadClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				code, body, err := get(ctx)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				switch {
				case err != nil && strings.Contains(err.Error(), "stream error") && strings.Contains(err.Error(), "INTERNAL_ERROR"):
					// kube-apiserver had sent the headers of a response
					// whose replica died before the end of its body: it
					// resets the stream, so the client never takes a
					// truncated body for a bundle.
					l.failed(cutInFlight)
				case err != nil && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset")):
					// The same cut seen one layer down: the connection
					// itself ended mid-response.
					l.failed(cutConnection)
				case err != nil:
					l.failed(fmt.Sprintf("transport: %v", err))
				case code > retryAfter:
					l.failed(fmt.Sprintf("%d %s with Retry-After", code-retryAfter, http.StatusText(code-retryAfter)))
				case code != http.StatusOK:
					l.failed(fmt.Sprintf("%d %s", code, http.StatusText(code)))
				case sha256.Sum256(body) != want:
					l.wrong++
				default:
					l.ok++
				}
				l.mu.Unlock()
			}
		}()
	}
	l.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(l.stop)
	return l
}

func (l *load) failed(kind string) {
	now := time.Now()
	if l.firstError.IsZero() {
		l.firstError = now
	}
	l.lastError = now
	l.errors[kind]++
}

// result stops the load and says what the clients saw.
func (l *load) result() (ok, wrong, failed int, kinds string, window time.Duration) {
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []string
	for k, n := range l.errors {
		failed += n
		ks = append(ks, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(ks)
	if !l.firstError.IsZero() {
		window = l.lastError.Sub(l.firstError)
	}
	return l.ok, l.wrong, failed, strings.Join(ks, ", "), window
}

// cutInFlight and cutConnection are the kinds of error of a response cut
// by its replica's death: a reset stream, or (one layer down) a
// connection reset or ended mid-response.
const (
	cutInFlight   = "response cut in flight (stream reset)"
	cutConnection = "response cut in flight (connection reset or EOF)"
)

// classes are the errors by class: 503s (retryable; with Retry-After
// client-go retries them itself), responses cut in flight, and every
// other kind, which a kill of one replica must not cause.
func (l *load) classes() (unavailable, cut int, other []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, n := range l.errors {
		switch {
		case strings.HasPrefix(k, "503 "):
			unavailable += n
		case k == cutInFlight || k == cutConnection:
			cut += n
		default:
			other = append(other, k)
		}
	}
	sort.Strings(other)
	return unavailable, cut, other
}

// write is one write of a published bundle Secret, as a watch saw it.
type write struct {
	at              time.Time
	typ             watch.EventType
	name, rv, sum   string
	templatesDigest string
}

// secretHistory records every write of the published bundle Secrets.
type secretHistory struct {
	mu     sync.Mutex
	writes []write
}

func recordSecrets(t *testing.T) *secretHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// From a list's resourceVersion: the Secrets as they are now are not
	// writes of the drill.
	list, err := f.Kube.CoreV1().Secrets(deckhousev1.BundlesNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := f.Kube.CoreV1().Secrets(deckhousev1.BundlesNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := &secretHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Secret)
			if !ok || ev.Type == watch.Bookmark || !strings.HasPrefix(s.Name, deckhousev1.PublishedBundleSecretPrefix) {
				continue
			}
			h.mu.Lock()
			h.writes = append(h.writes, write{at: time.Now(), typ: ev.Type, name: s.Name, rv: s.ResourceVersion,
				sum: s.Annotations[bashiblev1alpha1.ChecksumAnnotation], templatesDigest: s.Annotations[bashiblev1alpha1.TemplatesDigestAnnotation]})
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return h
}

func (h *secretHistory) all() []write {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]write(nil), h.writes...)
}

// notRetriedByClientGo are the error kinds client-go does not retry by
// itself: everything but a 503 with Retry-After.
func (l *load) notRetriedByClientGo() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var kinds []string
	for k := range l.errors {
		if k != "503 Service Unavailable with Retry-After" {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// holderHistory records who held a Lease, every change of holder, sampled
// every 50 ms: far more often than a term can begin and end (the suite's
// retry period is 500 ms).
type holderHistory struct {
	mu      sync.Mutex
	holders []string
	stop    func()
}

func recordHolders(t *testing.T, namespace, name string) *holderHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &holderHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if holder := leaseHolder(ctx, namespace, name); holder != "" {
				h.mu.Lock()
				if len(h.holders) == 0 || h.holders[len(h.holders)-1] != holder {
					h.holders = append(h.holders, holder)
				}
				h.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	h.stop = func() { cancel(); <-done }
	t.Cleanup(h.stop)
	return h
}

// all are the holders in the order they held the Lease.
func (h *holderHistory) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.holders...)
}
