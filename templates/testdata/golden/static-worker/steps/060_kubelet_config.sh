#!/usr/bin/env bash
# Managed by node-manager for node group worker; changes are overwritten.
set -Eeuo pipefail
write_if_changed() {
  local path=$1 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat > "$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$path"
  echo "updated $path"
}

mkdir -p /var/lib/bashible/kubelet
if write_if_changed /var/lib/bashible/kubelet/config.yaml <<'CONF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 120
containerLogMaxSize: 50Mi
containerLogMaxFiles: 4
seccompDefault: false
clusterDomain: cluster.local
clusterDNS:
  - 10.222.0.10
cgroupDriver: systemd
rotateCertificates: true
serverTLSBootstrap: true
CONF
then
  touch /var/lib/bashible/kubelet/restart-requested
fi
