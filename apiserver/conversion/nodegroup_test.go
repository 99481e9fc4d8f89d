package conversion

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// ngFuzzRounds is how many random objects each property is checked on,
// per version.
const ngFuzzRounds = 3000

var ngSpokes = []string{"v1alpha1", "v1alpha2"}

func pick[T any](r *rand.Rand, from ...T) T { return from[r.Intn(len(from))] }

// ngFiller fills NodeGroups at any version with random objects their
// version's schema accepts: every enum from its set, every pattern
// matched, and the cross-field rules kept.
// Each object is filled with a nil chance of its own, so that sparse
// objects (nothing only v1 holds) and dense ones both occur.
func ngFiller(seed int64) []*randfill.Filler {
	var out []*randfill.Filler
	for i, nilChance := range []float64{0.1, 0.35, 0.6, 0.85, 0.97} {
		out = append(out, ngFillerWith(seed+int64(i)*1000, nilChance))
	}
	return out
}

func ngFillerWith(seed int64, nilChance float64) *randfill.Filler {
	// randfill fills a pointer to a type with a custom function always;
	// thin gives the struct's optional fields their nil chance back.
	thin := func(v any, c randfill.Continue) {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			f := rv.Field(i)
			switch f.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map:
				if !f.IsNil() && c.Float64() < nilChance {
					f.Set(reflect.Zero(f.Type()))
				}
			}
		}
	}
	return randfill.New().RandSource(rand.NewSource(seed)).NilChance(nilChance).NumElements(0, 3).MaxDepth(12).Funcs(
		func(v *int32, c randfill.Continue) { *v = int32(c.Intn(100) + 1) },
		func(v *int64, c randfill.Continue) { *v = int64(c.Intn(1000) + 1) },
		func(v *metav1.Time, c randfill.Continue) {
			*v = metav1.NewTime(time.Unix(1_700_000_000+int64(c.Intn(1_000_000)), 0).UTC())
		},
		func(v *metav1.Duration, c randfill.Continue) {
			v.Duration = time.Duration(c.Intn(86400)+1) * time.Second
		},
		func(v *resource.Quantity, c randfill.Continue) {
			*v = resource.MustParse(pick(c.Rand, "500m", "1", "2", "100Mi", "1Gi", "5Gi"))
		},
		func(v *intstr.IntOrString, c randfill.Continue) { *v = intstr.FromInt32(int32(c.Intn(10) + 1)) },
		func(v *metav1.LabelSelector, c randfill.Continue) {
			*v = metav1.LabelSelector{}
			if c.Intn(2) == 0 {
				v.MatchLabels = map[string]string{"role": pick(c.Rand, "worker", "front")}
			}
			if c.Intn(2) == 0 {
				op := pick(c.Rand, metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists)
				req := metav1.LabelSelectorRequirement{Key: "zone", Operator: op}
				if op != metav1.LabelSelectorOpExists {
					req.Values = []string{"a", "b"}
				}
				v.MatchExpressions = []metav1.LabelSelectorRequirement{req}
			}
		},
		func(v *metav1.Condition, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Type = pick(c.Rand, "Ready", "Updating", "Error", "InertFields")
			v.Status = pick(c.Rand, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown)
			v.Reason = pick(c.Rand, "Ok", "NotReady", "FieldsHaveNoEffect")
		},
		func(v *deckhousev1.NodeGroupStatus, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Engine = pick(c.Rand, deckhousev1.NodeGroupEngine(""), deckhousev1.NodeGroupEngineNone, deckhousev1.NodeGroupEngineCAPI)
			v.Conditions = slices.CompactFunc(slices.SortedFunc(slices.Values(v.Conditions), func(a, b metav1.Condition) int {
				return cmpString(a.Type, b.Type)
			}), func(a, b metav1.Condition) bool { return a.Type == b.Type })
		},
		func(v *deckhousev1.NodeType, c randfill.Continue) {
			*v = pick(c.Rand, deckhousev1.NodeTypeCloudEphemeral, deckhousev1.NodeTypeCloudPermanent, deckhousev1.NodeTypeCloudStatic, deckhousev1.NodeTypeStatic)
		},
		func(v *deckhousev1alpha1.NodeType, c randfill.Continue) {
			*v = pick(c.Rand, deckhousev1alpha1.NodeTypeCloud, deckhousev1alpha1.NodeTypeHybrid, deckhousev1alpha1.NodeTypeStatic)
		},
		func(v *deckhousev1alpha2.NodeType, c randfill.Continue) {
			*v = pick(c.Rand, deckhousev1alpha2.NodeTypeCloud, deckhousev1alpha2.NodeTypeHybrid, deckhousev1alpha2.NodeTypeStatic)
		},
		func(v *deckhousev1.TaintEffect, c randfill.Continue) {
			*v = pick[deckhousev1.TaintEffect](c.Rand, "NoSchedule", "PreferNoSchedule", "NoExecute")
		},
		func(v *deckhousev1.Weekday, c randfill.Continue) {
			*v = pick[deckhousev1.Weekday](c.Rand, "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
		},
		func(v *deckhousev1.Taint, c randfill.Continue) {
			v.Key = pick(c.Rand, "dedicated", "dedicated.deckhouse.io", "example.com/tier", "ship-class")
			v.Value = pick(c.Rand, "", "system", "frigate")
			c.Fill(&v.Effect)
		},
		func(v *deckhousev1.NodeTemplate, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Labels = ngMetadataMap(c)
			v.Annotations = ngMetadataMap(c)
			v.Taints = slices.CompactFunc(slices.SortedFunc(slices.Values(v.Taints), func(a, b deckhousev1.Taint) int {
				return cmpString(a.Key+"/"+string(a.Effect), b.Key+"/"+string(b.Effect))
			}), func(a, b deckhousev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect })
		},
		func(v *deckhousev1.ChaosSpec, c randfill.Continue) {
			v.Mode = pick(c.Rand, "", "Disabled", deckhousev1.ChaosModeDrainAndDelete)
			v.Period = pick(c.Rand, "", "6h", "30m", "2h30m")
		},
		func(v *deckhousev1.DisruptionWindow, c randfill.Continue) {
			v.From = fmt.Sprintf("%02d:%02d", c.Intn(24), c.Intn(60))
			v.To = fmt.Sprintf("%02d:%02d", c.Intn(24), c.Intn(60))
			c.Fill(&v.Days)
		},
		func(v *deckhousev1.DisruptionsSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.ApprovalMode = pick(c.Rand, deckhousev1.ApprovalManual, deckhousev1.ApprovalAutomatic, deckhousev1.ApprovalRollingUpdate)
			if v.ApprovalMode != deckhousev1.ApprovalAutomatic {
				v.Automatic = nil
			}
			if v.ApprovalMode != deckhousev1.ApprovalRollingUpdate {
				v.RollingUpdate = nil
			}
		},
		func(v *deckhousev1.DrainTimeoutPolicy, c randfill.Continue) {
			*v = pick(c.Rand, deckhousev1.DrainTimeoutPolicy(""), deckhousev1.DrainTimeoutDelete, deckhousev1.DrainTimeoutWait)
		},
		func(v *deckhousev1.ClassReference, c randfill.Continue) {
			v.Kind = pick(c.Rand, "OpenStackInstanceClass", "AWSInstanceClass", "YandexInstanceClass")
			v.Name = pick(c.Rand, "small", "finland-medium", "test")
		},
		func(v *deckhousev1.NotManagedCRISpec, c randfill.Continue) {
			v.CRISocketPath = pick(c.Rand, "", "/run/containerd/containerd.sock", "/var/run/crio/crio.sock")
		},
		func(v *deckhousev1.NotHeldResources, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			if v.CPU != nil && c.Intn(2) == 0 {
				*v.CPU = intstr.FromString(pick(c.Rand, "1500m", "2"))
			}
			if v.Memory != nil && c.Intn(2) == 0 {
				*v.Memory = intstr.FromString(pick(c.Rand, "1.5Gi", "512M", "128974848"))
			}
		},
		func(v *deckhousev1.CRISpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Type = pick(c.Rand, "", deckhousev1.CRIDocker, deckhousev1.CRIContainerd, deckhousev1.CRIContainerdV2, deckhousev1.CRINotManaged)
			if v.Type != deckhousev1.CRIContainerd {
				v.Containerd = nil
			}
			if v.Type != deckhousev1.CRIContainerdV2 {
				v.ContainerdV2 = nil
			}
			if v.Type != deckhousev1.CRINotManaged {
				v.NotManaged = nil
			}
		},
		func(v *deckhousev1.KubeletSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			ngKubelet(c, &v.RootDir, &v.ContainerLogMaxSize, v.ContainerLogMaxFiles)
			if r := v.ResourceReservation; r != nil {
				r.Mode = pick(c.Rand, deckhousev1.ResourceReservationOff, deckhousev1.ResourceReservationAuto, deckhousev1.ResourceReservationStatic)
				if r.Mode != deckhousev1.ResourceReservationStatic {
					r.Static = nil
				} else if r.Static == nil {
					r.Static = &deckhousev1.StaticResourceReservation{}
				}
			}
			if tm := v.TopologyManager; tm != nil {
				tm.Scope = pick(c.Rand, "", "Container", "Pod")
				tm.Policy = pick(c.Rand, "", "None", "BestEffort", "Restricted", "SingleNumaNode")
				r := v.ResourceReservation
				if tm.Enabled && (r == nil || r.Mode == deckhousev1.ResourceReservationOff ||
					(r.Mode == deckhousev1.ResourceReservationStatic && r.Static.CPU == nil)) {
					tm.Enabled = false
				}
			}
			if s := v.MemorySwap; s != nil {
				s.SwapBehavior = pick(c.Rand, "", "NoSwap", "LimitedSwap")
				if s.SwapBehavior != "LimitedSwap" {
					s.LimitedSwap = nil
				} else if s.LimitedSwap != nil {
					s.LimitedSwap.Size = pick(c.Rand, "1G", "4G")
				}
			}
		},
		func(v *deckhousev1.CloudInstancesSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Zones = ngZones(c)
			v.MaxPerZone += v.MinPerZone
			if v.Standby != nil && c.Intn(2) == 0 {
				*v.Standby = intstr.FromString("10%")
			}
			if h := v.StandbyHolder; h != nil && h.OverprovisioningRate != nil {
				*h.OverprovisioningRate = int32(c.Intn(80) + 1)
			}
		},
		func(v *deckhousev1.UpdateSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			if v.MaxConcurrent != nil && c.Intn(2) == 0 {
				*v.MaxConcurrent = intstr.FromString(pick(c.Rand, "40%", "100%", "3"))
			}
		},
		func(v *deckhousev1.FencingSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Mode = pick(c.Rand, deckhousev1.FencingModeWatchdog, deckhousev1.FencingModeNotify)
			if v.Watchdog != nil {
				v.Watchdog.Timeout = pick(c.Rand, "", "60s", "2m")
			}
		},
		func(v *deckhousev1.GPUSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Sharing = pick(c.Rand, deckhousev1.GPUSharingExclusive, deckhousev1.GPUSharingTimeSlicing, deckhousev1.GPUSharingMIG)
			if m := v.MIG; m != nil {
				m.PartedConfig = pick(c.Rand, "all-1g.5gb", "custom")
				for i := range m.CustomConfigs {
					if len(m.CustomConfigs[i].Slices) == 0 {
						m.CustomConfigs[i].Slices = make([]deckhousev1.GPUMIGSlice, 1)
					}
					for j := range m.CustomConfigs[i].Slices {
						m.CustomConfigs[i].Slices[j].Profile = pick(c.Rand, "1g.10gb", "3g.40gb")
					}
				}
			}
		},
		func(v *deckhousev1.NodeGroupSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.KubernetesVersion = pick(c.Rand, "", "1.33", "1.36")
			if v.NodeType == deckhousev1.NodeTypeCloudEphemeral {
				if v.CloudInstances == nil {
					v.CloudInstances = &deckhousev1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSInstanceClass", Name: "a"}}
				}
			} else {
				v.CloudInstances = nil
				if d := v.Disruptions; d != nil && d.ApprovalMode == deckhousev1.ApprovalRollingUpdate {
					d.ApprovalMode, d.RollingUpdate = deckhousev1.ApprovalManual, nil
				}
			}
			if v.NodeType != deckhousev1.NodeTypeStatic && v.NodeType != deckhousev1.NodeTypeCloudStatic {
				v.StaticInstances = nil
			}
		},
		// v1alpha1
		func(v *deckhousev1alpha1.CRISpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Type = pick[deckhousev1alpha1.CRIType](c.Rand, "", "Docker", "Containerd", "NotManaged")
			if v.Type != "Containerd" {
				v.Containerd = nil
			}
		},
		func(v *deckhousev1alpha1.KubeletSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			ngKubelet(c, &v.RootDir, &v.ContainerLogMaxSize, v.ContainerLogMaxFiles)
		},
		func(v *deckhousev1alpha1.CloudInstancesSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Zones = ngZones(c)
			v.MaxPerZone += v.MinPerZone
		},
		func(v *deckhousev1alpha1.StaticSpec, c randfill.Continue) {
			v.InternalNetworkCIDRs = []string{"10.0.0.0/8", "192.168.0.0/16"}[:c.Intn(3)]
		},
		func(v *deckhousev1alpha1.NodeGroupSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.KubernetesVersion = pick(c.Rand, "", "1.19", "1.33")
			if v.NodeType == deckhousev1alpha1.NodeTypeCloud {
				if v.CloudInstances == nil {
					v.CloudInstances = &deckhousev1alpha1.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSInstanceClass", Name: "a"}}
				}
			} else {
				v.CloudInstances = nil
				if d := v.Disruptions; d != nil && d.ApprovalMode == deckhousev1.ApprovalRollingUpdate {
					d.ApprovalMode, d.RollingUpdate = deckhousev1.ApprovalManual, nil
				}
			}
		},
		// v1alpha2
		func(v *deckhousev1alpha2.CRISpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Type = pick[deckhousev1alpha2.CRIType](c.Rand, "", "Docker", "Containerd", "NotManaged")
			if v.Type != "Containerd" {
				v.Containerd = nil
			}
			if v.Type != "NotManaged" {
				v.NotManaged = nil
			}
		},
		func(v *deckhousev1alpha2.KubeletSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			ngKubelet(c, &v.RootDir, &v.ContainerLogMaxSize, v.ContainerLogMaxFiles)
		},
		func(v *deckhousev1alpha2.CloudInstancesSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			v.Zones = ngZones(c)
			v.MaxPerZone += v.MinPerZone
		},
		func(v *deckhousev1alpha2.NodeGroupSpec, c randfill.Continue) {
			c.FillNoCustom(v)
			thin(v, c)
			if v.NodeType == deckhousev1alpha2.NodeTypeCloud {
				if v.CloudInstances == nil {
					v.CloudInstances = &deckhousev1alpha2.CloudInstancesSpec{ClassReference: deckhousev1.ClassReference{Kind: "AWSInstanceClass", Name: "a"}}
				}
			} else {
				v.CloudInstances = nil
				if d := v.Disruptions; d != nil && d.ApprovalMode == deckhousev1.ApprovalRollingUpdate {
					d.ApprovalMode, d.RollingUpdate = deckhousev1.ApprovalManual, nil
				}
			}
		},
	)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ngMetadataMap(c randfill.Continue) map[string]string {
	out := map[string]string{}
	for range c.Intn(3) {
		out[pick(c.Rand, "environment", "app", "example.com/tier", "node-role.deckhouse.io/system")] = pick(c.Rand, "", "production", "true")
	}
	return out
}

func ngZones(c randfill.Continue) []string {
	return []string{"eu-west-1a", "eu-west-1b", "ru-central1-a"}[:c.Intn(4)]
}

func ngKubelet(c randfill.Continue, rootDir, logSize *string, logFiles *int32) {
	*rootDir = pick(c.Rand, "", "/var/lib/kubelet", "/mnt/data/kubelet")
	*logSize = pick(c.Rand, "", "50Mi", "1Gi")
	if logFiles != nil {
		*logFiles = int32(c.Intn(20) + 1)
	}
}

// ngRandom is a random valid NodeGroup at version, as kube-apiserver
// hands it to the conversion (unstructured JSON).
func ngRandom(t *testing.T, fillers []*randfill.Filler, r *rand.Rand, version string) *unstructured.Unstructured {
	t.Helper()
	f := fillers[r.Intn(len(fillers))]
	var obj runtime.Object
	switch version {
	case "v1":
		ng := &deckhousev1.NodeGroup{}
		f.Fill(&ng.Spec)
		f.Fill(&ng.Status)
		obj = ng
	case "v1alpha1":
		ng := &deckhousev1alpha1.NodeGroup{}
		f.Fill(&ng.Spec)
		f.Fill(&ng.Status)
		obj = ng
	case "v1alpha2":
		ng := &deckhousev1alpha2.NodeGroup{}
		f.Fill(&ng.Spec)
		f.Fill(&ng.Status)
		obj = ng
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion("deckhouse.io/" + version)
	u.SetKind("NodeGroup")
	u.SetName(fmt.Sprintf("g%d", r.Intn(1000)))
	u.SetResourceVersion("42")
	if r.Intn(2) == 0 {
		u.SetAnnotations(map[string]string{"example.com/owner": "team"})
	}
	// A round trip through JSON, as the webhook reads it.
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return out
}

// ngConvert converts through the registered NodeGroup conversions. The
// result is compared as it is, not through JSON: an integer must come back
// an integer (int64, as kube-apiserver's JSON decoding makes it), not a
// float64.
func ngConvert(t *testing.T, u *unstructured.Unstructured, to string) *unstructured.Unstructured {
	t.Helper()
	k, err := For(deckhousev1.SchemeGroupVersion.WithKind("NodeGroup").GroupKind())
	if err != nil {
		t.Fatal(err)
	}
	out, err := k.Convert(u, to)
	if err != nil {
		t.Fatalf("convert %s to %s: %v\n%s", u.GetAPIVersion(), to, err, ngYAML(u))
	}
	// Every field of the result is one its version has.
	typed := map[string]any{"v1": &deckhousev1.NodeGroup{}, "v1alpha1": &deckhousev1alpha1.NodeGroup{}, "v1alpha2": &deckhousev1alpha2.NodeGroup{}}[to]
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(out.Object, typed, true); err != nil {
		t.Fatalf("convert %s to %s gave a field %s does not have: %v\n%s", u.GetAPIVersion(), to, to, err, ngYAML(out))
	}
	return out
}

func ngYAML(u *unstructured.Unstructured) string {
	data, _ := yaml.Marshal(u.Object)
	return string(data)
}

func ngSame(t *testing.T, what string, got, want *unstructured.Unstructured) bool {
	t.Helper()
	if reflect.DeepEqual(got.Object, want.Object) {
		return true
	}
	t.Errorf("%s:\ngot:\n%s\nwant:\n%s", what, ngYAML(got), ngYAML(want))
	return false
}

// ngSpokeLoss is what v1 cannot hold of a spoke object, applied to a copy:
// the documented loss (nodegroup.go).
func ngSpokeLoss(u *unstructured.Unstructured, version string) *unstructured.Unstructured {
	out := u.DeepCopy()
	if version != "v1alpha1" {
		return out
	}
	spec := out.Object["spec"].(map[string]any)
	if _, ok := spec["docker"]; ok {
		cri, _ := spec["cri"].(map[string]any)
		if cri == nil {
			cri = map[string]any{}
			spec["cri"] = cri
		}
		if t, _ := cri["type"].(string); t == "" {
			cri["type"] = "Docker"
		}
	}
	return out
}

// TestNodeGroupHubRoundTripsThroughEverySpoke: any valid v1 NodeGroup read
// at an older version and written back is the same object.
func TestNodeGroupHubRoundTripsThroughEverySpoke(t *testing.T) {
	f, r := ngFiller(1), rand.New(rand.NewSource(1))
	annotated := map[string]int{}
	for i := range ngFuzzRounds {
		hub := ngRandom(t, f, r, "v1")
		for _, v := range ngSpokes {
			spoke := ngConvert(t, hub, v)
			if _, ok := spoke.GetAnnotations()[deckhousev1.ConversionDataAnnotation]; ok {
				annotated[v]++
			}
			if !ngSame(t, fmt.Sprintf("round %d: v1 -> %s -> v1", i, v), ngConvert(t, spoke, "v1"), hub) {
				return
			}
		}
	}
	for _, v := range ngSpokes {
		t.Logf("v1 -> %s -> v1: %d random objects unchanged (%d of them needed the conversion-data annotation)", v, ngFuzzRounds, annotated[v])
	}
}

// TestNodeGroupSpokeRoundTripsLoseOnlyWhatIsDocumented: any valid object at
// an older version, stored at v1 and read back at its version, is the same
// but for exactly the documented loss.
func TestNodeGroupSpokeRoundTripsLoseOnlyWhatIsDocumented(t *testing.T) {
	for _, v := range ngSpokes {
		f, r := ngFiller(2), rand.New(rand.NewSource(2))
		lossy := 0
		for i := range ngFuzzRounds {
			spoke := ngRandom(t, f, r, v)
			want := ngSpokeLoss(spoke, v)
			if !reflect.DeepEqual(want.Object, spoke.Object) {
				lossy++
			}
			if !ngSame(t, fmt.Sprintf("round %d: %s -> v1 -> %s", i, v, v), ngConvert(t, ngConvert(t, spoke, "v1"), v), want) {
				return
			}
		}
		t.Logf("%s -> v1 -> %s: %d random objects, %d lost exactly the documented fields, the rest nothing", v, v, ngFuzzRounds, lossy)
	}
}

// TestNodeGroupSpokeToSpokeAndBack: an object written at one older version
// and read at the other comes back as it would from v1.
func TestNodeGroupSpokeToSpokeAndBack(t *testing.T) {
	for _, a := range ngSpokes {
		for _, b := range ngSpokes {
			if a == b {
				continue
			}
			f, r := ngFiller(3), rand.New(rand.NewSource(3))
			for i := range ngFuzzRounds {
				obj := ngRandom(t, f, r, a)
				if !ngSame(t, fmt.Sprintf("round %d: %s -> %s -> %s", i, a, b, a), ngConvert(t, ngConvert(t, obj, b), a), ngSpokeLoss(obj, a)) {
					return
				}
			}
			t.Logf("%s -> %s -> %s: %d random objects, each back with only %s's documented loss", a, b, a, ngFuzzRounds, a)
		}
	}
}

// ngEdits are changes a user makes to a group read at an older version,
// each to a field every version holds, applied alike at any version.
var ngEdits = map[string]func(u *unstructured.Unstructured){
	"a node label": func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, "yes", "spec", "nodeTemplate", "labels", "example.com/edited"); err != nil {
			panic(err)
		}
	},
	"kubelet.maxPods": func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, int64(77), "spec", "kubelet", "maxPods"); err != nil {
			panic(err)
		}
	},
}

