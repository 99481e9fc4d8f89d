package manifests_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/conversion"
	"github.com/node-manager/node-manager/manifests"
)

// schemaOfVersion validates objects against one version of a generated CRD as
// kube-apiserver does on create: unknown fields pruned (kubectl's strict
// field validation refuses them), defaults applied, then the OpenAPI
// schema and the CEL rules.
type schemaOfVersion struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *schemacel.Validator
}

func loadCRDVersions(t *testing.T, file string) map[string]schemaOfVersion {
	t.Helper()
	data, err := manifests.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	out := map[string]schemaOfVersion{}
	for _, v := range crd.Spec.Versions {
		internal := &apiextensionsinternal.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			t.Fatalf("%s %s: %v", file, v.Name, err)
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(internal)
		if err != nil {
			t.Fatal(err)
		}
		out[v.Name] = schemaOfVersion{structural: s, validator: validator, cel: schemacel.NewValidator(s, true, celconfig.PerCallLimit)}
	}
	return out
}

// admit is what kube-apiserver makes of obj: the fields it would prune and
// the errors that refuse it.
func (v schemaOfVersion) admit(obj map[string]any) (pruned []string, errs field.ErrorList) {
	opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
	pruned = pruning.PruneWithOptions(obj, v.structural, true, opts)
	defaulting.Default(obj, v.structural)
	errs = apiservervalidation.ValidateCustomResource(nil, obj, v.validator)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return pruned, append(errs, celErrs...)
}

