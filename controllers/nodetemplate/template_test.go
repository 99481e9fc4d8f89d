package nodetemplate

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

const (
	cloudUninit = "node.cloudprovider.kubernetes.io/uninitialized"
	csiTaint    = deckhousev1.NodeDomain + "csi-not-bootstrapped"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func ngTaint(key, value string, effect deckhousev1.TaintEffect) deckhousev1.Taint {
	return deckhousev1.Taint{Key: key, Value: value, Effect: effect}
}

func group(name string, typ deckhousev1.NodeType, tmpl *deckhousev1.NodeTemplate) *deckhousev1.NodeGroup {
	return &deckhousev1.NodeGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       deckhousev1.NodeGroupSpec{NodeType: typ, NodeTemplate: tmpl},
	}
}

// lastApplied encodes what a previous apply recorded.
func lastApplied(labels, annotations map[string]string, taints ...corev1.Taint) string {
	return Applied{Labels: labels, Annotations: annotations, Taints: taints}.encode()
}

type nodeSpec struct {
	labels      map[string]string
	annotations map[string]string
	taints      []corev1.Taint
}

func (s nodeSpec) node(group string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7",
		Labels: maps.Clone(s.labels), Annotations: maps.Clone(s.annotations)}}
	if group != "" {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[deckhousev1.NodeGroupLabel] = group
	}
	n.Spec.Taints = append([]corev1.Taint(nil), s.taints...)
	return n
}

// staticLabels are the labels every Static node of group "worker" gets.
func staticLabels(extra map[string]string) map[string]string {
	m := map[string]string{deckhousev1.NodeGroupLabel: "worker", deckhousev1.NodeTypeLabel: "Static", deckhousev1.NodeRoleLabelPrefix + "worker": ""}
	maps.Copy(m, extra)
	return m
}

func staticAnnotations(extra map[string]string) map[string]string {
	m := map[string]string{deckhousev1.ScaleDownDisabledAnnotation: "true"}
	maps.Copy(m, extra)
	return m
}

