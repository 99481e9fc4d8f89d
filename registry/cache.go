package registry

import (
	"bytes"
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cachedObject is a served object that keeps each of its serializations
// (JSON, YAML, … — one per encoder), so a bundle is encoded once per
// version however many nodes fetch it. It is what the apiserver's watch
// cache does for stored objects (runtime.CacheableObject).
//
// It keeps the object's metadata, not the object: a Bashible's script is
// held by the Store as pieces shared between groups (bundles.Script), and
// the object holds it whole, so the object is built when it is encoded or
// asked for (a table, a conversion) and dropped after.
type cachedObject struct {
	metav1.Object // a copy of the object's metadata
	kind          metav1.TypeMeta
	build         func() runtime.Object

	mu        sync.Mutex
	encodings map[runtime.Identifier]*encoding
}

type encoding struct {
	once sync.Once
	data []byte
	err  error
}

var (
	_ runtime.CacheableObject = &cachedObject{}
	_ metav1.Object           = &cachedObject{}
)

// newCachedObject caches the object build makes (always the same one).
func newCachedObject(build func() runtime.Object) *cachedObject {
	obj := build()
	c := &cachedObject{Object: obj.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta).DeepCopy(), build: build,
		encodings: map[runtime.Identifier]*encoding{}}
	c.kind.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return c
}

// CacheEncode writes the serialization for encoder id, encoding the
// object the first time (a new one: encoders set the kind on what they
// encode, so concurrent requests must not share it).
func (c *cachedObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	c.mu.Lock()
	e, ok := c.encodings[id]
	if !ok {
		e = &encoding{}
		c.encodings[id] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = encode(c.build(), &buf)
		// Kept as long as the version is served: an exact copy, not the
		// buffer, whose growth leaves up to twice the bytes allocated.
		e.data = make([]byte, buf.Len())
		copy(e.data, buf.Bytes())
	})
	if e.err != nil {
		return e.err
	}
	_, err := w.Write(e.data)
	return err
}

// GetObject returns the object, built anew.
func (c *cachedObject) GetObject() runtime.Object { return c.build() }

// GetObjectKind is the object's.
func (c *cachedObject) GetObjectKind() schema.ObjectKind { return &c.kind }

// DeepCopyObject returns the object, built anew.
func (c *cachedObject) DeepCopyObject() runtime.Object { return c.build() }

// objectCache keeps the current cachedObject of each group, replaced when
// the group's bundle changes (a new resourceVersion).
type objectCache struct {
	mu      sync.Mutex
	byGroup map[string]*cachedObject
}

func (oc *objectCache) get(group, rv string, build func() runtime.Object) *cachedObject {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if c, ok := oc.byGroup[group]; ok && c.GetResourceVersion() == rv {
		return c
	}
	if oc.byGroup == nil {
		oc.byGroup = map[string]*cachedObject{}
	}
	c := newCachedObject(build)
	oc.byGroup[group] = c
	return c
}

// forget drops a group that is no longer served.
func (oc *objectCache) forget(group string) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	delete(oc.byGroup, group)
}