// inertWarnings are the warnings of the inert-fields policy for a v1
// NodeGroup (the policy matches v1; kube-apiserver converts a request at
// another version to v1 before evaluating it).
func inertWarnings(t *testing.T, obj map[string]any) []string {
	t.Helper()
	data, err := manifests.FS.ReadFile("policies/nodegroup-inert-fields.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err == nil && tm.Kind == "ValidatingAdmissionPolicy" {
			if err := yaml.UnmarshalStrict(doc, &policy); err != nil {
				t.Fatal(err)
			}
		}
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range policy.Spec.Validations {
		ast, iss := env.Compile(v.Expression)
		if iss.Err() != nil {
			t.Fatalf("compile %q: %v", v.Expression, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		res, _, err := p.Eval(map[string]any{"object": obj})
		if err != nil {
			t.Fatalf("evaluate %q: %v", v.Expression, err)
		}
		if res.Value() == false {
			path, _, _ := strings.Cut(strings.TrimSpace(v.Message), ":")
			out = append(out, path)
		}
	}
	return out
}

func nodeGroupObject(t *testing.T, doc string) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	// As kube-apiserver decodes JSON: integers are int64.
	u := &unstructured.Unstructured{Object: obj}
	data, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u.Object
}

// TestDeprecatedNodeGroupFieldsAreAcceptedAndWarnedAbout: every field
// Deckhouse still accepts on a NodeGroup though it is deprecated, and the
// older versions' own fields, are accepted at their version as Deckhouse
// accepts them (nothing pruned, nothing refused), the group they make at
// v1 is valid there too, and the inert-fields policy warns about each.
func TestDeprecatedNodeGroupFieldsAreAcceptedAndWarnedAbout(t *testing.T) {
	versions := loadCRDVersions(t, "crds/deckhouse.io_nodegroups.yaml")
	for _, tc := range []struct {
		name, doc string
		warn      []string
	}{
		{"v1 cri.type Docker with cri.docker", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: docker}
spec:
  nodeType: Static
  cri: {type: Docker, docker: {maxConcurrentDownloads: 10, manage: true}}
`, []string{"spec.cri.type", "spec.cri.docker"}},
		{"v1 cri.docker left beside containerd", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: leftover}
spec:
  nodeType: Static
  cri: {type: Containerd, docker: {manage: false}}
`, []string{"spec.cri.docker"}},
		{"v1 cloudInstances.quickShutdown and standbyHolder.notHeldResources", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: cloud}
spec:
  nodeType: CloudEphemeral
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: big}
    minPerZone: 1
    maxPerZone: 2
    quickShutdown: true
    standbyHolder: {notHeldResources: {cpu: 1500m, memory: 1.5Gi}}
`, []string{"spec.cloudInstances.classReference", "spec.cloudInstances.standbyHolder",
			"spec.cloudInstances.standbyHolder.notHeldResources", "spec.cloudInstances.quickShutdown"}},
		{"v1 notHeldResources as numbers", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: cloud}
spec:
  nodeType: CloudEphemeral
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: big}
    minPerZone: 0
    maxPerZone: 0
    standbyHolder: {notHeldResources: {cpu: 2, memory: 128974848}}
`, []string{"spec.cloudInstances.classReference", "spec.cloudInstances.standbyHolder",
			"spec.cloudInstances.standbyHolder.notHeldResources"}},
		{"v1 gpu.exclusive", `
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: gpu}
spec:
  nodeType: Static
  gpu: {sharing: Exclusive, exclusive: {}}
`, []string{"spec.gpu"}},
		{"v1alpha1 with everything of its own", `
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata: {name: old}
spec:
  nodeType: Cloud
  kubernetesVersion: "1.19"
  docker: {maxConcurrentDownloads: 10, manage: true}
  static: {internalNetworkCIDRs: [10.0.0.0/8]}
  cri: {type: Docker}
  kubelet: {maxPods: 150, rootDir: /mnt/data/kubelet, containerLogMaxSize: 50Mi, containerLogMaxFiles: 4, seccompDefault: true}
  cloudInstances:
    classReference: {kind: OpenStackInstanceClass, name: small}
    zones: [Helsinki, Espoo, Tampere]
    minPerZone: 1
    maxPerZone: 2
    standby: 10%
    standbyHolder: {notHeldResources: {cpu: "2", memory: 512M}}
  nodeTemplate:
    labels: {environment: production, app: warp-drive-ai}
    annotations: {ai.fleet.com/discombobulate: "true"}
    taints: [{effect: NoExecute, key: ship-class, value: frigate}]
  chaos: {mode: DrainAndDelete, period: 24h}
  operatingSystem: {manageKernel: true}
  disruptions:
    approvalMode: Automatic
    automatic: {drainBeforeApproval: false, windows: [{from: "06:00", to: "08:00", days: [Tue, Sun]}]}
`, []string{"spec.chaos.mode", "spec.operatingSystem.manageKernel", "spec.cri.type", "spec.cri.docker",
			"spec.cloudInstances.classReference", "spec.cloudInstances.standby", "spec.cloudInstances.standbyHolder",
			"spec.cloudInstances.standbyHolder.notHeldResources"}},
		{"v1alpha2 Hybrid with Docker", `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata: {name: hybrid}
spec:
  nodeType: Hybrid
  cri: {type: Docker, docker: {maxConcurrentDownloads: 3}}
  kubelet: {maxPods: 110}
  disruptions: {approvalMode: Manual}
`, []string{"spec.cri.type", "spec.cri.docker"}},
		{"v1alpha2 NotManaged", `
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata: {name: crio}
spec:
  nodeType: Static
  cri: {type: NotManaged, notManaged: {criSocketPath: /var/run/crio/crio.sock}}
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := nodeGroupObject(t, tc.doc)
			u := &unstructured.Unstructured{Object: obj}
			version := strings.TrimPrefix(u.GetAPIVersion(), "deckhouse.io/")
			pruned, errs := versions[version].admit(obj)
			if len(pruned) > 0 || len(errs) > 0 {
				t.Fatalf("at %s: pruned %v, refused: %v", version, pruned, errs.ToAggregate())
			}
			k, err := conversion.For(deckhousev1.SchemeGroupVersion.WithKind("NodeGroup").GroupKind())
			if err != nil {
				t.Fatal(err)
			}
			hub, err := k.Convert(u, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if pruned, errs := versions["v1"].admit(hub.Object); len(pruned) > 0 || len(errs) > 0 {
				t.Fatalf("converted to v1: pruned %v, refused: %v", pruned, errs.ToAggregate())
			}
			got := inertWarnings(t, hub.Object)
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.warn))
			if !slices.Equal(got, want) {
				t.Errorf("the inert-fields policy warns about %v, want %v", got, want)
			}
		})
	}
}

// TestOlderNodeGroupVersionsValidateAsV1Does: what reaches a node's shell
// is refused at v1alpha1 and v1alpha2 exactly as at v1.
func TestOlderNodeGroupVersionsValidateAsV1Does(t *testing.T) {
	versions := loadCRDVersions(t, "crds/deckhouse.io_nodegroups.yaml")
	nodeType := map[string]string{"v1": "Static", "v1alpha1": "Static", "v1alpha2": "Static"}
	for _, tc := range []struct {
		name, spec, refusal string
	}{
		{"a reserved label", `nodeTemplate: {labels: {node.deckhouse.io/group: other}}`, "reserved for node-manager"},
		{"a reserved annotation", `nodeTemplate: {annotations: {update.node.deckhouse.io/approved: ""}}`, "reserved for node-manager"},
		{"a taint key with a shell character", `nodeTemplate: {taints: [{key: "a;reboot", effect: NoSchedule}]}`, "spec.nodeTemplate.taints[0].key"},
		{"a taint value with a space", `nodeTemplate: {taints: [{key: a, value: "x y", effect: NoSchedule}]}`, "spec.nodeTemplate.taints[0].value"},
		{"duplicate taints", `nodeTemplate: {taints: [{key: a, effect: NoSchedule}, {key: a, value: b, effect: NoSchedule}]}`, "only one taint with the same key and effect"},
		{"kubelet.rootDir /", `kubelet: {rootDir: /}`, "spec.kubelet.rootDir"},
		{"kubelet.rootDir with a quote", `kubelet: {rootDir: "/var/lib/kube'let"}`, "spec.kubelet.rootDir"},
		{"containerLogMaxSize with a newline", `kubelet: {containerLogMaxSize: "50Mi\nx"}`, "spec.kubelet.containerLogMaxSize"},
		{"maxPods 0", `kubelet: {maxPods: 0}`, "spec.kubelet.maxPods"},
		{"a chaos period that is no duration", `chaos: {period: "6h; rm"}`, "spec.chaos.period"},
		{"a disruption window out of range", `disruptions: {approvalMode: Automatic, automatic: {windows: [{from: "25:00", to: "08:00"}]}}`, "from"},
		{"containerd settings with another runtime", `cri: {type: NotManaged, containerd: {maxConcurrentDownloads: 3}}`, "cri.containerd is allowed only when cri.type is Containerd"},
	} {
		for version, v := range versions {
			t.Run(tc.name+" at "+version, func(t *testing.T) {
				obj := nodeGroupObject(t, "apiVersion: deckhouse.io/"+version+"\nkind: NodeGroup\nmetadata: {name: g}\nspec:\n  nodeType: "+
					nodeType[version]+"\n  "+tc.spec+"\n")
				_, errs := v.admit(obj)
				if errs.ToAggregate() == nil || !strings.Contains(errs.ToAggregate().Error(), tc.refusal) {
					t.Errorf("want a refusal naming %q, got %v", tc.refusal, errs.ToAggregate())
				}
			})
		}
	}
	// The socket path of a runtime node-manager does not run, at the
	// versions that have it.
	for _, version := range []string{"v1", "v1alpha2"} {
		obj := nodeGroupObject(t, "apiVersion: deckhouse.io/"+version+"\nkind: NodeGroup\nmetadata: {name: g}\nspec:\n  nodeType: Static\n"+
			"  cri: {type: NotManaged, notManaged: {criSocketPath: \"/run/x.sock;reboot\"}}\n")
		if _, errs := versions[version].admit(obj); errs.ToAggregate() == nil || !strings.Contains(errs.ToAggregate().Error(), "criSocketPath") {
			t.Errorf("%s: a socket path with a shell character: got %v, want a refusal", version, errs.ToAggregate())
		}
	}
}