func TestCompute(t *testing.T) {
	added := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name  string
		node  nodeSpec
		group *deckhousev1.NodeGroup // nil: the node has no known group
		// want is the node's metadata after the change, the last-applied
		// annotation aside (checked against Desired separately).
		wantLabels      map[string]string
		wantAnnotations map[string]string
		wantTaints      []corev1.Taint
		// wantNoTaintWrite: the change must leave spec.taints out entirely.
		wantNoTaintWrite bool
		wantLastApplied  bool
		wantErr          bool
	}{
		{
			name: "first apply adds the template and keeps every foreign key and taint",
			node: nodeSpec{
				labels:      map[string]string{"foreign": "x", "topology.kubernetes.io/zone": "a"},
				annotations: map[string]string{"csi.volume.kubernetes.io/nodeid": "{}"},
				taints: []corev1.Taint{
					taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
					taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule),
					taint("foreign", "v", corev1.TaintEffectNoExecute),
				},
			},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Labels:      map[string]string{"tier": "db"},
				Annotations: map[string]string{"owner": "team-a"},
				Taints:      []deckhousev1.Taint{ngTaint("dedicated", "db", "NoSchedule")},
			}),
			wantLabels:      staticLabels(map[string]string{"foreign": "x", "topology.kubernetes.io/zone": "a", "tier": "db"}),
			wantAnnotations: staticAnnotations(map[string]string{"csi.volume.kubernetes.io/nodeid": "{}", "owner": "team-a"}),
			wantTaints: []corev1.Taint{
				taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
				taint("foreign", "v", corev1.TaintEffectNoExecute),
				taint("dedicated", "db", corev1.TaintEffectNoSchedule),
			},
			wantLastApplied: true,
		},
		{
			// Deckhouse PR 22958: an empty template on the first apply wrote
			// an empty taint list and stripped the cloud provider's taint.
			name: "first apply of an empty template writes no taints at all",
			node: nodeSpec{taints: []corev1.Taint{
				taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
				taint(csiTaint, "", corev1.TaintEffectNoSchedule),
			}},
			group:            group("worker", deckhousev1.NodeTypeCloudPermanent, nil),
			wantLabels:       map[string]string{deckhousev1.NodeGroupLabel: "worker", deckhousev1.NodeTypeLabel: "CloudPermanent", deckhousev1.NodeRoleLabelPrefix + "worker": ""},
			wantAnnotations:  staticAnnotations(nil),
			wantTaints:       []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule), taint(csiTaint, "", corev1.TaintEffectNoSchedule)},
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "labels are added, changed and removed; foreign labels survive",
			node: nodeSpec{
				labels: staticLabels(map[string]string{"tier": "db", "gone": "1", "foreign": "x"}),
				annotations: staticAnnotations(map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: lastApplied(
					map[string]string{"tier": "db", "gone": "1", "already-gone": "1"}, nil)}),
			},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Labels: map[string]string{"tier": "web", "new": ""},
			}),
			wantLabels:       staticLabels(map[string]string{"tier": "web", "new": "", "foreign": "x"}),
			wantAnnotations:  staticAnnotations(nil),
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "annotations are added, changed and removed; foreign ones survive",
			node: nodeSpec{
				labels: staticLabels(nil),
				annotations: staticAnnotations(map[string]string{"a": "1", "b": "1", "foreign": "x",
					deckhousev1.LastAppliedNodeTemplateAnnotation: lastApplied(nil, map[string]string{"a": "1", "b": "1"})}),
			},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Annotations: map[string]string{"a": "2", "c": "3"},
			}),
			wantLabels:       staticLabels(nil),
			wantAnnotations:  staticAnnotations(map[string]string{"a": "2", "c": "3", "foreign": "x"}),
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "taints: value changed in place, effect change replaces, removed, added; foreign taints survive, even on a key we own with another effect",
			node: nodeSpec{
				labels: staticLabels(nil),
				annotations: staticAnnotations(map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: lastApplied(nil, nil,
					taint("value", "old", corev1.TaintEffectNoExecute),
					taint("effect", "", corev1.TaintEffectNoSchedule),
					taint("gone", "", corev1.TaintEffectNoSchedule),
					taint("shared", "", corev1.TaintEffectNoSchedule),
				)}),
				taints: []corev1.Taint{
					{Key: "value", Value: "old", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added},
					taint("effect", "", corev1.TaintEffectNoSchedule),
					taint("foreign", "", corev1.TaintEffectNoSchedule),
					taint("gone", "", corev1.TaintEffectNoSchedule),
					taint("shared", "", corev1.TaintEffectNoSchedule),
					taint("shared", "theirs", corev1.TaintEffectNoExecute),
				},
			},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Taints: []deckhousev1.Taint{
					ngTaint("value", "new", "NoExecute"),
					ngTaint("effect", "", "PreferNoSchedule"),
					ngTaint("added", "1", "NoSchedule"),
				},
			}),
			wantLabels:      staticLabels(nil),
			wantAnnotations: staticAnnotations(nil),
			wantTaints: []corev1.Taint{
				{Key: "value", Value: "new", Effect: corev1.TaintEffectNoExecute, TimeAdded: &added},
				taint("foreign", "", corev1.TaintEffectNoSchedule),
				taint("shared", "theirs", corev1.TaintEffectNoExecute),
				taint("effect", "", corev1.TaintEffectPreferNoSchedule),
				taint("added", "1", corev1.TaintEffectNoSchedule),
			},
			wantLastApplied: true,
		},
		{
			name: "a template taint already on the node (put there by someone else) is adopted, not duplicated",
			node: nodeSpec{taints: []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectNoSchedule)}},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Taints: []deckhousev1.Taint{ngTaint("dedicated", "db", "NoSchedule")},
			}),
			wantLabels:       staticLabels(nil),
			wantAnnotations:  staticAnnotations(nil),
			wantTaints:       []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectNoSchedule)},
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "the uninitialized taint goes whatever its effect, in the same change as the template",
			node: nodeSpec{taints: []corev1.Taint{
				taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule),
				taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoExecute),
			}},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Labels: map[string]string{"tier": "db"},
			}),
			wantLabels:      staticLabels(map[string]string{"tier": "db"}),
			wantAnnotations: staticAnnotations(nil),
			wantTaints:      []corev1.Taint{},
			wantLastApplied: true,
		},
		{
			name: "a CloudEphemeral machine not made by Cluster API gets only the uninitialized taint removed",
			node: nodeSpec{
				labels: map[string]string{"foreign": "x"},
				taints: []corev1.Taint{
					taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
					taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule),
				},
			},
			group: group("worker", deckhousev1.NodeTypeCloudEphemeral, &deckhousev1.NodeTemplate{
				Labels: map[string]string{"tier": "db"},
				Taints: []deckhousev1.Taint{ngTaint("dedicated", "db", "NoSchedule")},
			}),
			wantLabels: map[string]string{deckhousev1.NodeGroupLabel: "worker", "foreign": "x"},
			wantTaints: []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule)},
		},
		{
			name: "a CloudEphemeral machine without the uninitialized taint is not touched",
			node: nodeSpec{labels: map[string]string{"foreign": "x"}},
			group: group("worker", deckhousev1.NodeTypeCloudEphemeral, &deckhousev1.NodeTemplate{
				Labels: map[string]string{"tier": "db"},
			}),
			wantLabels:       map[string]string{deckhousev1.NodeGroupLabel: "worker", "foreign": "x"},
			wantNoTaintWrite: true,
		},
		{
			name: "a Cluster API machine of a CloudEphemeral group gets the full template but stays scalable",
			node: nodeSpec{
				annotations: map[string]string{deckhousev1.MachineAnnotation: "worker-abc"},
				taints:      []corev1.Taint{taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)},
			},
			group: group("worker", deckhousev1.NodeTypeCloudEphemeral, &deckhousev1.NodeTemplate{
				Labels: map[string]string{"tier": "db"},
			}),
			wantLabels:      map[string]string{deckhousev1.NodeGroupLabel: "worker", deckhousev1.NodeTypeLabel: "CloudEphemeral", deckhousev1.NodeRoleLabelPrefix + "worker": "", "tier": "db"},
			wantAnnotations: map[string]string{deckhousev1.MachineAnnotation: "worker-abc"},
			wantTaints:      []corev1.Taint{},
			wantLastApplied: true,
		},
		{
			name:  "master nodes get the control-plane and master role labels",
			node:  nodeSpec{taints: []corev1.Taint{taint(deckhousev1.ControlPlaneRoleLabel, "", corev1.TaintEffectNoSchedule)}},
			group: group("master", deckhousev1.NodeTypeCloudPermanent, nil),
			wantLabels: map[string]string{deckhousev1.NodeGroupLabel: "master", deckhousev1.NodeTypeLabel: "CloudPermanent",
				deckhousev1.NodeRoleLabelPrefix + "master": "", deckhousev1.ControlPlaneRoleLabel: ""},
			wantAnnotations:  staticAnnotations(nil),
			wantTaints:       []corev1.Taint{taint(deckhousev1.ControlPlaneRoleLabel, "", corev1.TaintEffectNoSchedule)},
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "a node moved to another group loses the old role label",
			node: nodeSpec{
				labels: map[string]string{deckhousev1.NodeTypeLabel: "Static", deckhousev1.NodeRoleLabelPrefix + "old": "", "foreign": "x"},
				annotations: staticAnnotations(map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: lastApplied(
					map[string]string{deckhousev1.NodeTypeLabel: "Static", deckhousev1.NodeRoleLabelPrefix + "old": ""},
					map[string]string{deckhousev1.ScaleDownDisabledAnnotation: "true"})}),
			},
			group:            group("worker", deckhousev1.NodeTypeStatic, nil),
			wantLabels:       staticLabels(map[string]string{"foreign": "x"}),
			wantAnnotations:  staticAnnotations(nil),
			wantNoTaintWrite: true,
			wantLastApplied:  true,
		},
		{
			name: "keys in node-manager's namespaces and entries the API would refuse are skipped, a template uninitialized taint included",
			node: nodeSpec{taints: []corev1.Taint{taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)}},
			group: group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
				Labels:      map[string]string{deckhousev1.NodeGroupLabel: "evil", "ok": "1", "bad key": "1", "bad-value": "a b"},
				Annotations: map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: "{}", deckhousev1.ApprovedAnnotation: ""},
				Taints:      []deckhousev1.Taint{ngTaint(deckhousev1.UninitializedTaint, "", "NoSchedule")},
			}),
			wantLabels:      staticLabels(map[string]string{"ok": "1"}),
			wantAnnotations: staticAnnotations(nil),
			wantTaints:      []corev1.Taint{},
			wantLastApplied: true,
		},
		{
			name: "an unreadable last-applied annotation removes nothing and is rewritten",
			node: nodeSpec{
				labels:      staticLabels(map[string]string{"was-ours": "1"}),
				annotations: staticAnnotations(map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: "{not json"}),
				taints:      []corev1.Taint{taint("was-ours", "", corev1.TaintEffectNoSchedule)},
			},
			group:            group("worker", deckhousev1.NodeTypeStatic, nil),
			wantLabels:       staticLabels(map[string]string{"was-ours": "1"}),
			wantAnnotations:  staticAnnotations(nil),
			wantTaints:       []corev1.Taint{taint("was-ours", "", corev1.TaintEffectNoSchedule)},
			wantNoTaintWrite: true,
			wantLastApplied:  true,
			wantErr:          true,
		},
		{
			name: "a last-applied annotation written by Deckhouse is understood",
			node: nodeSpec{
				labels:      staticLabels(map[string]string{"x": ""}),
				annotations: staticAnnotations(map[string]string{deckhousev1.LastAppliedNodeTemplateAnnotation: `{"annotations":{},"labels":{"x":""},"taints":[{"effect":"NoSchedule","key":"k"}]}`}),
				taints:      []corev1.Taint{taint("k", "", corev1.TaintEffectNoSchedule), taint("foreign", "", corev1.TaintEffectNoSchedule)},
			},
			group:           group("worker", deckhousev1.NodeTypeStatic, nil),
			wantLabels:      staticLabels(nil),
			wantAnnotations: staticAnnotations(nil),
			wantTaints:      []corev1.Taint{taint("foreign", "", corev1.TaintEffectNoSchedule)},
			wantLastApplied: true,
		},
		{
			name: "a node without a known group is not touched",
			node: nodeSpec{
				labels: map[string]string{"foreign": "x"},
				taints: []corev1.Taint{taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)},
			},
			wantLabels:       map[string]string{"foreign": "x"},
			wantTaints:       []corev1.Taint{taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)},
			wantNoTaintWrite: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			groupName := ""
			if tc.group != nil {
				groupName = tc.group.Name
			}
			n := tc.node.node(groupName)
			before := n.DeepCopy()
			res := Compute(n, tc.group)
			if !reflect.DeepEqual(n, before) {
				t.Fatalf("Compute modified its input node")
			}
			if (res.LastAppliedErr != nil) != tc.wantErr {
				t.Errorf("LastAppliedErr = %v, want error: %v", res.LastAppliedErr, tc.wantErr)
			}
			if tc.wantNoTaintWrite && res.Change.Taints != nil {
				t.Errorf("the change writes taints %v; want spec.taints left alone", *res.Change.Taints)
			}
			res.Change.ApplyTo(n)

			gotAnnotations := maps.Clone(n.Annotations)
			last, hasLast := gotAnnotations[deckhousev1.LastAppliedNodeTemplateAnnotation]
			delete(gotAnnotations, deckhousev1.LastAppliedNodeTemplateAnnotation)
			if hasLast != tc.wantLastApplied {
				t.Errorf("last-applied annotation present = %v, want %v", hasLast, tc.wantLastApplied)
			}
			if tc.wantLastApplied {
				var got Applied
				if err := json.Unmarshal([]byte(last), &got); err != nil {
					t.Fatalf("last-applied annotation %q: %v", last, err)
				}
				want := Desired(tc.group)
				if !reflect.DeepEqual(got.Labels, want.Labels) || !reflect.DeepEqual(got.Annotations, want.Annotations) ||
					len(got.Taints) != len(want.Taints) || (len(want.Taints) > 0 && !reflect.DeepEqual(got.Taints, want.Taints)) {
					t.Errorf("last-applied = %+v, want %+v", got, want)
				}
			}
			if !equalMaps(n.Labels, tc.wantLabels) {
				t.Errorf("labels = %v, want %v", n.Labels, tc.wantLabels)
			}
			if !equalMaps(gotAnnotations, tc.wantAnnotations) {
				t.Errorf("annotations = %v, want %v", gotAnnotations, tc.wantAnnotations)
			}
			if !equalTaints(n.Spec.Taints, tc.wantTaints) {
				t.Errorf("taints = %v, want %v", n.Spec.Taints, tc.wantTaints)
			}

			// Idempotence: the node as changed needs nothing more.
			if again := Compute(n, tc.group); !again.Change.Empty() || again.LastAppliedErr != nil {
				t.Errorf("second compute is not empty: %s (err %v)", again.Change, again.LastAppliedErr)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	return len(a) == len(b) && (len(a) == 0 || maps.Equal(a, b))
}

