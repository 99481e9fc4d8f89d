package fencingagents

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// The agents' timings, passed to every DaemonSet: the ones the fencing
// controller's margin is checked against (deckhousev1's fencing timing).
const (
	FeedInterval = deckhousev1.DefaultFencingAgentFeedInterval
	APITimeout   = deckhousev1.DefaultFencingAgentAPITimeout
)

// Ports on the node (the agents run on the host network, so peers reach
// each other at the nodes' InternalIP).
const (
	MetricsPort = 9681
	GossipPort  = 9682
)

// WatchdogDevice is softdog's device, made by the node step of fenced groups.
const WatchdogDevice = "/dev/watchdog"

// GossipKeyDir is where the agent's pod mounts its group's gossip keyring
// Secret (KeySecretName); the kubelet updates the files in place when the
// Secret changes, and the agent reads them again.
const GossipKeyDir = "/etc/fencing-agent/gossip-key"

// KeySecretName is the Secret of group's gossip keyring.
func KeySecretName(group string) string { return deckhousev1.FencingGossipKeySecretPrefix + group }

// agentUID is the user (and group) the agent runs as, its own: the node
// step 017_fencing_watchdog gives the device to it, mode 0600.
const agentUID = deckhousev1.FencingAgentUID

// DaemonSetName is the DaemonSet of group's agents.
func DaemonSetName(group string) string { return deckhousev1.FencingAgentName + "-" + group }

// selector are the labels of a group's DaemonSet and its pods.
func selector(group string) map[string]string {
	return map[string]string{deckhousev1.AppNameLabel: deckhousev1.FencingAgentName, deckhousev1.NodeGroupLabel: group}
}

// NodeSelector selects the nodes of group: those whose
// deckhousev1.NodeGroupRestrictedLabel says group. NodeRestriction forbids
// a kubelet to write that label; node-manager-controller sets it from the
// node's Instance (controllers/nodetemplate).
func NodeSelector(group string) map[string]string {
	return map[string]string{deckhousev1.NodeGroupRestrictedLabel: group}
}

// DaemonSet is the fencing agents of ng, in namespace, running image; nil
// when ng has no spec.fencing. In Watchdog mode the pod mounts the device
// and is privileged (a container reaches a host device only so: the
// device cgroup admits no other); in Notify mode it has neither, since it
// never opens the device.
func DaemonSet(ng *deckhousev1.NodeGroup, namespace, image string) *appsv1.DaemonSet {
	if ng.Spec.Fencing == nil {
		return nil
	}
	mode := ng.Spec.Fencing.Mode
	watchdog := mode == deckhousev1.FencingModeWatchdog
	labels := selector(ng.Name)
	objLabels := map[string]string{deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName}
	for k, v := range labels {
		objLabels[k] = v
	}
	container := corev1.Container{
		Name:  deckhousev1.FencingAgentName,
		Image: image,
		Args: []string{
			"--mode=" + mode,
			"--watchdog-device=" + WatchdogDevice,
			"--feed-interval=" + FeedInterval.String(),
			"--api-timeout=" + APITimeout.String(),
			"--gossip-port=" + strconv.Itoa(GossipPort),
			"--listen-address=:" + strconv.Itoa(MetricsPort),
			"--gossip-key-dir=" + GossipKeyDir,
			// The API as the kubelet reaches it: the node's local API
			// proxy, not the Service VIP (kube-proxy and the CNI), so a
			// Service path broken on this node alone does not reset it.
			// In-cluster credentials and CA are kept.
			"--api-server=" + deckhousev1.NodeAPIProxyURL,
			// The gossip listens on the node's InternalIP only.
			"--gossip-bind-address=$(HOST_IP)",
			"--gossip-advertise-address=$(HOST_IP)",
		},
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "NODE_GROUP", Value: ng.Name},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		},
		Ports: []corev1.ContainerPort{
			{Name: "https-metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "gossip", ContainerPort: GossipPort, Protocol: corev1.ProtocolTCP},
			{Name: "gossip-udp", ContainerPort: GossipPort, Protocol: corev1.ProtocolUDP},
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("https-metrics"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds:    10,
			FailureThreshold: 3,
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("https-metrics"), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: 5,
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("48Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			Privileged:               &watchdog,
			AllowPrivilegeEscalation: &watchdog,
			ReadOnlyRootFilesystem:   new(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	pod := corev1.PodSpec{
		ServiceAccountName: deckhousev1.FencingAgentName,
		HostNetwork:        true,
		DNSPolicy:          corev1.DNSClusterFirstWithHostNet,
		PriorityClassName:  "system-node-critical",
		// The group's nodes by the label only node-manager-controller
		// writes (from the node's Instance), never by node.deckhouse.io/group,
		// which a kubelet may set on its own Node: a node relabelled into
		// another group must not get that group's pod, and with it the
		// group's gossip keyring (its kubelet reads the Secret for the pod).
		NodeSelector: NodeSelector(ng.Name),
		// A fenced node's agent runs whatever the node's taints.
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		// Time for the label removal and the magic close on SIGTERM.
		TerminationGracePeriodSeconds: new(int64(10)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   new(true),
			RunAsUser:      new(int64(agentUID)),
			RunAsGroup:     new(int64(agentUID)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{container},
	}
	// The group's gossip keyring: the kubelet reads the Secret for the pod
	// (the agent's ServiceAccount has no read of it) and writes it group-
	// readable by the agent's group only (fsGroup), never world-readable.
	pod.SecurityContext.FSGroup = new(int64(agentUID))
	pod.Volumes = []corev1.Volume{{Name: "gossip-key", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: KeySecretName(ng.Name), DefaultMode: new(int32(0o440))},
	}}}
	pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "gossip-key", MountPath: GossipKeyDir, ReadOnly: true}}
	if watchdog {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "watchdog", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: WatchdogDevice, Type: new(corev1.HostPathCharDev)},
		}})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "watchdog", MountPath: WatchdogDevice})
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName(ng.Name), Namespace: namespace, Labels: objLabels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}
