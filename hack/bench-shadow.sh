#!/usr/bin/env bash
# The sidecar's CPU per booking with a staged rollout's shadow candidate,
# against the floor: hack/bench-inband.sh (in-band answers, the floor
# writing the same answers on the same stack) run on a mounted compiled
# ConfigMap directory (--config-dir) holding hack/bench-lib.sh's policies
# as the stable config, for each of:
#
#   off            no candidate staged;
#   shadow-same    a shadow candidate that builds the same hints (the
#                  policy file with a comment added: another hash);
#   shadow-differ  a shadow candidate whose decode kv-retain has a TTL of
#                  300 s: every decode booking's hint differs (kv.retain),
#                  prefill's do not.
#
#   hack/bench-shadow.sh [RATES] [SECONDS] [REPS]   default "5000" 10 3, TCP
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${1:-5000}
SECS=${2:-10}
REPS=${3:-3}
D=$(mktemp -d /tmp/kvshadow-XXXXXX)
trap 'rm -rf "$D"' EXIT

policy='worker_selection:
  prefill: {type: kvcr, hints: [{type: kv-fetch, parameters: {min_blocks: 4}}]}
  decode: {type: dynamo-default-cost-fn, hints: [{type: kv-retain}, {type: kv-evict}]}
'
roles='prefill:
  routerMode: kv
decode:
  routerMode: kv
'
# hash DIR [PREFIX]: internal/compiled.Hash of the config's keys in DIR.
hash() {
	local k
	for k in hints.yaml roles.yaml; do
		printf '%s\0%d\0' "$k" "$(wc -c <"$1/${2:-}$k")"
		cat "$1/${2:-}$k"
	done | sha256sum | cut -c1-16
}
# variant NAME [CANDIDATE_POLICY]: a compiled directory, staging the
# candidate in shadow when given.
variant() {
	mkdir "$D/$1"
	printf '%s' "$policy" >"$D/$1/hints.yaml"
	printf '%s' "$roles" >"$D/$1/roles.yaml"
	[ $# -gt 1 ] || return 0
	printf '%s' "$2" >"$D/$1/candidate.hints.yaml"
	printf '%s' "$roles" >"$D/$1/candidate.roles.yaml"
	printf '{"candidate":"%s","stage":"shadow"}' "$(hash "$D/$1" candidate.)" >"$D/$1/rollout.json"
}
variant off
variant shadow-same "$policy# the candidate
"
variant shadow-differ "$(sed 's/{type: kv-retain}/{type: kv-retain, parameters: {ttl_seconds: 300}}/' <<<"$policy")
"
grep -q 'ttl_seconds: 300' "$D/shadow-differ/candidate.hints.yaml"

for v in off shadow-same shadow-differ; do
	echo "== $v"
	expect=
	[ "$v" = off ] || expect=1
	SIDECAR_CONFIG="--config-dir $D/$v" EXPECT_SHADOW=$expect hack/bench-inband.sh "$RATES" "$SECS" "$REPS" tcp
done
