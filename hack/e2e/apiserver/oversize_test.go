package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// randomHeredoc is n bytes or so of valid shell that gzip cannot shrink
// much: a heredoc of random base64.
func randomHeredoc(t *testing.T, n int) string {
	t.Helper()
	raw := make([]byte, n*3/4)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	return "cat > /dev/null <<'EOF'\n" + base64.StdEncoding.EncodeToString(raw) + "\nEOF\n"
}

func TestBundleTooLargeForASecretIsReportedNotServed(t *testing.T) {
	ctx := framework.Context(t)
	if _, err := f.CreateGroup(ctx, framework.NewGroup("huge")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteGroup(t, "huge") })
	f.WaitChecksum(t, "huge", func(s string) bool { return s != "" })

	// Three NGCs within the CRD's 512 KiB content limit: about 1.5 MB of
	// script that encodes to more than a Secret holds. Created one by one,
	// the first one or two may well be published: the last good bundle is
	// whatever was published before the group grew too large.
	var names []string
	for i := range 3 {
		ngc := f.TestConfiguration(t, fmt.Sprintf("huge-%d.sh", i), deckhousev1alpha1.NodeGroupConfigurationSpec{
			NodeGroups: []string{"huge"}, Bundles: []string{"*"}, Weight: 94, Content: randomHeredoc(t, 500_000),
		})
		names = append(names, ngc.Name)
	}

	var cond *metav1.Condition
	framework.Poll(t, "group huge reported as too large", func(ctx context.Context) (bool, error) {
		ng, err := f.NM.DeckhouseV1().NodeGroups().Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(ng.Status.Conditions, bundles.ConditionRendered)
		return cond != nil && cond.Reason == bundles.ReasonBundleTooLarge, nil
	})
	if cond.Status != metav1.ConditionFalse {
		t.Errorf("Rendered is %s, want False", cond.Status)
	}
	for _, want := range []string{"bytes encoded", fmt.Sprintf("%d bytes", bundles.MaxEncodedBundleBytes), "094_huge-", "last good bundle"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("the NodeGroup's message should say %q: %s", want, cond.Message)
		}
	}
	for _, name := range names {
		framework.Poll(t, "NodeGroupConfiguration "+name+" reported as too large", func(ctx context.Context) (bool, error) {
			ngc, err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(ngc.Status.Conditions, bundles.ConditionRendered)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == bundles.ReasonBundleTooLarge && strings.Contains(c.Message, "huge"), nil
		})
	}
	lastGood := f.Bundle(t, "huge")
	steps := 0
	for name := range lastGood.Data {
		if strings.HasPrefix(name, "094_huge-") {
			steps++
		}
	}
	if steps == len(names) {
		t.Errorf("group huge serves all %d oversize steps (checksum %s)", steps, checksum0(lastGood))
	}
	// Nothing else is published while the group stays too large.
	time.Sleep(2 * time.Second)
	if after := f.Bundle(t, "huge"); after.ResourceVersion != lastGood.ResourceVersion {
		t.Errorf("group huge's bundle changed from resourceVersion %s to %s while it is too large", lastGood.ResourceVersion, after.ResourceVersion)
	}
	code, metrics := direct(t, replica.Port, "/metrics")
	if code != http.StatusOK || !strings.Contains(string(metrics), `bashible_apiserver_bundle_too_large{group="huge"} 1`) {
		t.Errorf("the leader's /metrics should have bashible_apiserver_bundle_too_large{group=\"huge\"} 1")
	}
}
