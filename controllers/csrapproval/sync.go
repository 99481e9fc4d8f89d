package csrapproval

import (
	"context"
	"encoding/json"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/instances"
	"github.com/node-manager/node-manager/controllers/nodes"
)

// sync decides one CSR: it creates the node's Instance before an
// approval, then records the verdict.
func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cl, lookupErr := c.cluster(ctx)
	d := Decide(csr, cl)
	if *lookupErr != nil {
		return *lookupErr // never decided on what could not be read
	}
	switch {
	case d.Verdict == Approve && d.CreateInstance:
		if d, err = c.createInstance(ctx, d); err != nil {
			return err
		}
	case d.Verdict == Approve && d.Claim != nil:
		if d, err = c.recordClaim(ctx, d); err != nil {
			return err
		}
	}
	switch d.Verdict {
	case Approve:
		return c.conclude(ctx, csr, d, certificatesv1.CertificateApproved)
	case Deny:
		return c.conclude(ctx, csr, d, certificatesv1.CertificateDenied)
	}
	return nil
}

// createInstance pins the node to the decision's group, with the approved
// request, before the approval. Create is the arbiter between two requests
// racing for one name: if the Instance exists by now, its group and the
// request it records decide.
func (c *Controller) createInstance(ctx context.Context, d Decision) (Decision, error) {
	g, err := c.groups.Get(d.Group)
	if err != nil {
		return d, fmt.Errorf("reading node group %s for the Instance of node %s: %w", d.Group, d.Node, err)
	}
	client := c.d.NodeManager.DeckhouseV1alpha1().Instances()
	inst := instances.ForNode(d.Node, g)
	inst.Annotations = map[string]string{deckhousev1.ApprovedRequestAnnotation: d.Claim.Encode()}
	_, err = client.Create(ctx, inst, metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName})
	if err == nil {
		klog.FromContext(ctx).Info("Created the Instance of a joining node", "instance", d.Node, "group", d.Group, "csr", d.Claim.CSR, "key", d.Claim.Key)
		return d, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return d, fmt.Errorf("creating Instance %s of group %s before approving its kubelet certificate: %w", d.Node, d.Group, err)
	}
	return c.recordClaim(ctx, d)
}

// recordClaim records the decision's request on the node's existing
// Instance before the approval, read afresh: an Instance of another group,
// or one that records another key, turns the approval into a denial. The
// write is guarded by the resourceVersion read, so of two requests racing
// for one name only one is recorded (the other's sync is retried, and
// denied).
func (c *Controller) recordClaim(ctx context.Context, d Decision) (Decision, error) {
	client := c.d.NodeManager.DeckhouseV1alpha1().Instances()
	inst, err := client.Get(ctx, d.Node, metav1.GetOptions{})
	if err != nil {
		return d, fmt.Errorf("reading Instance %s before approving its kubelet certificate: %w", d.Node, err)
	}
	if pinned := inst.Labels[deckhousev1.NodeGroupLabel]; pinned != d.Group {
		return deny(ReasonNodeOfOtherGroup, d.Node, d.Group,
			"node %s belongs to node group %q (its Instance), so a bootstrap token of node group %s may not obtain its certificate", d.Node, pinned, d.Group), nil
	}
	if first, ok := ParseClaim(inst.Annotations); ok {
		if first.Key != d.Claim.Key {
			return claimed(d.Node, d.Group, d.Claim.Token, first), nil
		}
		return d, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": inst.ResourceVersion,
		"annotations": map[string]string{deckhousev1.ApprovedRequestAnnotation: d.Claim.Encode()}}})
	if _, err := client.Patch(ctx, d.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return d, fmt.Errorf("recording the approved request %s on Instance %s (annotation %s): %w", d.Claim.CSR, d.Node, deckhousev1.ApprovedRequestAnnotation, err)
	}
	klog.FromContext(ctx).Info("Recorded the approved request on the Instance of a joining node", "instance", d.Node, "group", d.Group, "csr", d.Claim.CSR, "key", d.Claim.Key)
	return d, nil
}

func (c *Controller) conclude(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, d Decision, typ certificatesv1.RequestConditionType) error {
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.d.Clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message, LastUpdateTime: now, LastTransitionTime: now,
	})
	if _, err := c.d.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName}); err != nil {
		return fmt.Errorf("recording %s on CSR %s: %w", typ, csr.Name, err)
	}
	klog.FromContext(ctx).Info("Decided a kubelet client CSR", "csr", csr.Name, "decision", string(typ), "reason", d.Reason,
		"node", d.Node, "group", d.Group, "requestor", csr.Spec.Username, "message", d.Message)
	return nil
}

// cluster answers the decision's questions: whether the group exists from
// the informer, and the node's Instance, Node and tombstone from the API.
// A verdict is final, and an informer can lag behind a deletion it has not
// seen yet (the Instance of a fenced node, gone a moment ago): a denial
// read from it would name the wrong reason, and an approval path would
// miss a tombstone. A CSR is decided once, so the reads cost little. The
// error is a read that failed (the sync is retried, never decided on it).
func (c *Controller) cluster(ctx context.Context) (Cluster, *error) {
	var lookupErr error
	failed := func(err error) {
		if lookupErr == nil {
			lookupErr = err
		}
	}
	return Cluster{
		GroupExists: func(g string) bool { _, err := c.groups.Get(g); return err == nil },
		Instance: func(n string) (string, map[string]string, bool) {
			inst, err := c.d.NodeManager.DeckhouseV1alpha1().Instances().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				if !apierrors.IsNotFound(err) {
					failed(fmt.Errorf("reading Instance %s: %w", n, err))
				}
				return "", nil, false
			}
			return inst.Labels[deckhousev1.NodeGroupLabel], inst.Annotations, true
		},
		Tombstone: func(n string) (instances.Tombstone, bool) {
			ts, ok, err := c.tombstones.Lookup(ctx, n)
			if err != nil {
				failed(err)
			}
			return ts, ok
		},
		NodeGroup: func(n string) (string, bool) {
			node, err := c.d.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				if !apierrors.IsNotFound(err) {
					failed(fmt.Errorf("reading Node %s: %w", n, err))
				}
				return "", false
			}
			return nodes.Label(node), true
		},
	}, &lookupErr
}