func equalTaints(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// A template change is a sequence: every step's outcome is the input of
// the next, the way the controller meets the node again and again.
func TestComputeSequence(t *testing.T) {
	ng := group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
		Labels: map[string]string{"a": "1"},
		Taints: []deckhousev1.Taint{ngTaint("t1", "", "NoSchedule")},
	})
	n := nodeSpec{
		labels: map[string]string{"foreign": "x"},
		taints: []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule), taint(deckhousev1.UninitializedTaint, "", corev1.TaintEffectNoSchedule)},
	}.node("worker")
	steps := []struct {
		template   deckhousev1.NodeTemplate
		wantLabels map[string]string
		wantTaints []corev1.Taint
	}{
		{
			template:   *ng.Spec.NodeTemplate,
			wantLabels: staticLabels(map[string]string{"foreign": "x", "a": "1"}),
			wantTaints: []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule), taint("t1", "", corev1.TaintEffectNoSchedule)},
		},
		{
			template: deckhousev1.NodeTemplate{Labels: map[string]string{"a": "2", "b": "1"},
				Taints: []deckhousev1.Taint{ngTaint("t1", "v", "NoSchedule"), ngTaint("t2", "", "NoExecute")}},
			wantLabels: staticLabels(map[string]string{"foreign": "x", "a": "2", "b": "1"}),
			wantTaints: []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule),
				taint("t1", "v", corev1.TaintEffectNoSchedule), taint("t2", "", corev1.TaintEffectNoExecute)},
		},
		{
			template:   deckhousev1.NodeTemplate{},
			wantLabels: staticLabels(map[string]string{"foreign": "x"}),
			wantTaints: []corev1.Taint{taint(cloudUninit, "true", corev1.TaintEffectNoSchedule)},
		},
	}
	for i, s := range steps {
		ng.Spec.NodeTemplate = &s.template
		res := Compute(n, ng)
		res.Change.ApplyTo(n)
		if !equalMaps(n.Labels, s.wantLabels) {
			t.Errorf("step %d: labels = %v, want %v", i, n.Labels, s.wantLabels)
		}
		if !equalTaints(n.Spec.Taints, s.wantTaints) {
			t.Errorf("step %d: taints = %v, want %v", i, n.Spec.Taints, s.wantTaints)
		}
		if again := Compute(n, ng); !again.Change.Empty() {
			t.Errorf("step %d: not idempotent: %s", i, again.Change)
		}
	}
}

