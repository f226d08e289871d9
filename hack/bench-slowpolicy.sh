#!/usr/bin/env bash
# Slow-policy isolation, measured on the sidecar binary (issue 21).
#
#   hack/bench-slowpolicy.sh [RATES] [HOG_RATES] [SECONDS]
#       default "1000 5000 10000" "5000 10000 20000" 5
#
# Part 1, per rate of RATES: booking p99 of the sidecar without and with a
# custom policy that sleeps 5 ms listed after kv-fetch on prefill (a kvhint
# built with testdata/kvhint-slow of test/fault linked in, as a custom
# build links a plugin), and the time from the first booking of the role
# to the policy's ejection (--policy-eject-after 5). The run with the
# policy starts once it is ejected (--policy-ejection-base 10m keeps it
# out for the run): the goal is a p99 within 1.2 times the run without.
# The two runs alternate which goes first at each rate.
#
# Part 2, per rate of HOG_RATES: the built-ins' actions dropped for the
# deadline per million bookings with a CPU hog (a busy loop) on the
# sidecar's core, at the default --policy-deadline of 1 ms (goal 0), and
# the runs that overran it and kept their actions.
#
# BENCH_PARTS ("1 2") picks the parts; BENCH_KVHINT names another kvhint
# binary for part 2 (a build of an older commit, for a before figure).
#
# Pinning as in hack/bench-lib.sh: the generator and the sink workers on
# core 0, the sidecar (and the hog) on core 1. The load average is printed
# with every run: the machine may be shared.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${1:-"1000 5000 10000"}
HOG_RATES=${2:-"5000 10000 20000"}
SECS=${3:-5}
W=$(mktemp -d /tmp/kvslow-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT

. hack/bench-lib.sh
bench_setup
go build -o "$W/kvhint" ./test/fault/testdata/kvhint-slow # kvhint with test-slow linked in
cp "$W/hints.yaml" "$W/builtins.yaml"
cat >"$W/slow.yaml" <<'YAML'
worker_selection:
  prefill: {type: kvcr, hints: [{type: kv-fetch, parameters: {min_blocks: 4}}, {type: test-slow, name: slow, parameters: {sleep: 5ms}}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-retain}, {type: kv-evict}]}
YAML

