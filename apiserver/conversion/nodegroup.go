package conversion

import (
	"fmt"
	"reflect"
	"strings"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// NodeGroup is served at v1alpha1, v1alpha2 and v1 (the hub, its storage
// version), as Deckhouse serves it, with Deckhouse's mappings:
//
//   - spec.nodeType: v1alpha1 and v1alpha2 Cloud is v1 CloudEphemeral,
//     Hybrid is CloudStatic, Static is Static; going down CloudStatic and
//     CloudPermanent both read as Hybrid (the conversion-data annotation
//     brings CloudPermanent back up).
//   - spec.cri.type: ContainerdV2 reads as Containerd below v1, and
//     cri.containerdV2 as cri.containerd (back to ContainerdV2 going up
//     while the older version's cri.type is left as it read).
//   - v1alpha1 spec.docker is v1's spec.cri.docker; going up, a
//     spec.docker with no cri.type makes cri.type Docker (Deckhouse's
//     rule).
//
// Fields only v1 has (spec.kubernetesVersion, update, staticInstances,
// fencing, gpu, nodeDrainTimeoutSecond, cloudInstances.priority,
// quickShutdown and standbyHolder.overprovisioningRate, kubelet's
// resourceReservation, topologyManager, memorySwap and failCgroupV1, and at
// v1alpha1 cri.notManaged) are absent below v1 and kept by the annotation:
// a group edited at an older version keeps them. status is the same at
// every version.
//
// What v1alpha1 holds that v1 has no place for, spec.kubernetesVersion
// and spec.static (internalNetworkCIDRs: the cluster's
// StaticClusterConfiguration holds them), is inert: Deckhouse drops both
// going up. Here they are kept aside in the OlderVersionFieldsAnnotation
// of the stored group (Spoke.Own) and read back at v1alpha1 as written;
// v1 readers see neither (v1's own spec.kubernetesVersion is not set from
// v1alpha1's: a pin from an old manifest must not start downgrading
// kubelets). The one change a round trip makes (the fuzz tests hold the
// conversions to exactly it): a v1alpha1 spec.docker with no cri.type
// reads back with cri.type Docker.
var nodeGroup = Kind{
	GroupKind: deckhousev1.SchemeGroupVersion.WithKind("NodeGroup").GroupKind(),
	Hub:       "v1",
	Spokes: map[string]Spoke{
		"v1alpha1": nodeGroupSpoke(true),
		"v1alpha2": nodeGroupSpoke(false),
	},
}

// nodeTypeUp maps the older versions' node types to v1's.
var nodeTypeUp = map[string]string{
	"Cloud":  string(deckhousev1.NodeTypeCloudEphemeral),
	"Hybrid": string(deckhousev1.NodeTypeCloudStatic),
	"Static": string(deckhousev1.NodeTypeStatic),
}

// nodeTypeDown maps v1's node types to the older versions'.
var nodeTypeDown = map[string]string{
	string(deckhousev1.NodeTypeCloudEphemeral): "Cloud",
	string(deckhousev1.NodeTypeCloudStatic):    "Hybrid",
	string(deckhousev1.NodeTypeCloudPermanent): "Hybrid",
	string(deckhousev1.NodeTypeStatic):         "Static",
}

// nodeGroupHubOnly are the v1 fields the older versions do not have, as
// paths below the object's root.
var nodeGroupHubOnly = []string{
	"spec.kubernetesVersion",
	"spec.update",
	"spec.staticInstances",
	"spec.fencing",
	"spec.gpu",
	"spec.nodeDrainTimeoutSecond",
	"spec.cloudInstances.priority",
	"spec.cloudInstances.quickShutdown",
	"spec.cloudInstances.standbyHolder.overprovisioningRate",
	"spec.kubelet.resourceReservation",
	"spec.kubelet.topologyManager",
	"spec.kubelet.memorySwap",
	"spec.kubelet.failCgroupV1",
}

// v1alpha1HubOnly are the v1 fields v1alpha2 has and v1alpha1 does not.
var v1alpha1HubOnly = []string{"spec.cri.notManaged"}

// v1alpha1Own are the v1alpha1 fields v1 has no place for, kept in the
// OlderVersionFieldsAnnotation. v1alpha1's kubernetesVersion is one of
// them although v1 has a field of that name: v1's pins the kubelets, and
// an old manifest's must not start changing them.
var v1alpha1Own = []string{"spec.kubernetesVersion", "spec.static"}

func nodeGroupSpoke(v1alpha1 bool) Spoke {
	hubOnly := nodeGroupHubOnly
	if v1alpha1 {
		hubOnly = append(append([]string{}, nodeGroupHubOnly...), v1alpha1HubOnly...)
	}
	var s Spoke
	if v1alpha1 {
		s.Own = v1alpha1Own
	}
	s.Up = func(obj map[string]any) error {
		spec, err := specOf(obj)
		if err != nil || spec == nil {
			return err
		}
		if err := mapNodeType(spec, nodeTypeUp); err != nil {
			return err
		}
		if v1alpha1 {
			for _, p := range v1alpha1Own {
				deletePath(obj, p)
			}
			if docker, ok := spec["docker"]; ok {
				delete(spec, "docker")
				cri, err := childMap(spec, "cri", true)
				if err != nil {
					return err
				}
				cri["docker"] = docker
				if t, _ := cri["type"].(string); t == "" {
					cri["type"] = string(deckhousev1.CRIDocker)
				}
			}
		}
		return nil
	}
	s.Down = func(obj map[string]any) error {
		spec, err := specOf(obj)
		if err != nil || spec == nil {
			return err
		}
		if err := mapNodeType(spec, nodeTypeDown); err != nil {
			return err
		}
		for _, p := range hubOnly {
			deletePath(obj, p)
		}
		cri, err := childMap(spec, "cri", false)
		if err != nil || cri == nil {
			return err
		}
		if cri["type"] == string(deckhousev1.CRIContainerdV2) {
			cri["type"] = string(deckhousev1.CRIContainerd)
		}
		if v2, ok := cri["containerdV2"]; ok {
			if _, ok := cri["containerd"]; !ok {
				cri["containerd"] = v2
			}
			delete(cri, "containerdV2")
		}
		if v1alpha1 {
			if docker, ok := cri["docker"]; ok {
				spec["docker"] = docker
				delete(cri, "docker")
			}
		}
		return nil
	}
	s.Restore = func(hub, saved map[string]any) error {
		// What the spoke read when it went down, as it comes back up:
		// where the user left a mapped field as it read, the hub's own
		// value returns (CloudPermanent, ContainerdV2, an unset cri.type).
		unchanged := runtimeDeepCopy(saved)
		if err := s.Down(unchanged); err != nil {
			return err
		}
		if err := s.Up(unchanged); err != nil {
			return err
		}
		for _, p := range []string{"spec.nodeType", "spec.cri.type"} {
			now, nowOK := getPath(hub, p)
			then, thenOK := getPath(unchanged, p)
			if nowOK != thenOK || !reflect.DeepEqual(now, then) {
				continue
			}
			if v, ok := getPath(saved, p); ok {
				setPath(hub, p, v)
			} else {
				deletePath(hub, p)
			}
		}
		if cri, _ := childMap(mapAt(hub, "spec"), "cri", false); cri != nil && cri["type"] == string(deckhousev1.CRIContainerdV2) {
			if c, ok := cri["containerd"]; ok {
				cri["containerdV2"] = c
				delete(cri, "containerd")
			}
		}
		for _, p := range hubOnly {
			v, ok := getPath(saved, p)
			if !ok {
				continue
			}
			parent := p[:strings.LastIndex(p, ".")]
			if _, ok := getPath(hub, parent); !ok {
				// The user removed what held it.
				continue
			}
			if p == "spec.cri.notManaged" {
				if t, _ := getPath(hub, "spec.cri.type"); t != string(deckhousev1.CRINotManaged) {
					continue
				}
			}
			setPath(hub, p, runtimeDeepCopyValue(v))
		}
		return nil
	}
	return s
}

func specOf(obj map[string]any) (map[string]any, error) {
	return childMap(obj, "spec", false)
}

// mapNodeType rewrites spec.nodeType by m; a value m does not know is an
// error (each version's schema allows only its own).
func mapNodeType(spec map[string]any, m map[string]string) error {
	t, ok := spec["nodeType"]
	if !ok {
		return nil
	}
	s, _ := t.(string)
	to, ok := m[s]
	if !ok {
		return fmt.Errorf("spec.nodeType %v has no counterpart in the other version", t)
	}
	spec["nodeType"] = to
	return nil
}

// childMap is m[key] as an object; with create, an absent one is added.
func childMap(m map[string]any, key string, create bool) (map[string]any, error) {
	if m == nil {
		return nil, nil
	}
	v, ok := m[key]
	if !ok || v == nil {
		if !create {
			return nil, nil
		}
		c := map[string]any{}
		m[key] = c
		return c, nil
	}
	c, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, not an object", key, v)
	}
	return c, nil
}

