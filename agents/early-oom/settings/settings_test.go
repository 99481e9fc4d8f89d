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
	if err := f.Validate(); err != nil {
		t.Errorf("the API would refuse the example: %v", err)
	}
	if len(f.Groups) != 2 {
		t.Errorf("the example has groups %v; want loki and gpu", f.Groups)
	}
}

// TestValidateRefusesWhatNoNodeCanUseNamingLevelFieldAndBound is the
// API's check (bashible-apiserver's admission webhook runs it): each
// destructive or absurd value is refused with its level, its field and
// its bound, and the settings a node would accept pass.
func TestValidateRefusesWhatNoNodeCanUseNamingLevelFieldAndBound(t *testing.T) {
	for _, tc := range []struct{ data, level, want string }{
		{"recoveryPause: 0s\n", "the cluster-wide settings", "recoveryPause 0s: want 10s to 1h0m0s"},
		{"mode: Kill\n", "the cluster-wide settings", `mode "Kill": want one of [Evict Observe Disabled]`},
		{"memAvailableFloor: -1Gi\n", "the cluster-wide settings", "memAvailableFloor -1073741824 bytes: want 0 (off) or a size from 1Mi to 1Ti"},
		{"memAvailableFloor: 2Ti\n", "the cluster-wide settings", "memAvailableFloor 2199023255552 bytes: want 0 (off) or a size from 1Mi to 1Ti"},
		{"memAvailableFloor: 256\n", "the cluster-wide settings", "memAvailableFloor 256 bytes: want 0 (off) or a size from 1Mi to 1Ti"},
		// Quantity.Value makes 1e30 a 0 (the floor off) and 256m a 1.
		{"memAvailableFloor: 1e30\n", "the cluster-wide settings", "memAvailableFloor 1e+30: want a whole number of bytes"},
		{"memAvailableFloor: 256m\n", "the cluster-wide settings", "memAvailableFloor 256m: want a whole number of bytes"},
		{"fullAvg10: 100\n", "the cluster-wide settings", "fullAvg10 100: want a percentage from 10 and below 100"},
		{"groups:\n  loki:\n    recoveryPause: 0s\n", "the settings of group loki", "recoveryPause 0s: want 10s to 1h0m0s"},
		{"groups:\n  loki:\n    samples: 0\n", "the settings of group loki", "samples 0: want 1 to 300"},
		{"groups:\n  gpu:\n    mode: Kill\n", "the settings of group gpu", `mode "Kill": want one of`},
		{"groups:\n  loki:\n    maxEvictions: 1000\n", "the settings of group loki", "maxEvictions 1000: want 1 to 100"},
		{"groups:\n  loki:\n    evictionWindow: 1s\n", "the settings of group loki", "evictionWindow 1s: want 1m0s to 24h0m0s"},
	} {
		f, err := Parse([]byte(tc.data))
		if err != nil {
			t.Fatalf("%q: %v", tc.data, err)
		}
		err = f.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.level+": "+tc.want) {
			t.Errorf("%q: %v; want an error %q", tc.data, err, tc.level+": "+tc.want)
			continue
		}
		// The agent refuses the same, with the same words, on a node of
		// the group (any node, for the cluster's level).
		group := strings.TrimPrefix(tc.level, "the settings of group ")
		if _, rerr := f.Resolve(Default(), group); rerr == nil || !strings.Contains(err.Error(), rerr.Error()) {
			t.Errorf("%q: the agent resolved it with %v; the API said %v", tc.data, rerr, err)
		}
	}
	for _, ok := range []string{file, "", "memAvailableFloor: 0\n", "memAvailableFloor: 1.5Gi\n", "mode: Disabled\ngroups:\n  gpu: {}\n"} {
		f, err := Parse([]byte(ok))
		if err != nil {
			t.Fatalf("%q: %v", ok, err)
		}
		if err := f.Validate(); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

// TestValidateNamesEveryLevelAtFault: an operator sees every mistake at
// once, the cluster's first, then the groups' in order.
func TestValidateNamesEveryLevelAtFault(t *testing.T) {
	f, err := Parse([]byte("samples: 0\ngroups:\n  b:\n    recoveryPause: 1s\n  a:\n    fullAvg10: 5\n  c:\n    samples: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = f.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"the cluster-wide settings: samples 0", "the settings of group a: fullAvg10 5", "the settings of group b: recoveryPause 1s"}
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d is %q; want it to start %q", i, lines[i], want[i])
		}
	}
}

// TestBadYAMLIsAParseError: what is not YAML, not a mapping, or not a
// number where one is wanted never gets to Validate.
func TestBadYAMLIsAParseError(t *testing.T) {
	for _, data := range []string{"mode: [Evict\n", "- a\n- b\n", "fullAvg10: high\n", "recoveryPause: 10\n", "memAvailableFloor: lots\n", "fullAvg10: .nan\n", "mode: Off\n"} {
		if f, err := Parse([]byte(data)); err == nil {
			if verr := f.Validate(); verr == nil {
				t.Errorf("%q parsed and validated", data)
			}
		}
	}
}
