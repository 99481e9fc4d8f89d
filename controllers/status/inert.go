package status

import (
	"fmt"
	"strings"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/clusterapi"
)

// ConditionInertFields is True while the group sets fields that nothing in
// this deployment acts on; its message names each field and why.
const ConditionInertFields = "InertFields"

// InertField is a NodeGroup field that is set but has no effect here.
type InertField struct {
	// Path is the field's path from the object's root, such as spec.chaos.mode.
	Path string
	// Why says why nothing acts on it.
	Why string
}

// The reasons, shared by fields with the same cause. The admission policy
// manifests/policies/nodegroup-inert-fields.yaml warns with the same
// fields (TestInertFieldsAgreeWithTheAdmissionPolicy keeps the two lists
// in step).
const (
	noMachineController = "node-manager creates no cloud machines (a cloud provider's machine controller does, and none is part of this deployment)"
	noAutoscaler        = "it is read only by cluster-autoscaler, which is not part of this deployment"
	noDocker            = "Docker is deprecated and node-manager runs no Docker: the group's nodes get the cluster's defaultCRI, as if cri.type were unset"
	noDockerSettings    = "Docker is deprecated and node-manager runs no Docker; these settings are ignored"
	noQuickShutdown     = "it is deprecated (in Deckhouse it shortened the drain of cloud machines to 5 minutes); node-manager creates no cloud machines, " +
		"and a drain's deadline is nodeDrainTimeoutSecond (5 minutes when unset)"
	noNotHeldResources = "it is deprecated and unused, as in Deckhouse (overprovisioningRate replaced it)"
	noGPUStack         = "node-manager deploys no GPU components (Deckhouse's NVIDIA device plugin, feature discovery, DCGM exporter, MIG manager) " +
		"and leaves containerd's default runtime alone: install the driver and runtime with a NodeGroupConfiguration"
)

// Components are the parts of node-manager a deployment runs that some
// fields depend on.
type Components struct {
	// ClusterAPI: node-manager-controller runs with --cluster-api, beside
	// Cluster API's core and Cluster API Provider Static (as the release
	// installs them), so staticInstances are bootstrapped.
	ClusterAPI bool
	// CloudMachines: node-manager-controller also runs with --cloud-cluster,
	// so CloudEphemeral groups get their machines through Cluster API
	// (classReference, zones and the per-zone sizes and rollout limits are
	// acted on).
	CloudMachines bool
	// CloudSizes reads the CloudEphemeral groups' MachineDeployments for
	// their desired size (nil unless CloudMachines).
	CloudSizes *clusterapi.CloudSizes
}

// InertFields lists, in a fixed order, the fields of a NodeGroup's spec
// that are set and that no component of this deployment acts on. Every
// other field is acted on: rendered into the group's bundle (nodeType,
// kubernetesVersion, cri but for Deckhouse's deprecated Docker, kubelet,
// nodeTemplate, disruptions.approvalMode),
// kept on its nodes (nodeTemplate), or used by update approval, the drain,
// the fencing controller and agents (fencing), this controller
// (disruptions, update, nodeDrainTimeoutSecond, cloudInstances.minPerZone,
// maxPerZone and zones) or, with c.ClusterAPI, Cluster API and its static
// provider (staticInstances), and with c.CloudMachines Cluster API and the
// cloud's provider (cloudInstances.classReference, maxSurgePerZone and
// maxUnavailablePerZone), the autoscaler's priority expander
// (cloudInstances.priority) and the standby holders (standby, standbyHolder). A field left at the value the API defaults
// it to is not listed: the user did not ask for it.
func InertFields(spec *deckhousev1.NodeGroupSpec, c Components) []InertField {
	var out []InertField
	add := func(path, why string) { out = append(out, InertField{Path: "spec." + path, Why: why}) }

	capiMachines := spec.StaticInstances != nil && c.ClusterAPI ||
		spec.NodeType == deckhousev1.NodeTypeCloudEphemeral && spec.CloudInstances != nil && c.CloudMachines
	if ch := spec.Chaos; ch != nil && ch.Mode == deckhousev1.ChaosModeDrainAndDelete && !capiMachines {
		add("chaos.mode", "chaos deletes only machines Cluster API makes for the group (staticInstances with --cluster-api, "+
			"or a CloudEphemeral group with --cloud-cluster); this group has none")
	}
	if o := spec.OperatingSystem; o != nil && o.ManageKernel != nil {
		add("operatingSystem.manageKernel", "it is deprecated and has no effect, as in Deckhouse")
	}
	if cri := spec.CRI; cri != nil {
		if cri.Type == deckhousev1.CRIDocker {
			add("cri.type", noDocker)
		}
		if cri.Docker != nil {
			add("cri.docker", noDockerSettings)
		}
	}
	if spec.StaticInstances != nil && !c.ClusterAPI {
		add("staticInstances", "node-manager-controller runs without --cluster-api, so Cluster API Provider Static is given no machine and "+
			"no StaticInstance is bootstrapped; install the release (which runs Cluster API and the provider), or join machines "+
			"with the manual-bootstrap-for-<group> Secret")
	}
	if ci := spec.CloudInstances; ci != nil {
		if !c.CloudMachines {
			add("cloudInstances.classReference", noMachineController+"; templates may read it as .nodeGroup.cloudInstances.classReference")
			if ci.MaxSurgePerZone != nil && *ci.MaxSurgePerZone != 1 {
				add("cloudInstances.maxSurgePerZone", noMachineController)
			}
			if ci.MaxUnavailablePerZone != nil && *ci.MaxUnavailablePerZone != 0 {
				add("cloudInstances.maxUnavailablePerZone", noMachineController)
			}
		}
		if ci.Standby != nil && !c.CloudMachines {
			add("cloudInstances.standby", noMachineController)
		}
		if ci.StandbyHolder != nil && !c.CloudMachines {
			add("cloudInstances.standbyHolder", noMachineController)
		}
		if ci.StandbyHolder != nil && ci.StandbyHolder.NotHeldResources != nil {
			add("cloudInstances.standbyHolder.notHeldResources", noNotHeldResources)
		}
		if ci.Priority != nil && !c.CloudMachines {
			add("cloudInstances.priority", noAutoscaler)
		}
		if ci.QuickShutdown != nil {
			add("cloudInstances.quickShutdown", noQuickShutdown)
		}
	}
	if spec.GPU != nil {
		add("gpu", noGPUStack)
	}
	return out
}

// inertCondition is the InertFields condition for the fields (the caller
// keeps the transition time).
func inertCondition(fields []InertField) (ok bool, reason, message string) {
	if len(fields) == 0 {
		return false, "AllFieldsActedOn", "every field set is acted on"
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%s (%s)", f.Path, f.Why)
	}
	return true, "FieldsHaveNoEffect", "these fields have no effect in this deployment: " + strings.Join(parts, "; ")
}
