#!/usr/bin/env bash
# The bounds of issue 21 as figures: RSS, descriptors and goroutines of the
# real sidecar binary under 20 stalled workers with 47,000-block hints and
# under 256 concurrent 47,000-hash bookings, both against the 256 MiB
# container limit config/router sets (given as the downward API gives it);
# 6,000 workers over the API against the per-source cap; 1,200 hinted
# workers and descriptor exhaustion under a 1,024-descriptor limit; five
# reloads renaming policies.
# docs/benchmarks.md has the results.
#
#   hack/bench-bounds.sh [REPEATS]   # default 1
#
# The figures come from the fault tests of test/fault/bounds_test.go, which
# also hold the bounds as assertions; this prints their figure lines and
# the machine's load before and after each run (the figures are memory and
# descriptors, which load changes little; latency is not measured here).
set -euo pipefail
cd "$(dirname "$0")/.."

REPEATS=${1:-1}
TESTS='TestStalledWorkersLongHintsUnderMemoryLimit|TestConcurrentLongBookingsUnderMemoryLimit|TestWorkersOverTheAPICapped|TestManyHintedWorkersUnderFileLimit|TestReloadRenamingPoliciesDropsSeries|TestBookingListenerSurvivesDescriptorExhaustion'

for rep in $(seq "$REPEATS"); do
	echo "run $rep, $(git rev-parse --short HEAD), load before: $(uptime | sed 's/.*load average: //')"
	go test ./test/fault -run "$TESTS" -count=1 -v -timeout 10m 2>&1 |
		grep -E '^(=== RUN|--- |\s+bounds_test\.go)' | sed -E 's/^\s+bounds_test\.go:[0-9]+: /    /'
	echo "load after: $(uptime | sed 's/.*load average: //')"
done
