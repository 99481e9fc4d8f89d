package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/node-manager/node-manager/agents/early-oom/detect"
	"github.com/node-manager/node-manager/agents/early-oom/settings"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// settingsWarningPrefix starts every warning of the settings webhook.
const settingsWarningPrefix = "early-oom settings: "

var configMapKind = metav1.GroupVersionKind{Version: corev1.SchemeGroupVersion.Version, Kind: "ConfigMap"}

// SettingsWebhook refuses a ConfigMap of early-oom's settings
// (deckhousev1.EarlyOOMName in deckhousev1.Namespace) whose
// EarlyOOMSettingsKey does not parse or holds a value no node could use,
// with the check early-oom's agents make (settings.Parse and
// File.Validate), so that the API and the agents agree on every bound.
// What depends on a node (a MemAvailable floor above half of its RAM)
// only that node's agent can judge; a floor is admitted with a warning
// saying so.
//
// Its ValidatingWebhookConfiguration sends it only CREATE and UPDATE of
// that one ConfigMap; anything else it is sent is admitted unread.
type SettingsWebhook struct{}

// NewSettingsWebhook is the settings webhook.
func NewSettingsWebhook() *SettingsWebhook { return &SettingsWebhook{} }

// ServeHTTP answers one AdmissionReview.
func (*SettingsWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, func(_ context.Context, req *admissionv1.AdmissionRequest) Decision {
		d := reviewSettings(req)
		klog.V(2).InfoS("Checked early-oom's settings at admission", "namespace", req.Namespace, "name", req.Name,
			"operation", req.Operation, "dryRun", req.DryRun != nil && *req.DryRun, "allowed", d.Allowed, "message", d.Message)
		return d
	})
}

// reviewSettings decides one request.
func reviewSettings(req *admissionv1.AdmissionRequest) Decision {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.Kind != configMapKind ||
		req.Namespace != deckhousev1.Namespace || req.Name != deckhousev1.EarlyOOMName {
		return Decision{Allowed: true}
	}
	where := fmt.Sprintf("ConfigMap %s/%s", req.Namespace, req.Name)
	cm := &corev1.ConfigMap{}
	if err := json.Unmarshal(req.Object.Raw, cm); err != nil {
		return Decision{Message: fmt.Sprintf("%s: cannot read the object: %v", where, err)}
	}
	data, ok := cm.Data[deckhousev1.EarlyOOMSettingsKey]
	if !ok {
		w := fmt.Sprintf("%s has no data key %s: early-oom applies its flags' settings on every node", where, deckhousev1.EarlyOOMSettingsKey)
		if _, binary := cm.BinaryData[deckhousev1.EarlyOOMSettingsKey]; binary {
			w += " (it reads data, not binaryData)"
		}
		return Decision{Allowed: true, Warnings: []string{settingsWarning("%s", w)}}
	}
	return CheckSettings(where, data)
}

// CheckSettings decides the settings data of the ConfigMap named by
// where: refused, naming every level, field and bound at fault, when it
// does not parse or holds a value no node could use; admitted otherwise,
// with a warning when a MemAvailable floor is set, which each node's
// agent also checks against its RAM.
func CheckSettings(where, data string) Decision {
	f, err := settings.Parse([]byte(data))
	if err == nil {
		if err = f.Validate(); err != nil {
			err = fmt.Errorf("%s: %w", deckhousev1.EarlyOOMSettingsKey, err)
		}
	}
	if err != nil {
		return Decision{Message: fmt.Sprintf("%s: %s (no agent would use these settings: each keeps its flags' settings and reports SettingsInvalid)",
			where, strings.ReplaceAll(err.Error(), "\n", "; "))}
	}
	d := Decision{Allowed: true}
	var floors []string
	if f.MemAvailableFloor != nil {
		floors = append(floors, "the cluster's")
	}
	for _, g := range slices.Sorted(maps.Keys(f.Groups)) {
		if f.Groups[g].MemAvailableFloor != nil {
			floors = append(floors, "group "+g+"'s")
		}
	}
	if len(floors) > 0 {
		d.Warnings = append(d.Warnings, settingsWarning("memAvailableFloor (%s) is also checked on each node: where it is above %v of the node's RAM, "+
			"that node's agent keeps its flags' settings and reports a Warning Event SettingsInvalid", strings.Join(floors, ", "), detect.MaxFloorShareOfRAM))
	}
	return d
}

// settingsWarning formats one warning of the settings webhook.
func settingsWarning(format string, args ...any) string {
	return prefixed(settingsWarningPrefix, format, args...)
}
