package agent

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/node-manager/node-manager/agents/early-oom/cgroup"
	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/meminfo"
	"github.com/node-manager/node-manager/agents/early-oom/psi"
	"github.com/node-manager/node-manager/agents/early-oom/settings"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/internal/serving"
)

// Options are the command-line settings. Mode and the thresholds are the
// baseline that the early-oom ConfigMap overrides (package settings).
type Options struct {
	Kubeconfig string
	// NodeName, PodName, PodNamespace and PodUID identify the agent: its
	// node (whose pods it ranks) and its own pod (never a victim). The
	// DaemonSet passes them from the downward API.
	NodeName     string
	PodNamespace string
	PodName      string
	PodUID       string
	// Namespace and SettingsConfigMap locate the settings ConfigMap; an
	// empty name reads none.
	Namespace         string
	SettingsConfigMap string

	PSIPath     string
	MeminfoPath string
	CgroupRoot  string

	Interval    time.Duration
	GracePeriod time.Duration

	Mode              string
	FullAvg10         float64
	SomeAvg10         float64
	MemAvailableFloor string
	Samples           int
	RecoveryPause     time.Duration
	MaxEvictions      int
	EvictionWindow    time.Duration

	ListenAddress string
	Serving       serving.Options
}

// NewOptions returns the defaults (settings.Default for the thresholds).
func NewOptions() *Options {
	d := settings.Default()
	return &Options{
		Namespace:         deckhousev1.Namespace,
		SettingsConfigMap: deckhousev1.EarlyOOMName,
		PSIPath:           psi.DefaultPath,
		MeminfoPath:       meminfo.DefaultPath,
		CgroupRoot:        cgroup.DefaultRoot,
		Interval:          2 * time.Second,
		GracePeriod:       5 * time.Second,
		Mode:              string(d.Mode),
		FullAvg10:         d.Thresholds.FullAvg10,
		SomeAvg10:         d.Thresholds.SomeAvg10,
		MemAvailableFloor: resource.NewQuantity(d.Thresholds.MinAvailable, resource.BinarySI).String(),
		Samples:           d.Thresholds.Samples,
		RecoveryPause:     d.Thresholds.Pause,
		MaxEvictions:      d.MaxEvictions,
		EvictionWindow:    d.EvictionWindow,
		ListenAddress:     ":9681",
		Serving:           serving.NewOptions(),
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means in-cluster configuration (the pod's bound ServiceAccount token, which carries its node's name)")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "the node this agent guards (spec.nodeName from the downward API)")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "the agent's own pod's namespace")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "the agent's own pod's name")
	fs.StringVar(&o.PodUID, "pod-uid", o.PodUID, "the agent's own pod's UID: never a victim")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the settings ConfigMap")
	fs.StringVar(&o.SettingsConfigMap, "settings-configmap", o.SettingsConfigMap, "ConfigMap whose "+deckhousev1.EarlyOOMSettingsKey+" overrides the mode and thresholds for the cluster and per node group; empty reads none")
	fs.StringVar(&o.PSIPath, "psi-path", o.PSIPath, "memory Pressure Stall Information file")
	fs.StringVar(&o.MeminfoPath, "meminfo-path", o.MeminfoPath, "meminfo file (MemAvailable)")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot, "mount point of the host's cgroups (v1: its memory hierarchy is <root>/memory)")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "time between samples")
	fs.DurationVar(&o.GracePeriod, "grace-period", o.GracePeriod, "longest termination grace period a victim gets (its own, if shorter, is kept)")
	fs.StringVar(&o.Mode, "mode", o.Mode, fmt.Sprintf("what to do under pressure, one of %v (the ConfigMap overrides it)", settings.Modes))
	fs.Float64Var(&o.FullAvg10, "full-avg10", o.FullAvg10, fmt.Sprintf("act when full avg10 (percent; %v to 100) of the pods not at their own limit stays above this", detect.MinAvg10))
	fs.Float64Var(&o.SomeAvg10, "some-avg10", o.SomeAvg10, fmt.Sprintf("also act when some avg10 (percent; %v to 100) of the pods not at their own limit stays above this; 0: not a trigger", detect.MinAvg10))
	fs.StringVar(&o.MemAvailableFloor, "mem-available-floor", o.MemAvailableFloor, fmt.Sprintf("also act when MemAvailable stays below this size (at most %v of the node's RAM); 0: not a trigger", detect.MaxFloorShareOfRAM))
	fs.IntVar(&o.Samples, "samples", o.Samples, "consecutive samples over the thresholds before acting")
	fs.DurationVar(&o.RecoveryPause, "recovery-pause", o.RecoveryPause, fmt.Sprintf("wait after each action before counting again (%s to %s)", detect.MinPause, detect.MaxPause))
	fs.IntVar(&o.MaxEvictions, "max-evictions", o.MaxEvictions, fmt.Sprintf("the most pods this node's agent deletes in any --eviction-window (1 to %d); past it, it reports and deletes nothing", settings.MaxMaxEvictions))
	fs.DurationVar(&o.EvictionWindow, "eviction-window", o.EvictionWindow, fmt.Sprintf("the window of --max-evictions (%s to %s)", settings.MinEvictionWindow, settings.MaxEvictionWindow))
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address of /metrics (HTTPS; callers authenticated and authorized by the Kubernetes API), /healthz and /readyz (open)")
	o.Serving.AddFlags(fs)
}

// Baseline is the settings the flags give.
func (o *Options) Baseline() (settings.Settings, error) {
	floor, err := resource.ParseQuantity(o.MemAvailableFloor)
	if err != nil {
		return settings.Settings{}, fmt.Errorf("--mem-available-floor=%s: %w", o.MemAvailableFloor, err)
	}
	s := settings.Default()
	s.Mode = settings.Mode(o.Mode)
	s.Thresholds.FullAvg10 = o.FullAvg10
	s.Thresholds.SomeAvg10 = o.SomeAvg10
	if s.Thresholds.MinAvailable, err = settings.FloorBytes(floor); err != nil {
		return settings.Settings{}, fmt.Errorf("--mem-available-floor: %w", err)
	}
	s.Thresholds.Samples = o.Samples
	s.Thresholds.Pause = o.RecoveryPause
	s.MaxEvictions = o.MaxEvictions
	s.EvictionWindow = o.EvictionWindow
	if err := s.Validate(); err != nil {
		return settings.Settings{}, fmt.Errorf("the flags' settings: %w", err)
	}
	return s, nil
}

// Self is the agent's own pod UID.
func (o *Options) Self() types.UID { return types.UID(o.PodUID) }

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name is empty; the DaemonSet passes spec.nodeName"))
	}
	if o.PodUID == "" {
		errs = append(errs, errors.New("--pod-uid is empty; the DaemonSet passes metadata.uid, so that the agent never picks its own pod"))
	}
	if o.Interval <= 0 || o.GracePeriod < 0 {
		errs = append(errs, errors.New("--interval must be positive and --grace-period not negative"))
	}
	if !slices.Contains(settings.Modes, settings.Mode(o.Mode)) {
		errs = append(errs, fmt.Errorf("--mode=%s: want one of %v", o.Mode, settings.Modes))
	}
	if _, err := o.Baseline(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.Serving.Validate()...)
	return errors.Join(errs...)
}
