// Package admission is bashible-apiserver's validating admission
// webhooks. The preview (Webhook), for NodeGroups and
// NodeGroupConfigurations: at `kubectl apply` (and
// `kubectl apply --dry-run=server`) it previews the change with the
// server's own renderer (package preview) and answers with warnings — the
// groups that change, their node counts and changed steps, and whether
// the change is disruptive — and refuses a NodeGroupConfiguration that
// does not render, naming the template, the line and the message.
//
// It is served on the server's secure port at
// bashiblev1alpha1.PreviewWebhookPath, behind the generic server's
// delegated authentication and authorization: only a caller allowed to
// post to that path (kube-apiserver, by the ClusterRole in
// manifests/bashible-apiserver/preview.yaml) is answered. Its
// ValidatingWebhookConfiguration fails open (failurePolicy Ignore, a
// short timeout), so a bashible-apiserver that is down or slow never
// blocks a write: the object is admitted without a preview, and a
// configuration that does not render is then reported on its status as
// before.
//
// The early-oom settings (SettingsWebhook, settings.go): a ConfigMap of
// early-oom's settings that no node could use is refused, naming the
// level, the field and the bound, by the check its agents make
// (agents/early-oom/settings), served at
// bashiblev1alpha1.EarlyOOMSettingsWebhookPath.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/apiserver/preview"
)

// maxReviewBytes bounds an AdmissionReview's body: kube-apiserver refuses
// objects over about 1.5 MiB, and a review carries the object twice on
// update.
const maxReviewBytes = 4 << 20

// defaultBudget is how long a preview may take when kube-apiserver does
// not say its timeout; a preview that takes longer admits the object with
// a warning.
const defaultBudget = 4 * time.Second

// Previewer computes previews (preview.Previewer).
type Previewer interface {
	Preview(ctx context.Context, p preview.Proposal) (*preview.Result, error)
}

// Settings are the cluster state groups render from now
// (bundles.Controller): the cluster configuration and API endpoints
// Deckhouse's warnings read.
type Settings interface {
	Snapshot() (bundles.Inputs, error)
}

// Webhook is the HTTP handler of the webhook.
type Webhook struct {
	previewer Previewer
	settings  Settings
}

// NewWebhook answers reviews with previewer, and adds Deckhouse's
// NodeGroup warnings (Warnings) from settings; settings may be nil.
func NewWebhook(previewer Previewer, settings Settings) *Webhook {
	return &Webhook{previewer: previewer, settings: settings}
}

var (
	nodeGroupKind = metav1.GroupVersionKind{Group: deckhousev1.GroupName, Version: deckhousev1.SchemeGroupVersion.Version, Kind: "NodeGroup"}
	configKind    = metav1.GroupVersionKind{Group: deckhousev1alpha1.GroupName, Version: deckhousev1alpha1.SchemeGroupVersion.Version, Kind: "NodeGroupConfiguration"}
)

// ServeHTTP answers one AdmissionReview.
func (wh *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) { serveReview(w, r, wh.review) }

// serveReview reads one AdmissionReview from r, decides it within the
// time kube-apiserver gives, and writes the answer.
func serveReview(w http.ResponseWriter, r *http.Request, decide func(context.Context, *admissionv1.AdmissionRequest) Decision) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("read the AdmissionReview (at most %d bytes): %v", maxReviewBytes, err), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	budget := defaultBudget
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
		// Leave kube-apiserver time to read the answer.
		budget = t * 4 / 5
	}
	ctx, cancel := context.WithTimeout(r.Context(), budget)
	defer cancel()
	d := decide(ctx, review.Request)
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: d.Allowed, Warnings: d.Warnings}
	if !d.Allowed {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: d.Message}
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		klog.ErrorS(err, "Writing an admission response failed", "uid", review.Request.UID)
	}
}

// review decides one request.
func (wh *Webhook) review(ctx context.Context, req *admissionv1.AdmissionRequest) Decision {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return Decision{Allowed: true}
	}
	p, err := proposal(req)
	if err != nil {
		return Decision{Allowed: true, Warnings: []string{warning("cannot read the object (%s); it is admitted without a preview", err)}}
	}
	// The warnings name the changed steps, never their diffs or the new
	// checksums.
	p.StepsOnly = true
	start := time.Now()
	res, err := wh.previewer.Preview(ctx, p)
	d := Decide(p, res, err)
	if d.Allowed && p.NodeGroup != nil {
		d.Warnings = append(d.Warnings, wh.deckhouseWarnings(req, p.NodeGroup)...)
	}
	composed, whole := 0, 0
	if res != nil {
		composed, whole = res.Composed, res.Rendered
	}
	klog.V(2).InfoS("Previewed a change at admission", "kind", req.Kind.Kind, "name", req.Name, "dryRun", req.DryRun != nil && *req.DryRun,
		"allowed", d.Allowed, "warnings", len(d.Warnings), "groupsComposed", composed, "groupsRenderedWhole", whole, "duration", time.Since(start), "err", err)
	return d
}

// deckhouseWarnings are Deckhouse's warnings about the NodeGroup under
// review, with its stored version on update; none when the cluster state
// cannot be read (the preview's own warning says so).
func (wh *Webhook) deckhouseWarnings(req *admissionv1.AdmissionRequest, ng *deckhousev1.NodeGroup) []string {
	if wh.settings == nil {
		return nil
	}
	in, err := wh.settings.Snapshot()
	if err != nil {
		return nil
	}
	var old *deckhousev1.NodeGroup
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old = &deckhousev1.NodeGroup{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			old = nil
		}
	}
	return Warnings(old, ng, in)
}

// proposal decodes the object under review.
func proposal(req *admissionv1.AdmissionRequest) (preview.Proposal, error) {
	switch req.Kind {
	case nodeGroupKind:
		ng := &deckhousev1.NodeGroup{}
		if err := json.Unmarshal(req.Object.Raw, ng); err != nil {
			return preview.Proposal{}, err
		}
		return preview.Proposal{NodeGroup: ng}, nil
	case configKind:
		c := &deckhousev1alpha1.NodeGroupConfiguration{}
		if err := json.Unmarshal(req.Object.Raw, c); err != nil {
			return preview.Proposal{}, err
		}
		return preview.Proposal{Config: c}, nil
	}
	return preview.Proposal{}, fmt.Errorf("kind %s is not previewed", schema.GroupVersionKind(req.Kind))
}
