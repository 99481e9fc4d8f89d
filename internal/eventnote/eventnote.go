// Package eventnote keeps Events whose note says what went wrong from
// being folded into one another.
//
// client-go's events/v1 recorder (k8s.io/client-go/tools/events) treats two
// Events as the same, and turns the second into a count on the first, when
// they share their object, related object, type, reason, action and
// reporter, whatever their notes: for several minutes after a first
// failure, a different failure of the same object is recorded as
// "the first failure, count 2". Events whose note is the news (a
// NodeGroupConfiguration's render error, a NodeGroup's skipped template
// keys) take their action from Action, which adds a digest of the note:
// the same note again still counts up one Event, a new note is a new Event.
//
// Both binaries use it: bashible-apiserver for RenderFailed, and
// node-manager-controller for NodeTemplateKeysSkipped.
package eventnote

import (
	"fmt"
	"hash/fnv"
)

// Action is base and a digest of note, such as Render/1a2b3c4d.
func Action(base, note string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(note))
	return fmt.Sprintf("%s/%08x", base, h.Sum32())
}
