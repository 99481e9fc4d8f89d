package infrastructure_test

import (
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// TestRoundTrip fills every infrastructure.cluster.x-k8s.io type with random
// values and checks that JSON and YAML encoding and decoding, and deep
// copies, lose nothing.
func TestRoundTrip(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(infrav1alpha1.AddToScheme(scheme))
	codecs := serializer.NewCodecFactory(scheme)
	for seed := int64(1); seed <= 20; seed++ {
		f := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(seed), codecs)
		roundtrip.RoundTripExternalTypesWithoutProtobuf(t, scheme, codecs, f, nil)
	}
}