// TestNodeGroupEditAtASpokeKeepsWhatOnlyV1Holds: a v1 group read at an
// older version, changed there in a field that version holds, and written
// back is the v1 group with that change, everything only v1 holds kept.
func TestNodeGroupEditAtASpokeKeepsWhatOnlyV1Holds(t *testing.T) {
	f, r := ngFiller(4), rand.New(rand.NewSource(4))
	restored := map[string]int{}
	for i := range ngFuzzRounds {
		hub := ngRandom(t, f, r, "v1")
		for _, v := range ngSpokes {
			for name, edit := range ngEdits {
				spoke := ngConvert(t, hub, v)
				if _, ok := spoke.GetAnnotations()[deckhousev1.ConversionDataAnnotation]; ok {
					restored[v]++
				}
				edit(spoke)
				want := hub.DeepCopy()
				edit(want)
				if !ngSame(t, fmt.Sprintf("round %d: v1 -> %s, %s changed -> v1", i, v, name), ngConvert(t, spoke, "v1"), want) {
					return
				}
			}
		}
	}
	for _, v := range ngSpokes {
		t.Logf("v1 -> %s, edited, -> v1: %d random objects times %d edits, %d of them restored from the conversion-data annotation",
			v, ngFuzzRounds, len(ngEdits), restored[v])
	}
}

