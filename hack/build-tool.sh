#!/usr/bin/env bash
# Builds one pinned tool from the hack/tools module into bin/, saying what it
# does and reporting progress while the (possibly long) build runs.
#
# usage: hack/build-tool.sh <output> <package> [ldflags]
# TOOLS_MODULE (default hack/tools) is the pinning module to build in;
# the environment (CGO_ENABLED, ...) is passed to go build.
set -Eeuo pipefail

out=$1 pkg=$2 ldflags=${3:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=$root/${TOOLS_MODULE:-hack/tools}
name=$(basename "$out")
# The Makefile compiles the product with -trimpath (GOFLAGS) so that checkouts
# share the build cache; a tool's dependencies already live at one path, the
# module cache, and are shared as they are: -trimpath here would only make
# every tool's first build cold again.
unset GOFLAGS
version=$(cd "$module" && go list -m -f '{{.Version}}' "$(go list -f '{{.Module.Path}}' "$pkg")" 2>/dev/null || true)

echo "tools: building $name from $pkg${version:+ $version} (a cold build of the Kubernetes binaries takes minutes; later builds use the Go cache)"
start=$SECONDS
(cd "$module" && exec go build -ldflags "$ldflags" -o "$out" "$pkg") &
pid=$!
next=15
while kill -0 "$pid" 2>/dev/null; do
	sleep 1
	if (( SECONDS - start >= next )) && kill -0 "$pid" 2>/dev/null; then
		echo "tools: still building $name ($(( SECONDS - start ))s)"
		next=$(( next + 15 ))
	fi
done
if ! wait "$pid"; then
	echo "tools: building $name failed" >&2
	exit 1
fi
touch "$out"
echo "tools: built $name in $(( SECONDS - start ))s"
