# kv-hint-operator. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
KVHINT ?= $(BIN)/kvhint
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
# -count=1: the end-to-end tests build and run kvhint themselves, which Go's
# test cache cannot see, so a cached pass could hide a broken binary.
GO_TEST_FLAGS ?= -count=1

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/kvhint.
	go build -o $(KVHINT) ./cmd/kvhint

.PHONY: envtest
envtest: ## Build (or reuse) kube-apiserver and etcd for the tests; prints their folder.
	@hack/envtest-assets.sh

.PHONY: test
test: ## Run every test against a real kube-apiserver and etcd (built on first use).
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test $(GO_TEST_FLAGS) ./...

.PHONY: soak
soak: ## Run the 10-minute soak of the sidecar binary (steady bookings, config flips); figures in docs/benchmarks.md.
	KVHINT_SOAK=1 KVHINT_SOAK_REPORT=$${KVHINT_SOAK_REPORT:-$(CURDIR)/bin/soak-report.md} go test $(GO_TEST_FLAGS) ./test/fault/ -run '^TestSoak$$' -v -timeout 20m

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/controller-gen $(CONTROLLER_GEN)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers.
	@if [ -d api ]; then $(CONTROLLER_GEN) crd rbac:roleName=kvhint-manager paths=./api/... paths=./controllers/... paths=./internal/... output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac; fi

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	@if [ -d api ]; then $(CONTROLLER_GEN) object paths=./api/...; fi

.PHONY: verify
verify: manifests generate ## Fail if generated files are stale or the tree is not gofmt/vet clean.
	@test -z "$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files -co --exclude-standard '*.go'); exit 1; }
	go vet ./...
	@git diff --exit-code -- api config || { echo "generated files are stale: run make manifests generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config)" || { echo "untracked generated files:"; git status --porcelain -- api config; exit 1; }

.PHONY: dev
dev: build ## Run the whole product locally (control plane, manager, sidecars, workers) until Ctrl-C.
	$(KVHINT) dev --assets "$$(hack/envtest-assets.sh)"
