# node-manager — see README.md. The two commands that matter:
#   make run    build, start the local control plane and the stack, show it working
#   make test   everything: generated-code check, vet, staticcheck, unit and e2e tests

SHELL := /usr/bin/env bash
.SHELLFLAGS := -Eeuo pipefail -c
.DEFAULT_GOAL := help

BIN       := $(CURDIR)/bin
TOOLS_DIR := $(CURDIR)/hack/tools
TOOLS_MOD := $(TOOLS_DIR)/go.mod $(TOOLS_DIR)/go.sum
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.36.3 \
               -X k8s.io/component-base/version.gitMajor=1 \
               -X k8s.io/component-base/version.gitMinor=36

CONTROL_PLANE := $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl
GENERATORS    := $(BIN)/deepcopy-gen $(BIN)/client-gen $(BIN)/lister-gen $(BIN)/informer-gen \
                 $(BIN)/applyconfiguration-gen $(BIN)/openapi-gen $(BIN)/controller-gen
LINTERS       := $(BIN)/staticcheck $(BIN)/goimports
# What the rootfs e2e suite's local package mirror serves in place of the
# upstream downloads: the kubelet and kubectl from hack/tools, containerd
# from its own module (its dependencies clash with k8s.io/kubernetes).
# Static builds, as every tool is (hack/build-tool.sh), so they run in the
# Debian root.
CTRD_DIR      := $(CURDIR)/hack/tools/containerd
CTRD_MOD      := $(CTRD_DIR)/go.mod $(CTRD_DIR)/go.sum
CTRD_VERSION   = $(shell cd $(CTRD_DIR) && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
NODE_BINARIES := $(BIN)/kubelet $(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr
# The join suite's install test runs node-manager's release as pods: the
# machine needs a scheduler for its Deployments and DaemonSets and a
# kube-proxy for its Services, both from the pinned module.
CLUSTER_BINARIES := $(BIN)/kube-scheduler $(BIN)/kube-proxy
# promtool tests the alerting rules (make test-rules); its own module, as
# Prometheus's dependencies clash with k8s.io/kubernetes. Only cmd/promtool
# is built, without the service discoveries of every cloud (remove_all_sd:
# Prometheus's own build tag), which rule tests never use and which were
# most of its cold build.
PROM_DIR      := $(CURDIR)/hack/tools/prometheus
PROM_MOD      := $(PROM_DIR)/go.mod $(PROM_DIR)/go.sum
# capi-controller-manager is upstream Cluster API's core manager, which
# Cluster API Provider Static runs on (make run, the e2e harness); its own
# module, as its dependencies clash with k8s.io/kubernetes too. The harness
# reads its CRDs, webhooks and RBAC from the same module (hack/stack/clusterapi.go).
CAPI_DIR      := $(CURDIR)/hack/tools/clusterapi
CAPI_MOD      := $(CAPI_DIR)/go.mod $(CAPI_DIR)/go.sum
CAPI_VERSION   = $(shell cd $(CAPI_DIR) && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
TOOLS         := $(CONTROL_PLANE) $(GENERATORS) $(LINTERS) $(NODE_BINARIES) $(CLUSTER_BINARIES) $(BIN)/promtool $(BIN)/capi-controller-manager

# Every go command below compiles with -trimpath, so a build's cache entries
# do not depend on where the checkout lives: a fresh clone (CI's, or a second
# worktree) reuses what an earlier checkout compiled instead of compiling the
# whole product again for each of vet, the race build and the e2e build.
export GOFLAGS ?= -trimpath

# node-manager's own binaries, which make run and the e2e suites start.
STACK_CMDS := ./apiserver/cmd/bashible-apiserver ./apiserver/cmd/bashible-render-worker ./controllers/cmd/node-manager-controller \
              ./controllers/cmd/caps-controller-manager ./agents/cmd/fencing-agent ./agents/cmd/early-oom

# Packages with e2e suites need the local control plane; the rest are unit tests.
# The e2e suites start slowest first (go test runs packages in the order given,
# E2E_PARALLEL at a time), so the short ones fill in behind them instead of one
# long suite running alone at the end. test-durations.sh prints the figures
# this order comes from at the end of every make test.
MODULE       = $(shell go list -m)
E2E_SLOWEST := join controllers bashible caps drills fencing apiserver foundation rootfs fencingagent
E2E_PKGS     = $(addprefix $(MODULE)/hack/e2e/,$(E2E_SLOWEST)) \
               $(filter-out $(addprefix $(MODULE)/hack/e2e/,$(E2E_SLOWEST)),$(shell go list ./hack/e2e/...))
# Three suites at once: a suite mostly waits (on its control plane, on
# timers of the behaviour it proves), so two cores serve three.
E2E_PARALLEL ?= 3
# Within a suite, the tests that call t.Parallel (controllers, bashible) run
# this many at a time on the suite's control plane; go test's default is
# GOMAXPROCS (2 here), but those tests mostly wait on the control plane and
# on the behaviour's own timers, not on the CPU.
E2E_TEST_PARALLEL ?= 6
# The product's unit tests reuse go test's cached result when nothing they
# depend on has changed: the package, everything it imports, the flags, and
# every environment variable and file of the module the test opened at run
# time (go test records them and compares each file's path, size and
# modification time). A fresh clone gives every file a new modification
# time, so a package whose tests open the module's files runs again in each:
# the product's tests embed what they read instead (the templates tests,
# 90-100 s, their testdata; others manifests.FS), and a fresh clone at the
# path of the last one reuses their results. The
# harness's packages (hack/) reach the repository and bin/ by absolute
# paths, so they run every time, as the e2e suites do. GO_TEST_FLAGS=-count=1
# runs everything.
UNIT_PKGS    = $(shell go list ./... | grep -v '/hack/')
HARNESS_PKGS = $(shell go list ./hack/... | grep -v '/hack/e2e/')
GO_TEST_FLAGS ?=
# Test binaries are linked without DWARF (-w): a quarter less link time for
# binaries nobody attaches a debugger to; stack traces are unaffected.
TEST_LDFLAGS := -ldflags=-w
# go test's own vet pass is a subset of the analyzers lint's go vet ./...
# has already run over the same packages and their tests.
TEST_VETFLAGS := -vet=off
# Each test target's output, read back by test-durations.sh.
TEST_LOGS    := $(CURDIR)/.local/test-logs

.PHONY: help
help: ## show the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

##@ tools: every tool is built from the pinned hack/tools module, only when missing or out of date

.PHONY: tools
tools: $(TOOLS) ## build the pinned control plane, generators and linters into bin/
	@echo "tools: up to date in $(BIN)"

$(BIN)/etcd: $(TOOLS_MOD) $(TOOLS_DIR)/cmd/etcd/main.go
	@hack/build-tool.sh $@ ./cmd/etcd
$(BIN)/kube-apiserver: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kube-apiserver "$(K8S_LDFLAGS)"
$(BIN)/kube-controller-manager: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kube-controller-manager "$(K8S_LDFLAGS)"
$(BIN)/kubectl: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kubectl "$(K8S_LDFLAGS)"
$(BIN)/kubelet: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kubelet "$(K8S_LDFLAGS)"
$(BIN)/kube-scheduler: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kube-scheduler "$(K8S_LDFLAGS)"
$(BIN)/kube-proxy: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kubernetes/cmd/kube-proxy "$(K8S_LDFLAGS)"
$(BIN)/containerd $(BIN)/containerd-shim-runc-v2 $(BIN)/ctr: $(BIN)/%: $(CTRD_MOD)
	@TOOLS_MODULE=hack/tools/containerd hack/build-tool.sh $@ github.com/containerd/containerd/v2/cmd/$* \
		"-X github.com/containerd/containerd/v2/version.Version=$(patsubst v%,%,$(CTRD_VERSION))"
$(BIN)/promtool: $(PROM_MOD)
	@TOOLS_MODULE=hack/tools/prometheus TOOL_TAGS=remove_all_sd hack/build-tool.sh $@ github.com/prometheus/prometheus/cmd/promtool
$(BIN)/capi-controller-manager: $(CAPI_MOD)
	@TOOLS_MODULE=hack/tools/clusterapi hack/build-tool.sh $@ sigs.k8s.io/cluster-api/core \
		"-X sigs.k8s.io/cluster-api/version.gitVersion=$(CAPI_VERSION)"
$(BIN)/%-gen: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/code-generator/cmd/$*-gen
$(BIN)/openapi-gen: $(TOOLS_MOD)
	@hack/build-tool.sh $@ k8s.io/kube-openapi/cmd/openapi-gen
$(BIN)/controller-gen: $(TOOLS_MOD)
	@hack/build-tool.sh $@ sigs.k8s.io/controller-tools/cmd/controller-gen
$(BIN)/staticcheck: $(TOOLS_MOD)
	@hack/build-tool.sh $@ honnef.co/go/tools/cmd/staticcheck
# goimports pins golang.org/x/tools in a module of its own, so that a new
# version never changes the key of the Kubernetes binaries' cache.
$(BIN)/goimports: hack/tools/goimports/go.mod hack/tools/goimports/go.sum
	@TOOLS_MODULE=hack/tools/goimports hack/build-tool.sh $@ golang.org/x/tools/cmd/goimports

# Debian packages the build and the tests need, as command:package (the
# package is named after the command when ":package" is left out):
# shellcheck checks every shell script we ship (golden tests run it); jq is
# used by bashible, which the bashible e2e suite runs on simulated nodes;
# debootstrap builds the Debian root the rootfs and join e2e suites run the
# bundle in; the join suite boots that root with systemd-nspawn, cleans the
# iptables rules its kubelet made with iptables-save, and builds the pause
# image with gcc; make images puts ca-certificates' CA bundle in the images
# that need one (IMAGE_DEBIAN_TOOLS).
IMAGE_DEBIAN_TOOLS := update-ca-certificates:ca-certificates
DEBIAN_TOOLS := shellcheck jq debootstrap systemd-nspawn:systemd-container iptables-save:iptables mkfs.ext4:e2fsprogs gcc $(IMAGE_DEBIAN_TOOLS)
# $(call debian-install,command:package ...): installs the packages of the
# commands missing here.
define debian-install
export PATH=$$PATH:/usr/sbin:/sbin; missing=$$(for t in $(1); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done); \
if [[ -n "$$missing" ]]; then \
	echo "tools: installing from Debian packages: $$missing"; \
	if [[ $$(id -u) -eq 0 ]]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null; \
fi
endef
.PHONY: debian-tools
debian-tools:
	@$(call debian-install,$(DEBIAN_TOOLS))
	@shellcheck --version | sed -n 2p; jq --version; echo "debootstrap $$(debootstrap --version | cut -d' ' -f2)"

##@ code generation

.PHONY: generate
generate: $(GENERATORS) ## regenerate deepcopy, clients, listers, informers, applyconfigs and CRDs
	@hack/codegen.sh update

.PHONY: verify-generated
verify-generated: $(GENERATORS) ## fail if generated code differs from what the generators produce
	@hack/codegen.sh verify

##@ build, run, test

.PHONY: build
build: ## compile every package, bashible-apiserver, node-manager-controller, caps-controller-manager, the agents (fencing-agent, early-oom) and the local stack
	go build ./...
	go build -o $(BIN)/ $(STACK_CMDS) ./hack/cmd/localstack

# The release (docs/install.md): one YAML file of node-manager and Cluster
# API's core, every image pinned by digest in REGISTRY, as make images
# recorded them in IMAGES_DIGESTS; monitoring is a second, optional file.
REGISTRY       ?=
IMAGES_DIGESTS ?= $(CURDIR)/.local/images/digests
RELEASE_DIR    ?= $(CURDIR)/.local/release
ifneq ($(filter release,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error release: set REGISTRY=<registry>/<path>, where make push REGISTRY=... put the images)
endif
endif
.PHONY: release
release: images $(BIN)/kubectl ## the release .local/release/node-manager.yaml (REGISTRY=<registry>/<path>), applied with kubectl apply --server-side -f
	go run ./hack/cmd/release -registry "$(REGISTRY)" -digests "$(IMAGES_DIGESTS)" -kubectl $(BIN)/kubectl \
		-out $(RELEASE_DIR)/node-manager.yaml -monitoring-out $(RELEASE_DIR)/node-manager-monitoring.yaml \
		-cluster-autoscaler-out $(RELEASE_DIR)/node-manager-cluster-autoscaler.yaml

.PHONY: run
run: $(CONTROL_PLANE) $(BIN)/capi-controller-manager build ## start the local control plane and the stack; Ctrl-C stops it
	@$(BIN)/localstack

.PHONY: lint
lint: $(LINTERS) debian-tools ## gofmt, imports grouped (goimports -local), go vet, staticcheck, shellcheck of hack/, wire names only in well_known.go, agents/ importing nothing under controllers/; the product module must not depend on k8s.io/kubernetes
	@if go list -m k8s.io/kubernetes >/dev/null 2>&1; then \
		echo "lint: go.mod depends on k8s.io/kubernetes; only hack/tools may (use the k8s.io/* staging modules)"; exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | grep -v '^hack/tools/')); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@# Imports in three groups: the standard library, other modules, this
	@# module (code-generator's output aside).
	@ungrouped=$$($(BIN)/goimports -local $(MODULE) -l $$(git ls-files -co --exclude-standard '*.go' | grep -v -e '^hack/tools/' -e '^generated/' -e 'zz_generated')); \
	if [[ -n "$$ungrouped" ]]; then echo "imports not grouped as goimports -local $(MODULE) groups them (run it with -w):"; echo "$$ungrouped"; exit 1; fi
	go vet ./...
	@# generated/ is code-generator output, which keeps deprecated client-go
	@# calls for compatibility; it is checked by verify-generated instead.
	$(BIN)/staticcheck $$(go list ./... | grep -v '/generated/')
	@# The scripts the build and the tests run are held to the shipped shell's bar.
	shellcheck hack/*.sh
	@# Every wire name is defined once, in apiserver/apis/*/*/well_known.go.
	hack/verify-wire-names.sh
	@# The node agents stand apart from node-manager-controller: what both
	@# need lives under internal/.
	@if deps=$$(go list -deps ./agents/... | grep '^$(MODULE)/controllers/'); then \
		echo "lint: agents/ imports controllers/ ($$deps); move what both need under internal/"; exit 1; fi

.PHONY: test-unit
# bin/kubectl: hack/release's tests build the release with its kustomize.
test-unit: debian-tools $(BIN)/kubectl ## unit tests (no control plane), including golden files checked by bash -n and shellcheck
	@mkdir -p $(TEST_LOGS)
	go test -race -timeout 20m $(TEST_VETFLAGS) $(TEST_LDFLAGS) $(GO_TEST_FLAGS) $(UNIT_PKGS) 2>&1 | tee $(TEST_LOGS)/unit.log
	go test -count=1 -race -timeout 20m $(TEST_VETFLAGS) $(TEST_LDFLAGS) $(GO_TEST_FLAGS) $(HARNESS_PKGS) 2>&1 | tee -a $(TEST_LOGS)/unit.log

.PHONY: test-rules
test-rules: $(BIN)/promtool ## promtool test rules: every alert of manifests/monitoring on synthetic series
	@hack/test-rules.sh

.PHONY: test-e2e
test-e2e: images $(CONTROL_PLANE) $(NODE_BINARIES) $(CLUSTER_BINARIES) $(BIN)/capi-controller-manager debian-tools ## e2e suites: the local control plane, and the bundle run in a Debian root
	@mkdir -p $(TEST_LOGS)
	@# Linked once here, where three suites starting at once each linked all
	@# of them; the suites then skip their own build (hack/stack.PrebuiltEnv).
	go build -o $(BIN)/ $(STACK_CMDS)
	NODE_MANAGER_E2E_PREBUILT=$(BIN) go test -count=1 -timeout 20m -p $(E2E_PARALLEL) -parallel $(E2E_TEST_PARALLEL) $(TEST_VETFLAGS) $(TEST_LDFLAGS) $(GO_TEST_FLAGS) $(E2E_PKGS) 2>&1 | tee $(TEST_LOGS)/e2e.log

.PHONY: test-fuzz
# Each target runs a fixed number of inputs (about 5-10 s here), not for a
# time: Go 1.26's fuzzing coordinator can fail a run whose -fuzztime
# deadline falls while a worker is busy ("context deadline exceeded", no
# failing input; golang/go#75804, fixed in Go 1.27), which a loaded machine
# makes likely. A count has no deadline; load only makes it slower.
# go test's vet pass is off here too: with it on, each target's vet
# computed facts for every dependency (107 CPU-s on an empty cache), which
# lint's go vet ./... has done.
test-fuzz: ## a short run of every fuzz target (parsers of outside input)
	go test -run '^$$' -fuzz '^FuzzParse$$' $(TEST_VETFLAGS) -fuzztime 4000x ./registry/objectname
	go test -run '^$$' -fuzz '^FuzzRenderCustomStep$$' $(TEST_VETFLAGS) -fuzztime 2000x ./templates
	go test -run '^$$' -fuzz '^FuzzRenderedScriptsKeepContextValuesInert$$' $(TEST_VETFLAGS) -fuzztime 600x ./templates
	go test -run '^$$' -fuzz '^FuzzParse$$' $(TEST_VETFLAGS) -fuzztime 100000x ./agents/early-oom/psi

.PHONY: test
# Its phases one after another, each timed (test-durations.sh prints them).
TEST_PHASES := verify-generated lint test-unit test-rules test-fuzz test-e2e
test: ## everything CI runs
	@mkdir -p $(TEST_LOGS) && : > $(TEST_LOGS)/phases
	@for phase in $(TEST_PHASES); do \
		start=$$SECONDS; $(MAKE) --no-print-directory $$phase; \
		echo "$$phase $$(( SECONDS - start ))" >> $(TEST_LOGS)/phases; \
	done
	@hack/test-durations.sh $(TEST_LOGS)
	@echo "test: all checks passed"

.PHONY: bench
bench: $(CONTROL_PLANE) debian-tools ## render, serving and bashible-run benchmarks on this machine, one `name: value unit` per line
	go run ./hack/cmd/bench
	@# One bashible.sh run applying 40 steps against a fake API (templates.BenchmarkAgentRun).
	@go test -run '^$$' -bench '^BenchmarkAgentRun$$' -benchtime 3x ./templates | \
		awk '$$1 ~ /^BenchmarkAgentRun/ { printf "bashible_run_40_steps: %.0f ms\nbashible_run_40_steps_cpu: %s ms\n", $$3 / 1e6, $$5 }'

# BENCH_FLEET_FLAGS: for example -nodes 200 while developing (see hack/cmd/benchfleet).
BENCH_FLEET_FLAGS ?=
.PHONY: bench-fleet
bench-fleet: $(CONTROL_PLANE) ## 5,000 simulated nodes against bashible-apiserver and node-manager-controller, `name: value unit` per line
	go run ./hack/cmd/benchfleet $(BENCH_FLEET_FLAGS)

##@ images: built from scratch with go-containerregistry (hack/cmd/images); no Docker daemon, nothing downloaded

IMAGES_DIR := $(CURDIR)/.local/images
# VERSION is the images' version label and the tag make push gives them;
# by default `git describe --tags`, or v0.0.0-<commit time>-<commit> before
# the first tag ("-dirty" when the work tree has changes).
VERSION ?=
# REGISTRY is where make push puts the images: <registry>[:port]/<path>;
# REGISTRY_INSECURE=true speaks plain HTTP to one not on loopback.
REGISTRY ?=
REGISTRY_INSECURE ?= false

.PHONY: images
images: ## OCI images of bashible-apiserver, node-manager-controller, caps-controller-manager, fencing-agent, early-oom and capi-controller-manager: .local/images/oci, .local/images/digests
	@$(call debian-install,$(IMAGE_DEBIAN_TOOLS))
	go run ./hack/cmd/images build -out $(IMAGES_DIR) $(if $(VERSION),-version $(VERSION))

.PHONY: push
push: ## push the images to REGISTRY=<registry>/<path>, by digest and tagged with their version (credentials: docker login)
	@if [[ -z "$(REGISTRY)" ]]; then \
		echo "push: say where to push: make push REGISTRY=<registry>[:port]/<path>, for example REGISTRY=registry.example.com/node-manager" >&2; exit 1; fi
	@$(MAKE) --no-print-directory images
	go run ./hack/cmd/images push -layout $(IMAGES_DIR)/oci -registry $(REGISTRY) $(if $(filter true,$(REGISTRY_INSECURE)),-insecure)

.PHONY: clean
clean: ## remove build outputs (keeps the Go caches)
	rm -rf $(BIN) .local
