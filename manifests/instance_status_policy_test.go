package manifests_test

import (
	"reflect"
	"strings"
	"testing"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/manifests"
)

// bashibleFields are the Instance status fields a node may write (what
// bashible reports); the policy compares every other field with oldObject.
var bashibleFields = map[string]bool{"conditions": true, "lastRun": true, "lastFailure": true, "bashibleStatus": true, "message": true}

// TestInstanceStatusPolicyCoversEveryField: a field added to InstanceStatus
// is either one bashible reports or one the node-writes policy keeps from
// nodes; without this, a new field would be writable by every node.
func TestInstanceStatusPolicyCoversEveryField(t *testing.T) {
	policy, err := manifests.FS.ReadFile("policies/instance-status-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[deckhousev1alpha1.InstanceStatus]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if bashibleFields[name] && name != "conditions" {
			continue
		}
		if name == "conditions" {
			// Conditions are shared: the node's types are filtered out, the rest compared.
			name += ".orValue([]).filter("
		} else {
			name += " == oldObject.?status.?" + name
		}
		if !strings.Contains(string(policy), "object.?status.?"+name) {
			t.Errorf("InstanceStatus field %q: the policy neither lets nodes write it (bashible's fields) nor compares it with oldObject; add it to one", typ.Field(i).Name)
		}
	}
}
