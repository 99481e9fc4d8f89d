package templates

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestRecomposeIsRender renders random sets of NodeGroupConfigurations
// (names and weights that collide with each other and with a built-in
// step's file, plain and templated content, content that does not render
// or is not bash), then random changes of them, and wants Recompose from
// the first render to give exactly what a whole Render of the changed set
// gives: the same steps and checksum, or the same failures.
func TestRecomposeIsRender(t *testing.T) {
	tree, err := LoadTree(Builtin())
	if err != nil {
		t.Fatal(err)
	}
	settings, err := ParseClusterConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := fuzzContext(settings)
	builtin := tree.steps[len(tree.steps)/2].name // NNN_name.sh
	builtinWeight, _ := strconv.Atoi(builtin[:3])
	names := []string{"a", "a.sh", "b", "c.sh", "d", strings.TrimPrefix(builtin[3:], "_")}
	weights := []int32{10, 10, 20, 500, int32(builtinWeight)}
	contents := []string{"echo plain\n", "echo {{ .nodeGroup.name }}\n", "echo other\n", "if then fi\n", "{{ .nope }}\n", "echo {{ .kubernetesVersion }}\n"}
	rng := rand.New(rand.NewPCG(1, 2))
	step := func(name string) CustomStep {
		return CustomStep{Name: name, Weight: weights[rng.IntN(len(weights))], Content: contents[rng.IntN(len(contents))]}
	}
	compared, rounds := 0, 0
	for rounds = 0; compared < 300 && rounds < 20000; rounds++ {
		var base []CustomStep
		for _, n := range names {
			if rng.IntN(2) == 0 {
				base = append(base, step(n))
			}
		}
		baseBundle, failures := tree.Render(&ctx, base)
		if failures != nil {
			continue
		}
		var next []CustomStep
		for _, s := range base {
			switch rng.IntN(4) {
			case 0: // removed
			case 1:
				next = append(next, step(s.Name))
			default:
				next = append(next, s)
			}
		}
		for _, n := range names {
			if rng.IntN(4) == 0 && !containsStep(next, n) {
				next = append(next, step(n))
			}
		}
		rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
		want, wantFailures := tree.Render(&ctx, next)
		got, gotFailures, ok := tree.Recompose(&ctx, baseBundle, base, next)
		if !ok {
			continue
		}
		compared++
		describe := fmt.Sprintf("from %+v to %+v", base, next)
		if fmt.Sprint(gotFailures) != fmt.Sprint(wantFailures) {
			t.Fatalf("%s: failures %v; Render: %v", describe, gotFailures, wantFailures)
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("%s: bundle %v; Render's %v", describe, got != nil, want != nil)
		}
		if want == nil {
			continue
		}
		if got.Checksum != want.Checksum || !maps.Equal(got.Steps, want.Steps) || got.Bashible != want.Bashible || got.Bootstrap != want.Bootstrap {
			t.Fatalf("%s: checksum %s, Render's %s", describe, got.Checksum, want.Checksum)
		}
		steps, _, _ := tree.RecomposeSteps(&ctx, baseBundle, base, next)
		if steps == nil || !maps.Equal(steps.Steps, want.Steps) || (steps.Checksum != "" && steps != baseBundle) {
			t.Fatalf("%s: RecomposeSteps gives other steps or a checksum", describe)
		}
	}
	if compared < 300 {
		t.Fatalf("only %d of %d rounds compared; want 300", compared, rounds)
	}
}

func containsStep(steps []CustomStep, name string) bool {
	for _, s := range steps {
		if s.Name == name {
			return true
		}
	}
	return false
}
