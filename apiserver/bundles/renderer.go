package bundles

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// Inputs is the cluster state bundles are rendered from.
type Inputs struct {
	NodeGroups []*deckhousev1.NodeGroup
	Configs    []*deckhousev1alpha1.NodeGroupConfiguration
	// NodeUsers are every NodeUser; each group's context carries those
	// that select it.
	NodeUsers []*deckhousev1.NodeUser
	// ClusterConfiguration is cluster-configuration.yaml, nil when absent.
	ClusterConfiguration []byte
	// StaticClusterConfiguration is static-cluster-configuration.yaml, nil
	// when absent.
	StaticClusterConfiguration []byte
	// Endpoints are the API servers' host:port.
	Endpoints []string
	// CA is the cluster CA (PEM), empty when unknown.
	CA string
}

// Result is one group's render.
type Result struct {
	Group string
	// Published is the bundle, nil when the render failed.
	Published *Published
	// Failures say why it failed, each attributed to its NodeGroupConfiguration when it has one.
	Failures []templates.Failure
	// Custom are the NodeGroupConfigurations that apply to the group.
	Custom []string
	// Cached says the inputs were unchanged and the previous render was reused.
	Cached bool
	// Duration of the render (zero when cached).
	Duration time.Duration
	// ClusterSettingsDigest identifies the cluster-level settings the
	// group was rendered under (SettingsDigest), also when the render
	// failed; empty when they could not be read.
	ClusterSettingsDigest string
	// Context is the render context the group rendered with, nil when it
	// could not be built (the render failed before any template ran). The
	// leader shows it in the bashible-apiserver-context Secret.
	Context *templates.Context

	// contextHash identifies the render context (contextHash), inputHash
	// that and the NodeGroupConfigurations (inputHash).
	contextHash, inputHash string
	// custom are the NodeGroupConfigurations' steps the group rendered
	// with, which Compose starts from.
	custom []templates.CustomStep
}

// Renderer renders node groups, reusing a group's previous result when
// none of its inputs changed, so a change re-renders only the groups it
// affects. Groups render independently: Render may run for different
// groups at once, and nothing is held across groups while a template
// renders, so a group whose templates are slow delays no other.
type Renderer struct {
	tree *templates.Tree
	// Parallelism is how many groups RenderAll renders at once; zero means 1.
	Parallelism int

	mu       sync.Mutex
	cache    map[string]*Result
	settings parsedSettings
}

// parsedSettings memoizes the last cluster configuration parsed.
type parsedSettings struct {
	raw, static []byte
	valid       bool
	settings    templates.ClusterSettings
	err         error
}

// NewRenderer returns a renderer for a template tree. Give it a tree with
// a sandbox (templates.Tree.WithSandbox) to bound what NodeGroupConfiguration
// templates may spend.
func NewRenderer(tree *templates.Tree) *Renderer {
	return &Renderer{tree: tree, cache: map[string]*Result{}}
}

// TemplatesDigest identifies the renderer's template tree.
func (r *Renderer) TemplatesDigest() string { return r.tree.Digest() }

// RenderAll renders every NodeGroup in in, Parallelism at a time, and
// forgets the cached renders of groups no longer in in.
func (r *Renderer) RenderAll(in Inputs) map[string]*Result {
	results := make(map[string]*Result, len(in.NodeGroups))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(r.Parallelism, 1))
	for _, ng := range in.NodeGroups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res := r.Render(ng, in)
			mu.Lock()
			results[ng.Name] = res
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.mu.Lock()
	for group := range r.cache {
		if results[group] == nil {
			delete(r.cache, group)
		}
	}
	r.mu.Unlock()
	return results
}

// Forget drops the cached render of a group that no longer exists.
func (r *Renderer) Forget(group string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cache, group)
}

