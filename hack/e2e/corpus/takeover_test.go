package corpus

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/stack"
)

// storedVersions reads each deckhouse.io CRD's storage version and
// status.storedVersions, by kind.
func storedVersions(ctx context.Context, dyn dynamic.Interface) (map[string][2]string, error) {
	list, err := dyn.Resource(crdGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][2]string{}
	for _, crd := range list.Items {
		if g, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); g != deckhousev1.GroupName {
			continue
		}
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		storage := ""
		for _, v := range versions {
			if m, _ := v.(map[string]any); m["storage"] == true {
				storage, _ = m["name"].(string)
			}
		}
		out[kind] = [2]string{storage, strings.Join(stored, ",")}
	}
	return out, nil
}

// storedAt is the apiVersion etcd holds for the cluster-scoped
// deckhouse.io object plural/name (read through etcd's JSON gateway).
func storedAt(ctx context.Context, cp *controlplane.ControlPlane, plural, name string) (string, error) {
	key := base64.StdEncoding.EncodeToString([]byte("/registry/" + deckhousev1.GroupName + "/" + plural + "/" + name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.EtcdURL()+"/v3/kv/range", strings.NewReader(`{"key":"`+key+`"}`))
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("read %s/%s from etcd: %w", plural, name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Kvs []struct{ Value []byte }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Kvs) != 1 {
		return "", fmt.Errorf("read %s/%s from etcd: %v (%d keys)", plural, name, err, len(out.Kvs))
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(out.Kvs[0].Value, &obj); err != nil {
		return "", fmt.Errorf("%s/%s in etcd is not JSON: %w", plural, name, err)
	}
	return obj.APIVersion, nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// versions is the CRD's spec.versions.
func versions(crd *unstructured.Unstructured) []any {
	v, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	return v
}

// setStorage marks want as the CRD name's storage version (and no other),
// retrying on a conflict.
func setStorage(ctx context.Context, dyn dynamic.Interface, name, want string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		current := ""
		for _, v := range versions {
			if m, _ := v.(map[string]any); m["storage"] == true {
				current, _ = m["name"].(string)
			}
		}
		if want == current {
			return nil
		}
		for _, v := range versions {
			m, _ := v.(map[string]any)
			m["storage"] = m["name"] == want
		}
		if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
			return err
		}
		if _, err := dyn.Resource(crdGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking %s storage version of CRD %s: %w", want, name, err)
		}
		return nil
	})
}

// capsKinds are the deckhouse.io kinds caps-controller-manager migrates
// (SSHCredentials hold private keys, which it alone may read);
// node-manager-controller migrates the others.
var capsKinds = map[string]bool{"SSHCredentials": true, "StaticInstance": true}

// waitMigrated waits until every deckhouse.io CRD of a kind mine says yes
// to lists its storage version alone in storedVersions, and returns what
// storedVersions reads (the last read when it times out).
func waitMigrated(ctx context.Context, dyn dynamic.Interface, mine func(kind string) bool) (map[string][2]string, error) {
	var migrated map[string][2]string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if migrated, err = storedVersions(ctx, dyn); err != nil {
			return false, nil
		}
		for kind, sv := range migrated {
			if mine(kind) && sv[0] != sv[1] {
				return false, nil
			}
		}
		return true, nil
	})
	return migrated, err
}

// storedVersionsManagers are the field managers that own the CRD name's
// status.storedVersions.
func storedVersionsManagers(ctx context.Context, dyn dynamic.Interface, name string) ([]string, error) {
	crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range crd.GetManagedFields() {
		if m.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]any
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &fields); err != nil {
			return nil, fmt.Errorf("CRD %s: managedFields of %s: %w", name, m.Manager, err)
		}
		if _, ok := fields["f:status"]["f:storedVersions"]; ok {
			out = append(out, m.Manager)
		}
	}
	return out, nil
}

// dynamicAs is a client of the control plane authenticated as user.
func dynamicAs(cp *controlplane.ControlPlane, user string) (dynamic.Interface, error) {
	certPEM, keyPEM, err := cp.IssueClientCert(user)
	if err != nil {
		return nil, err
	}
	cfg := cp.AdminConfig()
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return dynamic.NewForConfig(cfg)
}

