package controllers

import (
	"fmt"
	"testing"

	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// TestPinnedGroupRollsBackAndResumes: nodes that took a new configuration
// go back to the pinned revision through the usual update approval, and
// to the current configuration once the pin is removed.
func TestPinnedGroupRollsBackAndResumes(t *testing.T) {
	t.Parallel()
	const group = "pinned"
	newGroup(t, group, nil)
	for i := range 2 {
		f.TestAgent(t, fmt.Sprintf("pinned-%d", i), group)
	}
	first := f.Checksum(t, group) // revision 1
	f.WaitRolledOut(t, group, first, 2)
	bad := f.NewConfiguration(t, group, "echo a bad change\n") // revision 2
	f.WaitRolledOut(t, group, bad, 2)

	updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) {
		s.Update = &deckhousev1.UpdateSpec{PinnedRevision: ptr.To[int64](1)}
	})
	f.WaitChecksum(t, group, func(sum string) bool { return sum == first })
	f.WaitRolledOut(t, group, first, 2)

	updateGroup(t, group, func(s *deckhousev1.NodeGroupSpec) { s.Update = nil })
	f.WaitChecksum(t, group, func(sum string) bool { return sum == bad })
	f.WaitRolledOut(t, group, bad, 2)
}
