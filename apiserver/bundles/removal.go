package bundles

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// deleteRemoved deletes the published bundles of node groups that are gone.
//
// The NodeGroup informer is not proof that a group is gone: it can show no
// groups for a moment (a relist, the CRD reinstalled, a restore), and
// deleting on its word would take every group's bundle away at once, and
// with it every node's configuration. So a bundle the renders no longer
// cover is deleted only once a live GET of its NodeGroup answers 404; while
// the API still has the group, the bundle stays and the next render, when
// the informer catches up, takes over again.
func (c *Controller) deleteRemoved(ctx context.Context, results map[string]*Result) []error {
	published, err := c.published.Secrets(c.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, s := range published {
		group, ok := strings.CutPrefix(s.Name, deckhousev1.PublishedBundleSecretPrefix)
		if !ok || results[group] != nil {
			continue
		}
		_, err := c.cfg.NodeMgr.DeckhouseV1().NodeGroups().Get(ctx, group, metav1.GetOptions{})
		switch {
		case err == nil:
			klog.InfoS("Keeping the bundle of a node group the informer does not show: the API still has it",
				"group", group, "secret", klog.KObj(s))
			continue
		case !groupIsGone(err, group):
			errs = append(errs, fmt.Errorf("confirm that node group %s is gone before deleting its bundle: %w", group, err))
			continue
		}
		// The revisions go first: were the bundle deleted first and this
		// fail, nothing would bring the leader back to them.
		if err := c.revisions.deleteAll(ctx, group); err != nil {
			errs = append(errs, err)
			continue
		}
		err = c.cfg.Kube.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete bundle of removed group %s: %w", group, err))
			continue
		}
		c.lastGood.forget(group)
		delete(c.encoded, group)
		c.own.forget(s.Name)
		klog.InfoS("Deleted the bundle of a removed node group", "group", group, "secret", klog.KObj(s))
	}
	return errs
}

// groupIsGone reports whether err is the API's 404 for NodeGroup group
// itself. A 404 that names no object (nodegroups not served at all, say
// while the CRD is reinstalled) proves nothing about the group.
func groupIsGone(err error, group string) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	return status.Status().Details.Name == group
}
