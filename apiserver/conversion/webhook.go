package conversion

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// MaxReviewBytes bounds a ConversionReview's body. kube-apiserver sends
// every object of a read that is not at the version asked for in one
// review: a page of a list (500 objects for informers and kubectl) of
// objects each at most etcd's 1.5 MiB, in practice a few KiB. Past the
// bound the review is refused (400) without being decoded.
const MaxReviewBytes = 32 << 20

// Webhook answers kube-apiserver's apiextensions.k8s.io/v1
// ConversionReviews for the CRDs of Kinds (their spec.conversion points at
// bashiblev1alpha1.ConversionWebhookPath on bashible-apiserver).
//
// kube-apiserver calls CRD conversion webhooks without client credentials
// (unlike admission webhooks, it has no configuration that gives it any),
// so bashible-apiserver serves this path to anyone who reaches its port,
// unauthenticated and unauthorized, as Cluster API's and every other
// conversion webhook server does. That is safe because the answer is a
// pure function of the posted objects: nothing is read from the cluster
// or kept, so a caller learns only what it sent, converted; the body is
// bounded (MaxReviewBytes) and the request goes through the server's
// in-flight limits like any other.
type Webhook struct {
	// kinds are the conversions by kind; nil means Kinds.
	kinds map[schema.GroupKind]Kind
}

// NewWebhook is the webhook for Kinds.
func NewWebhook() *Webhook { return &Webhook{} }

// NewWebhookFor is the webhook for kinds (tests).
func NewWebhookFor(kinds map[schema.GroupKind]Kind) *Webhook { return &Webhook{kinds: kinds} }

func (wh *Webhook) kind(gk schema.GroupKind) (Kind, error) {
	if wh.kinds == nil {
		return For(gk)
	}
	k, ok := wh.kinds[gk]
	if !ok {
		return Kind{}, fmt.Errorf("no conversions for %s: it is served at one version", gk)
	}
	return k, nil
}

// ServeHTTP answers one ConversionReview: every object converted, or a
// response whose result is a Failure that says which object failed and
// why (kube-apiserver returns that message to the reader). Object
// content is never logged (SSHCredentials carry private keys).
func (wh *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const want = "POST an apiextensions.k8s.io/v1 ConversionReview"
	if r.Method != http.MethodPost {
		http.Error(w, want, http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("read the ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > MaxReviewBytes {
		klog.InfoS("Refused a ConversionReview over the size bound", "bytes", len(body), "max", MaxReviewBytes)
		http.Error(w, fmt.Sprintf("the ConversionReview is over %d bytes; kube-apiserver sends a page of a list per review: read with a smaller page (limit)", MaxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	review := &apiextensionsv1.ConversionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		if err == nil {
			err = errors.New("no request")
		}
		http.Error(w, fmt.Sprintf("%s: %v", want, err), http.StatusBadRequest)
		return
	}
	if gvk := review.GroupVersionKind(); gvk != apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview") {
		http.Error(w, fmt.Sprintf("%s, not %s (set conversionReviewVersions: [v1] on the CRD)", want, gvk), http.StatusBadRequest)
		return
	}
	start := time.Now()
	req := review.Request
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID}
	converted, err := wh.convert(req)
	if err != nil {
		resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
		klog.InfoS("A conversion failed", "uid", req.UID, "desiredAPIVersion", req.DesiredAPIVersion, "objects", len(req.Objects), "err", err)
	} else {
		resp.Result = metav1.Status{Status: metav1.StatusSuccess}
		resp.ConvertedObjects = converted
		klog.V(4).InfoS("Converted", "uid", req.UID, "desiredAPIVersion", req.DesiredAPIVersion, "objects", len(req.Objects), "duration", time.Since(start))
	}
	out := apiextensionsv1.ConversionReview{TypeMeta: review.TypeMeta, Response: resp}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		klog.ErrorS(err, "Writing a conversion response failed", "uid", req.UID)
	}
}

// convert converts every object of req, or fails naming the first that
// cannot be.
func (wh *Webhook) convert(req *apiextensionsv1.ConversionRequest) ([]runtime.RawExtension, error) {
	to, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil || to.Group == "" || to.Version == "" {
		return nil, fmt.Errorf("desiredAPIVersion %q is not group/version", req.DesiredAPIVersion)
	}
	out := make([]runtime.RawExtension, 0, len(req.Objects))
	for i, raw := range req.Objects {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw.Raw); err != nil {
			return nil, fmt.Errorf("object %d: not a Kubernetes object: %v", i, err)
		}
		where := fmt.Sprintf("object %d (%s %s)", i, obj.GetKind(), obj.GetName())
		gvk := obj.GroupVersionKind()
		if gvk.Group != to.Group {
			return nil, fmt.Errorf("%s: %s cannot convert to %s, another group", where, obj.GetAPIVersion(), req.DesiredAPIVersion)
		}
		k, err := wh.kind(gvk.GroupKind())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if _, err := k.spokeOrHub(gvk.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if _, err := k.spokeOrHub(to.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		c, err := k.Convert(obj, to.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		data, err := c.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: encoding the converted object: %w", where, err)
		}
		out = append(out, runtime.RawExtension{Raw: data})
	}
	return out, nil
}

// spokeOrHub checks that version is served: the hub or a spoke.
func (k Kind) spokeOrHub(version string) (Spoke, error) {
	if version == k.Hub {
		return Spoke{}, nil
	}
	return k.spoke(version)
}
