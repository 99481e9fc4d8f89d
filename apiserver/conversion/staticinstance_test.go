package conversion

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/randfill"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// staticFiller makes valid StaticInstances at either version (their
// schemas are the same).
func staticFiller() *randfill.Filler {
	address := func(c randfill.Continue) string {
		return "10." + string(rune('0'+c.Intn(10))) + ".0." + string(rune('1'+c.Intn(9)))
	}
	ref := func(c randfill.Continue) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: fuzzPick(c, "", "SSHCredentials"), APIVersion: fuzzPick(c, "", "deckhouse.io/v1alpha1", "deckhouse.io/v1alpha2"), Name: "creds-" + fuzzWord(c, 5)}
	}
	return fuzzFiller(
		func(s *deckhousev1alpha2.StaticInstanceSpec, c randfill.Continue) {
			*s = deckhousev1alpha2.StaticInstanceSpec{Address: address(c), CredentialsRef: ref(c)}
		},
		func(s *deckhousev1alpha1.StaticInstanceSpec, c randfill.Continue) {
			*s = deckhousev1alpha1.StaticInstanceSpec{Address: address(c), CredentialsRef: ref(c)}
		},
		func(p *deckhousev1alpha2.StaticInstancePhase, c randfill.Continue) {
			*p = fuzzPick(c, deckhousev1alpha2.StaticInstancePending, deckhousev1alpha2.StaticInstanceBootstrapping,
				deckhousev1alpha2.StaticInstanceRunning, deckhousev1alpha2.StaticInstanceCleaning, deckhousev1alpha2.StaticInstanceError)
		},
		func(p *deckhousev1alpha1.StaticInstancePhase, c randfill.Continue) {
			*p = fuzzPick[deckhousev1alpha1.StaticInstancePhase](c, "Pending", "Bootstrapping", "Running", "Cleaning", "Error")
		},
	)
}

// identityRoundTrips converts objects newObj makes at from to version to
// and back, and requires both conversions to change nothing but the
// apiVersion, with no conversion-data annotation.
func identityRoundTrips(t *testing.T, k Kind, f *randfill.Filler, newObj func() runtime.Object, from schema.GroupVersionKind, to string) {
	t.Helper()
	for range fuzzIterations {
		typed := newObj()
		f.Fill(typed)
		obj := fuzzObject(t, typed, from)
		out := convert(t, k, obj, to)
		if hasConversionData(out) {
			t.Fatalf("%s → %s: annotated with conversion data, but nothing is lost", from.Version, to)
		}
		want := obj.DeepCopy()
		want.SetAPIVersion(k.GroupKind.Group + "/" + to)
		requireEqual(t, from.Version+" → "+to, out, want)
		requireEqual(t, from.Version+" → "+to+" → "+from.Version, convert(t, k, out, from.Version), obj)
	}
}

// TestStaticInstanceRoundTrips: every valid StaticInstance is the same at
// both versions.
func TestStaticInstanceRoundTrips(t *testing.T) {
	identityRoundTrips(t, staticInstance, staticFiller(), func() runtime.Object { return &deckhousev1alpha2.StaticInstance{} },
		deckhousev1alpha2.SchemeGroupVersion.WithKind("StaticInstance"), "v1alpha1")
	identityRoundTrips(t, staticInstance, staticFiller(), func() runtime.Object { return &deckhousev1alpha1.StaticInstance{} },
		deckhousev1alpha1.SchemeGroupVersion.WithKind("StaticInstance"), "v1alpha2")
	t.Logf("%d v1alpha2 and %d v1alpha1 StaticInstances converted to the other version and back: unchanged both ways", fuzzIterations, fuzzIterations)
}