// TestTakeOverFromDeckhouse: a cluster that ran Deckhouse holds
// Deckhouse's CRDs (testdata/deckhouse-crds, as published) and objects
// stored at their versions; node-manager's CRDs installed over them are
// accepted, every stored object reads at every version node-manager
// serves (through bashible-apiserver's conversion webhook), and the storage
// migration leaves each CRD's storedVersions at its storage version with
// every object stored there (as etcd shows): node-manager-controller
// migrates NodeGroups, Instances and NodeUsers and may not read
// SSHCredentials, caps-controller-manager migrates SSHCredentials and
// StaticInstances (the field manager of each CRD's storedVersions says
// who did). It runs on a control plane of its own, since it replaces
// the CRDs every other test of the suite uses.
func TestTakeOverFromDeckhouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	applier, err := cp.NewApplier()
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	// Deckhouse's CRDs, and objects at each version they serve.
	crdFiles, err := filepath.Glob(filepath.Join("testdata", "deckhouse-crds", "*.yaml"))
	if err != nil || len(crdFiles) == 0 {
		t.Fatalf("no Deckhouse CRDs in testdata/deckhouse-crds: %v", err)
	}
	// As Deckhouse installs them (helm: create, not a server-side apply,
	// which refuses their x-doc-* schema extensions).
	crdObjs, err := controlplane.ReadManifests(crdFiles...)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crdObjs {
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("installing Deckhouse's CRD %s: %v", crd.GetName(), err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crdObjs {
			got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			if !slices.ContainsFunc(conds, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("Deckhouse's CRDs did not become Established: %v", err)
	}
	served, err := deckhouseCRDs(ctx, dyn)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loadVersioned(filepath.Join("testdata", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	// Deckhouse's Instances have no spec: node-manager-controller and
	// Deckhouse write them.
	objs = append(objs, versioned{File: "(the test)", Object: &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deckhouse.io/v1alpha1", "kind": "Instance", "metadata": map[string]any{"name": "static-0"}}}})
	// Deckhouse's NodeGroup CRD serves v1alpha1, v1alpha2 and v1 with v1
	// as storage and sets no conversion, so an object written at v1alpha1
	// would be stored relabelled v1, unconverted: a state no cluster is in.
	// A cluster that ran Deckhouse while v1alpha1 (then v1alpha2) was
	// storage holds NodeGroups stored at those versions, and lists them in
	// status.storedVersions. The test makes that history: it writes
	// NodeGroups oldest version first, each while its version is storage
	// (the flag moved on the installed copy; the testdata file stays as
	// published), then puts the flags back as published.
	const historyKind = "NodeGroup"
	versionOrder := map[string]int{}
	var historyCRD *unstructured.Unstructured
	for _, crd := range crdObjs {
		if kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind"); kind != historyKind {
			continue
		}
		historyCRD = crd
		for i, v := range versions(crd) {
			m, _ := v.(map[string]any)
			name, _ := m["name"].(string)
			versionOrder[name] = i
		}
	}
	if historyCRD == nil {
		t.Fatalf("no Deckhouse CRD for %s in testdata/deckhouse-crds", historyKind)
	}
	slices.SortStableFunc(objs, func(a, b versioned) int {
		return versionOrder[a.Object.GroupVersionKind().Version] - versionOrder[b.Object.GroupVersionKind().Version]
	})
	type stored struct {
		kind, name, version string
	}
	var kept []stored
	for _, v := range objs {
		obj := v.Object.DeepCopy()
		gvk := obj.GroupVersionKind()
		crd, ok := served[gvk.Kind]
		if !ok || !slices.Contains(crd.Served, gvk.Version) {
			continue
		}
		obj.SetName("dh-" + gvk.Version + "-" + obj.GetName())
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: crd.Plural}
		if gvk.Kind == historyKind {
			// Deckhouse's published schema admits only today's Kubernetes
			// versions at every NodeGroup version; a cluster that wrote the
			// example at v1alpha1 wrote the version of its time ("1.16"),
			// which storage kept. The test writes the oldest the published
			// schema of that version admits.
			if _, set, _ := unstructured.NestedString(obj.Object, "spec", "kubernetesVersion"); set {
				for _, cv := range versions(historyCRD) {
					m, _ := cv.(map[string]any)
					if m["name"] != gvk.Version {
						continue
					}
					enum, _, _ := unstructured.NestedSlice(m, "schema", "openAPIV3Schema", "properties", "spec", "properties", "kubernetesVersion", "enum")
					if len(enum) > 0 {
						_ = unstructured.SetNestedField(obj.Object, enum[0], "spec", "kubernetesVersion")
					}
				}
			}
			if err := setStorage(ctx, dyn, historyCRD.GetName(), gvk.Version); err != nil {
				t.Fatal(err)
			}
			var last error
			// kube-apiserver takes a moment to store at a new storage
			// version: an object stored at another is written again.
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				if _, last = dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); apierrors.IsInvalid(last) {
					return false, last
				} else if last != nil {
					return false, nil
				}
				at, err := storedAt(ctx, cp, crd.Plural, obj.GetName())
				if err != nil {
					return false, err
				}
				if at == obj.GetAPIVersion() {
					return true, nil
				}
				last = fmt.Errorf("stored at %s, want %s", at, obj.GetAPIVersion())
				return false, dyn.Resource(gvr).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			}); err != nil {
				t.Errorf("%s: storing %s %s at %s with Deckhouse's CRD: %v (%v)", v.File, gvk.Kind, obj.GetName(), gvk.Version, last, err)
				continue
			}
		} else if _, err := dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Errorf("%s: Deckhouse's CRD refuses %s %s: %v", v.File, obj.GetAPIVersion(), gvk.Kind, err)
			continue
		}
		kept = append(kept, stored{gvk.Kind, obj.GetName(), gvk.Version})
	}
	// The storage flag back as Deckhouse publishes it.
	published := ""
	for _, v := range versions(historyCRD) {
		if m, _ := v.(map[string]any); m["storage"] == true {
			published, _ = m["name"].(string)
		}
	}
	if err := setStorage(ctx, dyn, historyCRD.GetName(), published); err != nil {
		t.Fatal(err)
	}
	before, err := storedVersions(ctx, dyn)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Deckhouse's CRDs: %d objects stored; storage and storedVersions by kind: %v", len(kept), before)
	for _, o := range kept {
		if o.kind == historyKind && !slices.Contains(strings.Split(before[historyKind][1], ","), o.version) {
			t.Fatalf("%s %s was stored at %s, but status.storedVersions lists %s", o.kind, o.name, o.version, before[historyKind][1])
		}
	}

	// node-manager's CRDs over them.
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := applier.ApplyFiles(ctx, filepath.Join(root, "manifests", "crds")); err != nil {
		t.Fatalf("installing node-manager's CRDs over Deckhouse's: %v", err)
	}
	after, err := storedVersions(ctx, dyn)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node-manager's CRDs accepted; storage and storedVersions by kind: %v", after)

	// bashible-apiserver serves the conversion webhook.
	if err := stack.InstallAPIServer(ctx, root, applier); err != nil {
		t.Fatal(err)
	}
	replica, err := stack.StartRegistered(ctx, cp, stack.APIServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	ours, err := deckhouseCRDs(ctx, dyn)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	for _, s := range kept {
		crd := ours[s.kind]
		for _, version := range crd.Served {
			gvr := schema.GroupVersionResource{Group: deckhousev1.GroupName, Version: version, Resource: crd.Plural}
			var last error
			// kube-apiserver takes a moment to use the CRDs as pointed.
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				var got *unstructured.Unstructured
				got, last = dyn.Resource(gvr).Get(ctx, s.name, metav1.GetOptions{})
				if last == nil && got.GetAPIVersion() != deckhousev1.GroupName+"/"+version {
					last = fmt.Errorf("answered %s", got.GetAPIVersion())
				}
				return last == nil, nil
			})
			if err != nil {
				t.Errorf("%s %s stored at %s: read at %s: %v", s.kind, s.name, s.version, version, last)
				continue
			}
			reads++
		}
	}
	t.Logf("%d stored objects read at every served version: %d reads", len(kept), reads)

	// Before the migration: what etcd holds.
	atOld := 0
	for _, o := range kept {
		got, err := storedAt(ctx, cp, ours[o.kind].Plural, o.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != deckhousev1.GroupName+"/"+after[o.kind][0] {
			atOld++
		}
	}
	t.Logf("before the migration, %d of %d objects are stored at a version other than their storage version", atOld, len(kept))
	if atOld == 0 {
		t.Fatal("no object is stored at an older version: there is nothing to migrate and the test would prove nothing")
	}

	// node-manager-controller migrates its own kinds, and no other.
	env := &stack.Environment{CP: cp, Root: root, Applier: applier}
	if err := stack.InstallController(ctx, root, applier); err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallPolicies(ctx, root, applier); err != nil {
		t.Fatal(err)
	}
	controller, err := env.StartController(ctx, stack.ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer controller.Stop()
	var migrated map[string][2]string
	if migrated, err = waitMigrated(ctx, dyn, func(kind string) bool { return !capsKinds[kind] }); err != nil {
		t.Fatalf("storedVersions after node-manager-controller's migration: %v, want its kinds' at their storage version (%v)", migrated, err)
	}
	t.Logf("after node-manager-controller's migration: %v", migrated)
	for kind := range capsKinds {
		if sv := after[kind]; sv[0] != sv[1] && migrated[kind] != after[kind] {
			t.Errorf("%s: storedVersions %v after node-manager-controller's migration, was %v: node-manager-controller migrated caps-controller-manager's kind", kind, migrated[kind], sv)
		}
	}

	// caps-controller-manager migrates SSHCredentials and StaticInstances:
	// it alone may read SSHCredentials.
	if err := stack.InstallCAPS(ctx, root, applier); err != nil {
		t.Fatal(err)
	}
	caps, err := env.StartCAPS(ctx, stack.ControllerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer caps.Stop()
	if migrated, err = waitMigrated(ctx, dyn, func(string) bool { return true }); err != nil {
		t.Fatalf("storedVersions after the migration: %v, want each at its storage version (%v)", migrated, err)
	}
	t.Logf("after caps-controller-manager's migration: %v", migrated)

	// Who set each CRD's storedVersions: the field manager is the
	// component's name.
	for kind, crd := range ours {
		if sv := after[kind]; sv[0] == sv[1] {
			continue
		}
		want := deckhousev1.NodeManagerControllerName
		if capsKinds[kind] {
			want = deckhousev1.CAPSControllerManagerName
		}
		got, err := storedVersionsManagers(ctx, dyn, crd.Plural+"."+deckhousev1.GroupName)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("%s: status.storedVersions set by %v, want %s", kind, got, want)
		}
	}

	// Every object is stored at its kind's storage version now (etcd).
	for _, o := range kept {
		got, err := storedAt(ctx, cp, ours[o.kind].Plural, o.name)
		if err != nil {
			t.Fatal(err)
		}
		if want := deckhousev1.GroupName + "/" + migrated[o.kind][0]; got != want {
			t.Errorf("%s %s is stored at %s after the migration, want %s", o.kind, o.name, got, want)
		}
	}

	// node-manager-controller may neither read nor write SSHCredentials
	// (RBAC); caps-controller-manager may rewrite them unchanged, never
	// change one (manifests/policies/caps-controller-manager-migration.yaml).
	asController, err := dynamicAs(cp, stack.ControllerUser)
	if err != nil {
		t.Fatal(err)
	}
	asCAPS, err := dynamicAs(cp, stack.CAPSUser)
	if err != nil {
		t.Fatal(err)
	}
	creds := schema.GroupVersionResource{Group: deckhousev1.GroupName, Version: migrated["SSHCredentials"][0], Resource: ours["SSHCredentials"].Plural}
	if _, err := asController.Resource(creds).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node-manager-controller listing SSHCredentials: %v, want Forbidden (only caps-controller-manager may read them)", err)
	}
	for _, o := range kept {
		if o.kind != "SSHCredentials" {
			continue
		}
		if _, err := asController.Resource(creds).Patch(ctx, o.name, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node-manager-controller rewriting SSHCredentials %s: %v, want Forbidden", o.name, err)
		}
		var changed error
		// A new policy takes kube-apiserver about a second to enforce.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			_, changed = asCAPS.Resource(creds).Patch(ctx, o.name, types.MergePatchType, []byte(`{"spec":{"user":"someone-else"}}`), metav1.PatchOptions{})
			return changed != nil, nil
		})
		if changed == nil || !strings.Contains(changed.Error(), "may only rewrite") {
			t.Errorf("caps-controller-manager changing SSHCredentials %s: %v, want the migration policy's refusal", o.name, changed)
		}
		if _, err := asCAPS.Resource(creds).Patch(ctx, o.name, types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("caps-controller-manager rewriting SSHCredentials %s unchanged: %v", o.name, err)
		}
	}
	t.Logf("take-over done in %s", time.Since(start).Round(100*time.Millisecond))
}
