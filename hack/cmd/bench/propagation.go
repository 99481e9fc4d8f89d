package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
)

// benchPropagation measures ngc_change_to_served: from the update of a
// NodeGroupConfiguration that selects one group to a watch of that group's
// nodegroupbundle delivering the changed step (the median of five).
func benchPropagation(ctx context.Context, nm versioned.Interface) error {
	const (
		config = "step-02.sh" // nodeGroupConfigurations: selects group-002 alone
		group  = "group-002"
		rounds = 5
	)
	var took []time.Duration
	for round := range rounds {
		marker := fmt.Sprintf("# propagation %d\n", round)
		list, err := nm.BashibleV1alpha1().NodeGroupBundles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		w, err := nm.BashibleV1alpha1().NodeGroupBundles().Watch(ctx, metav1.ListOptions{
			ResourceVersion: list.ResourceVersion,
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", group).String(),
		})
		if err != nil {
			return err
		}
		c, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, config, metav1.GetOptions{})
		if err != nil {
			w.Stop()
			return err
		}
		c.Spec.Content += marker
		start := time.Now()
		if _, err := nm.DeckhouseV1alpha1().NodeGroupConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			w.Stop()
			return err
		}
		d, err := waitForStep(ctx, w, group, marker, start)
		w.Stop()
		if err != nil {
			return err
		}
		took = append(took, d)
	}
	slices.Sort(took)
	figure("ngc_change_to_served", ms(took[rounds/2]), "ms")
	return nil
}

// waitForStep waits on w for group's bundle to hold a step containing
// marker and says how long after start it came.
func waitForStep(ctx context.Context, w watch.Interface, group, marker string, start time.Time) (time.Duration, error) {
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("the watch of %s's bundle ended before the change was served", group)
			}
			b, isBundle := ev.Object.(*bashiblev1alpha1.NodeGroupBundle)
			if !isBundle || b.Name != group {
				continue
			}
			for _, script := range b.Data {
				if strings.Contains(script, marker) {
					return time.Since(start), nil
				}
			}
		case <-timeout:
			return 0, fmt.Errorf("%s's bundle did not hold the changed step within a minute", group)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
