// Package objectname parses the object names of bashible.deckhouse.io:
// a node group's name, or Deckhouse's legacy "<os>.<group>". It is the
// first thing a request's name meets (registry's get), and a package of
// its own so that its fuzz target builds only what the parser needs.
package objectname

import (
	"fmt"
	"regexp"
	"strings"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// groupNameRE is a NodeGroup name; the legacy form prefixes it with "<os>.".
var groupNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Help tells a caller what a valid object name is.
const Help = "a valid name is a node group's name (lowercase letters, digits and '-', at most 42 characters, such as \"worker\") or the legacy \"<os>.<group>\" (such as \"ubuntu-lts.worker\")"

// Parse returns the node group an object name refers to: the name
// itself, or the part after the dot in the legacy "<os>.<group>" form.
func Parse(name string) (string, error) {
	group := name
	if os, rest, found := strings.Cut(name, "."); found {
		if !groupNameRE.MatchString(os) {
			return "", fmt.Errorf("%q is not a valid name: %s", name, Help)
		}
		group = rest
	}
	if len(group) > deckhousev1.MaxNameLength || !groupNameRE.MatchString(group) {
		return "", fmt.Errorf("%q is not a valid name: %s", name, Help)
	}
	return group, nil
}
