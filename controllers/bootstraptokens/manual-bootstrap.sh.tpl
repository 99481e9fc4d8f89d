#!/usr/bin/env bash
# Manual bootstrap of a node of group {{ .Group }}, written by
# node-manager-controller into Secret {{ .Namespace }}/{{ .SecretName }}.
#
# The bootstrap token in this script is valid until {{ .ExpiresAt }}.
# After that this script refuses to run; fetch a fresh one with
#   {{ .FreshCommand }}
#
# Run it as root on the new machine. It writes the cluster CA and the
# group's bootstrap token to /var/lib/bashible, then fetches the group's
# bootstrap script (bootstrap/{{ .Group }}) from the API and runs it, which
# installs bashible and joins the machine. Running it again is safe: a
# machine bashible already manages is left alone.
#
# Environment, for tests: BASHIBLE_ROOT (a directory standing in for /; a
# non-root user may run the script then) and BASHIBLE_API_ENDPOINTS
# (space-separated host:port list replacing the built-in one).
set -Eeuo pipefail
export LC_ALL=C

NODE_GROUP={{ squote .Group }}
TOKEN_EXPIRES_AT={{ squote .ExpiresAt }}
TOKEN_EXPIRES_EPOCH={{ .ExpiresEpoch }}
FRESH_SCRIPT={{ squote .FreshCommand }}
DEFAULT_ENDPOINTS={{ squote .Endpoints }}
BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
read -r -a ENDPOINTS <<< "${BASHIBLE_API_ENDPOINTS:-$DEFAULT_ENDPOINTS}"

log() { echo "manual-bootstrap: $*" >&2; }

log "node group $NODE_GROUP; the bootstrap token in this script is valid until $TOKEN_EXPIRES_AT"

# A machine that has joined is run by bashible.timer; bootstrapping it
# again would skip the approval every later update needs.
if command -v systemctl > /dev/null 2>&1 && systemctl is-active --quiet bashible.timer 2> /dev/null; then
  log "the node already exists in the cluster and is managed by bashible (bashible.timer is active); nothing to do"
  exit 0
fi
if [[ -e "$BASHIBLE_DIR/configuration_checksum" ]]; then
  log "this machine has already been configured by bashible ($BASHIBLE_DIR/configuration_checksum exists); nothing to do"
  exit 0
fi

now=$(date +%s)
if (( now >= TOKEN_EXPIRES_EPOCH )); then
  log "the bootstrap token in this script expired at $TOKEN_EXPIRES_AT (this machine's clock says $(date -u -d "@$now" +%Y-%m-%dT%H:%M:%SZ)); the API would refuse it, so nothing was changed."
  log "fetch a fresh script (its token is valid for at least 3 more hours) and run that instead:"
  log "  $FRESH_SCRIPT > bootstrap.sh && bash bootstrap.sh"
  exit 1
fi

if [[ -z "$BASHIBLE_ROOT" && "$(id -u)" != 0 ]]; then
  log "run this script as root (for example with sudo): it writes to /var/lib/bashible and configures the machine"
  exit 1
fi

# ensure_tools installs curl and jq when missing (minimal RHEL images lack jq).
ensure_tools() {
  local -a missing=()
  local tool
  for tool in curl jq; do
    command -v "$tool" > /dev/null 2>&1 || missing+=("$tool")
  done
  (( ${#missing[@]} == 0 )) && return 0
  log "installing ${missing[*]}"
  if command -v apt-get > /dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  elif command -v dnf > /dev/null 2>&1; then
    dnf install -y -q "${missing[@]}"
  elif command -v yum > /dev/null 2>&1; then
    yum install -y -q "${missing[@]}"
  else
    log "${missing[*]} missing and neither apt-get, dnf nor yum is available to install it; install ${missing[*]} and run this script again"
    return 1
  fi
  for tool in "${missing[@]}"; do
    command -v "$tool" > /dev/null 2>&1 || { log "installing $tool did not provide the $tool command"; return 1; }
  done
}
ensure_tools

# The CA and the token, each replaced whole; the token is readable by root only.
umask 077
mkdir -p "$BASHIBLE_DIR"
cat > "$BASHIBLE_DIR/ca.crt.new" << 'CLUSTER_CA'
{{ .CA }}
CLUSTER_CA
chmod 0644 "$BASHIBLE_DIR/ca.crt.new"
mv -f "$BASHIBLE_DIR/ca.crt.new" "$BASHIBLE_DIR/ca.crt"
printf '%s\n' {{ squote .Token }} > "$BASHIBLE_DIR/bootstrap-token.new"
chmod 0600 "$BASHIBLE_DIR/bootstrap-token.new"
mv -f "$BASHIBLE_DIR/bootstrap-token.new" "$BASHIBLE_DIR/bootstrap-token"
# curl reads the header from a file, so the token is not on a command line.
printf 'Authorization: Bearer %s\n' {{ squote .Token }} > "$BASHIBLE_DIR/bootstrap-token-header"

response=$BASHIBLE_DIR/bootstrap-response.json
script=$BASHIBLE_DIR/bootstrap.sh
for endpoint in "${ENDPOINTS[@]}"; do
  code=$(curl --silent --show-error --noproxy '*' --connect-timeout 5 --max-time 60 \
    --cacert "$BASHIBLE_DIR/ca.crt" -H @"$BASHIBLE_DIR/bootstrap-token-header" \
    --output "$response" --write-out '%{http_code}' \
    "https://$endpoint/apis/bashible.deckhouse.io/v1alpha1/bootstrap/$NODE_GROUP") || code=unreachable
  case "$code" in
    200)
      if jq -j '.bootstrap // ""' < "$response" > "$script.new" 2> /dev/null &&
          [[ "$(head -n 1 "$script.new")" == "#!/usr/bin/env bash" ]]; then
        rm -f "$response"
        chmod 0700 "$script.new"
        mv -f "$script.new" "$script"
        log "running the bootstrap script of group $NODE_GROUP served by $endpoint"
        exec bash "$script"
      fi
      rm -f "$script.new"
      log "$endpoint answered, but not with a bootstrap script"
      ;;
    401)
      rm -f "$response"
      log "$endpoint refused the bootstrap token (401 Unauthorized): it has expired or was deleted; fetch a fresh script and run that instead:"
      log "  $FRESH_SCRIPT > bootstrap.sh && bash bootstrap.sh"
      exit 1
      ;;
    unreachable) log "could not reach $endpoint" ;;
    *) log "$endpoint answered HTTP $code: $(head -c 300 "$response" 2> /dev/null || true)" ;;
  esac
  rm -f "$response"
done
log "no API endpoint served the bootstrap script of group $NODE_GROUP: ${ENDPOINTS[*]}"
exit 1
