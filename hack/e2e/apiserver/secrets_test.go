package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestFailingConfigurationNeverLeaksRegistryCredentials plants registry
// credentials in the cluster configuration, applies a NodeGroupConfiguration
// that puts them into its render error every way it easily can, and looks
// for them where a render failure goes: the NodeGroupConfiguration's and
// every NodeGroup's status, Events, the server's log and its metrics.
func TestFailingConfigurationNeverLeaksRegistryCredentials(t *testing.T) {
	ctx := framework.Context(t)
	user, password := "leak-user", fmt.Sprintf("Planted-%d", time.Now().UnixNano())
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	setClusterConfiguration(t, `
apiVersion: deckhouse.io/v1
kind: ClusterConfiguration
registry:
  mirrors:
    - {host: docker.io, endpoints: ["https://mirror.corp:5000"], username: `+user+`, password: `+password+`}
`)
	ngc := f.TestConfiguration(t, "leak.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 150,
		Content: `{{ $m := index .registry.mirrors 0 }}{{ fail (printf "mirrors %s auth %s decoded %s" (toJson .registry) $m.auth (b64dec $m.auth)) }}`,
	})
	cond := waitConfigProcessed(t, ngc.Name, ngc.Generation)
	if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "[redacted]") {
		t.Fatalf("Rendered condition: %+v, want a redacted failure", cond)
	}
	framework.Poll(t, "a Warning event about leak.sh", func(ctx context.Context) (bool, error) {
		evs, err := f.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("regarding.name", ngc.Name).String()})
		return err == nil && len(evs.Items) > 0, err
	})
	framework.Poll(t, "NodeGroup worker reports the failure", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "worker", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := findCondition(ng.Status.Conditions, "Rendered")
		return c != nil && strings.Contains(c.Message, "leak.sh"), nil
	})

	places := map[string]string{}
	dump := func(what string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		places[what] = string(data)
	}
	ngcNow, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, ngc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dump("NodeGroupConfiguration status", ngcNow.Status)
	groups, err := f.NM.DeckhouseV1().NodeGroups().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ng := range groups.Items {
		dump("NodeGroup "+ng.Name+" status", ng.Status)
	}
	events, err := f.Kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dump("events.k8s.io Events", events.Items)
	coreEvents, err := f.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dump("core Events", coreEvents.Items)
	logData, err := os.ReadFile(filepath.Join(f.CP.Dir(), "bashible-apiserver-"+replica.Identity+".log"))
	if err != nil {
		t.Fatal(err)
	}
	places["server log"] = string(logData)
	_, metrics := direct(t, replica.Port, "/metrics")
	places["metrics"] = string(metrics)

	if !strings.Contains(places["server log"], "leak.sh") {
		t.Errorf("the server log does not mention the failure at all: the search below would prove nothing")
	}
	for what, text := range places {
		for _, secret := range []string{password, auth, user + ":" + password, user} {
			if strings.Contains(text, secret) {
				t.Errorf("%s carries the credential %q", what, secret)
			}
		}
	}
}
