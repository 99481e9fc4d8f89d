package clusterapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// The decisions for CloudEphemeral groups, pure functions of the group, the
// installation's cloud settings (Cloud) and the instance class. Per zone a
// group gets, named as Deckhouse names them:
//
//   - a MachineDeployment <group>-<hash of the cluster's UUID and the zone>,
//     whose Machines belong to the cloud provider's Cluster, are placed in
//     the zone (failureDomain), take their bootstrap data from the group's
//     bootstrap-data-for-<group> Secret (written by the bootstrap-token
//     controller, rotated with the group's token) and clone their
//     infrastructure from
//   - a copy of the instance class, <group>-<hash of the cluster's UUID, the
//     zone and the class's content>: the class is an InfrastructureMachineTemplate
//     of the installed provider (cloudInstances.classReference names its
//     kind and name in node-manager's namespace; Cloud.TemplateAPIVersion
//     its API), copied under a name that changes with its content, so that
//     an edit of the class, or a change of the reference, moves the
//     MachineDeployment to a new template and Cluster API rolls the zone's
//     machines, maxSurgePerZone up and maxUnavailablePerZone down.
//
// The MachineDeployment carries the standard cluster-autoscaler's Cluster API
// contract: its min and max size annotations are minPerZone and
// maxPerZone (the autoscaler scales it within them through the scale
// subresource); node-manager keeps its replicas within them, at exactly
// minPerZone when the two are equal.

// Cloud is what an installation says of its cloud provider.
type Cloud struct {
	// Cluster is the Cluster API Cluster the provider's installation made
	// in node-manager's namespace; CloudEphemeral machines belong to it.
	Cluster string
	// TemplateAPIVersion is the API version of the provider's
	// InfrastructureMachineTemplates (a class's kind is its own).
	TemplateAPIVersion string
	// Zones are the provider's zones, for groups that name none.
	Zones []string
	// UUID makes the names of the group's objects, and so of its machines,
	// unique to this cluster among the clusters of one cloud account.
	UUID string
}

// CloudWanted reports whether a group gets machines through Cluster API: a
// CloudEphemeral group with cloudInstances, not being deleted.
func CloudWanted(ng *deckhousev1.NodeGroup) bool {
	return ng != nil && ng.DeletionTimestamp == nil && ng.Spec.NodeType == deckhousev1.NodeTypeCloudEphemeral && ng.Spec.CloudInstances != nil
}

// Zones are the zones a group's machines go to: its own, or the provider's.
func (c Cloud) ZonesOf(ng *deckhousev1.NodeGroup) []string {
	zones := ng.Spec.CloudInstances.Zones
	if len(zones) == 0 {
		zones = c.Zones
	}
	out := slices.Clone(zones)
	slices.Sort(out)
	return slices.Compact(out)
}

// shortHash is the first 8 hex digits of the SHA-256 of s (as Deckhouse's
// sha256sum | trunc 8).
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

// MachineDeploymentName is the group's MachineDeployment in zone.
func (c Cloud) MachineDeploymentName(group, zone string) string {
	return group + "-" + shortHash(c.UUID+zone)
}

// TemplateName is the group's copy of its class in zone, for a class of
// the given checksum.
func (c Cloud) TemplateName(group, zone, classChecksum string) string {
	return group + "-" + shortHash(c.UUID+zone+classChecksum)
}

