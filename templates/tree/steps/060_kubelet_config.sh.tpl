{{ include "step-header" . }}
{{ include "write-if-changed" . }}
{{- $k := .nodeGroup.kubelet }}

mkdir -p /var/lib/bashible/kubelet
if write_if_changed /var/lib/bashible/kubelet/config.yaml <<'CONF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: {{ $k.maxPods }}
containerLogMaxSize: {{ $k.containerLogMaxSize }}
containerLogMaxFiles: {{ $k.containerLogMaxFiles }}
seccompDefault: {{ $k.seccompDefault }}
clusterDomain: {{ .normal.clusterDomain }}
clusterDNS:
  - {{ .normal.clusterDNSAddress }}
cgroupDriver: systemd
rotateCertificates: true
serverTLSBootstrap: true
{{- if $k.topologyManager.enabled }}
topologyManagerScope: {{ $k.topologyManager.scope | lower }}
topologyManagerPolicy: {{ $k.topologyManager.policy | kebabcase }}
cpuManagerPolicy: static
memoryManagerPolicy: Static
{{- end }}
CONF
then
  touch /var/lib/bashible/kubelet/restart-requested
fi
