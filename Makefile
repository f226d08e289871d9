# kv-hint-operator. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
KVHINT ?= $(BIN)/kvhint
KVHINT_DEV ?= $(BIN)/kvhint-dev
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
APIDIFF_VERSION ?= v0.0.0-20261113113407-e3970619a1a4
APIDIFF ?= $(BIN)/apidiff-$(APIDIFF_VERSION)
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(BIN)/staticcheck-$(STATICCHECK_VERSION)
GOIMPORTS_VERSION ?= v0.52.0
GOIMPORTS ?= $(BIN)/goimports-$(GOIMPORTS_VERSION)
CRD_REF_DOCS_VERSION ?= v0.3.0
CRD_REF_DOCS ?= $(BIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
LOCAL_MODULE := github.com/kvrouter/kv-hint-operator
LINT_PKGS = $$(go list ./...)
# goimports -local on every Go file but controller-gen's output
# (zz_generated.*, which make generate rewrites as controller-gen does).
GOIMPORTS_FILES = $$(git ls-files -co --exclude-standard '*.go' | grep -v -e 'zz_generated')
# The examples are modules of their own, as a team's plugin or router is.
EXAMPLES := $(wildcard examples/*/go.mod)
# Monitoring as code (alert rules, dashboard) and its tests: a module of its
# own, so that Prometheus, the Prometheus Operator's types and the Grafana
# SDK stay out of the product's go.mod.
OBSERVABILITY := tools/observability
# -count=1: the end-to-end tests build and run kvhint themselves, which Go's
# test cache cannot see, so a cached pass could hide a broken binary.
# -vet=off: make verify runs go vet, every analyzer and the test files
# included, on every module; the subset go test runs would analyze every
# dependency again on a cold cache and could find nothing more.
GO_TEST_FLAGS ?= -count=1 -vet=off

# One set of build flags for everything make compiles: verify's vet and
# lint, the tests and the binaries they build, hack/envtest-assets.sh's
# kube-apiserver and the Dockerfile's steps that test/tutorial runs. They
# are the image's, CGO_ENABLED=0 and -trimpath. Go's build cache keys a
# compiled package by its flags, so with one set a package the assets, the
# tests and the image share (client-go, apimachinery, grpc, ...) is
# compiled once on a cold machine, not once for each set.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell go env GOFLAGS)) -trimpath)

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/kvhint, the product binary (manager, sidecar, validate, compile).
	go build -o $(KVHINT) ./cmd/kvhint

.PHONY: build-dev
build-dev: ## Build bin/kvhint-dev: kvhint plus dev, loadgen and sim-worker.
	go build -o $(KVHINT_DEV) ./cmd/kvhint-dev

.PHONY: envtest
envtest: ## Build (or reuse) kube-apiserver and etcd for the tests; prints their folder.
	@hack/envtest-assets.sh

.PHONY: test
test: ## Run every test against a real kube-apiserver and etcd (built on first use), the examples' and the tools/ modules (chart, observability, promserver) included.
	@# hack/test.sh runs the modules of their own beside the product's.
	GO_TEST_FLAGS="$(GO_TEST_FLAGS)" hack/test.sh

.PHONY: observability-gen
observability-gen: ## Regenerate the PrometheusRule and the Grafana dashboard (JSON, ConfigMap) from their sources in tools/observability.
	cd $(OBSERVABILITY) && go run ./cmd/observability-gen

# make unit: every package's own tests, in -short, with no API server: the
# tests that need kube-apiserver and etcd skip when KUBEBUILDER_ASSETS is
# unset (and it is unset here, even if your shell sets it), the ones that
# build and run the binaries skip in -short, and the suites under test/
# (end to end, fault, scale, admission: real processes, run by make test)
# are left out. Go's test cache applies: a second run is instant.
UNIT_PKGS = $$(go list ./... | grep -v '/test/')

.PHONY: unit
unit: ## Run the unit tests: no API server, no binaries built, no test/ suites; under a minute on a warm cache.
	env -u KUBEBUILDER_ASSETS go test -short $(UNIT_PKGS)

.PHONY: soak
soak: ## Run the 10-minute soak of the sidecar binary (steady bookings, config flips); figures in docs/benchmarks.md.
	KVHINT_SOAK=1 KVHINT_SOAK_REPORT=$${KVHINT_SOAK_REPORT:-$(CURDIR)/bin/soak-report.md} go test $(GO_TEST_FLAGS) ./test/fault/ -run '^TestSoak$$' -v -timeout 20m

.PHONY: aa-study
aa-study: ## Run the A/A study of a canary step's analysis on the real Mooncake trace (some 40 s); figures in docs/rollout.md.
	KVHINT_AA_STUDY=1 go test $(GO_TEST_FLAGS) ./internal/rollout/analysis/ -run '^TestAAStudy$$' -v

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
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers, and copy config/ into the Helm chart's files/.
	@if [ -d api ]; then $(CONTROLLER_GEN) crd rbac:roleName=kvhint-manager paths=./api/... paths=./controllers/... paths=./internal/... output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac; fi
	@# The tests' DynamoGraphDeployment CRD, from the Go types written after
	@# Dynamo's public v1beta1 schema. generateEmbeddedObjectMeta keeps a
	@# component podTemplate's labels and annotations (without it the API
	@# server would prune them).
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./test/dynamo/v1beta1/... output:crd:artifacts:config=test/dynamo/crd
	@$(MAKE) --no-print-directory chart-files

# The chart renders these files of config/ as they are (Helm reads only
# files inside the chart), so config/ stays the one source and the chart
# test's comparison with kustomize build config/default catches the rest.
CHART := charts/kv-hint-operator
.PHONY: chart-files
chart-files: ## Copy the CRDs, cluster roles, admission and injection policies (and alert rules, when config/prometheus has them) into the chart's files/.
	@rm -rf $(CHART)/files && mkdir -p $(CHART)/files/crds $(CHART)/files/rbac $(CHART)/files/admission $(CHART)/files/injection
	@cp config/crd/bases/*.yaml $(CHART)/files/crds/
	@cp config/rbac/role.yaml config/rbac/edit_role.yaml config/rbac/view_role.yaml config/rbac/metrics_reader_role.yaml $(CHART)/files/rbac/
	@for f in config/admission/*.yaml; do [ "$$(basename $$f)" = kustomization.yaml ] || cp $$f $(CHART)/files/admission/; done
	@cp config/injection/policy.yaml $(CHART)/files/injection/
	@if ls config/prometheus/*.yaml >/dev/null 2>&1; then mkdir -p $(CHART)/files/prometheus; for f in config/prometheus/*.yaml; do [ "$$(basename $$f)" = kustomization.yaml ] || cp $$f $(CHART)/files/prometheus/; done; fi

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	@if [ -d api ]; then $(CONTROLLER_GEN) object paths=./api/...; fi
	$(CONTROLLER_GEN) object paths=./test/dynamo/v1beta1/...

.PHONY: crd-ref-docs
crd-ref-docs: $(CRD_REF_DOCS)
$(CRD_REF_DOCS):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION)
	mv $(BIN)/crd-ref-docs $(CRD_REF_DOCS)

.PHONY: docs
docs: $(CRD_REF_DOCS) ## Generate the API reference, docs/reference/api.md, from the Go types of api/ (crd-ref-docs, hack/crd-ref-docs/config.yaml).
	@if [ -d api ]; then $(CRD_REF_DOCS) --source-path=./api --config=hack/crd-ref-docs/config.yaml --renderer=markdown --output-path=docs/reference/api.md --log-level=WARN; fi

# The generated references of docs/reference/ beside api.md: the CLI
# (cobra's doc generator), the conditions and reasons (the doc comments of
# api/v1alpha1/conditions.go) and the metrics (the sidecar's and the
# manager's registries). tools/docgen is a module of its own, so that
# cobra's doc generator and its man-page dependency stay out of go.mod.
DOCGEN = cd $(CURDIR)/tools/docgen && go run ./cmd/docgen
.PHONY: reference
reference: ## Regenerate docs/reference/cli/, conditions.md and metrics.md.
	$(DOCGEN) cli -out $(CURDIR)/docs/reference/cli
	$(DOCGEN) conditions -root $(CURDIR) -out $(CURDIR)/docs/reference/conditions.md
	$(DOCGEN) metrics -out $(CURDIR)/docs/reference/metrics.md

.PHONY: reference-check
reference-check: ## Fail if docs/reference/cli/, conditions.md or metrics.md is stale (make reference).
	@tmp="$$(mktemp -d)" && trap 'rm -rf "$$tmp"' EXIT && \
	{ ($(DOCGEN) cli -out "$$tmp/cli" && $(DOCGEN) conditions -root $(CURDIR) -out "$$tmp/conditions.md" && $(DOCGEN) metrics -out "$$tmp/metrics.md") || \
	  { echo "docgen failed (above): docs/reference could not be generated to compare"; exit 1; }; } && \
	{ diff -r "$$tmp/cli" docs/reference/cli && diff "$$tmp/conditions.md" docs/reference/conditions.md && diff "$$tmp/metrics.md" docs/reference/metrics.md || \
	  { echo "docs/reference is stale: run make reference"; exit 1; }; }

.PHONY: apidiff
apidiff: $(APIDIFF)
$(APIDIFF):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
	mv $(BIN)/apidiff $(APIDIFF)

.PHONY: staticcheck
staticcheck: $(STATICCHECK)
$(STATICCHECK):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/staticcheck $(STATICCHECK)

.PHONY: goimports
goimports: $(GOIMPORTS)
$(GOIMPORTS):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install golang.org/x/tools/cmd/goimports@$(GOIMPORTS_VERSION)
	mv $(BIN)/goimports $(GOIMPORTS)

.PHONY: imports
imports: $(GOIMPORTS) ## goimports -local the tree (generated files aside).
	$(GOIMPORTS) -local $(LOCAL_MODULE) -w $(GOIMPORTS_FILES)

.PHONY: lint
lint: $(STATICCHECK) $(GOIMPORTS) ## staticcheck (default checks) and goimports -local, on the module and the examples.
	@test -z "$$($(GOIMPORTS) -local $(LOCAL_MODULE) -l $(GOIMPORTS_FILES))" || { echo "goimports needed (make imports):"; $(GOIMPORTS) -local $(LOCAL_MODULE) -l $(GOIMPORTS_FILES); exit 1; }
	$(STATICCHECK) $(LINT_PKGS)
	@for m in $(dir $(EXAMPLES)); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

.PHONY: api-check
api-check: $(APIDIFF) ## Fail on an incompatible change to the public packages (pkg/) against hack/api.
	@APIDIFF=$(APIDIFF) hack/api.sh check

.PHONY: api-accept
api-accept: $(APIDIFF) ## Accept the public API as it is now (after an intended change, listed in CHANGELOG.md).
	@APIDIFF=$(APIDIFF) hack/api.sh accept

.PHONY: imports-check
imports-check: ## Fail if a public package or an example imports internal/.
	@hack/imports-check.sh

.PHONY: linkcheck
linkcheck: ## Fail if a relative link or #anchor in a Markdown file of the tree does not resolve (GitHub's anchors).
	go run ./hack/linkcheck

.PHONY: verify
verify: manifests generate docs reference-check imports-check api-check lint linkcheck ## Fail if generated files (CRDs, RBAC, deepcopy, the API reference) are stale, the public API broke, a Markdown link is broken, or the tree is not gofmt/vet/staticcheck/goimports clean.
	@test -z "$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files -co --exclude-standard '*.go'); exit 1; }
	go vet ./...
	@for m in $(dir $(EXAMPLES)); do (cd $$m && go vet ./...) || exit 1; done
	cd $(OBSERVABILITY) && go vet ./...
	cd tools/chart && go vet ./...
	cd tools/promserver && go vet ./...
	@git diff --exit-code -- api config docs/reference $(CHART)/files test/dynamo/crd test/dynamo/v1beta1 || { echo "generated files are stale: run make manifests generate docs and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config docs/reference $(CHART)/files test/dynamo/crd test/dynamo/v1beta1)" || { echo "untracked generated files:"; git status --porcelain -- api config docs/reference $(CHART)/files test/dynamo/crd test/dynamo/v1beta1; exit 1; }

.PHONY: release
release: ## Build a release into dist/ from a clean checkout: kvhint archives, the OCI image layout and its SBOM, install.yaml, crds.yaml, the chart, SHA256SUMS (make release VERSION=vX.Y.Z).
	@test -n "$(VERSION)" || { echo "make release VERSION=vX.Y.Z"; exit 1; }
	rm -rf dist
	cd tools/chart && go run ./cmd/kvhint-release -repo ../.. -version $(VERSION) -out ../../dist

.PHONY: release-snapshot
release-snapshot: ## The same release as a snapshot into dist/ (uncommitted changes allowed; VERSION optional, default v0.0.0-snapshot-COMMIT); publishes nothing.
	rm -rf dist
	cd tools/chart && go run ./cmd/kvhint-release -repo ../.. -snapshot $(if $(VERSION),-version $(VERSION)) -out ../../dist

.PHONY: dev
dev: build-dev ## Run the whole product locally (control plane, manager, sidecars, workers) until Ctrl-C.
	$(KVHINT_DEV) dev --assets "$$(hack/envtest-assets.sh)"
