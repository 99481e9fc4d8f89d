package bundles

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

// MaxEncodedBundleBytes bounds a published bundle after encoding (gzipped
// JSON, the Secret's only value). The API refuses a Secret whose values
// total more than 1 MiB (1048576 bytes); this limit stays 24 KiB below it,
// so a bundle the leader decides to publish is never refused by the API.
const MaxEncodedBundleBytes = 1000 << 10

// ReasonBundleTooLarge is the Rendered condition's reason on a NodeGroup
// whose bundle cannot be published, and on its NodeGroupConfigurations.
const ReasonBundleTooLarge = "BundleTooLarge"

// largestShown is how many of the largest parts a BundleTooLargeError names.
const largestShown = 3

// BundleTooLargeError says a group's bundle rendered but cannot be
// published: encoded, it is larger than a Secret may hold.
type BundleTooLargeError struct {
	Group string
	// Encoded is the bundle's encoded size, Limit MaxEncodedBundleBytes.
	Encoded, Limit int
	// Largest are the largest parts of the bundle (steps, bashible.sh,
	// the bootstrap script), largest first.
	Largest []PartSize
}

// PartSize is one part of a bundle and its size in bytes before encoding.
type PartSize struct {
	Name  string
	Bytes int
}

func (e *BundleTooLargeError) Error() string {
	parts := make([]string, len(e.Largest))
	for i, p := range e.Largest {
		parts[i] = fmt.Sprintf("%s (%d bytes)", p.Name, p.Bytes)
	}
	return fmt.Sprintf("the bundle of node group %s is %d bytes encoded, more than the %d bytes a published bundle may hold "+
		"(a Secret holds at most 1 MiB); its largest parts: %s. Make the largest NodeGroupConfigurations smaller, "+
		"for example by downloading large files in the step instead of embedding them",
		e.Group, e.Encoded, e.Limit, strings.Join(parts, ", "))
}

// checkEncodedSize returns a *BundleTooLargeError when encoded, the
// encoding of p, is over MaxEncodedBundleBytes.
func checkEncodedSize(p *Published, encoded []byte) error {
	if len(encoded) <= MaxEncodedBundleBytes {
		return nil
	}
	parts := []PartSize{{bashiblev1alpha1.BashibleScriptKey, p.Bashible.Len()}, {"bootstrap", len(p.Bootstrap)}}
	for name, s := range p.Steps {
		parts = append(parts, PartSize{name, len(s)})
	}
	slices.SortFunc(parts, func(a, b PartSize) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Name, b.Name))
	})
	return &BundleTooLargeError{Group: p.Group, Encoded: len(encoded), Limit: MaxEncodedBundleBytes, Largest: parts[:min(largestShown, len(parts))]}
}
