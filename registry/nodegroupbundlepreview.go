package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/preview"
)

// NodeGroupBundlePreviewsResource is the resource of previews.
const NodeGroupBundlePreviewsResource = "nodegroupbundlepreviews"

// Previewer computes what a proposal would change (preview.Previewer).
type Previewer interface {
	Preview(ctx context.Context, p preview.Proposal) (*preview.Result, error)
}

// NodeGroupBundlePreviews is the REST storage of nodegroupbundlepreviews:
// create-only, like SubjectAccessReview. A created preview is answered in
// its status and stored nowhere; nothing else is written.
type NodeGroupBundlePreviews struct {
	previewer Previewer
	metrics   *Metrics
}

var (
	_ rest.Storage              = &NodeGroupBundlePreviews{}
	_ rest.Scoper               = &NodeGroupBundlePreviews{}
	_ rest.Creater              = &NodeGroupBundlePreviews{}
	_ rest.SingularNameProvider = &NodeGroupBundlePreviews{}
)

// NewNodeGroupBundlePreviews answers previews with previewer.
func NewNodeGroupBundlePreviews(previewer Previewer, metrics *Metrics) *NodeGroupBundlePreviews {
	return &NodeGroupBundlePreviews{previewer: previewer, metrics: metrics}
}

// New returns an empty NodeGroupBundlePreview.
func (*NodeGroupBundlePreviews) New() runtime.Object {
	return &bashiblev1alpha1.NodeGroupBundlePreview{}
}

// Destroy releases nothing: the previewer is shared.
func (*NodeGroupBundlePreviews) Destroy() {}

// NamespaceScoped is false: a preview is about node groups, which are
// cluster-scoped.
func (*NodeGroupBundlePreviews) NamespaceScoped() bool { return false }

// GetSingularName is the singular resource name, for discovery.
func (*NodeGroupBundlePreviews) GetSingularName() string { return "nodegroupbundlepreview" }

// Create answers the preview: it decodes the proposed objects, renders
// the groups they may change and returns the preview with its status.
func (r *NodeGroupBundlePreviews) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	r.metrics.Requests.WithLabelValues(NodeGroupBundlePreviewsResource, "create").Inc()
	in, ok := obj.(*bashiblev1alpha1.NodeGroupBundlePreview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a NodeGroupBundlePreview: %T", obj))
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	p, err := proposal(in.Spec)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	res, err := r.previewer.Preview(ctx, p)
	if errors.Is(err, preview.ErrBusy) {
		return nil, apierrors.NewTooManyRequests(err.Error(), 1)
	}
	if err != nil {
		return nil, apierrors.NewServiceUnavailable("preview: " + err.Error())
	}
	out := in.DeepCopy()
	out.Status = bashiblev1alpha1.NodeGroupBundlePreviewStatus{Groups: res.Groups}
	for _, f := range res.Failures {
		out.Status.Failures = append(out.Status.Failures, bashiblev1alpha1.GroupRenderFailure{Group: f.Group, NodeGroupConfiguration: f.Config, Message: f.Message})
	}
	out.CreationTimestamp = metav1.Now()
	return out, nil
}

// proposal decodes a preview's spec. Each object must be of its kind and
// named; a NodeGroupConfiguration gets the defaults the API would give it.
func proposal(spec bashiblev1alpha1.NodeGroupBundlePreviewSpec) (preview.Proposal, error) {
	var p preview.Proposal
	if spec.NodeGroup != nil {
		ng := &deckhousev1.NodeGroup{}
		if err := decodeProposed(spec.NodeGroup, deckhousev1.SchemeGroupVersion.WithKind("NodeGroup"), ng); err != nil {
			return p, fmt.Errorf("spec.nodeGroup: %w", err)
		}
		p.NodeGroup = ng
	}
	if spec.NodeGroupConfiguration != nil {
		c := &deckhousev1alpha1.NodeGroupConfiguration{}
		gvk := deckhousev1alpha1.SchemeGroupVersion.WithKind("NodeGroupConfiguration")
		if err := decodeProposed(spec.NodeGroupConfiguration, gvk, c); err != nil {
			return p, fmt.Errorf("spec.nodeGroupConfiguration: %w", err)
		}
		var raw struct {
			Spec map[string]json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(spec.NodeGroupConfiguration.Raw, &raw); err != nil {
			return p, fmt.Errorf("spec.nodeGroupConfiguration: %w", err)
		}
		_, weightSet := raw.Spec["weight"]
		preview.DefaultConfig(c, weightSet)
		p.Config = c
	}
	if p.NodeGroup == nil && p.Config == nil {
		return p, errors.New("spec: give nodeGroup, nodeGroupConfiguration or both")
	}
	return p, nil
}

// decodeProposed decodes raw (JSON, as kubectl sends it) into obj,
// refusing another kind or a missing name.
func decodeProposed(raw *runtime.RawExtension, gvk schema.GroupVersionKind, obj metav1.Object) error {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw.Raw, &tm); err != nil {
		return fmt.Errorf("not an object: %w", err)
	}
	if tm.GroupVersionKind() != gvk {
		return fmt.Errorf("apiVersion %q kind %q: want apiVersion %q kind %q", tm.APIVersion, tm.Kind, gvk.GroupVersion().String(), gvk.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(raw.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return err
	}
	if obj.GetName() == "" {
		return errors.New("metadata.name is required")
	}
	return nil
}