# metric NAME [LABELS]: the sum of a sidecar metric's series whose labels
# contain LABELS (0 when none).
metric() {
	curl -sf http://127.0.0.1:9471/metrics | awk -v n="$1" -v l="${2:-}" '($1 == n || index($1, n "{") == 1) && index($1, l) {s += $2} END {printf "%d\n", s}'
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

# eject_time: book prefill with a copy, one booking after the other, until
# the slow policy is ejected; print the time the bookings took (the
# metrics are read only after the first five, --policy-eject-after).
eject_time() {
	local n=0 body spent=0 t0
	body='{"request_id":"e","role":"prefill","worker":"p0","prompt_tokens":256,"block_size":16,"committed_kv_copy":{"source_worker":"p1","source_endpoint":"tcp://p1:23280","block_hashes":[1,2,3,4,5,6,7,8]}}'
	while :; do
		t0=$(date +%s%N)
		curl -sf -o /dev/null --data-binary "$body" http://127.0.0.1:9470/v1/bookings
		spent=$((spent + $(date +%s%N) - t0))
		n=$((n + 1))
		[ $n -lt 5 ] && continue
		[ "$(metric kvhint_router_policy_ejected 'policy="slow"')" = 1 ] && break
		[ $n -lt 1000 ] || { echo "not ejected after 1000 bookings" >&2; return 1; }
	done
	awk -v s="$spent" -v n="$n" 'BEGIN {printf "%.1f ms (%d bookings, curl included)", s / 1e6, n}'
}

# run CONFIG RATE: one offer against the sidecar running CONFIG; prints a
# line and sets P99.
run() {
	local config=$1 rate=$2 out eject=- offered completed errors p50 p99 skipped
	cp "$W/$config.yaml" "$W/hints.yaml"
	SIDECAR_ARGS="--policy-eject-after 5 --policy-ejection-base 10m --policy-ejection-max 10m" start_server sidecar tcp
	if [ "$config" = slow ]; then eject=$(eject_time); fi
	out=$(offer tcp "$rate" "$SECS")
	offered=$(awk '/^offered/ {print $2}' <<<"$out")
	completed=$(awk '/^completed/ {print $2}' <<<"$out")
	errors=$(awk '/^completed/ {print $(NF-1)}' <<<"$out")
	p50=$(awk '/^latency/ {print $3}' <<<"$out")
	p99=$(awk '/^latency/ {print $7}' <<<"$out")
	skipped=$(metric kvhint_router_policy_runs_skipped_total 'policy="slow"')
	stop_server
	printf '%-8s %6d/s  completed %7s/%-7s errors %-3s p50 %-10s p99 %-10s slow policy skipped %7s  eject %s  load %s\n' \
		"$config" "$rate" "$completed" "$offered" "$errors" "$p50" "$p99" "$skipped" "$eject" "$(load)"
	P99=$p99
}

# ms DURATION: a Go duration (as loadgen prints it) in milliseconds.
ms() { awk -v d="$1" 'BEGIN {v = d + 0; if (d ~ /µs$|us$/) v /= 1000; else if (d ~ /ns$/) v /= 1e6; else if (d ~ /[0-9]s$/ && d !~ /ms$/) v *= 1000; printf "%.3f", v}'; }

echo "start $(date -u +%H:%M:%S) UTC, load average $(load)"
PARTS=${BENCH_PARTS:-"1 2"}
if [[ " $PARTS " == *" 1 "* ]]; then
echo "== part 1: booking p99 without and with a 5 ms policy listed after kv-fetch (ejected)"
i=0
for rate in $RATES; do
	if [ $((i % 2)) = 0 ]; then order="builtins slow"; else order="slow builtins"; fi
	declare -A p
	for config in $order; do run "$config" "$rate"; p[$config]=$P99; done
	echo "   $rate/s: p99 with the policy (ejected) / without = $(awk -v a="$(ms "${p[slow]}")" -v b="$(ms "${p[builtins]}")" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}')"
	i=$((i + 1))
done
fi

if [[ " $PARTS " == *" 2 "* ]]; then
if [ -n "${BENCH_KVHINT:-}" ]; then cp "$BENCH_KVHINT" "$W/kvhint"; echo "part 2 runs $BENCH_KVHINT"; fi
echo "== part 2: built-ins' deadline drops per million bookings, CPU hog on the sidecar's core (--policy-deadline 1ms)"
cp "$W/builtins.yaml" "$W/hints.yaml"
for rate in $HOG_RATES; do
	SIDECAR_ARGS="" start_server sidecar tcp
	taskset -c 1 bash -c 'while :; do :; done' &
	HOG=$!
	out=$(offer tcp "$rate" "$SECS")
	kill "$HOG"
	wait "$HOG" 2>/dev/null || true
	bookings=$(metric kvhint_router_bookings_total)
	drops=$(metric kvhint_router_policy_failures_total 'reason="deadline"')
	overruns=$(metric kvhint_router_policy_overruns_total)
	stop_server
	printf 'hog %6d/s  completed %7s/%-7s p99 %-10s bookings %8s  deadline drops %s (%s per million)  overran and kept %s  load %s\n' "$rate" \
		"$(awk '/^completed/ {print $2}' <<<"$out")" "$(awk '/^offered/ {print $2}' <<<"$out")" "$(awk '/^latency/ {print $7}' <<<"$out")" \
		"$bookings" "$drops" "$(awk -v d="$drops" -v b="$bookings" 'BEGIN {printf "%.1f", b ? d / b * 1e6 : 0}')" "$overruns" "$(load)"
done
fi
echo "end $(date -u +%H:%M:%S) UTC, load average $(load)"
