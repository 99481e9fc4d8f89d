package foundation

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// Deckhouse's NodeGroup admission rules that need only the object are CEL
// rules of the CRD: kube-apiserver refuses each with Deckhouse's own
// message (modules/040-node-manager node-controller's NodeGroup webhook),
// and accepts the neighbouring valid object.

func TestNodeTypeIsImmutable(t *testing.T) {
	ctx := framework.Context(t)
	ngs := f.NM.DeckhouseV1().NodeGroups()
	created, err := ngs.Create(ctx, &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "immutable-type"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ngs.Delete(context.Background(), created.Name, metav1.DeleteOptions{}) })
	created.Spec.NodeType = deckhousev1.NodeTypeCloudStatic
	_, err = ngs.Update(ctx, created, metav1.UpdateOptions{})
	wantRefused(t, err, "spec.nodeType", ".spec.nodeType field is immutable")

	// Any other change of the group is still accepted.
	created.Spec.NodeType = deckhousev1.NodeTypeStatic
	created.Spec.NodeDrainTimeoutSecond = ptr.To[int32](120)
	if _, err := ngs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an update that keeps nodeType must be accepted: %v", err)
	}
}

func TestDuplicateTaintsAreRefused(t *testing.T) {
	taints := func(tt ...deckhousev1.Taint) *deckhousev1.NodeGroup {
		return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "taints"},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, NodeTemplate: &deckhousev1.NodeTemplate{Taints: tt}}}
	}
	_, err := f.NM.DeckhouseV1().NodeGroups().Create(framework.Context(t), taints(
		deckhousev1.Taint{Key: "dedicated", Value: "a", Effect: "NoSchedule"},
		deckhousev1.Taint{Key: "dedicated", Value: "b", Effect: "NoSchedule"}), metav1.CreateOptions{})
	wantRefused(t, err, "spec.nodeTemplate.taints", ".spec.nodeTemplate.taints must contain only one taint with the same key and effect")

	// The same key with another effect is two taints, as on a Node.
	wantAccepted(t, taints(
		deckhousev1.Taint{Key: "dedicated", Value: "a", Effect: "NoSchedule"},
		deckhousev1.Taint{Key: "dedicated", Value: "a", Effect: "NoExecute"}))
}

func TestRollingUpdateOnlyForCloudEphemeral(t *testing.T) {
	rolling := &deckhousev1.DisruptionsSpec{ApprovalMode: deckhousev1.ApprovalRollingUpdate}
	for _, nodeType := range []deckhousev1.NodeType{deckhousev1.NodeTypeStatic, deckhousev1.NodeTypeCloudStatic, deckhousev1.NodeTypeCloudPermanent} {
		_, err := f.NM.DeckhouseV1().NodeGroups().Create(framework.Context(t), &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "rolling"},
			Spec: deckhousev1.NodeGroupSpec{NodeType: nodeType, Disruptions: rolling}}, metav1.CreateOptions{})
		wantRefused(t, err, "spec.disruptions.approvalMode",
			`it is forbidden to set .spec.disruptions.approvalMode to "RollingUpdate" when spec.nodeType is not "CloudEphemeral"`)
	}
	wantAccepted(t, &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "rolling"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeCloudEphemeral, Disruptions: rolling,
			CloudInstances: &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "OpenStackInstanceClass", Name: "small"},
				MinPerZone: 1, MaxPerZone: 2}}})
}

func TestTopologyManagerNeedsAResourceReservation(t *testing.T) {
	group := func(r *deckhousev1.ResourceReservationSpec) *deckhousev1.NodeGroup {
		return &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "numa"},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, Kubelet: &deckhousev1.KubeletSpec{
				TopologyManager: &deckhousev1.TopologyManagerSpec{Enabled: true}, ResourceReservation: r}}}
	}
	_, err := f.NM.DeckhouseV1().NodeGroups().Create(framework.Context(t), group(&deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationOff}), metav1.CreateOptions{})
	wantRefused(t, err, "spec.kubelet.resourceReservation",
		".spec.kubelet.resourceReservation must be enabled for .spec.kubelet.topologyManager.enabled to work")

	memory := resource.MustParse("1Gi")
	_, err = f.NM.DeckhouseV1().NodeGroups().Create(framework.Context(t), group(&deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationStatic,
		Static: &deckhousev1.StaticResourceReservation{Memory: &memory}}), metav1.CreateOptions{})
	wantRefused(t, err, "spec.kubelet.resourceReservation.static",
		`for .spec.kubelet.topologyManager.enabled and .spec.kubelet.resourceReservation.mode == "Static", .spec.kubelet.resourceReservation.static.cpu must be specified`)

	cpu := resource.MustParse("500m")
	wantAccepted(t, group(&deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationStatic,
		Static: &deckhousev1.StaticResourceReservation{CPU: &cpu, Memory: &memory}}))
	wantAccepted(t, group(nil)) // no reservation block: Auto
	// Off without the topology manager stays valid.
	wantAccepted(t, &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: "numa"},
		Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic, Kubelet: &deckhousev1.KubeletSpec{
			ResourceReservation: &deckhousev1.ResourceReservationSpec{Mode: deckhousev1.ResourceReservationOff}}}})
}

// wantRefused fails unless err is kube-apiserver's Invalid naming field
// with message.
func wantRefused(t *testing.T, err error, field, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("kube-apiserver accepted a NodeGroup Deckhouse refuses (%s)", message)
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), message) {
		t.Fatalf("want Invalid naming %s with %q, got %v", field, message, err)
	}
}

// wantAccepted creates ng, which must be accepted, and deletes it.
func wantAccepted(t *testing.T, ng *deckhousev1.NodeGroup) {
	t.Helper()
	ngs := f.NM.DeckhouseV1().NodeGroups()
	if _, err := ngs.Create(framework.Context(t), ng, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid NodeGroup (%+v) was refused: %v", ng.Spec, err)
	}
	if err := ngs.Delete(framework.Context(t), ng.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Poll(t, "NodeGroup "+ng.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := ngs.Get(ctx, ng.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
