#!/usr/bin/env bash
# CPU time per op of a Go benchmark: user+system time of the whole process
# (every thread, the collector's included), not wall time. While other
# processes share the core, wall time counts the time the benchmark waited
# for it; CPU time counts only what it ran (cache sharing still shows).
#
#   hack/bench-cputime.sh PKG BENCH N1 N2
#   hack/bench-cputime.sh ./pkg/dispatch 'BenchmarkBookLong/blocks=64$/book$' 100000 400000
#   BIN=/tmp/dispatch.test hack/bench-cputime.sh - 'BenchmarkBookLong/blocks=64$/floor$' 100000 400000
#
# Runs the benchmark N1 and N2 times (-benchtime=Nx), GOMAXPROCS=1 and
# pinned to core 1 (as the other figures are), and prints (cpu(N2) -
# cpu(N1)) / (N2 - N1) in ns, so that start-up and set-up cancel out. BIN
# names a test binary built beforehand (go test -c), to compare commits
# with binaries of each; PKG is then ignored. Run from the package's
# directory when its benchmarks read testdata.
set -euo pipefail
pkg=$1 bench=$2 n1=$3 n2=$4
bin=${BIN:-}
if [ -z "$bin" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  nice -n 10 go test -c -o "$work/bench.test" "$pkg"
  bin=$work/bench.test
fi

# cpu N: the CPU seconds of a run of N iterations: perf's task-clock
# (nanoseconds) when perf is installed, else time's user+system (10 ms
# steps, so take N2 - N1 large enough).
cpu() {
  local out
  if command -v perf >/dev/null; then
    out=$(GOMAXPROCS=1 perf stat -x, -e task-clock taskset -c 1 "$bin" -test.run '^$' \
      -test.bench "$bench" -test.benchtime "${1}x" 2>&1 >/dev/null | awk -F, '$3 == "task-clock" {print $1 / 1000}')
  else
    out=$( { /usr/bin/time -f 'cputime %U %S' env GOMAXPROCS=1 taskset -c 1 "$bin" -test.run '^$' \
      -test.bench "$bench" -test.benchtime "${1}x" >/dev/null; } 2>&1 | awk '$1 == "cputime" {print $2 + $3}')
  fi
  [ -n "$out" ] || { echo "no CPU time for $bench at ${1}x" >&2; return 1; }
  echo "$out"
}

a=$(cpu "$n1")
b=$(cpu "$n2")
awk -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" -v bench="$bench" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
  'BEGIN {printf "%s: %.0f ns/op of CPU (%.2f s at %dx, %.2f s at %dx; load %s)\n", bench, (b - a) / (n2 - n1) * 1e9, a, n1, b, n2, load}'
