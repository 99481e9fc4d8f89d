package bundles

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/templates"
)

// renderWorker renders groups from the render queue until it shuts down.
// A group changed again while it renders stays dirty (unsettled) and is
// rendered once more; a failed render is retried with backoff.
func (c *Controller) renderWorker(ctx context.Context) {
	for {
		group, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.renderOne(ctx, group)
		c.queue.Done(group)
		c.cfg.Settle.Done()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Rendering a node group failed; will retry", "group", group)
			c.queue.AddRateLimited(group)
			continue
		}
		c.queue.Forget(group)
	}
}

// renderOne renders group as one turn of a render worker: in flight (and
// no longer dirty) while it renders, dirty again if it failed.
func (c *Controller) renderOne(ctx context.Context, group string) error {
	// Every line of the group's render says which group it is.
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("group", group))
	c.resultsMu.Lock()
	c.dirty[group], c.inflight[group] = false, true
	c.resultsMu.Unlock()
	publish, err := c.renderGroup(ctx, group)
	c.resultsMu.Lock()
	delete(c.inflight, group)
	if err != nil {
		c.dirty[group] = true
	} else if !c.dirty[group] {
		delete(c.dirty, group)
	}
	c.resultsMu.Unlock()
	// Only now that the render is no longer in flight: the publish worker
	// may take the item at once, and a publish that found the group still
	// in flight would leave its NodeGroupConfigurations' status untold
	// (allSettled), with nothing to publish again until the next change.
	if publish {
		c.publishQ.Add(publishKey)
	}
	return err
}

// renderGroup renders one group and records its result; publish says
// whether a publish is due (the render worker enqueues it).
func (c *Controller) renderGroup(ctx context.Context, group string) (publish bool, err error) {
	ng, err := c.nodeGroups.Get(group)
	if apierrors.IsNotFound(err) {
		c.resultsMu.Lock()
		_, had := c.results[group]
		delete(c.results, group)
		delete(c.renderedFrom, group)
		c.resultsMu.Unlock()
		c.cfg.Renderer.Forget(group)
		c.cfg.Metrics.ForgetGroup(group)
		return had, nil
	}
	if err != nil {
		return false, err
	}
	in, err := c.inputs()
	if err != nil {
		return false, err
	}
	r := c.cfg.Renderer.Render(ng, in)
	if r.Cached {
		c.cfg.Metrics.RenderCached.Inc()
	} else {
		c.cfg.Metrics.RenderDuration.WithLabelValues(r.Group).Observe(r.Duration.Seconds())
		if r.Published == nil {
			c.cfg.Metrics.RenderErrors.WithLabelValues(r.Group).Inc()
			klog.FromContext(ctx).Info("Node group failed to render; it keeps its last good bundle", "failures", failureMessages(r.Failures))
		}
	}
	from := make(map[string]configVersion, len(in.Configs))
	for _, ngc := range in.Configs {
		from[ngc.Name] = versionOf(ngc)
	}
	c.resultsMu.Lock()
	c.results[group] = r
	c.renderedFrom[group] = from
	c.resultsMu.Unlock()
	// Even an unchanged result may settle a NodeGroupConfiguration whose
	// status waited for this group.
	return true, nil
}

// inputs reads the current cluster state from the informers' caches.
func (c *Controller) inputs() (Inputs, error) {
	ngs, err := c.nodeGroups.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	configs, err := c.configs.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	users, err := c.nodeUsers.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{NodeGroups: ngs, Configs: configs, NodeUsers: users}
	if s, err := c.secretsKS.Secrets(metav1.NamespaceSystem).Get(deckhousev1.ClusterConfigurationSecret); err == nil {
		in.ClusterConfiguration = s.Data[deckhousev1.ClusterConfigurationKey]
	} else if !apierrors.IsNotFound(err) {
		return Inputs{}, err
	}
	if s, err := c.staticConfigKS.Secrets(metav1.NamespaceSystem).Get(deckhousev1.StaticClusterConfigurationSecret); err == nil {
		in.StaticClusterConfiguration = s.Data[deckhousev1.StaticClusterConfigurationKey]
	} else if !apierrors.IsNotFound(err) {
		return Inputs{}, err
	}
	if cm, err := c.configMapsKS.ConfigMaps(metav1.NamespaceSystem).Get(deckhousev1.RootCAConfigMap); err == nil {
		in.CA = cm.Data["ca.crt"]
	} else if !apierrors.IsNotFound(err) {
		return Inputs{}, err
	}
	endpointSlices, err := c.endpointSlices.List(labels.Everything())
	if err != nil {
		return Inputs{}, err
	}
	in.Endpoints = templates.APIServerEndpoints(endpointSlices)
	return in, nil
}

// configVersion identifies one spec of one NodeGroupConfiguration object:
// a configuration deleted and created again starts its generations anew.
type configVersion struct {
	uid        types.UID
	generation int64
}

func versionOf(ngc *deckhousev1alpha1.NodeGroupConfiguration) configVersion {
	return configVersion{uid: ngc.UID, generation: ngc.Generation}
}

// failureMessages are the messages of a render's failures, for logs and
// conditions.
func failureMessages(fs []templates.Failure) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Error()
	}
	return out
}
