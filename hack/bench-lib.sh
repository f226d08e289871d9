# Shared by hack/bench-listen.sh and hack/bench-capacity.sh: the rig both
# run their servers on. Source it from the repository root with W set to a
# scratch directory.
#
# bench_setup builds kvhint, kvhint-dev (for sim-worker and loadgen) and
# the booking test binary (whose TestFloorServer is the do-nothing floor),
# writes the hints and workers files, and starts the four sink workers (one
# process) on core 0; with BENCH_INBAND=1 the workers have no hint endpoint
# and no sinks start.
# start_server runs the sidecar or the floor on core 1, and offer runs the
# load generator on core 0 against it.

# wait_for CMD...: retry CMD for up to 10 s.
wait_for() {
	for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "gave up waiting for: $*" >&2
	return 1
}

bench_setup() {
	go build -o "$W/" ./cmd/kvhint ./cmd/kvhint-dev
	go test -c -o "$W/router.test" ./internal/sidecar/booking
	cat >"$W/hints.yaml" <<'YAML'
worker_selection:
  prefill: {type: kvcr, hints: [{type: kv-fetch, parameters: {min_blocks: 4}}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-retain}, {type: kv-evict}]}
YAML
	if [ "${BENCH_INBAND:-0}" = 1 ]; then
		# In-band only: hint-capable workers without a hint endpoint, so
		# the sidecar answers each hint and pushes nothing; no sinks.
		cat >"$W/workers.yaml" <<'YAML'
workers:
- {id: p0, capabilities: [router_hint], worker_type: prefill}
- {id: p1, capabilities: [router_hint], worker_type: prefill}
- {id: d0, capabilities: [router_hint], worker_type: decode}
- {id: d1, capabilities: [router_hint], worker_type: decode}
YAML
		return
	fi
	cat >"$W/workers.yaml" <<'YAML'
workers:
- {id: p0, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9601/v1/hints", worker_type: prefill}
- {id: p1, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9602/v1/hints", worker_type: prefill}
- {id: d0, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9603/v1/hints", worker_type: decode}
- {id: d1, capabilities: [router_hint], hint_endpoint: "http://127.0.0.1:9604/v1/hints", worker_type: decode}
YAML
	# The four workers are one sink process: four processes on one core,
	# each woken on its own for every hint, took 15-19% more of its CPU
	# and delayed the generator's sends behind them.
	taskset -c 0 "$W/kvhint-dev" sim-worker --sink --id p0 --listen 127.0.0.1:9601 --id p1 --listen 127.0.0.1:9602 \
		--id d0 --listen 127.0.0.1:9603 --id d1 --listen 127.0.0.1:9604 >"$W/workers.log" 2>&1 &
}

# target TRANSPORT: the booking API's address for the load generator (and
# for --listen: the same spelling but for TCP's scheme).
target() {
	if [ "$1" = unix ]; then echo "unix://$W/booking.sock"; else echo http://127.0.0.1:9470; fi
}

# all_registered TRANSPORT: whether the sidecar lists the four workers.
all_registered() {
	local list
	if [ "$1" = unix ]; then
		list=$(curl -sf --unix-socket "$W/booking.sock" http://localhost/v1/workers) || return 1
	else
		list=$(curl -sf http://127.0.0.1:9470/v1/workers) || return 1
	fi
	[ "$(grep -o '"id"' <<<"$list" | wc -l)" -ge 4 ]
}

# start_server SERVER TRANSPORT: start the sidecar (metrics on
# 127.0.0.1:9471) or the floor pinned to core 1, wait until it serves, and
# set SERVER_PID. SIDECAR_CONFIG, when set, is the sidecar's config flag
# in place of --config-file $W/hints.yaml (a --config-dir with the same
# roles and policies, say). The floor answers 204, or with FLOOR_BODY set the
# bodies it names in turn (TestFloorServer's KVHINT_FLOOR_BODY).
start_server() {
	local server=$1 transport=$2 listen
	listen=$(target "$transport")
	listen=${listen#http://}
	if [ "$server" = sidecar ]; then
		# shellcheck disable=SC2086
		taskset -c 1 "$W/kvhint" sidecar ${SIDECAR_CONFIG:---config-file "$W/hints.yaml"} --workers-file "$W/workers.yaml" \
			--allow-loopback-hint-endpoints --listen "$listen" --metrics-listen 127.0.0.1:9471 ${SIDECAR_ARGS:-} >"$W/server.log" 2>&1 &
		SERVER_PID=$!
		wait_for curl -sf http://127.0.0.1:9471/readyz
		# Ready means the config loaded; the workers file loads beside it.
		# Bookings for workers not registered yet would be answered 204,
		# unknown_worker, without a hint.
		wait_for all_registered "$transport"
	else
		KVHINT_FLOOR_LISTEN=$listen KVHINT_FLOOR_BODY=${FLOOR_BODY:-} taskset -c 1 "$W/router.test" -test.run '^TestFloorServer$' >"$W/server.log" 2>&1 &
		SERVER_PID=$!
		if [ "$transport" = unix ]; then wait_for test -S "$W/booking.sock"; else wait_for bash -c 'echo >/dev/tcp/127.0.0.1/9470'; fi
	fi
}

# stop_server: stop SERVER_PID and wait for it.
stop_server() {
	kill -TERM "$SERVER_PID"
	wait "$SERVER_PID" 2>/dev/null || true
}

# TICK is the clock tick of ticks.
TICK=$(getconf CLK_TCK)

# ticks PID: utime+stime of PID, in clock ticks.
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# cpu_ticks: the busy and total ticks of core 0 and core 1 (/proc/stat),
# for cpu_busy.
cpu_ticks() {
	awk '$1 == "cpu0" || $1 == "cpu1" {t = 0; for (i = 2; i <= NF; i++) t += $i; printf "%d %d ", t - $5 - $6, t}' /proc/stat
}

# cpu_busy BEFORE AFTER: each core's busy share between two cpu_ticks, as
# "core0 N% core1 M%": which of the two a run saturated.
cpu_busy() {
	awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " ")
		printf "core0 %.0f%% core1 %.0f%%", 100 * (y[1] - x[1]) / (y[2] - x[2]), 100 * (y[3] - x[3]) / (y[4] - x[4])}'
}

# offer TRANSPORT RATE SECONDS: run the load generator on core 0 and print
# its report, then a line "cores core0 N% core1 M%": the cores' busy
# shares over the run, every process on the machine included.
# GOMAXPROCS=2: on one core Go would run one P, and the pacer, which sleeps
# in raw nanosleep calls holding its P, would starve the goroutines reading
# the answers (16 ms p50 at 1,000/s).
offer() {
	local before
	before=$(cpu_ticks)
	GOMAXPROCS=2 taskset -c 0 "$W/kvhint-dev" loadgen --target "$(target "$1")" --rate "$2" --duration "${3}s" \
		--connections 16 --role prefill=p0,p1:copy=0.5 --role decode=d0,d1 2>&1 || true
	echo "cores $(cpu_busy "$before" "$(cpu_ticks)")"
}
