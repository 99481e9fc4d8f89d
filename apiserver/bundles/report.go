package bundles

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	applyv1 "github.com/node-manager/node-manager/generated/applyconfiguration/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/eventnote"
)

// reportConfigs sets each NodeGroupConfiguration's Rendered condition and
// emits a Warning event when it starts failing or fails differently.
func (c *Controller) reportConfigs(ctx context.Context, configs []*deckhousev1alpha1.NodeGroupConfiguration, results map[string]*Result, tooLarge map[string]*BundleTooLargeError) []error {
	// failures[ngc][message] = groups
	failures := map[string]map[string][]string{}
	applied := map[string][]string{}
	for _, group := range sortedGroups(results) {
		r := results[group]
		for _, name := range r.Custom {
			applied[name] = append(applied[name], group)
		}
		for _, f := range r.Failures {
			if f.Custom == "" {
				continue
			}
			if failures[f.Custom] == nil {
				failures[f.Custom] = map[string][]string{}
			}
			msg := f.Err.Error()
			failures[f.Custom][msg] = append(failures[f.Custom][msg], group)
		}
	}
	var errs []error
	for _, ngc := range configs {
		cond := metav1.Condition{Type: ConditionRendered, ObservedGeneration: ngc.Generation}
		if byMsg := failures[ngc.Name]; len(byMsg) > 0 {
			var parts []string
			for _, msg := range slices.Sorted(maps.Keys(byMsg)) {
				parts = append(parts, fmt.Sprintf("node groups %s: %s", strings.Join(byMsg[msg], ", "), msg))
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, "RenderFailed"
			cond.Message = truncate(strings.Join(parts, "; ")+". The node groups keep their last good bundle until this is fixed.", 4000)
		} else if big := tooLargeOf(applied[ngc.Name], tooLarge); len(big) > 0 {
			// Its step rendered, but a group it is in cannot be published:
			// it is not what those nodes run.
			parts := make([]string, len(big))
			for i, e := range big {
				parts[i] = e.Error()
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonBundleTooLarge
			cond.Message = truncate(strings.Join(parts, "; ")+". The node groups keep their last good bundle until this is fixed.", 4000)
		} else if groups := applied[ngc.Name]; len(groups) > 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, "Rendered"
			var held []string
			for _, g := range groups {
				if results[g].Published == nil {
					held = append(held, g)
				}
			}
			cond.Message = "Rendered for node groups " + strings.Join(groups, ", ")
			if len(held) > 0 {
				cond.Message += fmt.Sprintf("; not served yet to node groups %s, which keep their last good bundle because something else fails to render (see their Rendered condition)", strings.Join(held, ", "))
			}
		} else {
			cond.Status, cond.Reason = metav1.ConditionTrue, "NoNodeGroups"
			cond.Message = "No node group matches spec.nodeGroups"
		}
		old := meta.FindStatusCondition(ngc.Status.Conditions, ConditionRendered)
		if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
			continue
		}
		updated := ngc.DeepCopy()
		meta.SetStatusCondition(&updated.Status.Conditions, cond)
		updated.Status.ObservedGeneration = ngc.Generation
		if _, err := c.cfg.NodeMgr.DeckhouseV1alpha1().NodeGroupConfigurations().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: deckhousev1.BashibleAPIServerName}); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("report status of NodeGroupConfiguration %s: %w", ngc.Name, err))
			}
			continue
		}
		if cond.Status == metav1.ConditionFalse && (old == nil || old.Message != cond.Message) {
			// events.k8s.io notes are limited to 1 KiB.
			note := truncate(cond.Message, 1000)
			c.recorder.Eventf(updated, nil, corev1.EventTypeWarning, "RenderFailed", eventnote.Action("Render", note), "%s", note)
		}
	}
	return errs
}

// reportNodeGroups sets the Rendered condition, and the Pinned condition
// of a pinned group, on each NodeGroup with server-side apply, owning only
// those conditions: applying without Pinned removes it once the pin is.
func (c *Controller) reportNodeGroups(ctx context.Context, ngs []*deckhousev1.NodeGroup, results map[string]*Result, tooLarge map[string]*BundleTooLargeError, pins map[string]*pinOutcome) []error {
	var errs []error
	for _, ng := range ngs {
		r := results[ng.Name]
		if r == nil {
			continue
		}
		status, reason, msg := metav1.ConditionTrue, "Rendered", "Bundle rendered"
		if current, ok := c.cfg.Store.Get(ng.Name); ok && r.Published != nil {
			msg = "Serving configuration " + current.Checksum
		}
		if r.Published == nil {
			status, reason = metav1.ConditionFalse, "RenderFailed"
			msg = truncate(strings.Join(failureMessages(r.Failures), "; ")+". The group keeps its last good bundle.", 4000)
		} else if big := tooLarge[ng.Name]; big != nil {
			status, reason = metav1.ConditionFalse, ReasonBundleTooLarge
			msg = truncate(big.Error()+". The group keeps its last good bundle.", 4000)
		}
		// observedGeneration tells a reader which spec this condition is
		// about, so a new generation is always reported.
		old := meta.FindStatusCondition(ng.Status.Conditions, ConditionRendered)
		pin := pins[ng.Name]
		oldPin := meta.FindStatusCondition(ng.Status.Conditions, ConditionPinned)
		if old != nil && old.Status == status && old.Reason == reason && old.Message == msg && old.ObservedGeneration == ng.Generation &&
			pinReported(oldPin, pin, ng.Generation) {
			continue
		}
		conditions := []*metav1ac.ConditionApplyConfiguration{
			metav1ac.Condition().WithType(ConditionRendered).WithStatus(status).WithReason(reason).
				WithMessage(msg).WithLastTransitionTime(transitionTime(old, status)).WithObservedGeneration(ng.Generation),
		}
		if pin != nil {
			conditions = append(conditions, metav1ac.Condition().WithType(ConditionPinned).WithStatus(pin.status).WithReason(pin.reason).
				WithMessage(truncate(pin.message, 4000)).WithLastTransitionTime(transitionTime(oldPin, pin.status)).WithObservedGeneration(ng.Generation))
		}
		ac := applyv1.NodeGroup(ng.Name).WithStatus(applyv1.NodeGroupStatus().WithConditions(conditions...))
		if _, err := c.cfg.NodeMgr.DeckhouseV1().NodeGroups().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: deckhousev1.BashibleAPIServerName, Force: true}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("report status of NodeGroup %s: %w", ng.Name, err))
		}
	}
	return errs
}

// pinReported reports whether a group's Pinned condition old already says
// what pin does (both absent when the group is not pinned).
func pinReported(old *metav1.Condition, pin *pinOutcome, generation int64) bool {
	if pin == nil || old == nil {
		return pin == nil && old == nil
	}
	return old.Status == pin.status && old.Reason == pin.reason && old.Message == truncate(pin.message, 4000) && old.ObservedGeneration == generation
}

// transitionTime keeps a condition's transition time while its status
// stays, and is now when it changes.
func transitionTime(old *metav1.Condition, status metav1.ConditionStatus) metav1.Time {
	if old != nil && old.Status == status {
		return old.LastTransitionTime
	}
	return metav1.Now()
}

// tooLargeOf are the errors of those groups whose bundle is too large.
func tooLargeOf(groups []string, tooLarge map[string]*BundleTooLargeError) []*BundleTooLargeError {
	var out []*BundleTooLargeError
	for _, g := range groups {
		if e := tooLarge[g]; e != nil {
			out = append(out, e)
		}
	}
	return out
}

// truncate shortens s to at most n bytes, ending in "...", to fit a
// condition message or an event note.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
