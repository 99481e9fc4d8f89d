package registry

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

func TestCachedObjectEncodesOncePerEncoderAndMatchesDirectEncoding(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := bashiblev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj := &bashiblev1alpha1.NodeGroupBundle{
		TypeMeta:   metav1.TypeMeta{APIVersion: "bashible.deckhouse.io/v1alpha1", Kind: "NodeGroupBundle"},
		ObjectMeta: metav1.ObjectMeta{Name: "worker", ResourceVersion: "7"},
		Data:       map[string]string{"000_a.sh": "echo a", "010_b.sh": "echo b"},
	}
	ser := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})
	var direct bytes.Buffer
	if err := ser.Encode(obj.DeepCopy(), &direct); err != nil {
		t.Fatal(err)
	}

	cached := newCachedObject(func() runtime.Object { return obj.DeepCopy() })
	var calls atomic.Int32
	encode := func(o runtime.Object, w io.Writer) error {
		calls.Add(1)
		return ser.Encode(o, w)
	}
	var wg sync.WaitGroup
	outs := make([][]byte, 16)
	for i := range outs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var buf bytes.Buffer
			if err := cached.CacheEncode(ser.Identifier(), encode, &buf); err != nil {
				t.Error(err)
			}
			outs[i] = buf.Bytes()
		}(i)
	}
	wg.Wait()
	for _, out := range outs {
		if !bytes.Equal(out, direct.Bytes()) {
			t.Fatalf("cached encoding differs:\n%s\n%s", out, direct.Bytes())
		}
	}
	if e := cached.encodings[ser.Identifier()]; cap(e.data) != len(e.data) {
		t.Errorf("the kept encoding holds %d bytes for %d", cap(e.data), len(e.data))
	}
	if calls.Load() != 1 {
		t.Errorf("encoded %d times, want once", calls.Load())
	}
	var other bytes.Buffer
	if err := cached.CacheEncode("another-encoder", encode, &other); err != nil || calls.Load() != 2 {
		t.Errorf("another encoder must encode afresh: %v, %d calls", err, calls.Load())
	}
	if cached.GetName() != "worker" || cached.GetObject().(*bashiblev1alpha1.NodeGroupBundle).Data["000_a.sh"] != "echo a" {
		t.Error("metadata and the object are reachable through the cache")
	}

	var oc objectCache
	built := 0
	build := func() runtime.Object { built++; return obj.DeepCopy() }
	first := oc.get("worker", "7", build)
	if oc.get("worker", "7", build) != first || built != 1 {
		t.Error("the same version must be served from the cache")
	}
	obj.ResourceVersion = "8"
	if oc.get("worker", "8", build) == first || built != 2 {
		t.Error("a new version must replace the cached object")
	}
}
