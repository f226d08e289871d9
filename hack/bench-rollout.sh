#!/usr/bin/env bash
# Times restart-mode rollouts (test/rollout BenchmarkRollout, and
# BenchmarkGraphRollout for a DynamoGraphDeployment): from a
# RouterRole change to every router pod Ready on the new config, for 3 and
# 30 replicas with maxSurge 25%, beside a floor (the same Deployment rolled
# by a template change made directly), and the manager's API writes per
# change. Real kube-apiserver, etcd, kube-controller-manager and kwok from
# hack/envtest-assets.sh. Prints the machine's load with the figures.
#   hack/bench-rollout.sh [COUNT]   # changes per case, default 3
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-3}
assets=$(hack/envtest-assets.sh)
echo "load before: $(uptime)"
KUBEBUILDER_ASSETS="$assets" go test ./test/rollout/ -run '^$' -bench 'Benchmark(Graph)?Rollout' -benchtime "${count}x" -count 1 -v -timeout 30m
echo "load after: $(uptime)"
