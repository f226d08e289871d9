#!/usr/bin/env bash
# CPU per booking of the sidecar on loopback TCP and on a Unix socket, and
# of a do-nothing server on the same stack (the floor), at a few rates.
# docs/benchmarks.md has the results and how to read them.
#
#   hack/bench-listen.sh [RATES] [SECONDS] [REPEATS]   # default "1000 5000 10000" 10 1
#
# The load generator and the four sink workers run on core 0, the server
# on core 1 (taskset; Go then runs one P there). CPU per booking = the server's utime+stime from
# /proc/PID/stat over the generator's run, over the bookings completed.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${1:-"1000 5000 10000"}
SECS=${2:-10}
REPEATS=${3:-1}
W=$(mktemp -d /tmp/kvbench-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT

. hack/bench-lib.sh
bench_setup

# run SERVER TRANSPORT RATE: start the server pinned to core 1, offer RATE
# for SECS from core 0, print one result line, stop the server.
run() {
	local server=$1 transport=$2 rate=$3
	start_server "$server" "$transport"
	# The generator encodes its bookings before its clock starts: take the
	# server's ticks around its whole run; the server is idle meanwhile.
	local before after out completed
	before=$(ticks $SERVER_PID)
	out=$(offer "$transport" "$rate" "$SECS")
	after=$(ticks $SERVER_PID)
	stop_server
	completed=$(awk '/^completed/ {print $2}' <<<"$out")
	local p50 p99 errors
	p50=$(awk '/^latency/ {print $3}' <<<"$out")
	p99=$(awk '/^latency/ {print $7}' <<<"$out")
	errors=$(awk '/^completed/ {print $(NF-1)}' <<<"$out")
	awk -v s="$server" -v t="$transport" -v r="$rate" -v c="$completed" -v e="$errors" \
		-v cpu="$((after - before))" -v tick="$TICK" -v p50="$p50" -v p99="$p99" \
		'BEGIN {printf "%-8s %-5s %6d/s  completed %7d  errors %s  cpu %6.2f s  %6.1f us/booking  p50 %s  p99 %s\n", s, t, r, c, e, cpu/tick, (c ? cpu/tick/c*1e6 : 0), p50, p99}'
}

for rep in $(seq "$REPEATS"); do
	for rate in $RATES; do
		for server in sidecar floor; do
			for transport in tcp unix; do
				run $server $transport $rate
			done
		done
	done
done
