#!/usr/bin/env bash
# Fails if the public SDK or an example reaches this module's internal/
# packages. pkg/ may not import them at any depth: what a public package
# does must be visible in public code, where the API guard sees it. An
# example may not import them itself; its custom kvhint build reaches them
# only through cmd/kvhint/app, as a team's build does.
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
bad=$(go list -deps ./pkg/... | grep "^$module/internal/" || true)
if [ -n "$bad" ]; then
  echo "imports-check: pkg/ depends on internal packages:" >&2
  for p in $bad; do
    echo "  $p, imported by: $(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./pkg/... | awk -v p="$p" '{for (i = 2; i <= NF; i++) if ($i == p) print $1}' | tr '\n' ' ')" >&2
  done
  exit 1
fi
for mod in examples/*/go.mod; do
  dir=$(dirname "$mod")
  direct=$(cd "$dir" && go list -f '{{.ImportPath}}: {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | grep -o "$module/internal/[^ ]*" | sort -u || true)
  if [ -n "$direct" ]; then
    echo "imports-check: $dir imports internal packages: $direct" >&2
    exit 1
  fi
done
# The Go router links only the public dispatch core: nothing internal, no
# Kubernetes client and no metrics library, at any depth.
deps=$(cd examples/go-router && go list -deps ./...)
if grep -E "^$module/internal/|^k8s.io/client-go|^github.com/fsnotify|^github.com/prometheus/" <<<"$deps"; then
  echo "imports-check: examples/go-router depends on the packages above" >&2
  exit 1
fi
echo "imports-check: pkg/ and examples/ import no internal package"
