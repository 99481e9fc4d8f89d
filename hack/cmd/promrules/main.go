// Command promrules prepares the alerting rules for `promtool test rules`
// (`make test-rules` runs it through hack/test-rules.sh). The rules ship as
// PrometheusRule objects, whose spec holds the groups a Prometheus rule file
// has at its top; promrules writes each object's spec to
// <out>/<metadata.name>.rules.yaml, and copies the promtool test files
// beside them so that their rule_files name those files plainly. It fails
// when an alert has no test: every alert name must appear as an
// `alertname:` of some test file.
//
// usage: promrules -out DIR -rules manifests/monitoring -tests manifests/monitoring/tests
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("out", "", "directory to write the rule files and test files to")
	rules := flag.String("rules", "manifests/monitoring", "directory of the PrometheusRule manifests")
	tests := flag.String("tests", "manifests/monitoring/tests", "directory of the promtool test files")
	flag.Parse()
	if err := run(*out, *rules, *tests); err != nil {
		fmt.Fprintf(os.Stderr, "promrules: %v\n", err)
		os.Exit(1)
	}
}

// prometheusRule is the part of a PrometheusRule object promtool needs.
type prometheusRule struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

var alertnameRE = regexp.MustCompile(`(?m)^\s*-?\s*alertname:\s*"?([A-Za-z0-9_]+)"?\s*$`)

func run(out, rulesDir, testsDir string) error {
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	manifests, err := filepath.Glob(filepath.Join(rulesDir, "*.yaml"))
	if err != nil {
		return err
	}
	var alerts []string
	for _, path := range manifests {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for doc := range bytes.SplitSeq(data, []byte("\n---\n")) {
			var pr prometheusRule
			if err := yaml.Unmarshal(doc, &pr); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if pr.Kind != "PrometheusRule" {
				continue
			}
			// The spec is re-encoded as it stands, not through the struct
			// above, so that no field promtool reads is lost.
			var whole map[string]any
			if err := yaml.Unmarshal(doc, &whole); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			spec, err := yaml.Marshal(whole["spec"])
			if err != nil {
				return fmt.Errorf("%s: encoding the spec of %s: %w", path, pr.Metadata.Name, err)
			}
			if err := os.WriteFile(filepath.Join(out, pr.Metadata.Name+".rules.yaml"), spec, 0o644); err != nil {
				return err
			}
			for _, g := range pr.Spec.Groups {
				for _, r := range g.Rules {
					if r.Alert != "" && !slices.Contains(alerts, r.Alert) {
						alerts = append(alerts, r.Alert)
					}
				}
			}
		}
	}
	if len(alerts) == 0 {
		return fmt.Errorf("no alert found in the PrometheusRule objects of %s", rulesDir)
	}
	tests, err := filepath.Glob(filepath.Join(testsDir, "*.yaml"))
	if err != nil {
		return err
	}
	tested := map[string]bool{}
	for _, path := range tests {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range alertnameRE.FindAllSubmatch(data, -1) {
			tested[string(m[1])] = true
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(path)), data, 0o644); err != nil {
			return err
		}
	}
	var untested []string
	for _, a := range alerts {
		if !tested[a] {
			untested = append(untested, a)
		}
	}
	if len(untested) > 0 {
		return fmt.Errorf("alerts without a promtool test in %s (add an alert_rule_test with alertname: <name>): %s",
			testsDir, strings.Join(untested, ", "))
	}
	fmt.Printf("promrules: %d alerts, %d test files in %s\n", len(alerts), len(tests), out)
	return nil
}
