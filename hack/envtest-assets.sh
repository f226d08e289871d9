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
# etcd at the version kubernetes' own go.mod pins its client to, so that the
# server shares its packages (grpc, etcd's API types) with kube-apiserver.
ETCD_VERSION=${ETCD_VERSION:-3.7.0}
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
REPO=$(cd "$(dirname "$0")/.." && pwd)
# CGO_ENABLED=0 and -trimpath, the flags the Makefile gives every build (and
# the Dockerfile's): the build cache keys a compiled package by its flags, so
# the packages the binaries share with the repository's tests (client-go,
# apimachinery, apiserver, grpc, ...: about nine in ten of the tests'
# dependencies) are compiled once, here, and found in the cache by `make
# verify` and `make test`, instead of once for each.
export GOWORK=off CGO_ENABLED=0 GOFLAGS='-trimpath -mod=mod -buildvcs=false'
BUILD_START=$SECONDS

log "building kube-apiserver, kube-controller-manager and kubectl v${K8S_VERSION}, etcd v${ETCD_VERSION} and kwok v${KWOK_VERSION} from Go modules into $DEST"
log "a cold build takes about fifteen minutes on two cores; later runs reuse the cache"

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

# One wrapper module builds all five. The kubernetes module replaces its
# staging modules with local paths its module zip lacks, so the wrapper pins
# each of them. kwok (built against client libraries one minor older) and
# etcd's server take the versions kubernetes selects, so the packages they
# share with kube-apiserver are compiled once. etcd's server has no main
# package: a three-line one calls etcdmain.Main.
mkdir -p "$WORK/mod/cmd/etcd" "$WORK/out"
cd "$WORK/mod"
start=$SECONDS
gomod=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -n "$gomod" ] || { log "could not download k8s.io/kubernetes v${K8S_VERSION}"; exit 1; }
pinned_etcd=$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/client\/v3 v\([^ ]*\).*/\1/p' "$gomod" | head -n1)
if [ -n "$pinned_etcd" ] && [ "$pinned_etcd" != "$ETCD_VERSION" ]; then
  log "note: kubernetes v${K8S_VERSION} pins etcd's client at v${pinned_etcd}, not v${ETCD_VERSION}; the two builds share fewer packages"
fi

# The versions of the modules the repository's own packages and tests build
# from, as floors: minimal version selection then picks the same versions the
# tests compile with wherever kubernetes asks for no newer one.
floors=$(cd "$REPO" && GOFLAGS=-buildvcs=false go list -deps -test -f '{{with .Module}}{{if not .Main}}{{if not .Replace}}{{.Path}} {{.Version}}{{end}}{{end}}{{end}}' ./... 2>/dev/null | sort -u) || floors=
log "step resolve k8s.io/kubernetes and the repository's versions: $((SECONDS - start)) s"

# write_mod [FLOORS]: the wrapper's go.mod, with FLOORS as extra requirements.
write_mod() {
  {
    echo "module kvhint.local/assets"
    echo
    echo "go 1.26.0"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v${K8S_VERSION}"
    echo "	go.etcd.io/etcd/server/v3 v${ETCD_VERSION}"
    echo "	sigs.k8s.io/kwok v${KWOK_VERSION}"
    [ -z "${1:-}" ] || printf '%s\n' "$1" | sed 's/^/	/'
    echo ")"
    echo
    grep -E '^[[:space:]]*k8s\.io/[^ ]+ v0\.0\.0$' "$gomod" | awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } > go.mod
  rm -f go.sum
}
cat > cmd/etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
GO

minor=${K8S_VERSION#*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=v${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitTreeState=clean"
done

# build: one go build of the five commands. With -o naming a folder, go
# build writes each under its own name (./cmd/etcd as etcd).
build() {
  # kwok's tidy may complain about test-only packages of its dependencies;
  # the build says whether what the commands need is there.
  timed "download modules" quiet go mod tidy || true
  timed "compile kube-apiserver, kube-controller-manager, kubectl, etcd, kwok (one go build)" \
    go build -ldflags="$ldflags" -o "$WORK/out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl \
    ./cmd/etcd \
    sigs.k8s.io/kwok/cmd/kwok
}

write_mod "$floors"
if ! build; then
  [ -n "$floors" ] || { log "the build failed; see above"; exit 1; }
  # A version the repository needs may be one kubernetes does not build
  # with: build with kubernetes' own versions instead, sharing less.
  log "the build with the repository's versions failed; building with kubernetes' own"
  write_mod ""
  build || { log "the build failed; see above"; exit 1; }
fi

# The kwok binary has no stages of its own (kwokctl passes them): ship
# kwok's "fast" ones, a node that is Ready at once and pods that become
# Running and Ready on it and go when deleted, from its own module.
kwokdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  echo "---"
  cat "$kwokdir/kustomize/stage/$f"
done > "$WORK/out/kwok-stages.yaml"
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