// Render renders one group from the cluster-wide inputs in (in.NodeGroups
// is not read). When only the group's NodeGroupConfigurations changed
// since its last render, and that render succeeded, only the changed ones
// are rendered (as Compose does). Renders of different groups may run at once; renders of
// one group must not (the controller's queue never runs a key twice at
// once). A cluster configuration that cannot be read fails the group.
func (r *Renderer) Render(ng *deckhousev1.NodeGroup, in Inputs) *Result {
	custom, names := customSteps(ng.Name, in.Configs)
	settings, err := r.clusterSettings(in.ClusterConfiguration, in.StaticClusterConfiguration)
	if err != nil {
		return &Result{Group: ng.Name, Custom: names, Failures: []templates.Failure{{Err: err}}}
	}
	digest, err := SettingsDigest(settings, in.CA)
	if err != nil {
		return &Result{Group: ng.Name, Custom: names, Failures: []templates.Failure{{Err: err}}}
	}
	ctx, err := templates.NewContext(ng, settings, in.Endpoints, in.CA)
	if err != nil {
		return &Result{Group: ng.Name, Custom: names, ClusterSettingsDigest: digest, Failures: []templates.Failure{{Err: fmt.Errorf("NodeGroup %s: %w", ng.Name, err)}}}
	}
	if ctx.NodeUsers, err = templates.NodeUsersFor(ng.Name, in.NodeUsers); err != nil {
		return &Result{Group: ng.Name, Custom: names, ClusterSettingsDigest: digest, Failures: []templates.Failure{{Err: err}}}
	}
	ctxHash, err := contextHash(r.tree.Digest(), &ctx)
	if err != nil {
		return &Result{Group: ng.Name, Custom: names, ClusterSettingsDigest: digest, Failures: []templates.Failure{{Err: err}}}
	}
	hash, err := inputHash(ctxHash, custom)
	if err != nil {
		return &Result{Group: ng.Name, Custom: names, ClusterSettingsDigest: digest, Failures: []templates.Failure{{Err: err}}}
	}
	r.mu.Lock()
	prev := r.cache[ng.Name]
	r.mu.Unlock()
	if prev != nil && prev.inputHash == hash {
		cached := *prev
		cached.Cached, cached.Duration = true, 0
		return &cached
	}
	start := time.Now()
	var bundle *templates.Bundle
	var failures []templates.Failure
	recomposed := false
	if prev != nil && prev.Published != nil && prev.contextHash == ctxHash {
		// Only NodeGroupConfigurations changed since the group's last
		// good render: render those, take the rest from it
		// (templates.Tree.Recompose gives what a whole render gives).
		p := prev.Published
		bundle, failures, recomposed = r.tree.Recompose(&ctx, &templates.Bundle{Bashible: p.Bashible.String(), Steps: p.Steps, Bootstrap: p.Bootstrap, Checksum: p.Checksum}, prev.custom, custom)
	}
	if !recomposed {
		bundle, failures = r.tree.Render(&ctx, custom)
	}
	res := &Result{Group: ng.Name, Failures: failures, Custom: names, Duration: time.Since(start), ClusterSettingsDigest: digest, Context: &ctx, contextHash: ctxHash, inputHash: hash, custom: custom}
	if bundle != nil {
		res.Published = &Published{
			Group: ng.Name, NodeType: string(ng.Spec.NodeType),
			KubernetesVersion: ctx.KubernetesVersion, CRI: ctx.CRI,
			Checksum: bundle.Checksum, Bashible: NewScript(bundle.Bashible), Steps: bundle.Steps, Bootstrap: bundle.Bootstrap,
			ClusterSettingsDigest: digest,
		}
		res.Published.intern()
	}
	r.mu.Lock()
	r.cache[ng.Name] = res
	r.mu.Unlock()
	return res
}

// Compose is Render(ng, in) computed from base, a render of the group
// by a renderer of the same template tree (the bundle controller's
// latest): when base rendered, and from the render context ng has in in
// (its input hash proves it, with the NodeGroupConfigurations it rendered
// with), only the group's configurations that differ in in from those
// are rendered again, in the sandbox; the built-in templates and the
// others are taken from base (templates.Tree.Recompose). base may be
// behind in (configurations changed since it rendered): those are
// rendered too. The result is the one Render gives: the same steps,
// checksum and failures. ok is false when base cannot vouch for that
// (none, failed, rendered under another context or template tree): the
// caller renders the group whole.
func (r *Renderer) Compose(ng *deckhousev1.NodeGroup, in Inputs, base *Result) (res *Result, ok bool) {
	return r.compose(ng, in, base, true)
}

// ComposeSteps is Compose without the checksum: the result's
// Published.Checksum is empty (templates.Tree.RecomposeSteps). For a
// caller that compares the steps themselves.
func (r *Renderer) ComposeSteps(ng *deckhousev1.NodeGroup, in Inputs, base *Result) (res *Result, ok bool) {
	return r.compose(ng, in, base, false)
}

