package conversion

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/randfill"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

var (
	instanceHubGVK   = deckhousev1alpha1.SchemeGroupVersion.WithKind("Instance")
	instanceSpokeGVK = deckhousev1alpha2.SchemeGroupVersion.WithKind("Instance")
	instancePhases   = []deckhousev1alpha1.InstancePhase{deckhousev1alpha1.InstancePending, deckhousev1alpha1.InstanceProvisioning,
		deckhousev1alpha1.InstanceProvisioned, deckhousev1alpha1.InstanceRunning, deckhousev1alpha1.InstanceTerminating}
)

// instanceFiller makes valid Instances at both versions.
func instanceFiller() *randfill.Filler {
	return fuzzFiller(
		func(p *deckhousev1alpha1.InstancePhase, c randfill.Continue) { *p = fuzzPick(c, instancePhases...) },
		func(p *deckhousev1alpha2.InstancePhase, c randfill.Continue) {
			*p = fuzzPick(c, "Pending", "Provisioning", "Provisioned", "Running", "Terminating", deckhousev1alpha2.InstancePhaseUnknown)
		},
		func(s *deckhousev1alpha1.BashibleStatus, c randfill.Continue) {
			*s = fuzzPick[deckhousev1alpha1.BashibleStatus](c, "Ready", "WaitingApproval", "WaitingDisruptionApproval", "Error", "Unknown")
		},
		func(r *deckhousev1alpha1.BashibleRunResult, c randfill.Continue) {
			*r = fuzzPick(c, deckhousev1alpha1.BashibleRunSucceeded, deckhousev1alpha1.BashibleRunFailed, deckhousev1alpha1.BashibleRunStopped)
		},
		func(s *deckhousev1alpha1.BashibleStep, c randfill.Continue) {
			*s = deckhousev1alpha1.BashibleStep{Name: "0" + fuzzWord(c, 10) + ".sh", Attempts: 1 + c.Int31n(5), DurationMilliseconds: c.Int63n(1e6), ExitCode: c.Int31n(256)}
		},
		func(r *deckhousev1alpha1.BashibleRun, c randfill.Continue) {
			c.FillNoCustom(r)
			r.OmittedSteps = c.Int31n(1000)
		},
		func(r *deckhousev1alpha1.NodeRef, c randfill.Continue) { r.Name = "node-" + fuzzWord(c, 6) },
		func(cs *[]deckhousev1alpha2.InstanceCondition, c randfill.Continue) {
			*cs = nil
			for _, typ := range []string{"BashibleReady", "MachineReady", "WaitingApproval", "WaitingDisruptionApproval"} {
				if c.Intn(2) == 0 {
					continue
				}
				cond := deckhousev1alpha2.InstanceCondition{Type: typ, Status: fuzzPick(c, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown),
					Reason: fuzzPick(c, "", "Reason"+fuzzWord(c, 5)), Severity: fuzzPick(c, "", "Warning", "Error", "Info"),
					Message: c.String(30), ObservedGeneration: c.Int63n(5)}
				if c.Intn(3) != 0 {
					t := metav1.Unix(c.Int63n(4_000_000_000), 0)
					cond.LastTransitionTime = &t
				}
				*cs = append(*cs, cond)
			}
		},
	)
}

// instanceSpokeLosses is obj, a v1alpha2 Instance, less exactly what
// instance.go documents it loses through v1alpha1: status.machineStatus,
// status.phase Unknown, the conditions' severity, an empty spec or status.
func instanceSpokeLosses(obj *unstructured.Unstructured) (*unstructured.Unstructured, bool) {
	out := obj.DeepCopy()
	unstructured.RemoveNestedField(out.Object, "status", "machineStatus")
	if phase, _, _ := unstructured.NestedString(out.Object, "status", "phase"); phase == string(deckhousev1alpha2.InstancePhaseUnknown) {
		unstructured.RemoveNestedField(out.Object, "status", "phase")
	}
	if conditions, ok, _ := unstructured.NestedSlice(out.Object, "status", "conditions"); ok {
		for _, c := range conditions {
			delete(c.(map[string]any), "severity")
		}
		_ = unstructured.SetNestedSlice(out.Object, conditions, "status", "conditions")
	}
	for _, f := range []string{"spec", "status"} {
		if m, ok := out.Object[f].(map[string]any); ok && len(m) == 0 {
			delete(out.Object, f)
		}
	}
	return out, !equalContent(out, obj)
}

func equalContent(a, b *unstructured.Unstructured) bool {
	return reflect.DeepEqual(a.Object, b.Object)
}

