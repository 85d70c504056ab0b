#!/usr/bin/env bash
# Builds CoreDNS of the pinned release from its Go module (github.com/coredns/coredns), with
# its default plugin list (plugin.cfg, which has the `etcd` plugin), as test infrastructure for
# the multi-cluster DNS tests (e2e/tests/dns_publish.rs: a real DNS answer on loopback), and
# caches it outside the repo. A second call returns at once.
#
#   hack/build-coredns.sh         # prints the path of the coredns binary
#
# COREDNS_VERSION overrides the pinned release (v1.15.0); HUBFED_COREDNS points at an existing
# coredns binary (nothing is built then). Exits 3 when Go is missing. Nothing built or
# downloaded here belongs in the repository.
set -euo pipefail

V=${COREDNS_VERSION:-v1.15.0}
V=v${V#v}
MODULE=github.com/coredns/coredns
OUT_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/coredns/$V
OUT=${HUBFED_COREDNS:-$OUT_DIR/coredns}

if [ -x "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_COREDNS:-}" ]; then
  echo "HUBFED_COREDNS=$HUBFED_COREDNS is not an executable coredns binary" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is needed to build CoreDNS (https://go.dev)" >&2; exit 3; }
# One build at a time (CI starts it in the background; make tools or a test may ask meanwhile):
# a second caller waits for the first, then finds the binary.
mkdir -p "$(dirname "$OUT_DIR")"
exec 9>"$OUT_DIR.lock"
flock 9
if [ -x "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
. "$(dirname "$0")/go-module-build.sh"
go_module_workdir CoreDNS corednsbin "$OUT_DIR.tmp"

echo "building CoreDNS $V into $OUT_DIR (first time only, ~4 min)" >&2
# The release's own go.mod and go.sum (no replace directives), exactly as released: the
# default plugins are compiled in through core/plugin/zplugin.go, generated from plugin.cfg.
export GOFLAGS=
COMMIT=$(go mod download -json "$MODULE@$V" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)
LD="-s -w"
[ -n "$COMMIT" ] && LD+=" -X $MODULE/coremain.GitCommit=$COMMIT"
mkdir -p "$OUT_DIR.tmp"
GOBIN="$OUT_DIR.tmp" go install -trimpath -ldflags "$LD" "$MODULE@$V" >&2
"$OUT_DIR.tmp/coredns" -plugins | grep -qx etcd \
  || { echo "CoreDNS $V was built without its etcd plugin" >&2; exit 1; }
"$OUT_DIR.tmp/coredns" -version >&2
rm -rf "$OUT_DIR"
mv "$OUT_DIR.tmp" "$OUT_DIR"
echo "$OUT"
