package clusterapi

import (
	"net"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// The decisions of this controller, pure functions of the NodeGroup (or of
// nothing): what Cluster API objects node-manager wants, named and shaped as
// Deckhouse names and shapes them (reference §8.2), in the Cluster API
// v1beta2 form that Cluster API v1.14 serves.

// Kinds the objects refer to.
const (
	kindStaticCluster         = "StaticCluster"
	kindStaticControlPlane    = "StaticControlPlane"
	kindStaticMachineTemplate = "StaticMachineTemplate"
	kindMachine               = "Machine"
)

// Wanted reports whether a group gets a MachineDeployment: a Static or
// CloudStatic group with staticInstances.
func Wanted(ng *deckhousev1.NodeGroup) bool {
	if ng == nil || ng.DeletionTimestamp != nil || ng.Spec.StaticInstances == nil {
		return false
	}
	return ng.Spec.NodeType == deckhousev1.NodeTypeStatic || ng.Spec.NodeType == deckhousev1.NodeTypeCloudStatic
}

// managedLabels mark what this controller writes, so it deletes only those.
func managedLabels() map[string]string {
	return map[string]string{deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName}
}

// groupLabels are managedLabels plus the group.
func groupLabels(group string) map[string]string {
	l := managedLabels()
	l[deckhousev1.NodeGroupLabel] = group
	return l
}

// MachineDeployment is a static group's MachineDeployment <group>:
// staticInstances.count replicas of Machines whose bootstrap data is the
// group's manual-bootstrap Secret (no bootstrap provider) and whose
// infrastructure is cloned from the StaticMachineTemplate <group>.
func MachineDeployment(ng *deckhousev1.NodeGroup, namespace string) *clusterv1.MachineDeployment {
	replicas := ng.Spec.StaticInstances.Count
	secret := deckhousev1.ManualBootstrapSecretPrefix + ng.Name
	selector := map[string]string{deckhousev1.NodeGroupLabel: ng.Name}
	return &clusterv1.MachineDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: ng.Name, Namespace: namespace, Labels: groupLabels(ng.Name)},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: infrav1alpha1.StaticClusterName,
			Replicas:    &replicas,
			Selector:    metav1.LabelSelector{MatchLabels: selector},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{deckhousev1.NodeGroupLabel: ng.Name}},
				Spec: clusterv1.MachineSpec{
					ClusterName: infrav1alpha1.StaticClusterName,
					Bootstrap:   clusterv1.Bootstrap{DataSecretName: &secret},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1alpha1.GroupName, Kind: kindStaticMachineTemplate, Name: ng.Name,
					},
				},
			},
		},
	}
}

// MachineTemplate is a static group's StaticMachineTemplate <group>: the
// group's staticInstances.labelSelector, which CAPS matches StaticInstances
// against.
func MachineTemplate(ng *deckhousev1.NodeGroup, namespace string) *infrav1alpha1.StaticMachineTemplate {
	var selector *metav1.LabelSelector
	if s := ng.Spec.StaticInstances.LabelSelector; s != nil {
		selector = s.DeepCopy()
	}
	return &infrav1alpha1.StaticMachineTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1alpha1.SchemeGroupVersion.String(), Kind: kindStaticMachineTemplate},
		ObjectMeta: metav1.ObjectMeta{Name: ng.Name, Namespace: namespace, Labels: groupLabels(ng.Name)},
		Spec: infrav1alpha1.StaticMachineTemplateSpec{Template: infrav1alpha1.StaticMachineTemplateResource{
			ObjectMeta: infrav1alpha1.TemplateObjectMeta{Labels: map[string]string{deckhousev1.NodeGroupLabel: ng.Name}},
			Spec:       infrav1alpha1.StaticMachineTemplateResourceSpec{LabelSelector: selector},
		}},
	}
}

// MachineDeploymentCurrent reports whether have already holds every field
// MachineDeployment sets in want (Cluster API's defaults in have, such as
// its own selector label, do not count), so an unchanged group is not
// written again.
func MachineDeploymentCurrent(have, want *clusterv1.MachineDeployment) bool {
	return have.DeletionTimestamp == nil && containsLabels(have.Labels, want.Labels) &&
		have.Spec.ClusterName == want.Spec.ClusterName &&
		apiequality.Semantic.DeepEqual(have.Spec.Replicas, want.Spec.Replicas) &&
		containsLabels(have.Spec.Selector.MatchLabels, want.Spec.Selector.MatchLabels) &&
		containsLabels(have.Spec.Template.Labels, want.Spec.Template.Labels) &&
		have.Spec.Template.Spec.ClusterName == want.Spec.Template.Spec.ClusterName &&
		apiequality.Semantic.DeepEqual(have.Spec.Template.Spec.Bootstrap.DataSecretName, want.Spec.Template.Spec.Bootstrap.DataSecretName) &&
		have.Spec.Template.Spec.InfrastructureRef == want.Spec.Template.Spec.InfrastructureRef
}

