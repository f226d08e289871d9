#!/usr/bin/env bash
# The public API guard. `check` compares every public package under pkg/
# with the export data committed in hack/api/ and fails on an incompatible
# change or a package without a committed export; `accept` writes the export
# data anew, after an intended change that CHANGELOG.md lists.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${APIDIFF:?set APIDIFF to the apidiff binary}"
mode=${1:?usage: hack/api.sh check|accept}
module=$(go list -m)
dir=hack/api
pkgs=$(go list ./pkg/... | grep -v "/internal/")
export_file() { echo "$dir/$(echo "${1#"$module"/}" | tr / _).export"; }
case $mode in
accept)
  rm -rf "$dir" && mkdir -p "$dir"
  for p in $pkgs; do "$APIDIFF" -w "$(export_file "$p")" "$p"; done
  echo "api: wrote the export data of $(wc -w <<<"$pkgs") packages to $dir; commit it with the CHANGELOG.md entry"
  ;;
check)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  failed=0
  for p in $pkgs; do
    old=$(export_file "$p")
    if [ ! -f "$old" ]; then
      echo "api: $p has no committed export data in $dir: run make api-accept" >&2
      failed=1
      continue
    fi
    "$APIDIFF" -w "$tmp/new.export" "$p"
    out=$("$APIDIFF" -incompatible "$old" "$tmp/new.export")
    if [ -n "$out" ]; then
      echo "api: incompatible changes to $p:" >&2
      sed 's/^/  /' <<<"$out" >&2
      failed=1
    fi
  done
  for f in "$dir"/*.export; do
    [ -e "$f" ] || continue
    found=0
    for p in $pkgs; do [ "$(export_file "$p")" = "$f" ] && found=1; done
    if [ $found = 0 ]; then echo "api: $f names a package that is gone: an incompatible change" >&2; failed=1; fi
  done
  if [ $failed = 1 ]; then
    echo "api: if the change is intended, list it in CHANGELOG.md and run make api-accept" >&2
    exit 1
  fi
  echo "api: pkg/ is compatible with hack/api"
  ;;
*) echo "usage: hack/api.sh check|accept" >&2; exit 2 ;;
esac
