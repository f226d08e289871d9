#!/usr/bin/env bash
# The sidecar's booking capacity as a ratio to a do-nothing server on the
# same HTTP stack and the same socket type, measured in one run.
#
#   hack/bench-capacity.sh [RATES] [SECONDS] [TRIES] [TRANSPORTS]
#       default "5000 10000 15000 20000 25000 30000 40000 50000" 10 2 "tcp unix"
#
# Capacity of a server = the highest rate offered in RATES at which, in at
# least one of TRIES runs of SECONDS, the generator completed every booking
# with no error and a p99 (from each booking's scheduled time) at or under
# 2 ms; for the sidecar also with no hint dropped: every hint the bookings
# built was posted and answered 2xx by its worker (hints_sent_total equals
# the hints the generator saw), and no delivery error, no dropped hint and no
# policy failure was counted. The sidecar and the floor are run alternately
# at each rate, so both see the same machine; a server is no longer offered
# higher rates after two rates in a row failed.
#
# Pinning: the load generator and the four sink workers (one process) on
# core 0, the server under test on core 1 (taskset). Each line also shows
# the generator's own send lag p99 and both cores' busy shares.
# docs/benchmarks.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${1:-"5000 10000 15000 20000 25000 30000 40000 50000"}
SECS=${2:-10}
TRIES=${3:-2}
TRANSPORTS=${4:-"tcp unix"}
P99_MAX_US=2000
W=$(mktemp -d /tmp/kvcap-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT

. hack/bench-lib.sh
bench_setup

# metric NAME: the sum of a sidecar metric's series (0 when it has none),
# or "unread" when the metrics could not be read: a run is never passed on
# counters it did not see.
metric() {
	local m
	m=$(curl -sf http://127.0.0.1:9471/metrics) || { echo unread; return; }
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%d\n", s}' <<<"$m"
}

# to_us DURATION: a Go duration as the generator prints it, in µs.
to_us() {
	awk -v d="$1" 'BEGIN {
		if (d ~ /ms$/) { sub(/ms$/, "", d); print d * 1000; exit }
		if (d ~ /µs$/) { sub(/µs$/, "", d); print d + 0; exit }
		if (d ~ /ns$/) { sub(/ns$/, "", d); print d / 1000; exit }
		if (d ~ /s$/) { sub(/s$/, "", d); print d * 1e6; exit }
		print 1e12 }'
}

# run SERVER TRANSPORT RATE: one run; prints a result line and returns 0 if
# it met the bar.
run() {
	local server=$1 transport=$2 rate=$3 out
	start_server "$server" "$transport"
	# The server's own CPU per booking: its ticks around the whole offer
	# (it is idle while the generator encodes its bookings).
	local before after cost
	before=$(ticks "$SERVER_PID")
	out=$(offer "$transport" "$rate" "$SECS")
	after=$(ticks "$SERVER_PID")
	local offered completed errors p50 p99 lag cores hints sent=- dropped=- derr=- pfail=- busy= ok=1
	offered=$(awk '/^offered/ {print $2}' <<<"$out")
	completed=$(awk '/^completed/ {print $2}' <<<"$out")
	errors=$(awk '/^completed/ {print $(NF-1)}' <<<"$out")
	p50=$(awk '/^latency/ {print $3}' <<<"$out")
	p99=$(awk '/^latency/ {print $7}' <<<"$out")
	hints=$(awk '/^hints/ {print $2}' <<<"$out")
	# How late the generator itself sent (its p99), and how busy each core
	# was: a run the generator's core bound measures the rig, not the server.
	lag=$(awk '/^send lag/ {print $6}' <<<"$out")
	cores=$(awk '/^cores/ {print $2, $3, $4, $5}' <<<"$out")
	cost=$(awk -v t=$((after - before)) -v tick="$TICK" -v c="${completed:-0}" 'BEGIN {printf "%.1f", c ? t / tick / c * 1e6 : 0}')
	costs[$server-$transport-$rate]=$cost
	if [ "$server" = sidecar ]; then
		# Hints still queued are posted within milliseconds; wait for
		# them before reading the counters.
		for _ in $(seq 50); do
			sent=$(metric kvhint_router_hints_sent_total)
			[ "$sent" != unread ] && [ "$sent" -ge "${hints:-0}" ] && break
			sleep 0.1
		done
		dropped=$(metric kvhint_router_hints_dropped_total)
		derr=$(metric kvhint_router_delivery_errors_total)
		pfail=$(metric kvhint_router_policy_failures_total)
		# The senders' busy time: the posts' summed duration over the
		# run, per worker (one sender and one connection each).
		busy=$(curl -sf http://127.0.0.1:9471/metrics | awk -v secs="$SECS" \
			'$1 == "kvhint_router_delivery_duration_seconds_sum" {s = $2} $1 == "kvhint_router_delivery_duration_seconds_count" {n = $2}
			 END {if (n) printf "post %.0fus sender-busy %.0f%%", s / n * 1e6, s / secs / 4 * 100}')
		# The bookings must have built hints (a misconfigured run answers
		# every booking 204), and every one must have been posted.
		if [ "${hints:-0}" -le 0 ] || [ "$sent" != "$hints" ] || [ "$dropped" != 0 ] || [ "$derr" != 0 ] || [ "$pfail" != 0 ]; then ok=0; fi
	fi
	stop_server
	if [ -z "$completed" ] || [ "$completed" != "$offered" ] || [ "$errors" != 0 ] ||
		awk -v p="$(to_us "$p99")" -v m=$P99_MAX_US 'BEGIN {exit !(p > m)}'; then
		ok=0
	fi
	printf '%-8s %-5s %6d/s  completed %7s/%-7s errors %-3s p50 %-12s p99 %-12s send-lag-p99 %-12s hints %7s sent %7s dropped %s delivery-errors %s policy-failures %s %s  %s  server %sus/booking  %s\n' \
		"$server" "$transport" "$rate" "${completed:--}" "${offered:--}" "${errors:--}" "$p50" "$p99" "${lag:--}" "${hints:--}" "$sent" "$dropped" "$derr" "$pfail" "$busy" "$cores" "$cost" \
		"$([ $ok = 1 ] && echo PASS || echo fail)"
	[ $ok = 1 ]
}

declare -A best fails costs
for transport in $TRANSPORTS; do
	for server in sidecar floor; do
		best[$server-$transport]=0 fails[$server-$transport]=0
	done
done
for rate in $RATES; do
	for transport in $TRANSPORTS; do
		for server in sidecar floor; do
			k=$server-$transport
			[ "${fails[$k]}" -ge 2 ] && continue
			passed=0
			for _ in $(seq "$TRIES"); do
				if run "$server" "$transport" "$rate"; then passed=1; break; fi
			done
			if [ $passed = 1 ]; then
				best[$k]=$rate fails[$k]=0
			else
				fails[$k]=$((fails[$k] + 1))
			fi
		done
	done
done
echo
for transport in $TRANSPORTS; do
	s=${best[sidecar-$transport]} f=${best[floor-$transport]}
	# And by cost: the server's own CPU per booking, the floor's over the
	# sidecar's, at the sidecar's capacity (where both ran).
	awk -v t="$transport" -v s="$s" -v f="$f" -v sc="${costs[sidecar-$transport-$s]:-}" -v fc="${costs[floor-$transport-$s]:-}" \
		'BEGIN {printf "capacity %-5s sidecar %6d/s  floor %6d/s  ratio %s  |  at %d/s: sidecar %sus/booking, floor %sus/booking, cost ratio %s\n",
			t, s, f, (f ? sprintf("%.2f", s / f) : "-"), s, (sc == "" ? "-" : sc), (fc == "" ? "-" : fc), (sc > 0 && fc != "" ? sprintf("%.2f", fc / sc) : "-")}'
done
