package bundles

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// ConditionPinned is the NodeGroup condition bashible-apiserver sets while
// the group is pinned to a revision (spec.update.pinnedRevision): True
// when its nodes receive that revision, False when the revision is not
// kept (ReasonRevisionNotFound) or was rendered under other cluster
// settings than the current ones (ReasonClusterSettingsChanged). It is
// absent on a group without a pin.
const ConditionPinned = "Pinned"

// Reasons of the Pinned condition.
const (
	ReasonRevisionServed   = "RevisionServed"
	ReasonRevisionNotFound = "RevisionNotFound"
	// ReasonClusterSettingsChanged: the pinned revision was rendered under
	// cluster settings that have changed since (an extra CA, registry
	// credentials or a proxy removed, the cluster CA rotated...); serving
	// it would bring them back, so the nodes receive the current bundle.
	ReasonClusterSettingsChanged = "ClusterSettingsChanged"
)

// pinOutcome is what a group's pin came to: its Pinned condition.
type pinOutcome struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// pinnedRevision is the revision ng is pinned to, zero for none.
func pinnedRevision(ng *deckhousev1.NodeGroup) int64 {
	if ng == nil || ng.Spec.Update == nil || ng.Spec.Update.PinnedRevision == nil {
		return 0
	}
	return *ng.Spec.Update.PinnedRevision
}

// pinRequest is what a NodeGroup asks of its bundle: the revision it is
// pinned to (zero for none), and the revision a cluster administrator
// allowed across a change of the cluster settings
// (deckhousev1.PinAcrossClusterSettingsAnnotation, zero for none).
type pinRequest struct {
	revision, allowedAcrossSettings int64
}

// pinOf is ng's pinRequest.
func pinOf(ng *deckhousev1.NodeGroup) pinRequest {
	req := pinRequest{revision: pinnedRevision(ng)}
	if ng != nil {
		if v, err := strconv.ParseInt(ng.Annotations[deckhousev1.PinAcrossClusterSettingsAnnotation], 10, 64); err == nil && v > 0 {
			req.allowedAcrossSettings = v
		}
	}
	return req
}

