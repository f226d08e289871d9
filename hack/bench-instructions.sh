#!/usr/bin/env bash
# Instructions per op of a Go benchmark, counted by valgrind's callgrind:
# unlike ns/op they hold still while other processes load the machine (but
# say nothing of cache misses or stalls, so they bound, not replace, a
# timing on a quiet machine).
#
#   hack/bench-instructions.sh PKG BENCH N1 N2
#   hack/bench-instructions.sh ./pkg/dispatch 'BenchmarkBookLong/blocks=64/book$' 2000 6000
#
# Runs the benchmark N1 and N2 times (-benchtime=Nx) under callgrind and
# prints (total(N2) - total(N1)) / (N2 - N1), so that the test binary's
# start-up and the benchmark's set-up cancel out. GOMAXPROCS=1 and no
# asynchronous preemption (valgrind runs one thread at a time and trips on
# the preemption signal); the collector's work is counted, as it runs on
# the same thread. Valgrind 3.19 does not decode RDTSCP, which the Go
# runtime runs now and then (runtime.cputicks): cpu.rdtscp=off keeps the
# runtime off it (golang.org/x/sys/cpu, which does not know the name,
# says so on stderr, harmlessly), and a run that dies anyway is retried.
set -euo pipefail
pkg=$1 bench=$2 n1=$3 n2=$4
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nice -n 10 go test -c -o "$work/bench.test" "$pkg"

total() {
  local n=$1 try
  for try in $(seq 20); do
    if GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off GOMAXPROCS=1 nice -n 10 valgrind --tool=callgrind \
      --callgrind-out-file="$work/cg.out" "$work/bench.test" -test.run='^$' \
      -test.bench="$bench" -test.benchtime="${n}x" >"$work/log" 2>&1 && grep -q '^PASS' "$work/log"; then
      callgrind_annotate "$work/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
      return
    fi
  done
  echo "valgrind did not finish $bench at ${n}x in $try tries:" >&2
  grep -v '^==' "$work/log" | head -5 >&2
  return 1
}

a=$(total "$n1")
b=$(total "$n2")
echo "$bench: $(((b - a) / (n2 - n1))) instructions/op (callgrind totals $a at ${n1}x, $b at ${n2}x)"
