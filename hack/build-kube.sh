#!/usr/bin/env bash
# Builds kube-apiserver and kube-controller-manager of the pinned Kubernetes release from the
# k8s.io/kubernetes Go module and caches them outside the repo. A second call returns at once.
#
#   hack/build-kube.sh            # prints the directory holding the binaries
#
# KUBE_VERSION overrides the pinned release; HUBFED_KUBE_BIN_DIR points at a directory that
# already holds both binaries (nothing is built then).
set -euo pipefail

V=${KUBE_VERSION:-$(cat "$(dirname "$0")/KUBE_VERSION")}
V=${V#v}
OUT=${HUBFED_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/kube/v$V}

if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-controller-manager" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_KUBE_BIN_DIR:-}" ]; then
  echo "HUBFED_KUBE_BIN_DIR=$HUBFED_KUBE_BIN_DIR does not hold kube-apiserver and kube-controller-manager" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is needed to build the test binaries (https://go.dev)" >&2; exit 1; }

MINOR=$(cut -d. -f2 <<<"$V")
STAGING=v0.${V#*.}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
# GOTOOLCHAIN=local: never try to download another Go toolchain.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

echo "building kube-apiserver and kube-controller-manager v$V into $OUT (first time only, ~15 min)" >&2
go mod init hubfed.local/kubebins >/dev/null 2>&1
KGOMOD=$(go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$KGOMOD" ] || { echo "could not download k8s.io/kubernetes@v$V" >&2; exit 1; }
# Mirror Kubernetes' own go and godebug lines: they decide the GODEBUG defaults of the build.
go mod edit -go="$(sed -n 's/^go \(.*\)/\1/p' "$KGOMOD")"
sed -n 's/^godebug \(.*\)/godebug \1/p' "$KGOMOD" >> go.mod
# Every staging module is required at v0.0.0 by k8s.io/kubernetes: route each to its release.
for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*|\1|p' "$KGOMOD"); do
  go mod edit -replace="$m=$m@$STAGING"
done
go get "k8s.io/kubernetes/cmd/kube-apiserver@v$V" "k8s.io/kubernetes/cmd/kube-controller-manager@v$V" >&2

COMMIT=$(go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD+=" -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=$DATE"
  [ -n "$COMMIT" ] && LD+=" -X $p.gitCommit=$COMMIT"
done

mkdir -p "$OUT.tmp"
for c in kube-apiserver kube-controller-manager; do
  go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$LD" -o "$OUT.tmp/$c" "k8s.io/kubernetes/cmd/$c" >&2
done
"$OUT.tmp/kube-apiserver" --version >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
