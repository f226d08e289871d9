#!/usr/bin/env bash
# make test: the product module's tests, and beside them, in a second lane,
# the modules of their own (the examples, tools/chart, tools/observability,
# tools/promserver).
#
# The product's suites spend most of their wall time waiting on processes
# they start (API servers, managers, sidecars under attack), so the tools'
# modules, which mostly compile and render, run alongside instead of after
# them. Each lane's output is kept whole: the second lane's is printed
# after the first's, and the run fails if either does.
set -uo pipefail
cd "$(dirname "$0")/.."

flags=${GO_TEST_FLAGS:--count=1 -vet=off}
# The assets first, on their own: were the script to fail inside a test
# command, KUBEBUILDER_ASSETS would be empty and the suites that need an
# API server would fail with no cause.
assets="$(hack/envtest-assets.sh)" || exit 1
export KUBEBUILDER_ASSETS="$assets"

log="$(mktemp -d)/modules.log"
(
	set -e
	for m in examples/*/go.mod; do
		d="$(dirname "$m")"
		echo "go test $d"
		(cd "$d" && go test $flags ./...)
	done
	# The chart's tests: Helm's SDK, in a module of its own.
	echo "go test tools/chart"
	(cd tools/chart && go test $flags ./...)
	# The rules parse, the metric-existence check, the generated files'
	# check, promtool's rule cases and the apply to kube-apiserver.
	echo "go test tools/observability"
	(cd tools/observability && go test $flags ./...)
	# The rollout's Prometheus provider against a real Prometheus, built
	# from its Go module.
	echo "go test tools/promserver"
	(cd tools/promserver && go test $flags ./...)
) >"$log" 2>&1 &
modules=$!
trap 'kill "$modules" 2>/dev/null' EXIT

echo "go test ./... (the modules of their own run beside it: examples, tools/chart, tools/observability, tools/promserver)"
go test $flags ./...
product=$?

wait "$modules"
rest=$?
echo "--- the modules of their own:"
cat "$log"
if [ "$product" -ne 0 ] || [ "$rest" -ne 0 ]; then
	echo "make test: FAIL (product module exit $product, modules of their own exit $rest)" >&2
	exit 1
fi
