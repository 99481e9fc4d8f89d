package conversion

// Instance: hub v1alpha1 (storage), spoke v1alpha2.
//
// Deckhouse 1.77 made v1alpha2 its storage version; node-manager keeps
// v1alpha1, which its controllers and every node's bashible write, and
// converts (objects Deckhouse stored at v1alpha2 are read, and migrated,
// through Up). The mapping, field by field:
//
//	v1alpha1 (hub)                  v1alpha2
//	status.nodeRef                  spec.nodeRef
//	status.machineRef               spec.machineRef
//	status.classReference           spec.classReference
//	status.currentStatus.phase      status.phase
//	status.bashibleStatus           status.bashibleStatus
//	status.message                  status.message
//	status.conditions               status.conditions (severity: v1alpha2 only)
//	status.lastRun, lastFailure     the same (node-manager's, at both versions)
//	-                               status.machineStatus
//	status.currentStatus.lastUpdateTime, status.lastOperation,
//	status.bootstrapStatus          -
//
// Losses going down (v1alpha1 to v1alpha2), kept in the conversion-data
// annotation and restored going up: status.currentStatus.lastUpdateTime
// (restored only while the phase is the one it dates), status.lastOperation
// and status.bootstrapStatus.
//
// Losses going up (v1alpha2 to v1alpha1), for good:
//   - status.machineStatus (Deckhouse's summary of the Machine; node-manager
//     says what it has to about the machine in lastOperation);
//   - status.phase Unknown (v1alpha1 has no such phase: no phase is unknown);
//   - each condition's severity;
//   - an empty spec or status ({}), which down-conversion leaves out.

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

var instance = Kind{
	GroupKind: schema.GroupKind{Group: deckhousev1alpha1.GroupName, Kind: "Instance"},
	Hub:       deckhousev1alpha1.SchemeGroupVersion.Version,
	Spokes: map[string]Spoke{
		deckhousev1alpha2.SchemeGroupVersion.Version: {
			Up:      instanceUp,
			Down:    instanceDown,
			Restore: instanceRestore,
		},
	},
}

// instanceRefs are the fields of v1alpha1's status that are v1alpha2's spec.
var instanceRefs = []string{"nodeRef", "machineRef", "classReference"}

// instanceHubOnly are the fields of v1alpha1's status v1alpha2 has no place for
// (besides currentStatus.lastUpdateTime).
var instanceHubOnly = []string{"lastOperation", "bootstrapStatus"}

// instanceObject is obj[key] as an object: nil when absent, an error when
// it is something else.
func instanceObject(obj map[string]any, key string) (map[string]any, error) {
	raw, ok := obj[key]
	if !ok || raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", key)
	}
	return m, nil
}

func instanceDown(obj map[string]any) error {
	status, err := instanceObject(obj, "status")
	if err != nil || status == nil {
		return err
	}
	spec := map[string]any{}
	for _, f := range instanceRefs {
		if v, ok := status[f]; ok {
			spec[f] = v
			delete(status, f)
		}
	}
	current, err := instanceObject(status, "currentStatus")
	if err != nil {
		return fmt.Errorf("status.%w", err)
	}
	delete(status, "currentStatus")
	if phase, ok := current["phase"]; ok {
		status["phase"] = phase
	}
	for _, f := range instanceHubOnly {
		delete(status, f)
	}
	if len(spec) > 0 {
		obj["spec"] = spec
	}
	if len(status) == 0 {
		delete(obj, "status")
	}
	return nil
}

func instanceUp(obj map[string]any) error {
	spec, err := instanceObject(obj, "spec")
	if err != nil {
		return err
	}
	delete(obj, "spec")
	status, err := instanceObject(obj, "status")
	if err != nil {
		return err
	}
	if status == nil {
		status = map[string]any{}
	}
	for _, f := range instanceRefs {
		if v, ok := spec[f]; ok {
			status[f] = v
		}
	}
	phase, ok := status["phase"]
	delete(status, "phase")
	if ok && phase != "" && phase != string(deckhousev1alpha2.InstancePhaseUnknown) {
		status["currentStatus"] = map[string]any{"phase": phase}
	}
	delete(status, "machineStatus")
	if raw, ok := status["conditions"]; ok {
		conditions, ok := raw.([]any)
		if !ok {
			return fmt.Errorf("status.conditions is not a list")
		}
		for i, c := range conditions {
			condition, ok := c.(map[string]any)
			if !ok {
				return fmt.Errorf("status.conditions[%d] is not an object", i)
			}
			delete(condition, "severity")
		}
	}
	if len(status) > 0 {
		obj["status"] = status
	} else {
		delete(obj, "status")
	}
	return nil
}

// instanceRestore puts back into hub what v1alpha2 has no place for:
// lastOperation and bootstrapStatus as they were, and the phase's
// lastUpdateTime while the phase is still the one it dates.
func instanceRestore(hub, saved map[string]any) error {
	savedStatus, err := instanceObject(saved, "status")
	if err != nil || savedStatus == nil {
		return err
	}
	status, err := instanceObject(hub, "status")
	if err != nil {
		return err
	}
	if status == nil {
		status = map[string]any{}
	}
	for _, f := range instanceHubOnly {
		if v, ok := savedStatus[f]; ok {
			status[f] = v
		}
	}
	savedCurrent, err := instanceObject(savedStatus, "currentStatus")
	if err != nil {
		return fmt.Errorf("status.%w", err)
	}
	current, err := instanceObject(status, "currentStatus")
	if err != nil {
		return fmt.Errorf("status.%w", err)
	}
	if t, ok := savedCurrent["lastUpdateTime"]; ok && savedCurrent["phase"] == current["phase"] {
		if current == nil {
			current = map[string]any{}
		}
		current["lastUpdateTime"] = t
		status["currentStatus"] = current
	}
	if len(status) > 0 {
		hub["status"] = status
	}
	return nil
}
