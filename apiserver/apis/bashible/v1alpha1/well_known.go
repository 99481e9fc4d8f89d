package v1alpha1

// The wire names of the bashible.deckhouse.io API. Like the names in
// apiserver/apis/deckhouse/v1/well_known.go (the node labels served objects
// also carry, node.deckhouse.io/group and node.deckhouse.io/type, are
// there), each is written here once, in full, and used by its constant
// everywhere else; hack/verify-wire-names.sh (run by `make lint`) fails on a
// copy of one of these values as a string literal elsewhere.

// Annotations on every served object (Bashible, NodeGroupBundle, Bootstrap).
const (
	// ChecksumAnnotation carries the group's configuration checksum: a
	// sha256 (hex) over the group's bashible.sh and bundle steps. bashible
	// compares it with the node's node.deckhouse.io/configuration-checksum
	// to know it has work to do; node-manager-controller compares the two
	// to approve updates and report up-to-date nodes. bashible-apiserver
	// also puts it on the bundle Secrets it publishes.
	ChecksumAnnotation = "bashible.deckhouse.io/configuration-checksum"
	// KubernetesVersionAnnotation and CRIAnnotation are what the group's
	// bundle was rendered for; wide tables (kubectl get -o wide) show them.
	KubernetesVersionAnnotation = "bashible.deckhouse.io/kubernetes-version"
	CRIAnnotation               = "bashible.deckhouse.io/cri"
)

// Bundle revisions (pinning and rollback).
const (
	// RevisionAnnotation on every served object is the number of the
	// group's bundle revision it carries (nodegroupbundles/<group> lists
	// the kept revisions). bashible-apiserver also puts it, as a label, on
	// each revision Secret it keeps.
	RevisionAnnotation = "bashible.deckhouse.io/revision"
	// PinnedRevisionAnnotation is on the served objects of a group pinned
	// (NodeGroup spec.update.pinnedRevision) to an earlier revision: the
	// revision its nodes receive instead of the current configuration.
	PinnedRevisionAnnotation = "bashible.deckhouse.io/pinned-revision"
	// ChangedStepsAnnotation on a revision Secret lists, comma-separated,
	// the steps that changed since the revision before it.
	ChangedStepsAnnotation = "bashible.deckhouse.io/changed-steps"
)

// BashibleScriptKey is the only key of Bashible.Data: the node agent,
// which bashible itself fetches and writes to /var/lib/bashible/bashible.sh.
const BashibleScriptKey = "bashible.sh"

// TemplatesDigestAnnotation on a bundle Secret bashible-apiserver publishes
// records the digest of the template tree the bundle was rendered from.
const TemplatesDigestAnnotation = "bashible.deckhouse.io/templates-digest"

// How kube-apiserver reaches bashible-apiserver.
const (
	// APIServiceName is the APIService that registers this group and
	// version with the aggregator.
	APIServiceName = "v1alpha1.bashible.deckhouse.io"
	// ServiceName is the Service (in d8-cloud-instance-manager) the
	// APIService points at; bashible-apiserver's serving certificate is
	// issued for bashible-api.d8-cloud-instance-manager.svc.
	ServiceName = "bashible-api"
	// ConversionServiceName is the Service (in d8-cloud-instance-manager)
	// the deckhouse.io CRDs' conversion webhook calls: the same pods as
	// ServiceName, including those not ready yet (publishNotReadyAddresses).
	// A replica is ready once its informers have loaded, and loading
	// NodeGroups or Instances stored at an older version needs the
	// conversion webhook: through ServiceName, which routes to ready pods
	// only, no replica would ever become ready. The serving certificate
	// carries this Service's names too.
	ConversionServiceName = "bashible-api-conversion"
)

// The preview at apply time: bashible-apiserver's validating admission
// webhook for NodeGroups and NodeGroupConfigurations (apiserver/admission,
// manifests/bashible-apiserver/preview-webhook.yaml).
const (
	// PreviewWebhookConfigurationName is its ValidatingWebhookConfiguration.
	PreviewWebhookConfigurationName = "d8-node-manager-bundle-preview"
	// PreviewWebhookName is the webhook's name, which kubectl prints with a
	// refusal ("admission webhook ... denied the request").
	PreviewWebhookName = "bundle-preview.bashible.deckhouse.io"
	// PreviewWebhookPath is where bashible-apiserver serves it, on its
	// secure port.
	PreviewWebhookPath = "/admission/bundle-preview"
	// NodeGroupPolicyWebhookName is the webhook, in the same configuration,
	// that refuses the NodeGroup changes a group's nodes cannot take
	// (Deckhouse's rules that read node labels, apiserver/admission
	// Refusal). It fails closed and is called only for those changes.
	NodeGroupPolicyWebhookName = "nodegroup-policy.bashible.deckhouse.io"
	// NodeGroupPolicyWebhookPath is where bashible-apiserver serves it.
	NodeGroupPolicyWebhookPath = "/admission/nodegroup-policy"
	// PreviewWebhookCallerUser is the user kube-apiserver authenticates as
	// when it calls the webhook: the client certificate of its admission
	// kubeconfig (--admission-control-config-file). Only this user may post
	// to PreviewWebhookPath (manifests/bashible-apiserver/preview.yaml).
	PreviewWebhookCallerUser = "kube-apiserver-webhook-client"
)

// The early-oom settings at apply time: a second webhook of
// PreviewWebhookConfigurationName, served by bashible-apiserver, refuses a
// ConfigMap of early-oom's settings (deckhousev1.EarlyOOMName in
// d8-cloud-instance-manager) that no node could use
// (apiserver/admission/settings.go).
const (
	// EarlyOOMSettingsWebhookName is its name, which kubectl prints with a
	// refusal.
	EarlyOOMSettingsWebhookName = "early-oom-settings.bashible.deckhouse.io"
	// EarlyOOMSettingsWebhookPath is where bashible-apiserver serves it;
	// like PreviewWebhookPath, only PreviewWebhookCallerUser may post to it.
	EarlyOOMSettingsWebhookPath = "/admission/early-oom-settings"
)

// The conversion of deckhouse.io objects between the versions of their
// kind (apiserver/conversion): the CRDs' conversion webhook, served by
// bashible-apiserver through the Service ConversionServiceName.
const (
	// ConversionWebhookPath is where bashible-apiserver answers
	// kube-apiserver's ConversionReviews, on its secure port. kube-apiserver
	// calls conversion webhooks without credentials, so this path is served
	// to anyone (see conversion.Webhook for why that is safe).
	ConversionWebhookPath = "/conversion/deckhouse.io"
)
