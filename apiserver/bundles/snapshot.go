package bundles

import "errors"

// Snapshot is the cluster state every group renders from now, as this
// replica's informers hold it: what a preview of a proposed change starts
// from. The objects are the informers' and must not be modified. It fails
// until the inputs are loaded.
func (c *Controller) Snapshot() (Inputs, error) {
	if !c.inputsSynced.Load() {
		return Inputs{}, errors.New("the render inputs (node groups, configurations, cluster settings) are not loaded yet")
	}
	return c.inputs()
}

// Rendered is the group's latest render on this replica, nil when it has
// none: what a preview composes a proposal's render from
// (Renderer.Compose, which checks that it was rendered from the inputs
// the preview starts from). It must not be modified.
func (c *Controller) Rendered(group string) *Result {
	c.resultsMu.Lock()
	defer c.resultsMu.Unlock()
	return c.results[group]
}
