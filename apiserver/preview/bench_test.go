package preview

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/apiserver/bundles"
	"github.com/node-manager/node-manager/templates"
	"github.com/node-manager/node-manager/templates/sandbox"
)

func benchCluster(b *testing.B) (bundles.Inputs, *templates.Tree) {
	tree, err := templates.LoadTree(templates.Builtin())
	if err != nil {
		b.Fatal(err)
	}
	pool, err := sandbox.New(sandbox.Config{Library: tree.Library(), Workers: 2, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var in bundles.Inputs
	for i := range 100 {
		in.NodeGroups = append(in.NodeGroups, &deckhousev1.NodeGroup{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("group-%03d", i)},
			Spec: deckhousev1.NodeGroupSpec{NodeType: deckhousev1.NodeTypeStatic,
				Kubelet:      &deckhousev1.KubeletSpec{MaxPods: ptr.To(int32(100 + i))},
				NodeTemplate: &deckhousev1.NodeTemplate{Labels: map[string]string{"example.com/index": fmt.Sprint(i)}}}})
	}
	for i := range 30 {
		selector := []string{"*"}
		switch i % 3 {
		case 1:
			selector = []string{fmt.Sprintf("group-%03d", i), fmt.Sprintf("group-%03d", i+50)}
		case 2:
			selector = []string{fmt.Sprintf("group-%03d", i)}
		}
		content := fmt.Sprintf("# step %d\necho {{ .nodeGroup.name }} {{ .kubernetesVersion }}\n{{ range $k, $v := .nodeGroup.nodeTemplate.labels }}echo {{ $k }}={{ $v }}\n{{ end }}%s", i, strings.Repeat("# padding line of a realistic step\n", 40))
		in.Configs = append(in.Configs, weighted(config(fmt.Sprintf("step-%02d.sh", i), selector, content), int32(200+i)))
	}
	for i := range extraEvery {
		in.Configs = append(in.Configs, weighted(config(fmt.Sprintf("every-%03d.sh", i), []string{"*"}, fmt.Sprintf("sysctl -w net.core.somaxconn=%d\n", 1024+i)), 500))
	}
	return in, tree.WithSandbox(pool)
}

var extraEvery = 0

func BenchmarkPreviewEveryGroup(b *testing.B) {
	for _, n := range []int{0, 200} {
		extraEvery = n
		b.Run(fmt.Sprintf("extra-%d", n), benchmarkPreviewEveryGroup)
	}
}

func benchmarkPreviewEveryGroup(b *testing.B) {
	in, tree := benchCluster(b)
	rendered := bundles.NewRenderer(tree).RenderAll(in)
	published := fakePublished{}
	for g, r := range rendered {
		published[g] = r.Published
	}
	pv := New(tree, fakeInputs{in, rendered}, published, fakeNodes{})
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		res, err := pv.Preview(context.Background(), Proposal{StepsOnly: true, Config: config(fmt.Sprintf("apply-%03d.sh", i), []string{"*"}, fmt.Sprintf("sysctl -w net.core.somaxconn=%d\n", 1024+i))})
		if err != nil || len(res.Groups) != 100 {
			b.Fatal(err, len(res.Groups), res.Failures)
		}
	}
}
