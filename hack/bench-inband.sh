#!/usr/bin/env bash
# The sidecar's CPU per booking when it only answers (hints carried
# in-band by the router, none pushed), over a do-nothing server's on the
# same HTTP stack and socket that writes the same answers.
#
#   hack/bench-inband.sh [RATES] [SECONDS] [REPS] [TRANSPORTS]
#       default "1000 5000 10000" 10 3 "tcp unix"
#
# Workers are registered with router_hint and no hint_endpoint, so the
# sidecar answers each hinted booking 200 with the hint message and pushes
# nothing. The floor (TestFloorServer in internal/sidecar/booking) answers the bookings
# in turn with real answers the sidecar gave at setup for the bench's mix
# (the generator books prefill, with a KV copy half the time, then decode):
# a kv.fetch of 192 blocks, a decode kv.retain, a 204 (prefill without a
# copy) and a kv.retain again. CPU = the server's utime+stime over the
# offer, per booking completed. The sidecar and the floor alternate at each
# rate and transport (which goes first alternates too), REPS times; the
# summary is the median of each and their ratio, and the median of the
# ratios of each adjacent pair.
#
# A sidecar run is valid only if it built hints (bookings answered
# "hinted", 200 with a body), pushed none (hints_sent_total 0) and counted
# no booking error. Pinning as in hack/bench-lib.sh: the generator on core
# 0, the server on core 1. SIDECAR_CONFIG (hack/bench-lib.sh) gives the
# sidecar another config source with the same policies; with EXPECT_SHADOW
# set a run is valid only if a staged candidate compared every booking
# (hack/bench-shadow.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

