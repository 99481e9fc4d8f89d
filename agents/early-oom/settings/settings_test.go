package settings

import (
	"path"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/manifests"
)

const file = `
fullAvg10: 35
recoveryPause: 1m
groups:
  loki:
    fullAvg10: 70
    samples: 10
    memAvailableFloor: 200Mi
  gpu:
    mode: Disabled
`

func TestGroupOverridesTheClusterWhichOverridesTheFlags(t *testing.T) {
	f, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	base := Default()
	for group, check := range map[string]func(Settings) bool{
		// cluster-wide values over the flags, the rest from the flags
		"worker": func(s Settings) bool {
			return s.Mode == Evict && s.Thresholds.FullAvg10 == 35 && s.Thresholds.Samples == 5 && s.Thresholds.Pause == time.Minute
		},
		"": func(s Settings) bool { return s.Thresholds.FullAvg10 == 35 },
		"loki": func(s Settings) bool {
			return s.Thresholds.FullAvg10 == 70 && s.Thresholds.Samples == 10 && s.Thresholds.MinAvailable == 200<<20 && s.Thresholds.Pause == time.Minute
		},
		"gpu": func(s Settings) bool { return s.Mode == Disabled && s.Thresholds.FullAvg10 == 35 },
	} {
		s, err := f.Resolve(base, group)
		if err != nil || !check(s) {
			t.Errorf("group %q resolved to %+v, %v", group, s, err)
		}
	}
}

func TestUnknownKeysAreRefused(t *testing.T) {
	if _, err := Parse([]byte("fullavg10: 30\n")); err == nil {
		t.Error("a misspelt key was accepted")
	}
	if _, err := Parse([]byte("groups:\n  a:\n    treshold: 1\n")); err == nil {
		t.Error("a misspelt group key was accepted")
	}
}

func TestInvalidSettingsNameTheLevelAndKeepTheBase(t *testing.T) {
	for data, want := range map[string]string{
		"mode: Kill\n":                       "cluster-wide",
		"groups:\n  loki:\n    samples: 0\n": "group loki",
		// Destructive values are bounded (issue 35, item 19).
		"recoveryPause: 0s\n":                        "recoveryPause 0s",
		"fullAvg10: 1\n":                             "fullAvg10 1",
		"groups:\n  loki:\n    maxEvictions: 0\n":    "maxEvictions 0",
		"groups:\n  loki:\n    evictionWindow: 1s\n": "evictionWindow 1s",
	} {
		f, err := Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		s, err := f.Resolve(Default(), "loki")
		if err == nil || !strings.Contains(err.Error(), want) || s != Default() {
			t.Errorf("%q resolved to %+v, %v; want the base and an error naming %q", data, s, err, want)
		}
	}
}

// TestTheManifestsExampleIsValid keeps manifests/early-oom/
// settings-example.yaml true: it parses and resolves for its groups.
func TestTheManifestsExampleIsValid(t *testing.T) {
	data, err := manifests.FS.ReadFile(path.Join(deckhousev1.EarlyOOMName, "settings-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	f, err := Parse([]byte(cm.Data[deckhousev1.EarlyOOMSettingsKey]))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"", "loki", "gpu"} {
		if _, err := f.Resolve(Default(), g); err != nil {
			t.Errorf("group %q: %v", g, err)
		}
	}
	if len(f.Groups) != 2 {
		t.Errorf("the example has groups %v; want loki and gpu", f.Groups)
	}
}