// TestInstanceHubRoundTrip: any valid v1alpha1 Instance (node-manager's,
// stored) read at v1alpha2 and written back is unchanged: what v1alpha2
// cannot hold travels in the conversion-data annotation.
func TestInstanceHubRoundTrip(t *testing.T) {
	f := instanceFiller()
	annotated := 0
	for range fuzzIterations {
		typed := &deckhousev1alpha1.Instance{}
		f.Fill(typed)
		hub := fuzzObject(t, typed, instanceHubGVK)
		spoke := convert(t, instance, hub, "v1alpha2")
		if hasConversionData(spoke) {
			annotated++
		}
		if ref, ok, _ := unstructured.NestedFieldNoCopy(spoke.Object, "spec", "nodeRef"); typed.Status.NodeRef != nil && (!ok || ref.(map[string]any)["name"] != typed.Status.NodeRef.Name) {
			t.Fatalf("status.nodeRef %v is not v1alpha2's spec.nodeRef (%v)", typed.Status.NodeRef, ref)
		}
		if phase, _, _ := unstructured.NestedString(spoke.Object, "status", "phase"); typed.Status.CurrentStatus != nil && phase != string(typed.Status.CurrentStatus.Phase) {
			t.Fatalf("status.currentStatus.phase %q is not v1alpha2's status.phase %q", typed.Status.CurrentStatus.Phase, phase)
		}
		requireEqual(t, "v1alpha1 → v1alpha2 → v1alpha1", convert(t, instance, spoke, "v1alpha1"), hub)
	}
	t.Logf("%d v1alpha1 Instances through v1alpha2 and back unchanged; %d carried what v1alpha2 cannot hold in the conversion-data annotation", fuzzIterations, annotated)
}

// TestInstanceSpokeRoundTrip: any valid v1alpha2 Instance (as Deckhouse
// stores them) through v1alpha1 and back is unchanged but for exactly the
// documented losses.
func TestInstanceSpokeRoundTrip(t *testing.T) {
	f := instanceFiller()
	lossy := 0
	for range fuzzIterations {
		typed := &deckhousev1alpha2.Instance{}
		f.Fill(typed)
		spoke := fuzzObject(t, typed, instanceSpokeGVK)
		hub := convert(t, instance, spoke, "v1alpha1")
		if _, ok := hub.Object["spec"]; ok {
			t.Fatalf("v1alpha1 Instance has a spec: %v", hub.Object)
		}
		want, lost := instanceSpokeLosses(spoke)
		if lost {
			lossy++
		}
		requireEqual(t, "v1alpha2 → v1alpha1 → v1alpha2", convert(t, instance, hub, "v1alpha2"), want)
	}
	t.Logf("%d v1alpha2 Instances through v1alpha1 and back: %d unchanged, %d lost exactly the documented fields (machineStatus, phase Unknown, severity, empty spec/status)", fuzzIterations, fuzzIterations-lossy, lossy)
}

// TestInstanceEditedAtV1alpha2: an Instance changed at v1alpha2 keeps, at
// v1alpha1, what v1alpha2 cannot hold (lastOperation, bootstrapStatus, and
// the phase's lastUpdateTime while the phase stays), and takes the edit.
func TestInstanceEditedAtV1alpha2(t *testing.T) {
	f := instanceFiller()
	kept, phaseChanged := 0, 0
	for i := range fuzzIterations {
		typed := &deckhousev1alpha1.Instance{}
		f.Fill(typed)
		hub := fuzzObject(t, typed, instanceHubGVK)
		spoke := convert(t, instance, hub, "v1alpha2")

		// The edit, at v1alpha2: a new message and bashible status, and
		// every other time a phase (maybe the same one).
		want := hub.DeepCopy()
		message, bashible := "edited "+typed.Name, string(instanceFillerStatus(i))
		_ = unstructured.SetNestedField(spoke.Object, message, "status", "message")
		_ = unstructured.SetNestedField(spoke.Object, bashible, "status", "bashibleStatus")
		_ = unstructured.SetNestedField(want.Object, message, "status", "message")
		_ = unstructured.SetNestedField(want.Object, bashible, "status", "bashibleStatus")
		if i%2 == 0 {
			phase := string(instancePhases[i%len(instancePhases)])
			_ = unstructured.SetNestedField(spoke.Object, phase, "status", "phase")
			if old, _, _ := unstructured.NestedString(hub.Object, "status", "currentStatus", "phase"); old != phase {
				phaseChanged++
				_ = unstructured.SetNestedMap(want.Object, map[string]any{"phase": phase}, "status", "currentStatus")
			}
		}
		back := convert(t, instance, spoke, "v1alpha1")
		requireEqual(t, "edited at v1alpha2", back, want)
		if typed.Status.LastOperation != nil || typed.Status.BootstrapStatus != nil {
			kept++
		}
	}
	t.Logf("%d v1alpha1 Instances edited at v1alpha2 (message, bashibleStatus; phase in half, %d of them a new phase): exactly the edit reached v1alpha1; %d kept their lastOperation or bootstrapStatus through v1alpha2", fuzzIterations, phaseChanged, kept)
}

func instanceFillerStatus(i int) deckhousev1alpha1.BashibleStatus {
	return []deckhousev1alpha1.BashibleStatus{"Ready", "WaitingApproval", "WaitingDisruptionApproval", "Error", "Unknown"}[i%5]
}