// chooseServed decides what a group's nodes receive. current is the
// group's render as its newest revision (nil when it failed or is too
// large), prev what is published now (nil before the first publish),
// index the kept revisions, settings the digest of the cluster settings
// now (SettingsDigest; empty when they cannot be read).
//
//   - Not pinned: current; without one, the last good bundle, which after
//     an unpin is the newest revision rather than the pinned one.
//   - Pinned to a kept revision rendered under the current cluster
//     settings (or whose bundle is the current one): that revision,
//     loaded from its Secret.
//   - Pinned to a kept revision rendered under other cluster settings:
//     what an unpinned group receives, and a Pinned=False condition that
//     says why, unless a cluster administrator allowed this very revision
//     (deckhousev1.PinAcrossClusterSettingsAnnotation): a pin is a
//     rollback of the group's configuration, and must not bring back an
//     extra CA, registry credentials or a proxy that were removed since.
//   - Pinned to a revision not kept: what is published now, unchanged (a
//     node never falls back to another configuration silently), and a
//     Pinned=False condition that says so.
func (c *Controller) chooseServed(ctx context.Context, group string, req pinRequest, settings string, current, prev *Published, index []RevisionInfo) (*Published, *pinOutcome, error) {
	pin := req.revision
	if pin == 0 {
		if current != nil {
			return current, nil, nil
		}
		if prev != nil && prev.PinnedRevision != 0 && len(index) > 0 {
			newest := index[len(index)-1].Revision
			p, err := c.revisions.load(ctx, group, newest)
			if err == nil {
				return p, nil, nil
			}
			if !apierrors.IsNotFound(err) {
				return nil, nil, fmt.Errorf("load revision %d of group %s to resume it after the pin was removed: %w", newest, group, err)
			}
			klog.FromContext(ctx).Info("The newest revision of an unpinned group is gone; it keeps the bundle it was pinned to until it renders", "revision", newest)
		}
		return prev, nil, nil
	}
	newest := int64(0)
	if len(index) > 0 {
		newest = index[len(index)-1].Revision
	}
	var pinned *Published
	if prev != nil && prev.PinnedRevision == pin {
		pinned = prev
	} else if hasRevision(index, pin) {
		p, err := c.revisions.load(ctx, group, pin)
		switch {
		case err == nil:
			cp := *p
			cp.PinnedRevision = pin
			pinned = &cp
		case !apierrors.IsNotFound(err):
			return nil, nil, fmt.Errorf("load revision %d of group %s, which the group is pinned to: %w", pin, group, err)
		}
	}
	if pinned != nil {
		if !acrossSettings(pinned, current, settings) || req.allowedAcrossSettings == pin {
			return pinned, servedOutcome(pinned, newest), nil
		}
		served, _, err := c.chooseServed(ctx, group, pinRequest{}, settings, current, prev, index)
		if err != nil {
			return nil, nil, err
		}
		msg := fmt.Sprintf("spec.update.pinnedRevision %d was rendered under other cluster settings (cluster configuration, static cluster configuration and cluster CA: digest %s, now %s), "+
			"and a pin does not bring back cluster-level settings changed since, such as an extra CA, registry credentials or a proxy that were removed",
			pin, shortChecksum(orNone(pinned.ClusterSettingsDigest)), shortChecksum(orNone(settings)))
		if served != nil {
			msg += fmt.Sprintf("; its nodes receive revision %d (checksum %s) instead", served.Revision, shortChecksum(served.Checksum))
		}
		msg += fmt.Sprintf(". Pin a revision rendered under the current settings, remove the pin, or, as a cluster administrator, allow this pin with the annotation %s=%d on the NodeGroup.",
			deckhousev1.PinAcrossClusterSettingsAnnotation, pin)
		klog.FromContext(ctx).Info("Refused a pin across a change of the cluster settings", "revision", pin,
			"revisionSettings", pinned.ClusterSettingsDigest, "currentSettings", settings)
		return served, &pinOutcome{status: metav1.ConditionFalse, reason: ReasonClusterSettingsChanged, message: msg}, nil
	}
	keep := prev
	if keep == nil {
		keep = current // nothing served yet: a new node must still get a bundle
	}
	msg := fmt.Sprintf("spec.update.pinnedRevision %d is not a kept revision of the group (kept: %s)", pin, revisionNumbers(index))
	if keep != nil {
		msg += fmt.Sprintf("; its nodes keep receiving revision %d (checksum %s)", keep.Revision, shortChecksum(keep.Checksum))
	}
	msg += ". Pin a kept revision (kubectl get nodegroupbundles " + group + " -o yaml lists them) or remove the pin."
	return keep, &pinOutcome{status: metav1.ConditionFalse, reason: ReasonRevisionNotFound, message: msg}, nil
}

// acrossSettings reports whether serving the pinned bundle would serve
// cluster settings other than the current ones: it was rendered under
// another settings digest (or none was recorded, or the current one is
// unknown), and it is not the current bundle itself.
func acrossSettings(pinned, current *Published, settings string) bool {
	if current != nil && pinned.Checksum == current.Checksum {
		return false
	}
	return settings == "" || pinned.ClusterSettingsDigest != settings
}

// orNone is s, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// servedOutcome is the Pinned condition of a group whose nodes receive
// the pinned revision p; newest is the group's newest revision.
func servedOutcome(p *Published, newest int64) *pinOutcome {
	msg := fmt.Sprintf("Nodes receive revision %d (checksum %s)", p.Revision, shortChecksum(p.Checksum))
	if newest > p.Revision {
		msg += fmt.Sprintf(" instead of the current revision %d", newest)
	}
	msg += "; remove spec.update.pinnedRevision to resume the current configuration."
	return &pinOutcome{status: metav1.ConditionTrue, reason: ReasonRevisionServed, message: msg}
}

// revisionNumbers lists the kept revisions for a message.
func revisionNumbers(index []RevisionInfo) string {
	if len(index) == 0 {
		return "none"
	}
	parts := make([]string, len(index))
	for i, r := range index {
		parts[i] = strconv.FormatInt(r.Revision, 10)
	}
	return strings.Join(parts, ", ")
}

// shortChecksum is the first 12 characters of a checksum, as tables print it.
func shortChecksum(sum string) string {
	return sum[:min(12, len(sum))]
}
