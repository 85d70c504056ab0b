#!/usr/bin/env bash
# Builds `helm` of the pinned release from its Go module (helm.sh/helm/v<major>) and caches it
# outside the repo. A second call returns at once. The chart tests (e2e/tests/chart*.rs, image_pod.rs) and
# `helm template`/`helm lint` of charts/hubfed use it.
#
#   hack/build-helm.sh            # prints the path of the helm binary
#
# HELM_VERSION overrides the pinned release; HUBFED_HELM points at an existing helm binary
# (nothing is built then).
set -euo pipefail

# Pinned: the newest release whose go.mod asks for no newer Go than the one we require (1.26).
V=${HELM_VERSION:-v4.3.1}
V=v${V#v}
MAJOR=$(cut -d. -f1 <<<"${V#v}")
MODULE=helm.sh/helm/v$MAJOR
OUT_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/helm/$V
OUT=${HUBFED_HELM:-$OUT_DIR/helm}

if [ -x "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_HELM:-}" ]; then
  echo "HUBFED_HELM=$HUBFED_HELM is not an executable helm binary" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is needed to build helm (https://go.dev)" >&2; exit 1; }

W=$(mktemp -d)
trap 'rm -rf "$W" "$OUT_DIR.tmp"' EXIT
cd "$W"
# GOTOOLCHAIN=local: never try to download another Go toolchain. `go install pkg@version`
# builds with helm's own go.mod and go.sum, exactly as released.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=

echo "building helm $V into $OUT_DIR (first time only, a few minutes)" >&2
COMMIT=$(go mod download -json "$MODULE@$V" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)
# Helm's Makefile sets these; an empty metadata drops the "+unreleased" suffix.
P=$MODULE/internal/version
LD="-s -w -X $P.version=$V -X $P.metadata= -X $P.gitTreeState=clean"
[ -n "$COMMIT" ] && LD+=" -X $P.gitCommit=$COMMIT"

mkdir -p "$OUT_DIR.tmp"
GOBIN="$OUT_DIR.tmp" go install -trimpath -ldflags "$LD" "$MODULE/cmd/helm@$V" >&2
"$OUT_DIR.tmp/helm" version >&2
rm -rf "$OUT_DIR"
mv "$OUT_DIR.tmp" "$OUT_DIR"
echo "$OUT"