func ngParse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return ngConvertJSON(t, u)
}

func ngConvertJSON(t *testing.T, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNodeGroupDeckhouseMappings: Deckhouse's documented mappings, one by
// one, and what v1alpha1 and v1alpha2 read of Deckhouse's own examples
// (the x-doc-examples of its v1alpha1 and v1alpha2 schema).
func TestNodeGroupDeckhouseMappings(t *testing.T) {
	cases := []struct {
		name, from, to, in, want string
	}{
		{"Cloud is CloudEphemeral", "v1alpha2", "v1", `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata: {name: test}
spec:
  nodeType: Cloud
  cloudInstances: {zones: [Helsinki, Espoo, Tampere], minPerZone: 1, maxPerZone: 2, classReference: {kind: AWSInstanceClass, name: test}}
  nodeTemplate:
    labels: {environment: production, app: warp-drive-ai}
    annotations: {ai.fleet.com/discombobulate: "true"}
    taints: [{effect: NoExecute, key: ship-class, value: frigate}]
  chaos: {mode: DrainAndDelete, period: 24h}
`, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: test}
spec:
  nodeType: CloudEphemeral
  cloudInstances: {zones: [Helsinki, Espoo, Tampere], minPerZone: 1, maxPerZone: 2, classReference: {kind: AWSInstanceClass, name: test}}
  nodeTemplate:
    labels: {environment: production, app: warp-drive-ai}
    annotations: {ai.fleet.com/discombobulate: "true"}
    taints: [{effect: NoExecute, key: ship-class, value: frigate}]
  chaos: {mode: DrainAndDelete, period: 24h}
`},
		{"Hybrid is CloudStatic, v1alpha1's docker is cri.docker, its kubernetesVersion and static are kept aside", "v1alpha1", "v1", `
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata: {name: hybrid}
spec:
  nodeType: Hybrid
  kubernetesVersion: "1.19"
  static: {internalNetworkCIDRs: [10.0.0.0/8]}
  docker: {maxConcurrentDownloads: 10, manage: false}
  kubelet: {maxPods: 150, rootDir: /mnt/data/kubelet}
  disruptions:
    approvalMode: Automatic
    automatic: {drainBeforeApproval: false, windows: [{from: "06:00", to: "08:00", days: [Tue, Sun]}]}
`, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: hybrid
  annotations:
    node-manager.deckhouse.io/older-version-fields: '{"v1alpha1":{"spec":{"kubernetesVersion":"1.19","static":{"internalNetworkCIDRs":["10.0.0.0/8"]}}}}'
spec:
  nodeType: CloudStatic
  cri: {type: Docker, docker: {maxConcurrentDownloads: 10, manage: false}}
  kubelet: {maxPods: 150, rootDir: /mnt/data/kubelet}
  disruptions:
    approvalMode: Automatic
    automatic: {drainBeforeApproval: false, windows: [{from: "06:00", to: "08:00", days: [Tue, Sun]}]}
`},
		{"CloudPermanent reads as Hybrid and ContainerdV2 as Containerd, remembered", "v1", "v1alpha2", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: master}
spec:
  nodeType: CloudPermanent
  cri: {type: ContainerdV2, containerdV2: {maxConcurrentDownloads: 5}}
`, `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata:
  name: master
  annotations:
    node-manager.deckhouse.io/conversion-data: '{"spec":{"cri":{"containerdV2":{"maxConcurrentDownloads":5},"type":"ContainerdV2"},"nodeType":"CloudPermanent"}}'
spec:
  nodeType: Hybrid
  cri: {type: Containerd, containerd: {maxConcurrentDownloads: 5}}
`},
		{"CloudPermanent and ContainerdV2 survive an edit at v1alpha2", "v1alpha2", "v1", `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata:
  name: master
  annotations:
    node-manager.deckhouse.io/conversion-data: '{"spec":{"cri":{"containerdV2":{"maxConcurrentDownloads":5},"type":"ContainerdV2"},"nodeType":"CloudPermanent","update":{"maxConcurrent":2}}}'
spec:
  nodeType: Hybrid
  cri: {type: Containerd, containerd: {maxConcurrentDownloads: 8}}
`, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: master}
spec:
  nodeType: CloudPermanent
  cri: {type: ContainerdV2, containerdV2: {maxConcurrentDownloads: 8}}
  update: {maxConcurrent: 2}
`},
		{"a runtime chosen at v1alpha2 wins over the remembered ContainerdV2", "v1alpha2", "v1", `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata:
  name: w
  annotations:
    node-manager.deckhouse.io/conversion-data: '{"spec":{"cri":{"type":"ContainerdV2"},"nodeType":"Static"}}'
spec:
  nodeType: Static
  cri: {type: NotManaged, notManaged: {criSocketPath: /run/crio/crio.sock}}
`, `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: w}
spec:
  nodeType: Static
  cri: {type: NotManaged, notManaged: {criSocketPath: /run/crio/crio.sock}}
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ngSame(t, tc.from+" -> "+tc.to, ngConvert(t, ngParse(t, tc.in), tc.to), ngParse(t, tc.want))
		})
	}
}

// ngV1alpha1Own is a group written at v1alpha1 with the fields v1 has no
// place for (Deckhouse's first NodeGroup example pins kubernetesVersion).
const ngV1alpha1Own = `
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata: {name: test}
spec:
  nodeType: Cloud
  kubernetesVersion: "1.16"
  static: {internalNetworkCIDRs: [10.0.0.0/8, 192.168.0.0/16]}
  cri: {type: Containerd}
  cloudInstances: {zones: [eu-west-1a], minPerZone: 1, maxPerZone: 3, classReference: {kind: AWSInstanceClass, name: test}}
  kubelet: {maxPods: 150, rootDir: /mnt/data/kubelet}
`

// TestNodeGroupV1alpha1FieldsSurviveStorage: v1alpha1's kubernetesVersion
// and static, which v1 has no place for, are read back at v1alpha1 as
// written (directly and after a read and write at v1alpha2), while v1
// readers see neither: v1's own spec.kubernetesVersion, which pins the
// kubelets, stays unset.
func TestNodeGroupV1alpha1FieldsSurviveStorage(t *testing.T) {
	written := ngParse(t, ngV1alpha1Own)
	stored := ngConvert(t, written, "v1")
	for _, p := range []string{"spec.kubernetesVersion", "spec.static"} {
		if v, ok := getPath(stored.Object, p); ok {
			t.Errorf("stored at v1, %s is %v: a v1 reader must not see v1alpha1's field", p, v)
		}
	}
	ngSame(t, "v1alpha1 -> v1 -> v1alpha1", ngConvert(t, stored, "v1alpha1"), written)
	viaV1alpha2 := ngConvert(t, ngConvert(t, stored, "v1alpha2"), "v1")
	ngSame(t, "v1alpha1 -> v1 -> v1alpha2 -> v1", viaV1alpha2, stored)
	ngSame(t, "v1alpha1 -> v1 -> v1alpha2 -> v1 -> v1alpha1", ngConvert(t, viaV1alpha2, "v1alpha1"), written)
	ngSame(t, "v1alpha1 -> v1alpha2 -> v1alpha1", ngConvert(t, ngConvert(t, written, "v1alpha2"), "v1alpha1"), written)
}

// TestNodeGroupV1alpha1FieldsFollowWritesAtV1alpha1: a v1alpha1 write
// that changes or removes the fields is what is read back; an edit at v1
// keeps them; v1's own kubernetesVersion and v1alpha1's live side by side.
func TestNodeGroupV1alpha1FieldsFollowWritesAtV1alpha1(t *testing.T) {
	stored := ngConvert(t, ngParse(t, ngV1alpha1Own), "v1")

	read := ngConvert(t, stored, "v1alpha1")
	unstructured.RemoveNestedField(read.Object, "spec", "static")
	if err := unstructured.SetNestedField(read.Object, "1.19", "spec", "kubernetesVersion"); err != nil {
		t.Fatal(err)
	}
	again := ngConvert(t, ngConvert(t, read, "v1"), "v1alpha1")
	ngSame(t, "changed at v1alpha1, read back", again, read)

	unstructured.RemoveNestedField(read.Object, "spec", "kubernetesVersion")
	rewritten := ngConvert(t, read, "v1")
	if _, ok := rewritten.GetAnnotations()[deckhousev1.OlderVersionFieldsAnnotation]; ok {
		t.Errorf("both fields removed at v1alpha1, the stored group still carries %s", ngYAML(rewritten))
	}
	ngSame(t, "removed at v1alpha1, read back", ngConvert(t, rewritten, "v1alpha1"), read)

	// At v1: the group pins its kubelets and gets a label.
	edited := stored.DeepCopy()
	if err := unstructured.SetNestedField(edited.Object, "1.36", "spec", "kubernetesVersion"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(edited.Object, "yes", "spec", "nodeTemplate", "labels", "example.com/edited"); err != nil {
		t.Fatal(err)
	}
	old := ngConvert(t, edited, "v1alpha1")
	if v, _, _ := unstructured.NestedString(old.Object, "spec", "kubernetesVersion"); v != "1.16" {
		t.Errorf("edited at v1 (its own kubernetesVersion 1.36), read at v1alpha1: kubernetesVersion is %q, want v1alpha1's 1.16", v)
	}
	if v, _, _ := unstructured.NestedString(old.Object, "spec", "nodeTemplate", "labels", "example.com/edited"); v != "yes" {
		t.Errorf("edited at v1, read at v1alpha1: the label is %q, want yes", v)
	}
	ngSame(t, "edited at v1, read and written unchanged at v1alpha1", ngConvert(t, old, "v1"), edited)
}

// TestNodeGroupV1alpha1FieldsAnnotationIsChecked: the annotation is the
// writer's to edit; what it gives back must pass v1alpha1's schema, and a
// malformed one is ignored, never an error on read.
func TestNodeGroupV1alpha1FieldsAnnotationIsChecked(t *testing.T) {
	stored := ngConvert(t, ngParse(t, ngV1alpha1Own), "v1")
	plain := ngParse(t, ngV1alpha1Own)
	unstructured.RemoveNestedField(plain.Object, "spec", "kubernetesVersion")
	unstructured.RemoveNestedField(plain.Object, "spec", "static")
	for name, value := range map[string]string{
		"a value the pattern refuses": `{"v1alpha1":{"spec":{"kubernetesVersion":"1.16\nrm -rf /"}}}`,
		"a field of the wrong type":   `{"v1alpha1":{"spec":{"static":"10.0.0.0/8"}}}`,
		"not JSON":                    `{"v1alpha1":`,
		"an entry that is no object":  `{"v1alpha1":"1.16"}`,
	} {
		t.Run(name, func(t *testing.T) {
			hostile := stored.DeepCopy()
			hostile.SetAnnotations(map[string]string{deckhousev1.OlderVersionFieldsAnnotation: value})
			got := ngConvert(t, hostile, "v1alpha1")
			for _, p := range []string{"spec.kubernetesVersion", "spec.static"} {
				if v, ok := getPath(got.Object, p); ok {
					t.Errorf("read at v1alpha1, %s is %v from the annotation %s", p, v, value)
				}
			}
			if got.Object["spec"] == nil || !reflect.DeepEqual(got.Object["spec"], plain.Object["spec"]) {
				t.Errorf("read at v1alpha1, spec is %v, want %v", got.Object["spec"], plain.Object["spec"])
			}
		})
	}
}
