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

go build -o "$W/kvhint" ./cmd/kvhint
go test -c -o "$W/router.test" ./internal/router
TICK=$(getconf CLK_TCK)

cat >"$W/hints.yaml" <<'YAML'
router_mode: kv
worker_selection:
  prefill: {type: kvcr, hints: [{type: kv-fetch, parameters: {min_blocks: 4}}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-retain}, {type: kv-evict}]}
YAML
cat >"$W/workers.yaml" <<'YAML'
workers:
- {id: p0, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9601/v1/hints", worker_type: prefill}
- {id: p1, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9602/v1/hints", worker_type: prefill}
- {id: d0, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9603/v1/hints", worker_type: decode}
- {id: d1, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9604/v1/hints", worker_type: decode}
YAML
i=1
for w in p0 p1 d0 d1; do
	taskset -c 0 "$W/kvhint" sim-worker --id $w --listen 127.0.0.1:960$i --sink >"$W/worker-$w.log" 2>&1 &
	i=$((i + 1))
done

# ticks PID: utime+stime of PID, in clock ticks.
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# wait_for CMD...: retry CMD for up to 10 s.
wait_for() {
	for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "gave up waiting for: $*" >&2
	return 1
}

# run SERVER TRANSPORT RATE: start the server pinned to core 1, offer RATE
# for SECS from core 0, print one result line, stop the server.
run() {
	local server=$1 transport=$2 rate=$3 listen target pid
	if [ "$transport" = unix ]; then
		listen="unix://$W/booking.sock" target="unix://$W/booking.sock"
	else
		listen=127.0.0.1:9470 target=http://127.0.0.1:9470
	fi
	if [ "$server" = sidecar ]; then
		taskset -c 1 "$W/kvhint" sidecar --config-file "$W/hints.yaml" --workers-file "$W/workers.yaml" \
			--listen "$listen" --metrics-listen 127.0.0.1:9471 >"$W/server.log" 2>&1 &
		pid=$!
		wait_for curl -sf http://127.0.0.1:9471/readyz
	else
		KVHINT_FLOOR_LISTEN=$listen taskset -c 1 "$W/router.test" -test.run '^TestFloorServer$' >"$W/server.log" 2>&1 &
		pid=$!
		if [ "$transport" = unix ]; then wait_for test -S "$W/booking.sock"; else wait_for bash -c 'echo >/dev/tcp/127.0.0.1/9470'; fi
	fi
	# The generator encodes its bookings before its clock starts: take the
	# server's ticks around its whole run; the server is idle meanwhile.
	local before after out completed
	before=$(ticks $pid)
	# GOMAXPROCS=2: on one core Go would run one P, and the pacer, which
	# sleeps in raw nanosleep calls holding its P, would starve the
	# goroutines reading the answers (16 ms p50 at 1,000/s).
	out=$(GOMAXPROCS=2 taskset -c 0 "$W/kvhint" loadgen --target "$target" --rate "$rate" --duration "${SECS}s" \
		--connections 16 --role prefill=p0,p1:copy=0.5 --role decode=d0,d1 2>&1) || true
	after=$(ticks $pid)
	kill -TERM $pid
	wait $pid 2>/dev/null || true
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
