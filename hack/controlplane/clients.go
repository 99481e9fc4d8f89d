package controlplane

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// CACertPEM is the cluster CA certificate.
func (cp *ControlPlane) CACertPEM() []byte { return cp.ca.certPEM }

// AdminConfig is a client config for the admin (group system:masters).
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return cp.certConfig(cp.admin)
}

func (cp *ControlPlane) certConfig(kp keyPair) *rest.Config {
	return &rest.Config{
		Host: cp.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.ca.certPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		QPS:   100,
		Burst: 200,
	}
}

// AdminClient is a clientset for the admin.
func (cp *ControlPlane) AdminClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cp.AdminConfig())
}

// NodeCredentials is a node's client certificate, as a kubelet would hold it.
type NodeCredentials struct {
	CertPEM, KeyPEM []byte
}

// NodeCredentials issues a client certificate for node name
// (CN=system:node:<name>, O=system:nodes), signed by the cluster CA.
func (cp *ControlPlane) NodeCredentials(name string) (NodeCredentials, error) {
	if name == "" {
		return NodeCredentials{}, errors.New("node name is empty")
	}
	kp, err := cp.ca.clientCert("system:node:"+name, "system:nodes")
	if err != nil {
		return NodeCredentials{}, err
	}
	return NodeCredentials(kp), nil
}

// NodeConfig is a client config authenticated as node name.
func (cp *ControlPlane) NodeConfig(name string) (*rest.Config, error) {
	creds, err := cp.NodeCredentials(name)
	if err != nil {
		return nil, err
	}
	return cp.certConfig(keyPair(creds)), nil
}

// BootstrapToken is a bootstrap token stored as a kube-system Secret.
type BootstrapToken struct {
	ID, Secret string
	Expires    time.Time
}

// String is the token as a bearer credential, <id>.<secret>.
func (t BootstrapToken) String() string { return t.ID + "." + t.Secret }

// CreateBootstrapToken creates a bootstrap token for nodeGroup the way
// node-manager does: Secret kube-system/bootstrap-token-<id>, usable for
// authentication, extra groups system:bootstrappers:d8-node-manager and
// system:bootstrappers:d8-node-manager:<group> (the token's group, as
// kube-apiserver authenticates it), labelled with the group. ttl <= 0 creates an already expired token.
func (cp *ControlPlane) CreateBootstrapToken(ctx context.Context, nodeGroup string, ttl time.Duration) (BootstrapToken, error) {
	client, err := cp.AdminClient()
	if err != nil {
		return BootstrapToken{}, err
	}
	tok := BootstrapToken{ID: randomToken(6), Secret: randomToken(16), Expires: time.Now().Add(ttl).UTC()}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "bootstrap-token-" + tok.ID,
			Namespace: "kube-system",
			Labels:    map[string]string{deckhousev1.TokenNodeGroupLabel: nodeGroup},
		},
		Type: corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       tok.ID,
			"token-secret":                   tok.Secret,
			"expiration":                     tok.Expires.Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              deckhousev1.BootstrappersGroup + "," + deckhousev1.BootstrappersGroup + ":" + nodeGroup,
		},
	}
	if _, err := client.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return BootstrapToken{}, fmt.Errorf("create bootstrap token secret: %w", err)
	}
	// kube-apiserver's bootstrap-token authenticator reads the Secret from
	// its informer, which may not have it yet: until then the token is
	// Unauthorized. Return once it authenticates, as a kubelet would retry
	// (an expired token never does, and is returned at once).
	if ttl <= 0 {
		return tok, nil
	}
	tc, err := kubernetes.NewForConfig(cp.BootstrapTokenConfig(tok))
	if err != nil {
		return BootstrapToken{}, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := tc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		return BootstrapToken{}, fmt.Errorf("bootstrap token %s never authenticated with kube-apiserver: %w", tok.ID, err)
	}
	return tok, nil
}

// BootstrapTokenConfig is a client config that authenticates with tok.
func (cp *ControlPlane) BootstrapTokenConfig(tok BootstrapToken) *rest.Config {
	return &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     tok.String(),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.certPEM},
	}
}

// AnonymousConfig is a client config with no credentials.
func (cp *ControlPlane) AnonymousConfig() *rest.Config {
	return &rest.Config{Host: cp.APIServerURL, TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.certPEM}}
}

// randomToken returns n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(fmt.Sprintf("crypto/rand failed: %v", err))
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}

// WriteKubeconfig writes an admin kubeconfig to path, atomically (a reader
// never sees a half-written file), creating its directory.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(cp.kubeconfig(AdminUser, cp.admin), tmp); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("move kubeconfig into place at %s: %w", path, err)
	}
	return nil
}

// KubeconfigPath is the admin kubeconfig inside the working directory,
// written at start for tools such as kubectl.
func (cp *ControlPlane) KubeconfigPath() string { return cp.path("admin.kubeconfig") }

func (cp *ControlPlane) writeClientKubeconfig(path, user string, kp keyPair) error {
	if err := clientcmd.WriteToFile(cp.kubeconfig(user, kp), path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func (cp *ControlPlane) kubeconfig(user string, kp keyPair) clientcmdapi.Config {
	const name = "node-manager-local"
	return clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{name: {
			Server:                   cp.APIServerURL,
			CertificateAuthorityData: cp.ca.certPEM,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{user: {
			ClientCertificateData: kp.CertPEM,
			ClientKeyData:         kp.KeyPEM,
		}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: user}},
		CurrentContext: name,
	}
}

// RepoRoot finds the repository root: the nearest directory upwards from
// the working directory whose go.mod declares the product module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && len(data) > 0 && modulePath(data) == "github.com/node-manager/node-manager" {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod for github.com/node-manager/node-manager above the working directory")
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// IssueServingCert returns a serving certificate and key for loopback and
// dnsNames, signed by the cluster CA (CACertPEM verifies it).
func (cp *ControlPlane) IssueServingCert(commonName string, dnsNames ...string) (certPEM, keyPEM []byte, err error) {
	kp, err := cp.ca.servingCert(commonName, dnsNames, nil)
	return kp.CertPEM, kp.KeyPEM, err
}

// IssueClientCert returns a client certificate and key for user and groups,
// signed by the cluster CA, so kube-apiserver authenticates it as that user.
func (cp *ControlPlane) IssueClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	kp, err := cp.ca.clientCert(user, groups...)
	return kp.CertPEM, kp.KeyPEM, err
}

// WriteClientKubeconfig writes a kubeconfig for a client certificate.
func (cp *ControlPlane) WriteClientKubeconfig(path, user string, certPEM, keyPEM []byte) error {
	return cp.writeClientKubeconfig(path, user, keyPair{CertPEM: certPEM, KeyPEM: keyPEM})
}
