package apiserver

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	"github.com/node-manager/node-manager/hack/procstat"
)

// TestTemplateBombsCostTheServerNothing: NodeGroupConfigurations that would
// take the server's memory or loop without end fail on their own status,
// the server's memory does not grow, nothing keeps burning CPU afterwards,
// another group's change is published while one group renders a bomb, and
// the replica stays ready.
func TestTemplateBombsCostTheServerNothing(t *testing.T) {
	ctx := context.Background()
	rss0 := procstat.MustResident(t, replica.PID())
	for _, tc := range []struct{ name, content, want string }{
		// 4 GB in 4 MB strings, each under the output limit.
		{"memory-bomb.sh", `{{ $l := list }}{{ range until 1000 }}{{ $l = append $l (repeat 4000000 "x") }}{{ end }}`,
			"rendering used more than 128 MiB and was stopped"},
		{"range-bomb.sh", `{{ range 100000000000 }}{{ end }}`, "range over 100000000000: more than 100000 iterations"},
	} {
		ngc := f.TestConfiguration(t, tc.name, deckhousev1alpha1.NodeGroupConfigurationSpec{
			NodeGroups: []string{"master"}, Bundles: []string{"*"}, Weight: 90, Content: tc.content,
		})
		cond := waitConfigProcessed(t, tc.name, ngc.Generation)
		if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tc.want) {
			t.Errorf("%s: want Rendered=False saying %q, got %s: %s", tc.name, tc.want, cond.Status, cond.Message)
		}
		if err := f.NM.DeckhouseV1alpha1().NodeGroupConfigurations().Delete(ctx, tc.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grew := procstat.MustResident(t, replica.PID()) - rss0
	t.Logf("bashible-apiserver's resident memory grew by %.1f MiB", float64(grew)/(1<<20))
	if grew > 32<<20 {
		t.Errorf("bashible-apiserver grew by %d MiB", grew>>20)
	}

	// A CPU bomb on master (one action of RSA key generations: nothing
	// but the sandbox stops it, at the 10s --render-timeout), and while it
	// renders, a change for worker.
	worker0 := f.WaitChecksum(t, "worker", func(s string) bool { return s != "" })
	spin := f.TestConfiguration(t, "spin-bomb.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"master"}, Bundles: []string{"*"}, Weight: 91,
		Content: "{{ list" + strings.Repeat(` (genPrivateKey "rsa")`, 200) + " }}",
	})
	time.Sleep(500 * time.Millisecond) // master's render has started
	start := time.Now()
	f.TestConfiguration(t, "worker-change.sh", deckhousev1alpha1.NodeGroupConfigurationSpec{
		NodeGroups: []string{"worker"}, Bundles: []string{"*"}, Weight: 92, Content: "echo changed\n",
	})
	f.WaitChecksum(t, "worker", func(s string) bool { return s != worker0 })
	latency := time.Since(start)
	t.Logf("worker's change was served after %s while master rendered a template that runs until the 10s deadline", latency)
	if latency > 5*time.Second {
		t.Errorf("worker's change took %s", latency)
	}
	cond := waitConfigProcessed(t, "spin-bomb.sh", spin.Generation)
	if want := "rendering took longer than 10s and was stopped"; cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, want) {
		t.Errorf("spin-bomb.sh: want Rendered=False saying %q, got %s: %s", want, cond.Status, cond.Message)
	}
	time.Sleep(500 * time.Millisecond)
	cpu0 := procstat.TreeCPU(replica.PID())
	time.Sleep(2 * time.Second)
	used := procstat.TreeCPU(replica.PID()) - cpu0
	t.Logf("CPU used by bashible-apiserver and its render workers in the 2s after: %s", used)
	if used > 300*time.Millisecond {
		t.Errorf("bashible-apiserver and its workers used %s of CPU in the 2s after the bombs failed", used)
	}
	if code, body := direct(t, replica.Port, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d: %s", code, body)
	}
}
