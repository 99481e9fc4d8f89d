package stephistory

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// sync counts the runs of one node's Instance it has not counted yet.
func (c *Controller) sync(_ context.Context, name string) error {
	inst, err := c.instances.Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.seen, name)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	group := inst.Labels[deckhousev1.NodeGroupLabel]
	if group == "" {
		return nil
	}
	var steps map[string]string
	if b, err := c.bundles.Get(group); err == nil {
		steps = b.Data
	}
	c.mu.Lock()
	runs, seen := Observe(c.seen[name], inst.Status, c.since)
	c.seen[name] = seen
	c.mu.Unlock()
	for _, run := range runs {
		c.metrics.record(Sample(group, run, func(step string) bool {
			_, ok := steps[step]
			return ok
		}))
	}
	return nil
}
