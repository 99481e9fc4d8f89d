package bundles

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// Inputs is the cluster state bundles are rendered from.
type Inputs struct {
	NodeGroups []*deckhousev1.NodeGroup
	Configs    []*deckhousev1alpha1.NodeGroupConfiguration
	// ClusterConfiguration is cluster-configuration.yaml, nil when absent.
	ClusterConfiguration []byte
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

	inputHash string
}

// Renderer renders every group, reusing a group's previous result when none
// of its inputs changed, so a change re-renders only the groups it affects.
type Renderer struct {
	tree *templates.Tree

	mu    sync.Mutex
	cache map[string]*Result
}

// NewRenderer returns a renderer for a template tree.
func NewRenderer(tree *templates.Tree) *Renderer {
	return &Renderer{tree: tree, cache: map[string]*Result{}}
}

// TemplatesDigest identifies the renderer's template tree.
func (r *Renderer) TemplatesDigest() string { return r.tree.Digest() }

// RenderAll renders every NodeGroup in in. A cluster configuration that
// cannot be read fails every group with the same error.
func (r *Renderer) RenderAll(in Inputs) map[string]*Result {
	results := make(map[string]*Result, len(in.NodeGroups))
	settings, settingsErr := templates.ParseClusterConfiguration(in.ClusterConfiguration)

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ng := range in.NodeGroups {
		custom, names := customSteps(ng.Name, in.Configs)
		if settingsErr != nil {
			results[ng.Name] = &Result{Group: ng.Name, Custom: names,
				Failures: []templates.Failure{{Err: fmt.Errorf("kube-system/d8-cluster-configuration: %w", settingsErr)}}}
			continue
		}
		ctx, err := templates.NewContext(ng, settings, in.Endpoints, in.CA)
		if err != nil {
			results[ng.Name] = &Result{Group: ng.Name, Custom: names, Failures: []templates.Failure{{Err: fmt.Errorf("NodeGroup %s: %w", ng.Name, err)}}}
			continue
		}
		hash, err := inputHash(r.tree.Digest(), &ctx, custom)
		if err != nil {
			results[ng.Name] = &Result{Group: ng.Name, Custom: names, Failures: []templates.Failure{{Err: err}}}
			continue
		}
		if prev := r.cache[ng.Name]; prev != nil && prev.inputHash == hash {
			cached := *prev
			cached.Cached, cached.Duration = true, 0
			results[ng.Name] = &cached
			continue
		}
		start := time.Now()
		bundle, failures := r.tree.Render(&ctx, custom)
		res := &Result{Group: ng.Name, Failures: failures, Custom: names, Duration: time.Since(start), inputHash: hash}
		if bundle != nil {
			res.Published = &Published{
				Group: ng.Name, NodeType: string(ng.Spec.NodeType),
				KubernetesVersion: ctx.KubernetesVersion, CRI: ctx.CRI,
				Checksum: bundle.Checksum, Bashible: bundle.Bashible, Steps: bundle.Steps, Bootstrap: bundle.Bootstrap,
			}
		}
		r.cache[ng.Name] = res
		results[ng.Name] = res
	}
	for group := range r.cache {
		if results[group] == nil {
			delete(r.cache, group)
		}
	}
	return results
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

// inputHash identifies everything a group's render depends on.
func inputHash(treeDigest string, ctx *templates.Context, custom []templates.CustomStep) (string, error) {
	h := sha256.New()
	h.Write([]byte(treeDigest))
	enc := json.NewEncoder(h) // encoding/json sorts map keys: stable across runs
	if err := enc.Encode(ctx); err != nil {
		return "", fmt.Errorf("hash render inputs: %w", err)
	}
	if err := enc.Encode(custom); err != nil {
		return "", fmt.Errorf("hash render inputs: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
