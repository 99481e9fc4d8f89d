package templates

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// The NodeUser CRD's rules (apiserver/apis/deckhouse/v1/nodeuser_types.go),
// checked again here: the values reach a root shell on every node of the
// selected groups, and a stored object may predate a rule.
// TestNodeUserPatternsMatchTheCRD keeps them equal to the CRD's.
var (
	nodeUserNameRE     = regexp.MustCompile(`^[a-z][-a-z0-9]*$`)
	nodeUserKeyRE      = regexp.MustCompile(`^([^\x00-\x1f\x7f]* )?(ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com|ssh-ed25519-cert-v01@openssh\.com|ssh-rsa-cert-v01@openssh\.com|ecdsa-sha2-nistp256-cert-v01@openssh\.com|ecdsa-sha2-nistp384-cert-v01@openssh\.com|ecdsa-sha2-nistp521-cert-v01@openssh\.com|sk-ssh-ed25519-cert-v01@openssh\.com|sk-ecdsa-sha2-nistp256-cert-v01@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\x00-\x1f\x7f]*)?$`)
	nodeUserHashRE     = regexp.MustCompile(`^(!?\$[0-9a-z]{1,6}\$[./0-9A-Za-z=,$]+|!|\*|)$`)
	nodeUserGroupRE    = regexp.MustCompile(`^[a-z_][-a-z0-9_]*$`)
	nodeUserSelectorRE = regexp.MustCompile(`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`)
)

// Bounds of a NodeUser's uid (the CRD's).
const (
	MinNodeUserUID = 1001
	MaxNodeUserUID = 4294967294
	nobodyUID      = 65534
)

// NodeUsersFor are the NodeUsers that select group (spec.nodeGroups holds
// its name or "*"; an empty list means every group, as the CRD's default
// does), in the render context's shape, sorted by name. A NodeUser that
// breaks a rule of the CRD fails the group's render with its name: its
// values would reach a root shell.
func NodeUsersFor(group string, users []*deckhousev1.NodeUser) ([]NodeUser, error) {
	out := []NodeUser{}
	for _, u := range users {
		if len(u.Spec.NodeGroups) > 0 && !slices.Contains(u.Spec.NodeGroups, "*") && !slices.Contains(u.Spec.NodeGroups, group) {
			continue
		}
		if err := checkNodeUser(u); err != nil {
			return nil, fmt.Errorf("NodeUser %s: %w; fix or delete it", u.Name, err)
		}
		s := u.Spec
		keys := slices.Clone(s.SSHPublicKeys)
		if keys == nil {
			keys = []string{}
		}
		groups := slices.Clone(s.ExtraGroups)
		if groups == nil {
			groups = []string{}
		}
		selected := slices.Clone(s.NodeGroups)
		if len(selected) == 0 {
			selected = []string{"*"}
		}
		out = append(out, NodeUser{Name: u.Name, Spec: NodeUserSpec{
			UID: s.UID, SSHPublicKey: s.SSHPublicKey, SSHPublicKeys: keys, PasswordHash: s.PasswordHash,
			IsSudoer: s.IsSudoer, ExtraGroups: groups, NodeGroups: selected,
		}})
	}
	slices.SortFunc(out, func(a, b NodeUser) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// checkNodeUser applies the CRD's rules to a stored NodeUser.
func checkNodeUser(u *deckhousev1.NodeUser) error {
	s := u.Spec
	switch {
	case len(u.Name) > 32 || !nodeUserNameRE.MatchString(u.Name):
		return fmt.Errorf("metadata.name %q is no POSIX user name of at most 32 characters (%s)", u.Name, nodeUserNameRE)
	case s.UID < MinNodeUserUID || s.UID > MaxNodeUserUID || s.UID == nobodyUID:
		return fmt.Errorf("spec.uid %d is outside %d-%d (or is nobody's, %d)", s.UID, MinNodeUserUID, MaxNodeUserUID, nobodyUID)
	case s.SSHPublicKey == "" && len(s.SSHPublicKeys) == 0:
		return fmt.Errorf("neither spec.sshPublicKey nor spec.sshPublicKeys is set")
	case !nodeUserHashRE.MatchString(s.PasswordHash):
		return fmt.Errorf("spec.passwordHash is no crypt(3) hash of one line without ':' (%s)", nodeUserHashRE)
	}
	if s.SSHPublicKey != "" && !nodeUserKeyRE.MatchString(s.SSHPublicKey) {
		return fmt.Errorf("spec.sshPublicKey is not one line of authorized_keys with a known key type")
	}
	for i, k := range s.SSHPublicKeys {
		if !nodeUserKeyRE.MatchString(k) {
			return fmt.Errorf("spec.sshPublicKeys[%d] is not one line of authorized_keys with a known key type", i)
		}
	}
	for i, g := range s.ExtraGroups {
		if len(g) > 32 || !nodeUserGroupRE.MatchString(g) {
			return fmt.Errorf("spec.extraGroups[%d] %q is no POSIX group name of at most 32 characters", i, g)
		}
	}
	for i, g := range s.NodeGroups {
		if !nodeUserSelectorRE.MatchString(g) {
			return fmt.Errorf("spec.nodeGroups[%d] %q is neither \"*\" nor a node group's name", i, strings.ReplaceAll(g, "\n", `\n`))
		}
	}
	return nil
}
