#!/usr/bin/env bash
# Runs `promtool test rules` on the alerting rules node-manager ships
# (`make test-rules`). The rules are PrometheusRule objects in
# manifests/monitoring; hack/cmd/promrules writes their spec as plain rule
# files beside copies of the tests in manifests/monitoring/tests, and fails
# when an alert has no test. promtool is bin/promtool, built from the
# pinned hack/tools/prometheus module.
set -Eeuo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
promtool=${PROMTOOL:-$root/bin/promtool}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cd "$root"
go run ./hack/cmd/promrules -out "$tmp" -rules manifests/monitoring -tests manifests/monitoring/tests
for f in "$tmp"/*.rules.yaml; do
	"$promtool" check rules "$f"
done
cd "$tmp"
tests=()
for f in "$root"/manifests/monitoring/tests/*.yaml; do
	tests+=("$(basename "$f")")
done
"$promtool" test rules "${tests[@]}"