func mapAt(m map[string]any, key string) map[string]any {
	c, _ := m[key].(map[string]any)
	return c
}

// getPath is the value at a dotted path of objects.
func getPath(m map[string]any, path string) (any, bool) {
	parts := strings.Split(path, ".")
	var cur any = m
	for _, p := range parts {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// setPathCreating sets the value at a dotted path, adding the objects
// above it that are missing.
func setPathCreating(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	cur := m
	for _, p := range parts[:len(parts)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	cur[parts[len(parts)-1]] = v
}

// setPath sets the value at a dotted path whose parent exists.
func setPath(m map[string]any, path string, v any) {
	i := strings.LastIndex(path, ".")
	parent, ok := getPath(m, path[:i])
	if obj, isObj := parent.(map[string]any); ok && isObj {
		obj[path[i+1:]] = v
	}
}

// deletePath removes the value at a dotted path, if any.
func deletePath(m map[string]any, path string) {
	i := strings.LastIndex(path, ".")
	if parent, ok := getPath(m, path[:i]); ok {
		if obj, isObj := parent.(map[string]any); isObj {
			delete(obj, path[i+1:])
		}
	}
}

func runtimeDeepCopyValue(v any) any {
	return runtimeDeepCopy(map[string]any{"v": v})["v"]
}
