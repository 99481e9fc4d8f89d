#!/usr/bin/env bash
# First boot of a node of group worker. Run once on a new
# machine that has its bootstrap token in /var/lib/bashible/bootstrap-token
# and the cluster CA in /var/lib/bashible/ca.crt: it fetches bashible.sh with
# the token, marks the first run and converges. BASHIBLE_ROOT and
# BASHIBLE_API_ENDPOINTS work as in bashible.sh.
set -Eeuo pipefail
export LC_ALL=C

BASHIBLE_ROOT=${BASHIBLE_ROOT:-}
BASHIBLE_DIR=${BASHIBLE_ROOT}/var/lib/bashible
NODE_GROUP='worker'
DEFAULT_ENDPOINTS='10.0.0.10:6443'
read -r -a ENDPOINTS <<< "${BASHIBLE_API_ENDPOINTS:-$DEFAULT_ENDPOINTS}"

# A machine that has joined is run by bashible.timer; bootstrapping it
# again would skip the approval every later update needs.
if [[ -e "$BASHIBLE_DIR/configuration_checksum" ]]; then
  echo "bootstrap: this machine has already been configured by bashible; nothing to do" >&2
  exit 0
fi
for f in bootstrap-token ca.crt; do
  if [[ ! -s "$BASHIBLE_DIR/$f" ]]; then
    echo "bootstrap: $BASHIBLE_DIR/$f is missing; write the group's bootstrap token and the cluster CA first" >&2
    exit 1
  fi
done
(umask 077 && printf 'Authorization: Bearer %s\n' "$(cat "$BASHIBLE_DIR/bootstrap-token")" > "$BASHIBLE_DIR/bootstrap-token-header")

for endpoint in "${ENDPOINTS[@]}"; do
  if curl --silent --show-error --fail --noproxy '*' --connect-timeout 5 --max-time 60 \
      --cacert "$BASHIBLE_DIR/ca.crt" -H @"$BASHIBLE_DIR/bootstrap-token-header" \
      "https://$endpoint/apis/bashible.deckhouse.io/v1alpha1/bashibles/$NODE_GROUP" |
      jq -j '.data["bashible.sh"]' > "$BASHIBLE_DIR/bashible.sh.new" &&
      [[ "$(head -n 1 "$BASHIBLE_DIR/bashible.sh.new")" == "#!/usr/bin/env bash" ]]; then
    mv "$BASHIBLE_DIR/bashible.sh.new" "$BASHIBLE_DIR/bashible.sh"
    chmod 0755 "$BASHIBLE_DIR/bashible.sh"
    touch "$BASHIBLE_DIR/first_run"
    exec bash "$BASHIBLE_DIR/bashible.sh"
  fi
  rm -f "$BASHIBLE_DIR/bashible.sh.new"
  echo "bootstrap: fetching bashible.sh from $endpoint failed" >&2
done
echo "bootstrap: no API endpoint answered: ${ENDPOINTS[*]}" >&2
exit 1
