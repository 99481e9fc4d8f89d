// Package bundles turns cluster state into the bundles bashible-apiserver
// serves, and keeps every replica serving the same ones.
//
// # How a change reaches a node's GET
//
//  1. Informers (set up by [NewController]) watch the inputs, each as
//     narrowly as the API allows: NodeGroups, NodeGroupConfigurations,
//     kube-system/d8-cluster-configuration,
//     kube-system/d8-static-cluster-configuration,
//     kube-system/kube-root-ca.crt and the default/kubernetes EndpointSlices. A change puts the node groups
//     it affects on the render queue: a NodeGroup its own group, a
//     NodeGroupConfiguration the groups it selects before and after the
//     change, a cluster-wide input every group.
//  2. On every replica, renderWorker takes one group at a time from the
//     render queue and renders it (renderGroup, with [Renderer], which
//     reuses a group's previous result when none of its inputs changed).
//     Each group is a work item of its own, so a group whose templates take
//     their whole time budget delays no other. Every render, once it no
//     longer counts as in flight (renderOne), adds the single item of the
//     publish queue, which waits coalesced until it is taken.
//  3. On the leader only, publishWorker takes that item and publishes every
//     group's latest result (publishLatest, publish): writeBundle writes
//     each bundle as the Secret bashible-bundle-<group> in the bundles
//     namespace (a bundle it encoded before is compared with its Secret by
//     the digest of that encoding, so a pass encodes only what changed;
//     and until the informer shows one of the leader's writes, what the
//     write replaced counts as the write: ownWrites), deleteRemoved deletes the bundles of groups that are gone,
//     writeContext writes every group's render context (credentials
//     redacted) to the Secret Deckhouse's documentation points authors to
//     (contextsecret.go), and reportConfigs and reportNodeGroups set the
//     Rendered condition of each NodeGroupConfiguration and NodeGroup.
//  4. On every replica, an informer on the bundles namespace hands each
//     Secret to the [Store], which decodes and verifies it once per change;
//     the informer's cache keeps only the SHA-256 of each Secret's data
//     ([Store.Transform]), which is what writeBundle compares, and the
//     Store the Secret as received until its handler takes it.
//  5. The registry package serves what the Store holds: gets, lists and
//     watches read it and never wait for a render.
//
// # Why every replica renders
//
// Any replica may become the leader at any moment (the leader's pod is
// deleted, rolled or cut off), and a leader publishes nothing until every
// group has rendered once since its replica started, so that a group not
// rendered yet is never taken for a deleted one (latestResults). A replica
// that has rendered all along publishes as soon as it takes the Lease;
// rendering costs a follower little, as an unchanged group reuses its
// previous result. A replica's readiness does not wait for its renders
// ([Controller.Ready]): it serves what is published, whatever its own
// renders do.
//
// # Why only the leader publishes
//
// Replicas see a change at slightly different times, and during a rollout
// they run different template trees. Were each to write what it rendered, they
// would overwrite each other's Secrets, and nodes would flap between two
// checksums. One replica, the holder of the Lease [deckhousev1.BashibleAPIServerName] in the
// bundles namespace ([deckhousev1.BundlesNamespace] by default), is the only writer;
// it writes with the context of its term, so its writes stop when the term
// ends. Every bundle is published as soon as its group renders, but a
// NodeGroupConfiguration's status waits until every group it selects has
// rendered the current state, so its message never mixes old and new
// results.
//
// # Why replicas serve only what was published
//
// A node's request lands on any replica, and a client may list on one and
// watch on another. Serving the published Secrets, never its own render,
// makes every replica serve byte-identical objects, so two replicas never
// serve different content under one name, and a restarted replica comes
// back with the same checksums. An object's resourceVersion is its
// Secret's etcd resourceVersion, which means the same thing on every
// replica, so list-then-watch works whichever replica a request lands on.
//
// # The last good bundle
//
// The leader publishes only a bundle that rendered completely and fits in
// a Secret ([MaxEncodedBundleBytes]), and writes it only when it differs
// from what is published. A group whose render fails, or whose bundle is
// too large, keeps its previous Secret: its last good bundle. The failure
// is reported where its author looks: the Rendered condition of the
// NodeGroupConfiguration and the NodeGroup, a Warning Event and a metric.
//
// Should anyone else change or delete a published Secret, the change
// reaches the publish queue through the same informer, and the leader
// rewrites the Secret from the group's last good bundle (lastGood,
// publishGroup), even while the group's current render fails. Meanwhile
// the Store keeps serving what it had for a Secret whose content does not
// match its checksum, so an edit is never served under a false checksum. A follower takes what the
// leader publishes as the last good bundle, so after a failover the new
// leader restores the same one. A bundle is deleted only when a live GET of
// its NodeGroup answers 404 (deleteRemoved), never because the informer
// showed no groups for a moment.
//
// # Revisions and pins
//
// The leader keeps each group's last bundles as revisions ([revisions]:
// one immutable Secret per revision, so that a bundle may use almost all
// of a Secret; the list of them travels in the group's published Secret,
// so every replica serves it without holding their contents). A NodeGroup
// pinned to one of them (spec.update.pinnedRevision) has that revision
// published as its bundle (chooseServed), so the pin reaches every replica
// and node along the path every bundle takes. New renders of a pinned
// group are still recorded; unpinning publishes the newest. A pin to a
// revision that is not kept changes nothing the nodes receive and is
// reported by the NodeGroup's Pinned condition. Each revision records the
// digest of the cluster settings it was rendered under (SettingsDigest): a
// pin rolls back the group's configuration, not the cluster's, so a pin to
// a revision rendered under other settings (an extra CA, registry
// credentials or a proxy removed since) serves the current bundle and is
// reported as Pinned=False, ClusterSettingsChanged, unless a cluster
// administrator allowed that revision by annotation.
//
// # Who may author a bundle
//
// A node runs its bundle as root whatever it says, so only
// bashible-apiserver may write one. The checksum inside a published Secret
// proves only that the Secret is intact, not who wrote it: anyone who can
// write the Secret can recompute it. The guarantee therefore rests on who
// can write there. Published bundles live in a namespace of their own in
// which only bashible-apiserver's ServiceAccount is granted any write
// (Secrets and its leader Lease, manifests/bashible-apiserver/rbac.yaml);
// node-manager-controller, which writes Secrets in
// d8-cloud-instance-manager, has no rights there at all. The remaining
// writers are those who may write Secrets in every namespace — cluster
// administrators — and they could as well read any signing key, so signing
// the bundles (an HMAC with a key only bashible-apiserver reads) would add
// no protection the namespace does not already give, and is not done.
package bundles