// MachineTemplateCurrent is MachineDeploymentCurrent for the template.
func MachineTemplateCurrent(have, want *infrav1alpha1.StaticMachineTemplate) bool {
	return have.DeletionTimestamp == nil && containsLabels(have.Labels, want.Labels) &&
		containsLabels(have.Spec.Template.ObjectMeta.Labels, want.Spec.Template.ObjectMeta.Labels) &&
		apiequality.Semantic.DeepEqual(have.Spec.Template.Spec.LabelSelector, want.Spec.Template.Spec.LabelSelector)
}

func containsLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Cluster is Cluster API's Cluster "static" that every static group's
// Machines belong to. It is not paused and refers to a StaticCluster (the
// v1.14 admission webhook refuses a Cluster without references) and to an
// externally managed StaticControlPlane: only once a Cluster's control plane
// is initialized does Cluster API watch its Nodes, drain a Machine's Node
// and delete it (measured: without it, scale-down leaves the Node behind).
func Cluster(namespace string) *clusterv1.Cluster {
	return &clusterv1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Name: infrav1alpha1.StaticClusterName, Namespace: namespace, Labels: managedLabels()},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1alpha1.GroupName, Kind: kindStaticCluster, Name: infrav1alpha1.StaticClusterName,
			},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1alpha1.GroupName, Kind: kindStaticControlPlane, Name: infrav1alpha1.StaticClusterName,
			},
		},
	}
}

// ClusterCurrent reports whether have refers where Cluster's refs do.
func ClusterCurrent(have, want *clusterv1.Cluster) bool {
	return have.DeletionTimestamp == nil && containsLabels(have.Labels, want.Labels) &&
		have.Spec.InfrastructureRef == want.Spec.InfrastructureRef && have.Spec.ControlPlaneRef == want.Spec.ControlPlaneRef
}

// StaticCluster and StaticControlPlane are the Cluster's references; CAPS
// fills their status.
func StaticCluster(namespace string) *infrav1alpha1.StaticCluster {
	return &infrav1alpha1.StaticCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1alpha1.SchemeGroupVersion.String(), Kind: kindStaticCluster},
		ObjectMeta: metav1.ObjectMeta{Name: infrav1alpha1.StaticClusterName, Namespace: namespace, Labels: managedLabels()},
	}
}

// StaticControlPlane: see StaticCluster.
func StaticControlPlane(namespace string) *infrav1alpha1.StaticControlPlane {
	return &infrav1alpha1.StaticControlPlane{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1alpha1.SchemeGroupVersion.String(), Kind: kindStaticControlPlane},
		ObjectMeta: metav1.ObjectMeta{Name: infrav1alpha1.StaticClusterName, Namespace: namespace, Labels: managedLabels()},
	}
}

// KubeconfigSecret is the Cluster's kubeconfig Secret, through which Cluster
// API reaches the cluster's Nodes (this same cluster).
func KubeconfigSecret(namespace string, kubeconfig []byte) *corev1.Secret {
	labels := managedLabels()
	labels[infrav1alpha1.ClusterNameLabel] = infrav1alpha1.StaticClusterName
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: infrav1alpha1.StaticKubeconfigSecret, Namespace: namespace, Labels: labels},
		Type:       infrav1alpha1.ClusterSecretType,
		Data:       map[string][]byte{infrav1alpha1.ClusterSecretValueKey: kubeconfig},
	}
}

// KubeconfigSecretCurrent reports whether have holds what want does.
func KubeconfigSecretCurrent(have, want *corev1.Secret) bool {
	return have.DeletionTimestamp == nil && have.Type == want.Type && containsLabels(have.Labels, want.Labels) &&
		string(have.Data[infrav1alpha1.ClusterSecretValueKey]) == string(want.Data[infrav1alpha1.ClusterSecretValueKey])
}

// In-cluster paths of a pod's ServiceAccount credentials.
const (
	serviceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	serviceAccountCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	inClusterServer         = "https://kubernetes.default.svc"
)

// InClusterServer is the address of the cluster's own API as every pod
// of the cluster reaches it: the kubernetes Service's ClusterIP and port,
// which the kubelet gives each container (KUBERNETES_SERVICE_HOST and
// _PORT, read by getenv), and which the API server's certificate names.
// Not its DNS name: Cluster API must reach the cluster before the
// cluster's DNS runs (static nodes are joined while there may be no node
// for it to run on yet). Outside a pod, the Service's DNS name.
func InClusterServer(getenv func(string) string) string {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return inClusterServer
	}
	return "https://" + net.JoinHostPort(host, port)
}

// InClusterKubeconfig is the kubeconfig the Cluster's Secret holds by
// default: the cluster's own API at server (InClusterServer), with the
// reading pod's own ServiceAccount token and CA files. So the Secret holds
// no credential, and capi-controller-manager reaches the Nodes as itself
// (its RBAC in manifests/capi-controller-manager).
func InClusterKubeconfig(server string) ([]byte, error) {
	name := infrav1alpha1.StaticClusterName
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthority: serviceAccountCAFile}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {TokenFile: serviceAccountTokenFile}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: name}},
		CurrentContext: name,
	}
	return clientcmd.Write(cfg)
}
