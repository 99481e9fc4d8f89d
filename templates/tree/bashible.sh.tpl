#!/usr/bin/env bash
# bashible: the node agent of node group {{ .nodeGroup.name }}, served by
# bashible-apiserver as bashibles/{{ .nodeGroup.name }}. It fetches the
# group's bundle, runs its steps in order and records the checksum it applied.
set -Eeuo pipefail

readonly NODE_GROUP={{ .nodeGroup.name | squote }}
readonly BASHIBLE_DIR=/var/lib/bashible
readonly API_ENDPOINTS=({{ range .normal.apiserverEndpoints }}{{ . | squote }} {{ end }})
readonly API_PATH=/apis/bashible.deckhouse.io/v1alpha1

log() { echo "bashible: $(date -u +%Y-%m-%dT%H:%M:%SZ) $*" >&2; }

# detect_bundle prints the OS bundle of this machine.
detect_bundle() {
  local id id_like
  # shellcheck disable=SC1091 # the file exists on every supported OS
  id=$(. /etc/os-release && echo "${ID:-}")
  # shellcheck disable=SC1091
  id_like=$(. /etc/os-release && echo "${ID_LIKE:-}")
  case "$id" in
    debian) echo debian ;;
    ubuntu) echo ubuntu-lts ;;
    centos|rocky|almalinux|rhel) echo centos ;;
    *)
      case " $id_like " in
        *" rhel "*) echo centos ;;
        *) log "unsupported OS '$id': supported are debian, ubuntu-lts and centos (RHEL family)"; return 1 ;;
      esac
      ;;
  esac
}

# api_get <resource>: GET <resource>/<group> from the first endpoint that
# answers, with the kubelet's client certificate once the node has joined
# and the bootstrap token before. The token is passed in a header file so it
# never appears in a process list or a log.
api_get() {
  local resource=$1 endpoint
  local -a auth
  if [[ -f /var/lib/kubelet/pki/kubelet-client-current.pem ]]; then
    auth=(--cert /var/lib/kubelet/pki/kubelet-client-current.pem --key /var/lib/kubelet/pki/kubelet-client-current.pem)
  else
    auth=(-H @"$BASHIBLE_DIR/bootstrap-token-header")
  fi
  for endpoint in "${API_ENDPOINTS[@]}"; do
    if curl --silent --show-error --fail --connect-timeout 5 --max-time 60 \
        --cacert "$BASHIBLE_DIR/ca.crt" "${auth[@]}" \
        "https://$endpoint$API_PATH/$resource/$NODE_GROUP"; then
      return 0
    fi
    log "GET $resource/$NODE_GROUP from $endpoint failed"
  done
  return 1
}

main() {
  local bundle json checksum steps_dir step
  bundle=$(detect_bundle)
  export BASHIBLE_BUNDLE=$bundle
  json=$(api_get nodegroupbundles)
  checksum=$(jq -r '.metadata.annotations["bashible.deckhouse.io/configuration-checksum"]' <<<"$json")
  if [[ -f "$BASHIBLE_DIR/configuration_checksum" && "$(cat "$BASHIBLE_DIR/configuration_checksum")" == "$checksum" ]]; then
    log "configuration $checksum is already applied"
    return 0
  fi
  steps_dir=$(mktemp -d "$BASHIBLE_DIR/bundle_steps.XXXXXX")
  jq -r '.data | keys[]' <<<"$json" | while read -r step; do
    jq -r --arg step "$step" '.data[$step]' <<<"$json" > "$steps_dir/$step"
  done
  rm -rf "$BASHIBLE_DIR/bundle_steps"
  mv "$steps_dir" "$BASHIBLE_DIR/bundle_steps"
  for step in "$BASHIBLE_DIR"/bundle_steps/*; do
    log "running $(basename "$step")"
    bash "$step"
  done
  echo "$checksum" > "$BASHIBLE_DIR/configuration_checksum"
  log "configuration $checksum applied"
}

main "$@"
