#!/usr/bin/env bash
# Removes node-manager from the cluster kubectl points at, in the order that
# leaves nothing dangling (docs/install.md, "Remove"):
#   1. the aggregated API and the webhooks, so nothing waits for a pod that
#      is going away (an unavailable APIService blocks namespace deletion
#      cluster-wide; Cluster API's webhooks refuse writes of its objects);
#   2. the controllers and agents, so nothing acts on the deletions that
#      follow: no Node is drained or deleted, no host cleaned, no node's
#      configuration changed (the fencing agents disarm when stopped);
#   3. the finalizers only those controllers would have removed;
#   4. everything else of the release (namespaces, RBAC, policies, CRDs and
#      with them NodeGroups, Instances, StaticInstances, SSHCredentials).
# Nodes are left as they are.
#
# usage: hack/uninstall.sh <release.yaml> [<monitoring.yaml>]
# KUBECTL (default: kubectl) is the kubectl to run, with its flags.
set -Eeuo pipefail

release=${1:?usage: hack/uninstall.sh <release.yaml> [<monitoring.yaml>]}
monitoring=${2:-}
read -r -a kubectl <<< "${KUBECTL:-kubectl}"
ns=d8-cloud-instance-manager

k() { "${kubectl[@]}" "$@"; }

if [[ ! -r "$release" ]]; then
  echo "uninstall: cannot read the release $release (make release writes .local/release/node-manager.yaml)" >&2
  exit 1
fi

echo "uninstall: 1/4 the APIService and the webhooks"
k delete apiservice v1alpha1.bashible.deckhouse.io --ignore-not-found
k delete validatingwebhookconfiguration d8-node-manager-bundle-preview capi-validating-webhook-configuration --ignore-not-found
k delete mutatingwebhookconfiguration capi-mutating-webhook-configuration --ignore-not-found

echo "uninstall: 2/4 the controllers and agents"
k -n "$ns" delete deployment node-manager-controller capi-controller-manager caps-controller-manager bashible-apiserver --ignore-not-found --wait
k -n "$ns" delete daemonset early-oom --ignore-not-found --wait
k -n "$ns" delete daemonset -l app.kubernetes.io/managed-by=node-manager-controller --wait

echo "uninstall: 3/4 the finalizers no controller will remove now"
for r in machines.cluster.x-k8s.io machinesets.cluster.x-k8s.io machinedeployments.cluster.x-k8s.io clusters.cluster.x-k8s.io \
  staticmachines.infrastructure.cluster.x-k8s.io staticclusters.infrastructure.cluster.x-k8s.io staticcontrolplanes.infrastructure.cluster.x-k8s.io; do
  if k get crd "$r" > /dev/null 2>&1; then
    k -n "$ns" get "$r" -o name | while read -r obj; do
      k -n "$ns" patch "$obj" --type=merge -p '{"metadata":{"finalizers":null}}'
    done
  fi
done
# Instances at their storage version: at any other, kube-apiserver would call
# the conversion webhook, bashible-apiserver, which is gone by now.
if storage=$(k get crd instances.deckhouse.io -o jsonpath='{.spec.versions[?(@.storage==true)].name}' 2> /dev/null); then
  k get "instances.$storage.deckhouse.io" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | while read -r name; do
    k patch "instances.$storage.deckhouse.io" "$name" --type=merge -p '{"metadata":{"finalizers":null}}'
  done
fi

echo "uninstall: 4/4 everything else of the release"
k delete -f "$release" --ignore-not-found --wait
if [[ -n "$monitoring" ]]; then
  k delete -f "$monitoring" --ignore-not-found
fi
echo "uninstall: done; the nodes keep their configuration (stop bashible on a node with: systemctl disable --now bashible.timer)"
