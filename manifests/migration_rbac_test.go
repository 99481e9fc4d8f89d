package manifests_test

import (
	"bytes"
	"io/fs"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/crdmigration"
	"github.com/node-manager/node-manager/manifests"
)

// clusterRoles are the ClusterRoles of the RBAC file of a component
// (manifests/<component>/rbac.yaml), by name.
func clusterRoles(t *testing.T, component string) map[string]rbacv1.ClusterRole {
	t.Helper()
	raw, err := manifests.FS.ReadFile(component + "/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rbacv1.ClusterRole{}
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			t.Fatalf("%s/rbac.yaml: %v", component, err)
		}
		if role.Kind == "ClusterRole" {
			out[role.Name] = role
		}
	}
	return out
}

// TestMigrationRBACIsEachBinarysOwnKinds: the crd-migration ClusterRole of
// each binary grants list and patch on exactly the kinds it migrates
// (crdmigration's resource sets), and reads and patches the status of
// their CRDs only, by name; every deckhouse.io CRD served at several
// versions has exactly one migrator; and no ClusterRole of
// node-manager-controller names sshcredentials, which only
// caps-controller-manager may read.
func TestMigrationRBACIsEachBinarysOwnKinds(t *testing.T) {
	owners := map[string][]string{
		deckhousev1.NodeManagerControllerName: crdmigration.NodeManagerControllerResources,
		deckhousev1.CAPSControllerManagerName: crdmigration.CAPSControllerManagerResources,
	}
	for component, resources := range owners {
		name := "d8:node-manager:" + component + ":crd-migration"
		role, ok := clusterRoles(t, component)[name]
		if !ok {
			t.Errorf("%s/rbac.yaml: no ClusterRole %s", component, name)
			continue
		}
		want := slices.Sorted(slices.Values(resources))
		var crds []string
		for _, r := range resources {
			crds = append(crds, crdmigration.CRDName(r))
		}
		slices.Sort(crds)
		var kinds, watched, status []string
		for _, rule := range role.Rules {
			res := slices.Sorted(slices.Values(rule.Resources))
			names := slices.Sorted(slices.Values(rule.ResourceNames))
			switch {
			case slices.Equal(rule.APIGroups, []string{deckhousev1.GroupName}) && slices.Equal(rule.Verbs, []string{"list", "patch"}) && len(names) == 0:
				kinds = res
			case slices.Equal(rule.APIGroups, []string{"apiextensions.k8s.io"}) && slices.Equal(res, []string{"customresourcedefinitions"}) && slices.Equal(rule.Verbs, []string{"list", "watch"}):
				watched = names
			case slices.Equal(rule.APIGroups, []string{"apiextensions.k8s.io"}) && slices.Equal(res, []string{"customresourcedefinitions/status"}) && slices.Equal(rule.Verbs, []string{"patch"}):
				status = names
			default:
				t.Errorf("%s: rule %+v is none of list and patch of its kinds, list and watch of their CRDs by name, patch of their status by name", name, rule)
			}
		}
		if !slices.Equal(kinds, want) {
			t.Errorf("%s: list and patch on %v, want the kinds %s migrates: %v", name, kinds, component, want)
		}
		if !slices.Equal(watched, crds) || !slices.Equal(status, crds) {
			t.Errorf("%s: list and watch of the CRDs %v and patch of the status of %v, want both by name exactly %v", name, watched, status, crds)
		}
	}

	// Every deckhouse.io CRD served at several versions has one migrator.
	err := fs.WalkDir(manifests.FS, "crds", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, "kustomization.yaml") {
			return err
		}
		raw, err := manifests.FS.ReadFile(path)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return err
		}
		if crd.Spec.Group != deckhousev1.GroupName || len(crd.Spec.Versions) < 2 {
			return nil
		}
		var by []string
		for component, resources := range owners {
			if slices.Contains(resources, crd.Spec.Names.Plural) {
				by = append(by, component)
			}
		}
		if len(by) != 1 {
			t.Errorf("%s (%s) is served at %d versions and migrated by %v, want exactly one binary", crd.Name, path, len(crd.Spec.Versions), by)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for name, role := range clusterRoles(t, deckhousev1.NodeManagerControllerName) {
		for _, rule := range role.Rules {
			for _, r := range rule.Resources {
				if strings.HasPrefix(r, "sshcredentials") || r == "*" {
					t.Errorf("node-manager-controller's ClusterRole %s grants %v on %s: only caps-controller-manager may read SSHCredentials", name, rule.Verbs, r)
				}
			}
		}
	}
}