RATES=${1:-"1000 5000 10000"}
SECS=${2:-10}
REPS=${3:-3}
TRANSPORTS=${4:-"tcp unix"}
W=$(mktemp -d /tmp/kvinband-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$W"' EXIT

BENCH_INBAND=1
. hack/bench-lib.sh
bench_setup

# metric NAME [LABELS]: the sum of a sidecar metric's series whose labels
# contain LABELS (0 when none), or "unread".
metric() {
	local m
	m=$(curl -sf http://127.0.0.1:9471/metrics) || { echo unread; return; }
	awk -v n="$1" -v l="${2:-}" '($1 == n || index($1, n "{") == 1) && index($1, l) {s += $2} END {printf "%d\n", s}' <<<"$m"
}

# capture: real answers of the sidecar for the floor to write.
capture() {
	start_server sidecar tcp
	local copy hashes
	hashes=$(awk 'BEGIN {srand(1); for (i = 0; i < 192; i++) printf "%s%.0f", (i ? "," : ""), int(rand() * 1e18) + 1e18}')
	copy="{\"request_id\":\"cap-1\",\"role\":\"prefill\",\"worker\":\"p0\",\"prompt_tokens\":3072,\"block_size\":16,\"session\":{\"id\":\"cap-s\",\"turn\":1,\"final\":false},\"committed_kv_copy\":{\"source_worker\":\"p1\",\"source_endpoint\":\"tcp://p1:23280\",\"block_hashes\":[$hashes]}}"
	curl -sf -o "$W/fetch.json" -w '%{http_code}\n' --data-binary "$copy" http://127.0.0.1:9470/v1/bookings | grep -qx 200
	curl -sf -o "$W/retain.json" -w '%{http_code}\n' --data-binary \
		'{"request_id":"cap-1","role":"decode","worker":"d0","prompt_tokens":3072,"block_size":16,"session":{"id":"cap-s","turn":1,"final":false}}' \
		http://127.0.0.1:9470/v1/bookings | grep -qx 200
	curl -sf -o /dev/null -w '%{http_code}\n' --data-binary \
		'{"request_id":"cap-2","role":"prefill","worker":"p0","prompt_tokens":3072,"block_size":16,"session":{"id":"cap-t","turn":1,"final":false}}' \
		http://127.0.0.1:9470/v1/bookings | grep -qx 204
	: >"$W/none.json"
	stop_server
	FLOOR_BODY="$W/fetch.json:$W/retain.json:$W/none.json:$W/retain.json"
	echo "floor answers in turn: kv.fetch $(wc -c <"$W/fetch.json") B, kv.retain $(wc -c <"$W/retain.json") B, 204, kv.retain"
}

# run SERVER TRANSPORT RATE: one run; prints its line and records its cost.
run() {
	local server=$1 transport=$2 rate=$3 out before after
	start_server "$server" "$transport"
	before=$(ticks "$SERVER_PID")
	out=$(offer "$transport" "$rate" "$SECS")
	after=$(ticks "$SERVER_PID")
	local offered completed errors p50 p99 hints cores cost hinted=- nohint=- sent=- berr=- ok=1
	offered=$(awk '/^offered/ {print $2}' <<<"$out")
	completed=$(awk '/^completed/ {print $2}' <<<"$out")
	errors=$(awk '/^completed/ {print $(NF-1)}' <<<"$out")
	p50=$(awk '/^latency/ {print $3}' <<<"$out")
	p99=$(awk '/^latency/ {print $7}' <<<"$out")
	hints=$(awk '/^hints/ {print $2}' <<<"$out")
	cores=$(awk '/^cores/ {print $2, $3, $4, $5}' <<<"$out")
	cost=$(awk -v t=$((after - before)) -v tick="$TICK" -v c="${completed:-0}" 'BEGIN {printf "%.1f", c ? t / tick / c * 1e6 : 0}')
	if [ "$server" = sidecar ]; then
		hinted=$(metric kvhint_router_bookings_total 'outcome="hinted"')
		nohint=$(( $(metric kvhint_router_bookings_total) - hinted ))
		sent=$(metric kvhint_router_hints_sent_total)
		berr=$(metric kvhint_router_booking_errors_total)
		# Hints built, answered 200 with the message, none pushed.
		if [ "${hints:-0}" -le 0 ] || [ "$hinted" != "$hints" ] || [ "$sent" != 0 ] || [ "$berr" != 0 ]; then ok=0; fi
		# With EXPECT_SHADOW set, a staged candidate compared every booking.
		if [ -n "${EXPECT_SHADOW:-}" ] && [ "$(metric kvhint_shadow_bookings_total)" != "$completed" ]; then ok=0; fi
	fi
	stop_server
	if [ -z "$completed" ] || [ "$completed" != "$offered" ] || [ "$errors" != 0 ]; then ok=0; fi
	printf '%-8s %-5s %6d/s  completed %7s/%-7s errors %-3s p50 %-10s p99 %-10s hints %7s  200 %7s 204 %7s pushed %s booking-errors %s  %s  server %6sus/booking  %s\n' \
		"$server" "$transport" "$rate" "${completed:--}" "${offered:--}" "${errors:--}" "$p50" "$p99" "${hints:--}" \
		"$hinted" "$nohint" "$sent" "$berr" "$cores" "$cost" "$([ $ok = 1 ] && echo valid || echo INVALID)"
	if [ $ok = 1 ]; then
		costs[$server-$transport-$rate]+="$cost "
		last[$server]=$cost
	else
		invalid=$((invalid + 1)) last[$server]=
	fi
}

# median VALUES...: the median of numbers.
median() { [ $# -gt 0 ] || { echo -; return; }; printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "-"}'; }

declare -A costs pairs last
invalid=0
echo "start $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
capture
for rep in $(seq "$REPS"); do
	for rate in $RATES; do
		for transport in $TRANSPORTS; do
			# Alternate which server runs first.
			if [ $((rep % 2)) = 1 ]; then order="sidecar floor"; else order="floor sidecar"; fi
			for server in $order; do run "$server" "$transport" "$rate"; done
			# The pair's own ratio: the two runs next to each other saw
			# the most nearly the same machine.
			if [ -n "${last[sidecar]}" ] && [ -n "${last[floor]}" ]; then
				pairs[$transport-$rate]+="$(awk -v s="${last[sidecar]}" -v f="${last[floor]}" 'BEGIN {printf "%.2f", s / f}') "
			fi
		done
	done
	echo "rep $rep done $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
printf '%-8s %-5s %-34s %-34s %-8s %s\n' rate transport "sidecar us/booking: median (runs)" "floor us/booking: median (runs)" "ratio" "pairs' ratios: median (each)"
for rate in $RATES; do
	for transport in $TRANSPORTS; do
		# shellcheck disable=SC2086
		s=$(median ${costs[sidecar-$transport-$rate]:-}) f=$(median ${costs[floor-$transport-$rate]:-})
		printf '%-8s %-5s %-34s %-34s %-8s %s\n' "$rate" "$transport" "$s (${costs[sidecar-$transport-$rate]:-none})" "$f (${costs[floor-$transport-$rate]:-none})" \
			"$(awk -v s="$s" -v f="$f" 'BEGIN {print (s != "-" && f != "-" && f > 0) ? sprintf("%.2f", s / f) : "-"}')" \
			"$(median ${pairs[$transport-$rate]:-}) (${pairs[$transport-$rate]:-none})"
	done
done
echo "invalid runs: $invalid; end $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
