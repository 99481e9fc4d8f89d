#!/usr/bin/env bash
# Builds one pinned tool from the hack/tools module into bin/, saying what it
# does and reporting progress while the (possibly long) build runs.
#
# usage: hack/build-tool.sh <output> <package> [ldflags]
# TOOLS_MODULE (default hack/tools) is the pinning module to build in;
# TOOL_TAGS are build tags; the rest of the environment is passed to go build.
#
# Every tool is built static (CGO_ENABLED=0 unless the caller says
# otherwise): the kubelet and containerd must be, to run in the Debian root
# of the rootfs and join suites, and building the other Kubernetes binaries
# the same way compiles Kubernetes once for all of them instead of once with
# cgo and once without (6 minutes of a cold build on two cores).
#
# Built tools are kept in a cache outside the checkout, under a key made of
# everything the binary is built from: the pinning module's go.mod and
# go.sum, the package (and its files, when it lives in the pinning module),
# the ldflags, the Go version and the target platform. A fresh clone, or
# any checkout pinning the same versions, copies the binary from there
# instead of linking it again (each Kubernetes binary is 10-15 s of link
# time, about 2 minutes for all of them). TOOLS_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/node-manager/tools) moves it; TOOLS_CACHE=off
# builds every time. Entries unused for 30 days are removed.
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
export CGO_ENABLED=${CGO_ENABLED:-0}
tags=${TOOL_TAGS:-}
version=$( (cd "$module" && go list -m -f '{{.Version}}' "$(go list -f '{{.Module.Path}}' "$pkg")") 2>/dev/null || true)

cache=${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-manager/tools}
entry=""
if [[ "$cache" != off ]]; then
	key=$(
		cd "$module"
		printf 'package %s\nldflags %s\ntags %s\n' "$pkg" "$ldflags" "$tags"
		go env GOVERSION GOOS GOARCH GOAMD64 CGO_ENABLED
		sha256sum go.mod go.sum
		# A package of the pinning module itself: its sources too.
		if [[ "$pkg" == ./* ]]; then
			find "$pkg" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		fi
	) || { echo "tools: could not compute the cache key of $name" >&2; exit 1; }
	entry=$cache/$name/$(sha256sum <<< "$key" | cut -c1-24)
	if [[ -x "$entry/$name" ]]; then
		mkdir -p "$(dirname "$out")"
		cp "$entry/$name" "$out.tmp.$$" && mv -f "$out.tmp.$$" "$out"
		touch "$out" "$entry"
		echo "tools: $name${version:+ $version} from the cache ($entry)"
		exit 0
	fi
fi

echo "tools: building $name from $pkg${version:+ $version} (a cold build of the Kubernetes binaries takes minutes; later builds use the Go cache)"
start=$SECONDS
(cd "$module" && exec go build -tags "$tags" -ldflags "$ldflags" -o "$out" "$pkg") &
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

# Into the cache: a copy renamed into place, so a concurrent build never
# sees half a binary. A cache that cannot be written only costs the next
# checkout this build.
if [[ -n "$entry" ]]; then
	if mkdir -p "$entry" && cp "$out" "$entry/$name.tmp.$$" && mv -f "$entry/$name.tmp.$$" "$entry/$name"; then
		find "$cache/$name" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true
	else
		rm -f "$entry/$name.tmp.$$"
		echo "tools: could not keep $name in the cache $entry (the next checkout builds it again)" >&2
	fi
fi
