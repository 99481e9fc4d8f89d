// Package serving serves a component's /metrics and probes the way
// kube-controller-manager serves its own: over HTTPS, /metrics only to a
// caller the Kubernetes API authenticates and authorizes (delegated
// authentication and authorization), the probes to anyone. node-manager-
// controller and the fencing agent (agents/fencing-agent) serve through it.
package serving

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// Options say how /metrics and the probes are served: over HTTPS,
// with the caller authenticated by the Kubernetes API (TokenReview, or a
// client certificate signed by --client-ca-file) and authorized by it
// (SubjectAccessReview of get on the non-resource URL, such as /metrics),
// the way kube-controller-manager serves its own. /healthz and /readyz
// are open to anyone (the kubelet probes them without credentials).
type Options struct {
	CertFile string
	KeyFile  string
	Authn    *genericoptions.DelegatingAuthenticationOptions
	Authz    *genericoptions.DelegatingAuthorizationOptions
}

// OpenPaths are served without authorization: the probes.
var OpenPaths = []string{"/healthz", "/readyz"}

// NewOptions are the defaults.
func NewOptions() Options {
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	// Only bearer tokens (and --client-ca-file when given): reading the
	// cluster's front-proxy and client CAs would need read access to
	// kube-system's extension-apiserver-authentication ConfigMap, which
	// nothing here uses.
	authn.SkipInClusterLookup = true
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.AlwaysAllowPaths = OpenPaths
	return Options{Authn: authn, Authz: authz}
}

// AddFlags registers the options; the listen address is the component's
// own flag.
func (s *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.CertFile, "tls-cert-file", s.CertFile,
		"serving certificate (PEM) of the listen address; without it and --tls-private-key-file a self-signed one is made at start")
	fs.StringVar(&s.KeyFile, "tls-private-key-file", s.KeyFile, "private key (PEM) of --tls-cert-file")
	s.Authn.AddFlags(fs)
	s.Authz.AddFlags(fs)
}

// Validate checks the options.
func (s *Options) Validate() []error {
	errs := append(s.Authn.Validate(), s.Authz.Validate()...)
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, fmt.Errorf("--tls-cert-file and --tls-private-key-file go together; give both or neither"))
	}
	return errs
}

// Serve listens on address over HTTPS until ctx ends: h behind delegated
// authentication and authorization (see Options). The authentication and
// authorization clients use --authentication-kubeconfig and
// --authorization-kubeconfig, or else kubeconfig (the component's
// --kubeconfig), or else the in-cluster configuration.
func Serve(ctx context.Context, address, kubeconfig string, s *Options, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for metrics and probes: %w", address, err)
	}
	handler, serving, err := secureHandler(s, kubeconfig, ln, h)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	if _, _, err := serving.Serve(handler, 5*time.Second, ctx.Done()); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("serving metrics and probes on %s: %w", address, err)
	}
	return ln.Addr(), nil
}

// secureHandler builds the TLS serving and wraps h in the delegated
// authentication and authorization filters.
func secureHandler(s *Options, kubeconfig string, ln net.Listener, h http.Handler) (http.Handler, *server.SecureServingInfo, error) {
	secure := genericoptions.NewSecureServingOptions()
	secure.Listener = ln
	secure.MinTLSVersion = "VersionTLS12"
	// No certificate directory: a self-signed certificate stays in memory.
	secure.ServerCert.CertDirectory = ""
	secure.ServerCert.PairName = ""
	secure.ServerCert.CertKey = genericoptions.CertKey{CertFile: s.CertFile, KeyFile: s.KeyFile}
	if err := secure.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, nil, fmt.Errorf("making a self-signed serving certificate: %w", err)
	}
	var serving *server.SecureServingInfo
	if err := secure.ApplyTo(&serving); err != nil {
		return nil, nil, fmt.Errorf("setting up TLS serving: %w", err)
	}
	if s.Authn.RemoteKubeConfigFile == "" {
		s.Authn.RemoteKubeConfigFile = kubeconfig
	}
	if s.Authz.RemoteKubeConfigFile == "" {
		s.Authz.RemoteKubeConfigFile = kubeconfig
	}
	var authn server.AuthenticationInfo
	if err := s.Authn.ApplyTo(&authn, serving, nil); err != nil {
		return nil, nil, fmt.Errorf("setting up delegated authentication (TokenReview) for /metrics: %w", err)
	}
	var authz server.AuthorizationInfo
	if err := s.Authz.ApplyTo(&authz); err != nil {
		return nil, nil, fmt.Errorf("setting up delegated authorization (SubjectAccessReview) for /metrics: %w", err)
	}
	klog.V(2).InfoS("Metrics need an identity allowed to get them; probes are open", "open", OpenPaths)
	handler := genericapifilters.WithAuthorization(h, authz.Authorizer, scheme.Codecs)
	handler = genericapifilters.WithAuthentication(handler, authn.Authenticator, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	handler = genericapifilters.WithRequestInfo(handler, &request.RequestInfoFactory{})
	return handler, serving, nil
}
