{{ include "step-header" . }}
# Stands in for the kubelet's TLS bootstrap, which cannot run here: a node
# that joined with a bootstrap token receives its client certificate.
cert=$BASHIBLE_ROOT/var/lib/kubelet/pki/kubelet-client-current.pem
if [[ ! -s "$cert" && -s "$BASHIBLE_ROOT/control/kubelet-cert" ]]; then
  cp "$BASHIBLE_ROOT/control/kubelet-cert" "$cert"
  echo "joined: the kubelet has its client certificate"
fi