// ClassChecksum is the SHA-256 of what a class's copies carry: its kind
// and spec (encoding/json writes map keys sorted, so equal specs hash
// alike).
func ClassChecksum(class *unstructured.Unstructured) (string, error) {
	spec, _, err := unstructured.NestedFieldNoCopy(class.Object, "spec")
	if err != nil {
		return "", fmt.Errorf("reading the spec of %s %s: %w", class.GetKind(), class.GetName(), err)
	}
	b, err := json.Marshal(map[string]any{"kind": class.GetKind(), "spec": spec})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ClassTemplate is the group's copy of class in zone: its spec under
// TemplateName, labelled as the group's.
func (c Cloud) ClassTemplate(ng *deckhousev1.NodeGroup, class *unstructured.Unstructured, zone, checksum, namespace string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(class.GetAPIVersion())
	out.SetKind(class.GetKind())
	out.SetNamespace(namespace)
	out.SetName(c.TemplateName(ng.Name, zone, checksum))
	out.SetLabels(groupLabels(ng.Name))
	out.SetAnnotations(map[string]string{deckhousev1.CloudZoneAnnotation: zone, deckhousev1.InstanceClassChecksumAnnotation: checksum})
	if spec, ok := class.Object["spec"]; ok {
		out.Object["spec"] = runtime.DeepCopyJSONValue(spec)
	}
	return out
}

// Replicas is what a zone's MachineDeployment should hold: minPerZone when
// the two sizes are equal or it is new (current nil); otherwise current,
// brought within [minPerZone, maxPerZone] (the autoscaler moves it inside).
func Replicas(ci *deckhousev1.CloudInstancesSpec, current *int32) int32 {
	lo, hi := ci.MinPerZone, max(ci.MaxPerZone, ci.MinPerZone)
	if current == nil || lo == hi {
		return lo
	}
	return min(max(*current, lo), hi)
}

// CloudMachineDeployment is the group's MachineDeployment in zone with
// replicas, cloning its infrastructure from template, annotated also with
// capacity (CapacityAnnotations).
func (c Cloud) CloudMachineDeployment(ng *deckhousev1.NodeGroup, zone, template, checksum, namespace string, replicas int32, capacity map[string]string) *clusterv1.MachineDeployment {
	ci := ng.Spec.CloudInstances
	secret := deckhousev1.BootstrapDataSecretPrefix + ng.Name
	surge := intstr.FromInt32(derefOr(ci.MaxSurgePerZone, 1))
	unavailable := intstr.FromInt32(derefOr(ci.MaxUnavailablePerZone, 0))
	drain := derefOr(ng.Spec.NodeDrainTimeoutSecond, 600)
	gv, _ := schema.ParseGroupVersion(c.TemplateAPIVersion) // checked by Options.Validate
	name := c.MachineDeploymentName(ng.Name, zone)
	annotations := maps.Clone(capacity)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[deckhousev1.CloudZoneAnnotation] = zone
	annotations[deckhousev1.InstanceClassChecksumAnnotation] = checksum
	annotations[clusterv1.AutoscalerMinSizeAnnotation] = strconv.Itoa(int(ci.MinPerZone))
	annotations[clusterv1.AutoscalerMaxSizeAnnotation] = strconv.Itoa(int(max(ci.MaxPerZone, ci.MinPerZone)))
	return &clusterv1.MachineDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: groupLabels(ng.Name), Annotations: annotations},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: c.Cluster,
			Replicas:    &replicas,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{deckhousev1.NodeGroupLabel: ng.Name, clusterv1.MachineDeploymentNameLabel: name}},
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type:          clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &surge, MaxUnavailable: &unavailable},
			}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{deckhousev1.NodeGroupLabel: ng.Name, clusterv1.MachineDeploymentNameLabel: name}},
				Spec: clusterv1.MachineSpec{
					ClusterName:       c.Cluster,
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: &secret},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: gv.Group, Kind: ng.Spec.CloudInstances.ClassReference.Kind, Name: template},
					FailureDomain:     zone,
					Deletion:          clusterv1.MachineDeletionSpec{NodeDrainTimeoutSeconds: &drain},
				},
			},
		},
	}
}

// CloudMachineDeploymentCurrent reports whether have holds every field
// CloudMachineDeployment sets in want.
func CloudMachineDeploymentCurrent(have, want *clusterv1.MachineDeployment) bool {
	hs, ws := have.Spec, want.Spec
	return MachineDeploymentCurrent(have, want) && containsLabels(have.Annotations, want.Annotations) &&
		capacityCurrent(have.Annotations, want.Annotations) &&
		hs.Template.Spec.FailureDomain == ws.Template.Spec.FailureDomain &&
		apiequality.Semantic.DeepEqual(hs.Template.Spec.Deletion.NodeDrainTimeoutSeconds, ws.Template.Spec.Deletion.NodeDrainTimeoutSeconds) &&
		hs.Rollout.Strategy.Type == ws.Rollout.Strategy.Type &&
		apiequality.Semantic.DeepEqual(hs.Rollout.Strategy.RollingUpdate, ws.Rollout.Strategy.RollingUpdate)
}

func derefOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// UnhealthyLimit is how many of a group's machines may be unhealthy at
// once for Cluster API still to replace them: 40% of them, rounded down,
// but at least one, so that a group of one or two machines heals too. A
// wider outage is the network's, not the machines'; replacing them would
// not help.
func UnhealthyLimit(machines int32) int32 {
	return max(1, machines*40/100)
}

// CloudMachineHealthCheck is the group's MachineHealthCheck, for a group
// of the given number of machines: Cluster API replaces a machine of the
// group whose node has been lost (Ready Unknown: its kubelet stopped
// reporting) for unhealthyAfter, or that has not become a node within
// startupTimeout, while no more than UnhealthyLimit of them are unhealthy.
func (c Cloud) CloudMachineHealthCheck(ng *deckhousev1.NodeGroup, namespace string, machines, unhealthyAfter, startupTimeout int32) *clusterv1.MachineHealthCheck {
	limit := intstr.FromInt32(UnhealthyLimit(machines))
	return &clusterv1.MachineHealthCheck{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineHealthCheck"},
		ObjectMeta: metav1.ObjectMeta{Name: ng.Name, Namespace: namespace, Labels: groupLabels(ng.Name)},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: c.Cluster,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{deckhousev1.NodeGroupLabel: ng.Name}},
			Checks: clusterv1.MachineHealthCheckChecks{
				NodeStartupTimeoutSeconds: &startupTimeout,
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: &unhealthyAfter}},
			},
			Remediation: clusterv1.MachineHealthCheckRemediation{TriggerIf: clusterv1.MachineHealthCheckRemediationTriggerIf{UnhealthyLessThanOrEqualTo: &limit}},
		},
	}
}