func (r *Renderer) compose(ng *deckhousev1.NodeGroup, in Inputs, base *Result, checksum bool) (res *Result, ok bool) {
	if base == nil || base.Published == nil || base.contextHash == "" || base.Group != ng.Name {
		return nil, false
	}
	settings, err := r.clusterSettings(in.ClusterConfiguration, in.StaticClusterConfiguration)
	if err != nil {
		return nil, false
	}
	digest, err := SettingsDigest(settings, in.CA)
	if err != nil {
		return nil, false
	}
	ctx, err := templates.NewContext(ng, settings, in.Endpoints, in.CA)
	if err != nil {
		return nil, false
	}
	if ctx.NodeUsers, err = templates.NodeUsersFor(ng.Name, in.NodeUsers); err != nil {
		return nil, false
	}
	baseCustom := base.custom
	// base's input hash is of its context and baseCustom: the same
	// context is the same inputs.
	if hash, err := contextHash(r.tree.Digest(), &ctx); err != nil || hash != base.contextHash {
		return nil, false
	}
	custom, names := customSteps(ng.Name, in.Configs)
	b := base.Published
	start := time.Now()
	recompose := r.tree.Recompose
	if !checksum {
		recompose = r.tree.RecomposeSteps
	}
	bundle, failures, ok := recompose(&ctx, &templates.Bundle{Bashible: b.Bashible.String(), Steps: b.Steps, Bootstrap: b.Bootstrap, Checksum: b.Checksum}, baseCustom, custom)
	if !ok {
		return nil, false
	}
	res = &Result{Group: ng.Name, Failures: failures, Custom: names, Duration: time.Since(start), ClusterSettingsDigest: digest}
	if bundle != nil {
		res.Published = &Published{
			Group: ng.Name, NodeType: string(ng.Spec.NodeType),
			KubernetesVersion: ctx.KubernetesVersion, CRI: ctx.CRI,
			Checksum: bundle.Checksum, Bashible: NewScript(bundle.Bashible), Steps: bundle.Steps, Bootstrap: bundle.Bootstrap,
			ClusterSettingsDigest: digest,
		}
	}
	return res, true
}

// clusterSettings parses cluster-configuration.yaml and
// static-cluster-configuration.yaml once per content; an error names the
// Secret at fault.
func (r *Renderer) clusterSettings(raw, static []byte) (templates.ClusterSettings, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.settings.valid || !bytes.Equal(r.settings.raw, raw) || !bytes.Equal(r.settings.static, static) {
		s, err := templates.ParseClusterConfiguration(raw)
		if err != nil {
			err = fmt.Errorf("%s/%s: %w", metav1.NamespaceSystem, deckhousev1.ClusterConfigurationSecret, err)
		} else if s.Static, err = templates.ParseStaticClusterConfiguration(static); err != nil {
			err = fmt.Errorf("%s/%s: %w", metav1.NamespaceSystem, deckhousev1.StaticClusterConfigurationSecret, err)
		}
		r.settings = parsedSettings{raw: bytes.Clone(raw), static: bytes.Clone(static), valid: true, settings: s, err: err}
	}
	return r.settings.settings, r.settings.err
}

// customSteps are the NodeGroupConfigurations that apply to group, by name.
func customSteps(group string, configs []*deckhousev1alpha1.NodeGroupConfiguration) ([]templates.CustomStep, []string) {
	var steps []templates.CustomStep
	var names []string
	for _, c := range configs {
		if !slices.Contains(c.Spec.NodeGroups, "*") && !slices.Contains(c.Spec.NodeGroups, group) {
			continue
		}
		steps = append(steps, templates.CustomStep{Name: c.Name, Weight: c.Spec.Weight, Bundles: c.Spec.Bundles, Content: c.Spec.Content})
		names = append(names, c.Name)
	}
	slices.SortFunc(steps, func(a, b templates.CustomStep) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(names)
	return steps, names
}

// SettingsDigest identifies the cluster-level settings a bundle is
// rendered under: the parsed cluster-configuration.yaml and
// static-cluster-configuration.yaml (extra CAs, registry mirrors and their
// credentials, proxy, package source and versions, cluster network) and
// the cluster CA. The API endpoints are left out: they change with the
// control plane, and a pin across them would be refused for nothing. A
// revision keeps the digest it was rendered under, so that a pin does not
// bring back cluster-level trust an administrator has removed since.
func SettingsDigest(settings templates.ClusterSettings, ca string) (string, error) {
	h := sha256.New()
	enc := json.NewEncoder(h) // encoding/json sorts map keys: stable across runs
	if err := enc.Encode(settings); err != nil {
		return "", fmt.Errorf("hash the cluster settings: %w", err)
	}
	if err := enc.Encode(ca); err != nil {
		return "", fmt.Errorf("hash the cluster CA: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// contextHash identifies the render context a group renders under: the
// template tree and everything templates read.
func contextHash(treeDigest string, ctx *templates.Context) (string, error) {
	h := sha256.New()
	h.Write([]byte(treeDigest))
	if err := json.NewEncoder(h).Encode(ctx); err != nil { // encoding/json sorts map keys: stable across runs
		return "", fmt.Errorf("hash the render context: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// inputHash identifies everything a group's render depends on: its
// render context (contextHash) and its NodeGroupConfigurations.
func inputHash(contextHash string, custom []templates.CustomStep) (string, error) {
	h := sha256.New()
	h.Write([]byte(contextHash))
	if err := json.NewEncoder(h).Encode(custom); err != nil {
		return "", fmt.Errorf("hash the NodeGroupConfigurations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
