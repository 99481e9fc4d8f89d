// Package settings resolves what the early-oom agent on one node does: its
// mode (Evict, Observe, Disabled) and its thresholds. The flags of the
// DaemonSet give the built-in baseline; the ConfigMap early-oom in
// d8-cloud-instance-manager (key settings.yaml), when it exists, overrides
// it for the whole cluster and then per node group:
//
//	mode: Evict            # Evict, Observe (report only) or Disabled
//	fullAvg10: 40          # percent
//	someAvg10: 0           # percent, 0: not a trigger
//	memAvailableFloor: 256Mi # 1Mi to 1Ti, at most half the node's RAM; 0: not a trigger
//	samples: 5             # consecutive samples over the thresholds
//	recoveryPause: 30s     # 10s to 1h
//	maxEvictions: 5        # at most this many evictions on a node ...
//	evictionWindow: 10m    # ... in any window this long
//	groups:
//	  loki:                # a NodeGroup's name
//	    fullAvg10: 70
//	    samples: 10
//	  gpu:
//	    mode: Disabled
//
// A ConfigMap rather than flags rendered into one DaemonSet per group: one
// DaemonSet (one set of pods to monitor and one PodMonitor) serves every
// group, an edit takes effect at the agents' next sample without rolling a
// pod on every node, and nothing has to render or garbage-collect
// per-group DaemonSets. The agent watches only this one ConfigMap.
//
// Every value is bounded (detect's bounds for the thresholds, and the
// eviction budget's here), by one check per level (Overrides.Over). The
// API refuses a ConfigMap with a value outside them (File.Validate, run
// by bashible-apiserver's admission webhook). What gets past it (the
// webhook fails open when bashible-apiserver is down), or a MemAvailable
// floor above half the node's RAM, which only the node can judge, makes
// the ConfigMap unusable on that node, which the agent reports
// (early_oom_settings_invalid, the alert EarlyOOMSettingsInvalid, a
// Warning Event SettingsInvalid on the node) and then keeps the flags'
// settings.
package settings

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/node-manager/node-manager/agents/early-oom/detect"
)

// Mode is what the agent does when the detector says to act.
type Mode string

const (
	// Evict deletes the chosen pod (the default).
	Evict Mode = "Evict"
	// Observe reports the pod it would delete (a log line, an Event of
	// reason WouldEvict, a metric) and deletes nothing.
	Observe Mode = "Observe"
	// Disabled neither acts nor reports; the agent only serves its
	// metrics. (Not "Off": YAML reads an unquoted Off as false.)
	Disabled Mode = "Disabled"
)

// Modes are the valid modes.
var Modes = []Mode{Evict, Observe, Disabled}

// Settings are what one agent does.
type Settings struct {
	Mode       Mode
	Thresholds detect.Thresholds
	// MaxEvictions is the most pods one node's agent deletes in any
	// EvictionWindow (detect.Budget); past it, it reports and waits.
	MaxEvictions   int
	EvictionWindow time.Duration
}

// The eviction budget's bounds.
const (
	MaxMaxEvictions   = 100
	MinEvictionWindow = time.Minute
	MaxEvictionWindow = 24 * time.Hour
)

// Validate names what is wrong.
func (s Settings) Validate() error { return s.ValidateFor(0) }

// ValidateFor is Validate on a node with memTotal bytes of RAM (0:
// unknown), which bounds the MemAvailable floor.
func (s Settings) ValidateFor(memTotal int64) error {
	var errs []error
	if !slices.Contains(Modes, s.Mode) {
		errs = append(errs, fmt.Errorf("mode %q: want one of %v", s.Mode, Modes))
	}
	if err := s.Thresholds.ValidateFor(memTotal); err != nil {
		errs = append(errs, err)
	}
	if s.MaxEvictions < 1 || s.MaxEvictions > MaxMaxEvictions {
		errs = append(errs, fmt.Errorf("maxEvictions %d: want 1 to %d", s.MaxEvictions, MaxMaxEvictions))
	}
	if s.EvictionWindow < MinEvictionWindow || s.EvictionWindow > MaxEvictionWindow {
		errs = append(errs, fmt.Errorf("evictionWindow %s: want %s to %s", s.EvictionWindow, MinEvictionWindow, MaxEvictionWindow))
	}
	return errors.Join(errs...)
}

// Overrides are the settings a level (the cluster, a group) changes;
// unset fields keep the level below.
type Overrides struct {
	Mode              *Mode              `json:"mode,omitempty"`
	FullAvg10         *float64           `json:"fullAvg10,omitempty"`
	SomeAvg10         *float64           `json:"someAvg10,omitempty"`
	MemAvailableFloor *resource.Quantity `json:"memAvailableFloor,omitempty"`
	Samples           *int               `json:"samples,omitempty"`
	RecoveryPause     *metav1.Duration   `json:"recoveryPause,omitempty"`
	MaxEvictions      *int               `json:"maxEvictions,omitempty"`
	EvictionWindow    *metav1.Duration   `json:"evictionWindow,omitempty"`
}