func TestSkipped(t *testing.T) {
	ng := group("worker", deckhousev1.NodeTypeStatic, &deckhousev1.NodeTemplate{
		Labels: map[string]string{deckhousev1.NodeTypeLabel: "x", "dedicated.example.com/x": "", "bad key": "v",
			"example.com/bad-value": "has spaces"},
		Annotations: map[string]string{deckhousev1.ApprovedAnnotation: "", "example.com/any-value": "spaces are fine here"},
		Taints: []deckhousev1.Taint{ngTaint(deckhousev1.UninitializedTaint, "", "NoSchedule"), ngTaint("dedicated", "", "NoSchedule"),
			ngTaint("dedicated", "bad value", "NoExecute")},
	})
	got := Skipped(ng)
	wantPrefixes := []string{
		"annotation update.node.deckhouse.io/approved (reserved",
		"label bad key (invalid key",
		"label example.com/bad-value (invalid value",
		"label node.deckhouse.io/type (reserved",
		"taint dedicated:NoExecute (invalid value",
		"taint node.deckhouse.io/uninitialized:NoSchedule (reserved",
	}
	if len(got) != len(wantPrefixes) {
		t.Fatalf("Skipped = %q, want %d entries", got, len(wantPrefixes))
	}
	for i, w := range wantPrefixes {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("Skipped[%d] = %q, want prefix %q", i, got[i], w)
		}
	}
	if got := Skipped(group("worker", deckhousev1.NodeTypeStatic, nil)); got != nil {
		t.Errorf("Skipped of a group without a template = %v", got)
	}
	// What Skipped reports is exactly what Desired leaves out.
	d := Desired(ng)
	if _, ok := d.Labels["bad key"]; ok {
		t.Error("Desired keeps an invalid label key")
	}
	if _, ok := d.Labels["example.com/bad-value"]; ok {
		t.Error("Desired keeps an invalid label value")
	}
	if d.Annotations["example.com/any-value"] != "spaces are fine here" {
		t.Error("Desired dropped an annotation whose value is valid")
	}
	if want := []corev1.Taint{taint("dedicated", "", corev1.TaintEffectNoSchedule)}; !equalTaints(d.Taints, want) {
		t.Errorf("Desired taints = %v, want %v", d.Taints, want)
	}
}

// The annotation's format is Deckhouse's: empty fields are {} and [], and
// equal contents always encode to the same string (no rewrite churn).
func TestAppliedEncoding(t *testing.T) {
	if got, want := (Applied{}).encode(), `{"annotations":{},"labels":{},"taints":[]}`; got != want {
		t.Errorf("empty Applied = %s, want %s", got, want)
	}
	a := Applied{Labels: map[string]string{"b": "2", "a": "1"}}
	b := Applied{Labels: map[string]string{"a": "1", "b": "2"}, Annotations: map[string]string{}}
	if a.encode() != b.encode() {
		t.Errorf("equal contents encode differently: %s vs %s", a.encode(), b.encode())
	}
}
