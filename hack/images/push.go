package images

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// PushOptions says where images go.
type PushOptions struct {
	// Registry is <registry>[:port]/<path>: image <name> goes to
	// <Registry>/<name>. A loopback registry is spoken to over plain HTTP.
	Registry string
	// Tag is the tag every image gets besides its digest; empty: the image's
	// org.opencontainers.image.version label.
	Tag string
	// Insecure speaks plain HTTP (or HTTPS without verifying the
	// certificate) to a registry that is not on loopback.
	Insecure bool
	// Remote are more options of go-containerregistry's remote package
	// (a transport, for one); credentials come from the Docker config
	// ($DOCKER_CONFIG/config.json, ~/.docker/config.json) and its helpers.
	Remote []remote.Option
	// Logf, when set, is told of each image pushed.
	Logf func(format string, args ...any)
}

// Pushed is one image in a registry.
type Pushed struct {
	Name   string
	Digest v1.Hash
	// Ref is <registry>/<path>/<name>@sha256:<hex>, what a manifest pins.
	Ref string
	Tag string
}

// PushLayout pushes every image of the OCI layout at dir (see Push).
func PushLayout(ctx context.Context, dir string, opts PushOptions) ([]Pushed, error) {
	imgs, err := ReadLayout(dir)
	if err != nil {
		return nil, err
	}
	return Push(ctx, imgs, opts)
}

// Push pushes each image to <Registry>/<name> by digest, tags it, and checks
// the registry answers the tag with the digest pushed.
func Push(ctx context.Context, imgs []Named, opts PushOptions) ([]Pushed, error) {
	if opts.Registry == "" {
		return nil, errors.New("no registry to push to: say where, as <registry>[:port]/<path> (make push REGISTRY=registry.example.com/node-manager)")
	}
	var nameOpts []name.Option
	if opts.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	remoteOpts := append([]remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithUserAgent("node-manager-images"),
	}, opts.Remote...)

	var out []Pushed
	for _, n := range imgs {
		repo, err := name.NewRepository(strings.TrimSuffix(opts.Registry, "/")+"/"+n.Name, nameOpts...)
		if err != nil {
			return out, fmt.Errorf("the registry %q does not make a repository name for %s (%w): give <registry>[:port]/<path> in lower case, as REGISTRY=registry.example.com/node-manager", opts.Registry, n.Name, err)
		}
		digest, err := n.Image.Digest()
		if err != nil {
			return out, fmt.Errorf("digest of the image %s: %w", n.Name, err)
		}
		tagName := opts.Tag
		if tagName == "" {
			cfg, err := n.Image.ConfigFile()
			if err != nil {
				return out, fmt.Errorf("read the config of the image %s: %w", n.Name, err)
			}
			if tagName = cfg.Config.Labels[LabelVersion]; tagName == "" {
				return out, fmt.Errorf("the image %s has no %s label to tag it with: rebuild it with make images, or give a tag (TAG=...)", n.Name, LabelVersion)
			}
		}
		tag, err := name.NewTag(repo.String()+":"+tagName, nameOpts...)
		if err != nil {
			return out, fmt.Errorf("%q is not a tag (%w): a tag is up to 128 of [A-Za-z0-9_.-], not starting with . or -", tagName, err)
		}
		byDigest := repo.Digest(digest.String())

		if err := remote.Write(byDigest, n.Image, remoteOpts...); err != nil {
			return out, explain(err, "push "+byDigest.String(), repo.RegistryStr())
		}
		if err := remote.Tag(tag, n.Image, remoteOpts...); err != nil {
			return out, explain(err, "tag "+byDigest.String()+" as "+tag.String(), repo.RegistryStr())
		}
		desc, err := remote.Head(tag, remoteOpts...)
		if err != nil {
			return out, explain(err, "check "+tag.String(), repo.RegistryStr())
		}
		if desc.Digest != digest {
			return out, fmt.Errorf("the registry answers %s with %s, not the %s just pushed: is something else pushing to %s?", tag, desc.Digest, digest, repo)
		}
		p := Pushed{Name: n.Name, Digest: digest, Ref: byDigest.String(), Tag: tag.String()}
		if opts.Logf != nil {
			opts.Logf("pushed %s (%s)", p.Ref, p.Tag)
		}
		out = append(out, p)
	}
	return out, nil
}

// explain turns an error of go-containerregistry's remote package into one
// that says what failed and what to do.
func explain(err error, what, registry string) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch {
		case terr.StatusCode == http.StatusUnauthorized || hasCode(terr, transport.UnauthorizedErrorCode):
			return fmt.Errorf("%s: the registry %s wants credentials, or refused the ones given (%w): log in first (docker login %s, or crane auth login %s; credentials are read from $DOCKER_CONFIG/config.json, by default ~/.docker/config.json, and its credential helpers)", what, registry, err, registry, registry)
		case terr.StatusCode == http.StatusForbidden || hasCode(terr, transport.DeniedErrorCode):
			return fmt.Errorf("%s: the registry %s refused the push (%w): the account logged in may not push to this repository; grant it push rights, or push under a path it may write to (REGISTRY=%s/<path>)", what, registry, err, registry)
		case terr.StatusCode == http.StatusNotFound || hasCode(terr, transport.NameUnknownErrorCode):
			return fmt.Errorf("%s: the registry %s has no such repository and does not create it on push (%w): create the repository first, or push under an existing path", what, registry, err)
		case terr.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%s: the registry %s is rate-limiting this client (%w): wait and run it again", what, registry, err)
		default:
			return fmt.Errorf("%s: the registry %s refused the request (%w): check that it is an OCI distribution registry and has room for the images", what, registry, err)
		}
	}
	var (
		dnsErr  *net.DNSError
		opErr   *net.OpError
		certErr *tls.CertificateVerificationError
		uaErr   x509.UnknownAuthorityError
		hostErr x509.HostnameError
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &uaErr), errors.As(err, &hostErr):
		return fmt.Errorf("%s: the certificate of the registry %s is not trusted (%w): add its CA to this machine's trusted CAs (on Debian: /usr/local/share/ca-certificates, then update-ca-certificates), or for a test registry use REGISTRY_INSECURE=true", what, registry, err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s: the registry %s speaks plain HTTP (%w): if that is intended, push with REGISTRY_INSECURE=true", what, registry, err)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%s: the registry's host %s is not known (%w): check the host name in REGISTRY and this machine's DNS", what, registry, err)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &opErr):
		return fmt.Errorf("%s: the registry %s is unreachable (%w): check the address and port in REGISTRY, that the registry runs, and that this machine reaches it (proxy: HTTPS_PROXY)", what, registry, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func hasCode(e *transport.Error, code transport.ErrorCode) bool {
	for _, d := range e.Errors {
		if d.Code == code {
			return true
		}
	}
	return false
}