// File is the ConfigMap's settings.yaml: cluster-wide overrides and
// per-group ones.
type File struct {
	Overrides `json:",inline"`
	// Groups are overrides by NodeGroup name, over the cluster's.
	Groups map[string]Overrides `json:"groups,omitempty"`
}

// Parse reads settings.yaml strictly: an unknown, misspelt or miscased
// key, or one given twice, is an error, never silently ignored.
func Parse(data []byte) (File, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return File{}, fmt.Errorf("settings.yaml: %w", err)
	}
	var f File
	strict, err := kjson.UnmarshalStrict(js, &f)
	if err != nil {
		return File{}, fmt.Errorf("settings.yaml: %w", err)
	}
	if len(strict) > 0 {
		return File{}, fmt.Errorf("settings.yaml: %w", errors.Join(strict...))
	}
	return f, nil
}

// Resolve applies the cluster's overrides and then group's over base and
// validates the result, naming the level at fault. It checks each level
// with Overrides.Over, as File.Validate does at the API.
func (f File) Resolve(base Settings, group string) (Settings, error) {
	s, err := f.Overrides.Over(base)
	if err != nil {
		return base, fmt.Errorf("%s: %w", clusterLevel, err)
	}
	if g, ok := f.Groups[group]; ok && group != "" {
		if s, err = g.Over(s); err != nil {
			return base, fmt.Errorf("%s: %w", groupLevel(group), err)
		}
	}
	return s, nil
}

// Validate checks every level of f (the cluster's and each group's) on
// its own, with the check Resolve makes on a node (Overrides.Over), and
// names each level and field at fault. It is what the API refuses a
// ConfigMap for (bashible-apiserver's admission webhook): a value no node
// can use. What depends on the node — a MemAvailable floor above half of
// its RAM — only its agent can check (Settings.ValidateFor).
func (f File) Validate() error {
	var errs []error
	if _, err := f.Overrides.Over(Default()); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", clusterLevel, err))
	}
	for _, group := range slices.Sorted(maps.Keys(f.Groups)) {
		if _, err := f.Groups[group].Over(Default()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", groupLevel(group), err))
		}
	}
	return errors.Join(errs...)
}

const clusterLevel = "the cluster-wide settings"

func groupLevel(group string) string { return "the settings of group " + group }

// Over applies o over base and validates the result: the one check of a
// level's values, which the agent (Resolve) and the API (File.Validate)
// both make. Every bound is on one field alone, so over any valid base
// the errors name exactly the fields o sets out of bounds.
func (o Overrides) Over(base Settings) (Settings, error) {
	var errs []error
	if o.MemAvailableFloor != nil {
		if _, err := FloorBytes(*o.MemAvailableFloor); err != nil {
			errs = append(errs, err)
		}
	}
	s := o.apply(base)
	if err := s.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return base, err
	}
	return s, nil
}

// FloorBytes is a MemAvailable floor in bytes, refusing a quantity that
// is not a whole number of bytes within int64: Quantity.Value rounds
// 256m (milli) up to 1 and turns 1e30 into 0, the floor off.
func FloorBytes(q resource.Quantity) (int64, error) {
	v := q.Value()
	if q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("memAvailableFloor %s: want a whole number of bytes, such as 256Mi (0: off)", q.String())
	}
	return v, nil
}

func (o Overrides) apply(s Settings) Settings {
	if o.Mode != nil {
		s.Mode = *o.Mode
	}
	if o.FullAvg10 != nil {
		s.Thresholds.FullAvg10 = *o.FullAvg10
	}
	if o.SomeAvg10 != nil {
		s.Thresholds.SomeAvg10 = *o.SomeAvg10
	}
	if o.MemAvailableFloor != nil {
		// Over refuses a floor FloorBytes refuses.
		s.Thresholds.MinAvailable, _ = FloorBytes(*o.MemAvailableFloor)
	}
	if o.Samples != nil {
		s.Thresholds.Samples = *o.Samples
	}
	if o.RecoveryPause != nil {
		s.Thresholds.Pause = o.RecoveryPause.Duration
	}
	if o.MaxEvictions != nil {
		s.MaxEvictions = *o.MaxEvictions
	}
	if o.EvictionWindow != nil {
		s.EvictionWindow = o.EvictionWindow.Duration
	}
	return s
}

// Default are the built-in settings: act when full avg10 stays above 40 %
// for five samples (ten seconds at the default two-second interval), or
// when MemAvailable stays below 256 MiB (before the kubelet's own hard
// eviction at 100 MiB), then wait 30 s; at most five evictions in ten
// minutes. Deckhouse acted on a
// single sample above 30 %, which killed pods during short spikes.
func Default() Settings {
	return Settings{Mode: Evict, Thresholds: detect.Thresholds{FullAvg10: 40, MinAvailable: 256 << 20, Samples: 5, Pause: 30 * time.Second},
		MaxEvictions: 5, EvictionWindow: 10 * time.Minute}
}
