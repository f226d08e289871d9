#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd, kubectl and kwok from
# Go modules into a per-user cache and prints the folder, for
# KUBEBUILDER_ASSETS. kube-controller-manager and kwok are for the rollout
# tests: the first runs the Deployment and ReplicaSet controllers, the second
# plays the kubelet for fake nodes so pods become Running and Ready. The Go module proxy is
# the only registry these machines reach, so `setup-envtest use` cannot
# download the usual tarballs. The tests run the kubectl found here, so they
# need none installed. A folder whose binaries all answer --version is
# reused as it is.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
STAGING_VERSION="v0.${K8S_VERSION#1.}"
CACHE_ROOT=${KVHINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kv-hint-operator}
DEST="$CACHE_ROOT/k8s-v${K8S_VERSION}-etcd-v${ETCD_VERSION}"

log() { echo "envtest-assets: $*" >&2; }

# with_progress MSG CMD...: runs CMD, saying every 30 s that it still is, so
# a ten-minute compile never looks hung.
with_progress() {
  local msg=$1; shift
  local start=$SECONDS
  ( while sleep 30; do log "$msg: still working ($((SECONDS - start)) s)"; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}

complete() {
  "$DEST/kube-apiserver" --version >/dev/null 2>&1 && "$DEST/etcd" --version >/dev/null 2>&1 &&
    "$DEST/kubectl" version --client >/dev/null 2>&1 &&
    "$DEST/kube-controller-manager" --version >/dev/null 2>&1 &&
    "$DEST/kwok" --version >/dev/null 2>&1 && [ -s "$DEST/kwok-stages.yaml" ]
}
if complete; then
  echo "$DEST"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# One build at a time: a second caller waits for the first and reuses it.
exec 9>"$CACHE_ROOT/.build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it"
  flock 9
fi
if complete; then
  echo "$DEST"
  exit 0
fi
WORK=$(mktemp -d "$CACHE_ROOT/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export GOWORK=off CGO_ENABLED=0 GOFLAGS='-trimpath -mod=mod -buildvcs=false'
# KVHINT_ASSETS_PARALLEL=1 compiles etcd and kwok at the same time as the
# kubernetes binaries instead of after them. Off by default: not shown to
# help on two cores, where one go build already runs two compiles at once.
PARALLEL=${KVHINT_ASSETS_PARALLEL:-0}
BUILD_START=$SECONDS

log "building kube-apiserver, kube-controller-manager and kubectl v${K8S_VERSION}, etcd v${ETCD_VERSION} and kwok v${KWOK_VERSION} from Go modules into $DEST"
log "a cold build takes about twenty minutes on two cores; later runs reuse the cache"

# quiet CMD...: runs CMD without its output.
quiet() { "$@" >/dev/null 2>&1; }

# timed NAME CMD...: runs CMD with progress lines and says how long it took.
timed() {
  local name=$1; shift
  local start=$SECONDS rc=0
  with_progress "$name" "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    log "step $name: $((SECONDS - start)) s"
  else
    log "step $name: failed (exit $rc) after $((SECONDS - start)) s"
  fi
  return "$rc"
}

mkdir -p "$WORK/apiserver" "$WORK/etcd" "$WORK/kwok" "$WORK/out"

# etcd: go.etcd.io/etcd/server/v3 has no main package; a three-line one calls
# etcdmain.Main.
cat > "$WORK/etcd/go.mod" <<GOMOD
module kvhint.local/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
GOMOD
cat > "$WORK/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO

# kwok: its own module (it pins older client libraries than kubernetes'), so
# a wrapper of its own.
cat > "$WORK/kwok/go.mod" <<GOMOD
module kvhint.local/kwok

go 1.26.0

require sigs.k8s.io/kwok v${KWOK_VERSION}
GOMOD
cat > "$WORK/kwok/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
GO

# Resolving etcd's and kwok's modules is mostly waiting on the network, so it
# runs in the background while kubernetes' modules resolve and compile.
( cd "$WORK/etcd" && go mod tidy >"$WORK/etcd/tidy.log" 2>&1 ) &
etcd_tidy=$!
( cd "$WORK/kwok" && go mod tidy >"$WORK/kwok/tidy.log" 2>&1 ) &
kwok_tidy=$!

# wait_modules waits for etcd's and kwok's modules; only the shell that
# started the two resolutions can wait for them.
wait_modules() {
  wait "$etcd_tidy" || { log "resolving etcd's modules failed:"; cat "$WORK/etcd/tidy.log" >&2; return 1; }
  # kwok's tidy may complain about test-only packages of its dependencies;
  # the build says whether what the command needs is there.
  wait "$kwok_tidy" || true
}

build_etcd() {
  (cd "$WORK/etcd" && timed "compile etcd" go build -ldflags='-s -w' -o "$WORK/out/etcd" .)
}

build_kwok() {
  (
    cd "$WORK/kwok"
    timed "compile kwok" go build -ldflags="-s -w" -o "$WORK/out/kwok" sigs.k8s.io/kwok/cmd/kwok
    # The kwok binary has no stages of its own (kwokctl passes them): ship
    # kwok's "fast" ones, a node that is Ready at once and pods that become
    # Running and Ready on it and go when deleted, from its own module.
    kwokdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo "---"
      cat "$kwokdir/kustomize/stage/$f"
    done > "$WORK/out/kwok-stages.yaml"
  )
}

# kube-apiserver, kube-controller-manager and kubectl: the kubernetes module
# replaces its staging modules with local paths the module zip lacks, so a
# wrapper module pins each of them. The three commands share most of their
# packages, so one go build compiles them: the packages only one of them
# needs, and the three links, then run beside the others' compiles instead
# of after them.
(
  cd "$WORK/apiserver"
  go mod init kvhint.local/apiserver >/dev/null 2>&1
  log "resolving k8s.io/kubernetes v${K8S_VERSION} staging modules"
  start=$SECONDS
  gomod=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [ -n "$gomod" ] || { log "could not download k8s.io/kubernetes v${K8S_VERSION}"; exit 1; }
  {
    echo "module kvhint.local/apiserver"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    grep -E '^[[:space:]]*k8s\.io/[^ ]+ v0\.0\.0$' "$gomod" | awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "step resolve k8s.io/kubernetes: $((SECONDS - start)) s"
  timed "download kubernetes modules" quiet go mod tidy || true
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=v${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitTreeState=clean"
  done
  # With -o naming a folder, go build writes each command under its own name.
  timed "compile kube-apiserver, kube-controller-manager, kubectl (one go build)" \
    go build -ldflags="$ldflags" -o "$WORK/out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
) &
k8s_build=$!

if [ "$PARALLEL" = 1 ]; then
  wait_modules
  build_etcd & etcd_build=$!
  build_kwok & kwok_build=$!
  rc=0
  wait "$k8s_build" || rc=1
  wait "$etcd_build" || rc=1
  wait "$kwok_build" || rc=1
  [ "$rc" -eq 0 ] || { log "a build failed; see above"; exit 1; }
else
  wait "$k8s_build" || { log "building the kubernetes commands failed"; exit 1; }
  wait_modules
  build_etcd
  build_kwok
fi
log "all five built in $((SECONDS - BUILD_START)) s"

"$WORK/out/kube-apiserver" --version >/dev/null
"$WORK/out/etcd" --version >/dev/null
"$WORK/out/kubectl" version --client >/dev/null
"$WORK/out/kube-controller-manager" --version >/dev/null
"$WORK/out/kwok" --version >/dev/null
rm -rf "$DEST.tmp"
mv "$WORK/out" "$DEST.tmp"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
log "ready: $DEST"
echo "$DEST"
