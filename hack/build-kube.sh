#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kube-scheduler of the pinned Kubernetes
# release from the k8s.io/kubernetes Go module and caches them outside the repo. A second call
# returns at once; a cache from before kube-scheduler was added gets just the missing binary.
#
#   hack/build-kube.sh            # prints the directory holding the binaries
#   hack/build-kube.sh kubelet    # the same for the named binaries of k8s.io/kubernetes/cmd
#                                 # (the kubelet is only needed by e2e/tests/image_pod.rs)
#
# KUBE_VERSION overrides the pinned release; HUBFED_KUBE_BIN_DIR points at a directory that
# already holds the three binaries (nothing is built then).
set -euo pipefail

V=${KUBE_VERSION:-$(cat "$(dirname "$0")/KUBE_VERSION")}
V=${V#v}
OUT=${HUBFED_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/kube/v$V}

BINS=(kube-apiserver kube-controller-manager kube-scheduler)
[ $# -eq 0 ] || BINS=("$@")
MISSING=()
for c in "${BINS[@]}"; do
  [ -x "$OUT/$c" ] || MISSING+=("$c")
done
if [ ${#MISSING[@]} -eq 0 ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_KUBE_BIN_DIR:-}" ]; then
  echo "HUBFED_KUBE_BIN_DIR=$HUBFED_KUBE_BIN_DIR does not hold ${MISSING[*]}" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is needed to build the test binaries (https://go.dev)" >&2; exit 1; }
# One build at a time (tests, make tools and CI may ask at once; a second build would remove
# the first one's half-built binaries): a second caller waits, then builds only what is still
# missing.
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock 9
MISSING=()
for c in "${BINS[@]}"; do
  [ -x "$OUT/$c" ] || MISSING+=("$c")
done
if [ ${#MISSING[@]} -eq 0 ]; then
  echo "$OUT"
  exit 0
fi

MINOR=$(cut -d. -f2 <<<"$V")
STAGING=v0.${V#*.}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
# GOTOOLCHAIN=local: never try to download another Go toolchain.
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

echo "building ${MISSING[*]} v$V into $OUT (first time only, ~15 min for the first three)" >&2
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
PKGS=()
for c in "${MISSING[@]}"; do PKGS+=("k8s.io/kubernetes/cmd/$c@v$V"); done
go get "${PKGS[@]}" >&2

COMMIT=$(go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD+=" -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=$DATE"
  [ -n "$COMMIT" ] && LD+=" -X $p.gitCommit=$COMMIT"
done

rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
for c in "${MISSING[@]}"; do
  go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$LD" -o "$OUT.tmp/$c" "k8s.io/kubernetes/cmd/$c" >&2
  "$OUT.tmp/$c" --version >&2
done
mkdir -p "$OUT"
mv "$OUT.tmp"/* "$OUT/"
rmdir "$OUT.tmp"
echo "$OUT"
