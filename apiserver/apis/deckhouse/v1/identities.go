package v1

import (
	"fmt"
	"strings"
)

// The identities node-manager's callers have, as kube-apiserver names
// them: bashible-apiserver narrows reads by them, and the CSR approver and
// the Instance controller check them. The groups node-manager gives its
// bootstrap tokens are wire names (well_known.go); these are Kubernetes'
// own, so tests may write them out.

// NodeUserPrefix and BootstrapUserPrefix start the user names
// kube-apiserver gives kubelets (system:node:<node>) and bootstrap tokens
// (system:bootstrap:<token id>).
const (
	NodeUserPrefix      = "system:node:"
	BootstrapUserPrefix = "system:bootstrap:"
)

// BootstrapperGroup is the authenticated group of group's bootstrap tokens.
// Node group names ([a-z0-9-], at most 42 characters) always make a valid
// bootstrap group (\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z).
func BootstrapperGroup(group string) string { return BootstrapperGroupPrefix + group }

// TokenGroup is the node group a bootstrap user was authenticated for: the
// one system:bootstrappers:d8-node-manager:<group> among its groups. It
// fails when there is none or more than one.
func TokenGroup(groups []string) (string, error) {
	var found []string
	for _, g := range groups {
		if name, ok := strings.CutPrefix(g, BootstrapperGroupPrefix); ok && name != "" {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("it carries no %s<group> group, so it was not issued by node-manager for a node group "+
			"(node-manager-controller replaces its older tokens at once: use the current one from %s<group>)", BootstrapperGroupPrefix, ManualBootstrapSecretPrefix)
	default:
		return "", fmt.Errorf("it carries %d node groups (%s), so its group is ambiguous", len(found), strings.Join(found, ", "))
	}
}
