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

scratch="$(mktemp -d)"
log="$scratch/modules.log"
# The packages that run kvhint and kvhint-dev (test/fault, test/e2e,
# internal/cli, ...) share one build of each: internal/testing/testenv's
# Build links them here once, and the others find them up to date.
export KVHINT_TEST_BINARIES="$scratch/bin"
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
trap 'kill "$modules" 2>/dev/null; rm -rf "$scratch"' EXIT

# go test runs the packages two at a time in the order they are named.
# In go list's order the suites under test/ come last, so the longest of
# them (test/fault, three to five minutes) starts among the last and may
# run on alone at the end while the other slot has nothing left. The
# suites that take minutes go first, longest first, beside the rest of
# the module; a
# name no longer in the module is left out, and the rest keep go list's
# order. -e: a package that does not build is still named, and go test
# reports it as it would for ./...
mod=github.com/kvrouter/kv-hint-operator
all="$(go list -e ./...)" || exit 1
pkgs=()
for p in test/fault test/staged test/rollout test/e2e controllers; do
	if grep -qxF "$mod/$p" <<<"$all"; then
		pkgs+=("$mod/$p")
	fi
done
while read -r p; do
	case " ${pkgs[*]} " in
	*" $p "*) ;;
	*) pkgs+=("$p") ;;
	esac
done <<<"$all"

echo "go test ./..., the longest suites first (the modules of their own run beside it: examples, tools/chart, tools/observability, tools/promserver)"
go test $flags "${pkgs[@]}"
product=$?

wait "$modules"
rest=$?
echo "--- the modules of their own:"
cat "$log"
if [ "$product" -ne 0 ] || [ "$rest" -ne 0 ]; then
	echo "make test: FAIL (product module exit $product, modules of their own exit $rest)" >&2
	exit 1
fi
