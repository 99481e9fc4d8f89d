#!/usr/bin/env bash
# Regenerates (update) or checks (verify) everything produced by generators:
#   - deepcopy functions next to the API types        (k8s.io/code-generator deepcopy-gen)
#   - clientset, listers, informers, applyconfigs     (client-gen, lister-gen, informer-gen,
#     under generated/                                 applyconfiguration-gen)
#   - OpenAPI definitions of the aggregated API       (k8s.io/kube-openapi openapi-gen)
#   - CRD manifests under manifests/crds/             (sigs.k8s.io/controller-tools controller-gen,
#                                                      then hack/cmd/crdconversion for their conversion webhook)
# The generator binaries come from the pinned hack/tools module (`make tools`).
#
# usage: hack/codegen.sh update|verify
set -Eeuo pipefail

mode=${1:-}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN_DIR:-$root/bin}
module=$(cd "$root" && go list -m)
header=$root/hack/boilerplate.go.txt

# API packages with CRD types (deckhouse.io, and Cluster API Provider Static's
# infrastructure.cluster.x-k8s.io) and of the aggregated API
# (bashible.deckhouse.io). Add a package here when a new version or group appears.
crd_pkgs=(apiserver/apis/deckhouse/v1 apiserver/apis/deckhouse/v1alpha1 apiserver/apis/deckhouse/v1alpha2 apiserver/apis/infrastructure/v1alpha1)
aggregated_pkgs=(apiserver/apis/bashible/v1alpha1)
api_pkgs=("${crd_pkgs[@]}" "${aggregated_pkgs[@]}")

need() {
	local t
	for t in "$@"; do
		if [[ ! -x "$bin/$t" ]]; then
			echo "codegen: $bin/$t is missing; run 'make tools' first" >&2
			exit 1
		fi
	done
}

generate() { # generate <tree>: regenerate everything inside tree (a copy of the module)
	local tree=$1 p
	local -a full=() aggregated=()
	for p in "${api_pkgs[@]}"; do full+=("$module/$p"); done
	for p in "${aggregated_pkgs[@]}"; do aggregated+=("$module/$p"); done
	cd "$tree"

	echo "codegen: deepcopy"
	"$bin/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go "${api_pkgs[@]/#/./}"

	echo "codegen: openapi"
	rm -rf generated/openapi
	"$bin/openapi-gen" --go-header-file "$header" \
		--output-dir generated/openapi --output-pkg "$module/generated/openapi" --output-file zz_generated.openapi.go \
		--report-filename hack/api-rule-violations.list \
		--output-model-name-file zz_generated.model_name.go \
		--readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 --readonly-pkg k8s.io/apimachinery/pkg/runtime \
		--readonly-pkg k8s.io/apimachinery/pkg/version \
		k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
		"${aggregated[@]}"

	echo "codegen: applyconfigurations"
	rm -rf generated/applyconfiguration generated/clientset generated/listers generated/informers
	"$bin/applyconfiguration-gen" --go-header-file "$header" \
		--output-dir generated/applyconfiguration --output-pkg "$module/generated/applyconfiguration" \
		"${full[@]}"

	echo "codegen: clientset"
	local inputs=()
	for p in "${full[@]}"; do inputs+=(--input "$p"); done
	"$bin/client-gen" --go-header-file "$header" --clientset-name versioned --input-base "" "${inputs[@]}" \
		--output-dir generated/clientset --output-pkg "$module/generated/clientset" \
		--apply-configuration-package "$module/generated/applyconfiguration"

	echo "codegen: listers"
	"$bin/lister-gen" --go-header-file "$header" \
		--output-dir generated/listers --output-pkg "$module/generated/listers" "${full[@]}"

	echo "codegen: informers"
	"$bin/informer-gen" --go-header-file "$header" \
		--versioned-clientset-package "$module/generated/clientset/versioned" \
		--listers-package "$module/generated/listers" \
		--output-dir generated/informers --output-pkg "$module/generated/informers" "${full[@]}"

	echo "codegen: CRDs"
	rm -f manifests/crds/deckhouse.io_*.yaml manifests/crds/infrastructure.cluster.x-k8s.io_*.yaml
	"$bin/controller-gen" crd:crdVersions=v1 paths=./apiserver/apis/deckhouse/... paths=./apiserver/apis/infrastructure/... \
		output:crd:dir=manifests/crds
	# controller-gen cannot emit a conversion webhook: the deckhouse.io CRDs
	# that serve several versions get bashible-apiserver's here.
	echo "codegen: CRD conversion webhooks"
	go run ./hack/cmd/crdconversion manifests/crds
}

case "$mode" in
update)
	need deepcopy-gen openapi-gen applyconfiguration-gen client-gen lister-gen informer-gen controller-gen
	generate "$root"
	echo "codegen: done"
	;;
verify)
	need deepcopy-gen openapi-gen applyconfiguration-gen client-gen lister-gen informer-gen controller-gen
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# Regenerate in a copy so a verify never touches the working tree.
	tar -C "$root" --exclude=./bin --exclude=./.git --exclude=./.local --exclude=./hack/tools -cf - . | tar -C "$tmp" -xf -
	generate "$tmp" >/dev/null
	if ! diff -ru --exclude=bin --exclude=.git --exclude=.local --exclude=tools "$root" "$tmp" >"$tmp.diff" 2>&1; then
		echo "verify-generated: generated code is out of date; run 'make generate' and commit the result:" >&2
		head -n 60 "$tmp.diff" >&2
		rm -f "$tmp.diff"
		exit 1
	fi
	rm -f "$tmp.diff"
	echo "verify-generated: generated code is up to date"
	;;
*)
	echo "usage: $0 update|verify" >&2
	exit 2
	;;
esac
