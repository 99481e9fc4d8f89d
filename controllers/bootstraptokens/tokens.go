package bootstraptokens

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// The bootstrap token Secret format kube-apiserver reads
// (k8s.io/cluster-bootstrap); node-manager's own label and groups on it are
// in apiserver/apis/deckhouse/v1/well_known.go.
const (
	tokenSecretPrefix = "bootstrap-token-"
	keyTokenID        = "token-id"
	keyTokenSecret    = "token-secret"
	keyExpiration     = "expiration"
	keyExtraGroups    = "auth-extra-groups"
)

// Token lifetimes, as in Deckhouse: a token lives 4 hours and is replaced
// once less than 3 hours remain, so a script fetched from the Secret is
// always good for at least 3 hours.
const (
	TokenTTL    = 4 * time.Hour
	MinValidity = 3 * time.Hour
)

// Token is one bootstrap token: the credential, accepted by kube-apiserver's
// bootstrap-token authentication, with which a new machine of the group
// reads its objects and asks for its kubelet certificate.
type Token struct {
	// Name is the Secret's name, bootstrap-token-<ID>.
	Name    string
	ID      string
	Secret  string
	Expires time.Time
}

// String is the bearer credential, <id>.<secret>.
func (t Token) String() string { return t.ID + "." + t.Secret }

// extraGroups is a token's auth-extra-groups: node-manager's bootstrappers
// and the group's own, system:bootstrappers:d8-node-manager:<group>.
// kube-apiserver authenticates a token with these groups, so bashible-apiserver
// and the CSR approver learn the token's node group from the request itself
// and never from a Secret.
func extraGroups(group string) string {
	return deckhousev1.BootstrappersGroup + "," + deckhousev1.BootstrapperGroup(group)
}

// parseToken reads a token Secret; it fails on a Secret that is not a
// complete, expiring bootstrap token of the group it is labelled with (a
// token without the group's own extra group, as issued before node groups
// were authenticated, is not used and a current one is issued).
func parseToken(s *corev1.Secret) (Token, error) {
	if s.Type != corev1.SecretTypeBootstrapToken {
		return Token{}, fmt.Errorf("secret %s is of type %q, not a bootstrap token", s.Name, s.Type)
	}
	if got, want := string(s.Data[keyExtraGroups]), extraGroups(s.Labels[deckhousev1.TokenNodeGroupLabel]); got != want {
		return Token{}, fmt.Errorf("secret %s has auth-extra-groups %q, not %q", s.Name, got, want)
	}
	id, secret := string(s.Data[keyTokenID]), string(s.Data[keyTokenSecret])
	if !validTokenPart(id, 6) || !validTokenPart(secret, 16) || s.Name != tokenSecretPrefix+id {
		return Token{}, fmt.Errorf("secret %s does not hold a well-formed token", s.Name)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data[keyExpiration]))
	if err != nil {
		return Token{}, fmt.Errorf("secret %s: expiration: %w", s.Name, err)
	}
	return Token{Name: s.Name, ID: id, Secret: secret, Expires: exp}, nil
}

func validTokenPart(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// newToken draws a token from crypto/rand that expires ttl after now.
func newToken(now time.Time, ttl time.Duration) (Token, error) {
	id, err := randomString(6)
	if err != nil {
		return Token{}, err
	}
	secret, err := randomString(16)
	if err != nil {
		return Token{}, err
	}
	// Whole seconds: the Secret stores RFC 3339 without fractions.
	exp := now.Add(ttl).UTC().Truncate(time.Second)
	return Token{Name: tokenSecretPrefix + id, ID: id, Secret: secret, Expires: exp}, nil
}

// secret is the kube-system Secret of a token for group.
func (t Token) secret(group string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      t.Name,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{deckhousev1.TokenNodeGroupLabel: group, deckhousev1.HeritageLabel: deckhousev1.HeritageNodeManager},
		},
		Type: corev1.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			keyTokenID:                       []byte(t.ID),
			keyTokenSecret:                   []byte(t.Secret),
			keyExpiration:                    []byte(t.Expires.UTC().Format(time.RFC3339)),
			"description":                    []byte("node-manager bootstrap token of node group " + group),
			"usage-bootstrap-authentication": []byte("true"),
			"usage-bootstrap-signing":        []byte("true"),
			keyExtraGroups:                   []byte(extraGroups(group)),
		},
	}
}

// randomString returns n characters of [a-z0-9] from crypto/rand, without
// modulo bias.
func randomString(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	const limit = 256 - 256%len(alphabet) // 252: bytes below it map evenly
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", errors.Join(errors.New("reading crypto/rand"), err)
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
