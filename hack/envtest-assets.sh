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

log "building kube-apiserver, kube-controller-manager and kubectl v${K8S_VERSION}, etcd v${ETCD_VERSION} and kwok v${KWOK_VERSION} from Go modules into $DEST"
log "a cold build takes about twenty minutes on two cores; later runs reuse the cache"

# kube-apiserver: the kubernetes module replaces its staging modules with
# local paths the module zip lacks, so a wrapper module pins each of them.
mkdir -p "$WORK/apiserver" "$WORK/out"
(
  cd "$WORK/apiserver"
  go mod init kvhint.local/apiserver >/dev/null 2>&1
  log "resolving k8s.io/kubernetes v${K8S_VERSION} staging modules"
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
  log "downloading modules and compiling kube-apiserver (the long step)"
  with_progress "downloading kubernetes modules" go mod tidy >/dev/null 2>&1 || true
  minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=v${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitTreeState=clean"
  done
  with_progress "compiling kube-apiserver" go build -ldflags="$ldflags" -o "$WORK/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  with_progress "compiling kube-controller-manager" go build -ldflags="$ldflags" -o "$WORK/out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
  with_progress "compiling kubectl" go build -ldflags="$ldflags" -o "$WORK/out/kubectl" k8s.io/kubernetes/cmd/kubectl
)
log "kube-apiserver, kube-controller-manager and kubectl built"

mkdir -p "$WORK/etcd"
(
  cd "$WORK/etcd"
  cat > go.mod <<GOMOD
module kvhint.local/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
GOMOD
  cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "downloading modules and compiling etcd"
  go mod tidy >/dev/null
  with_progress "compiling etcd" go build -ldflags='-s -w' -o "$WORK/out/etcd" .
)
log "etcd built"

# kwok: its own module (it pins older client libraries than kubernetes'), so
# a wrapper of its own.
mkdir -p "$WORK/kwok"
(
  cd "$WORK/kwok"
  cat > go.mod <<GOMOD
module kvhint.local/kwok

go 1.26.0

require sigs.k8s.io/kwok v${KWOK_VERSION}
GOMOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
GO
  log "downloading modules and compiling kwok"
  go mod tidy >/dev/null 2>&1 || true
  with_progress "compiling kwok" go build -ldflags="-s -w" -o "$WORK/out/kwok" sigs.k8s.io/kwok/cmd/kwok
  # The kwok binary has no stages of its own (kwokctl passes them): ship
  # kwok's "fast" ones, a node that is Ready at once and pods that become
  # Running and Ready on it and go when deleted, from its own module.
  kwokdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$kwokdir/kustomize/stage/$f"
  done > "$WORK/out/kwok-stages.yaml"
)
log "kwok built"

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
