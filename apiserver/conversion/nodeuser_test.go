package conversion

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
)

// nodeUserFiller makes valid NodeUsers.
func nodeUserFiller() *randfill.Filler {
	return fuzzFiller(func(s *deckhousev1.NodeUserSpec, c randfill.Continue) {
		*s = deckhousev1.NodeUserSpec{
			UID: 1001 + c.Int63n(60000), PasswordHash: fuzzPick(c, "", "!", "*", "$6$salt$"+fuzzWord(c, 20)),
			IsSudoer: c.Intn(2) == 0, ExtraGroups: []string{"docker"}[:c.Intn(2)], NodeGroups: []string{"*", "worker"}[:c.Intn(3)],
		}
		key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + fuzzWord(c, 20) + " user@host"
		if c.Intn(2) == 0 {
			s.SSHPublicKey = key
		} else {
			s.SSHPublicKeys = []string{key, "cert-authority,principals=\"name\" " + key}[:1+c.Intn(2)]
		}
	})
}

// TestNodeUserRoundTrips: every valid NodeUser is the same at both versions.
func TestNodeUserRoundTrips(t *testing.T) {
	identityRoundTrips(t, nodeUser, nodeUserFiller(), func() runtime.Object { return &deckhousev1.NodeUser{} },
		deckhousev1.SchemeGroupVersion.WithKind("NodeUser"), "v1alpha1")
	identityRoundTrips(t, nodeUser, nodeUserFiller(), func() runtime.Object { return &deckhousev1alpha1.NodeUser{} },
		deckhousev1alpha1.SchemeGroupVersion.WithKind("NodeUser"), "v1")
	t.Logf("%d v1 and %d v1alpha1 NodeUsers converted to the other version and back: unchanged both ways", fuzzIterations, fuzzIterations)
}
