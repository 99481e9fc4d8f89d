#!/usr/bin/env bash
# verify-wire-names.sh fails when a wire name (a label, annotation, taint,
# field manager, namespace or well-known object name defined in an
# apiserver/apis/*/*/well_known.go file) is written as a Go string literal
# anywhere else, naming file:line:column and the constant to use instead.
# `make lint` runs it; the rules are in hack/cmd/wirenames/main.go.
set -Eeuo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/wirenames" ./hack/cmd/wirenames)
"$tmp/wirenames" "$root"
