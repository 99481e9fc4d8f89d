package staticmachines

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// instanceSelector is a group's staticInstances.labelSelector with
// Deckhouse's rule added: never an instance labelled allow-bootstrap=false.
// A nil selector selects every instance (that rule still applies).
func instanceSelector(sel *metav1.LabelSelector) (labels.Selector, error) {
	s := labels.Everything()
	if sel != nil {
		var err error
		if s, err = metav1.LabelSelectorAsSelector(sel); err != nil {
			return nil, fmt.Errorf("the labelSelector is invalid: %w", err)
		}
	}
	allow, err := labels.NewRequirement(deckhousev1.AllowBootstrapLabel, selection.NotIn, []string{"false"})
	if err != nil {
		return nil, err
	}
	return s.Add(*allow), nil
}

// phaseOf is an instance's phase, "" before CAPS first wrote one.
func phaseOf(inst *deckhousev1alpha2.StaticInstance) deckhousev1alpha2.StaticInstancePhase {
	if inst.Status.CurrentStatus == nil {
		return ""
	}
	return inst.Status.CurrentStatus.Phase
}

// phaseSince is when the instance's phase last changed (its creation when
// it has none).
func phaseSince(inst *deckhousev1alpha2.StaticInstance) time.Time {
	if cs := inst.Status.CurrentStatus; cs != nil && cs.LastUpdateTime != nil {
		return cs.LastUpdateTime.Time
	}
	return inst.CreationTimestamp.Time
}

// errorRetry is how long an instance stays in Error before it may be
// picked again (its credentials may have been fixed meanwhile).
const errorRetry = 5 * time.Minute

// free reports whether inst may be picked at now: Pending (or not yet
// seen), or in Error for errorRetry; bound to no machine; not being deleted.
func free(inst *deckhousev1alpha2.StaticInstance, now time.Time) bool {
	if inst.Status.MachineRef != nil || inst.DeletionTimestamp != nil {
		return false
	}
	switch phaseOf(inst) {
	case "", deckhousev1alpha2.StaticInstancePending:
		return true
	case deckhousev1alpha2.StaticInstanceError:
		return now.Sub(phaseSince(inst)) >= errorRetry
	}
	return false
}

// pickInstance chooses the instance a machine gets among those sel
// matches: a free one, the one Pending the longest, then by name. Fair (a
// host just released goes to the back) and deterministic (Deckhouse picks
// at random, which makes "the replacement takes the third host" a matter
// of luck). nil when none is free.
func pickInstance(instances []*deckhousev1alpha2.StaticInstance, sel labels.Selector, now time.Time) *deckhousev1alpha2.StaticInstance {
	var candidates []*deckhousev1alpha2.StaticInstance
	for _, inst := range instances {
		if free(inst, now) && sel.Matches(labels.Set(inst.Labels)) {
			candidates = append(candidates, inst)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := phaseSince(candidates[i]), phaseSince(candidates[j])
		if !a.Equal(b) {
			return a.Before(b)
		}
		return candidates[i].Name < candidates[j].Name
	})
	return candidates[0]
}
