#!/usr/bin/env bash
# Builds KubeFed's controller-manager of the pinned release from the sigs.k8s.io/kubefed Go
# module, as test infrastructure for `make bench-kubefed` (hubfed beside KubeFed on the same
# clusters), and caches it outside the repo. A second call returns at once.
#
#   hack/build-kubefed.sh         # prints the directory holding `controller-manager`
#
# KUBEFED_VERSION overrides the pinned release (v0.10.0); HUBFED_KUBEFED_BIN_DIR points at a
# directory that already holds `controller-manager` (nothing is built then). Nothing built or
# downloaded here belongs in the repository.
set -euo pipefail

V=${KUBEFED_VERSION:-v0.10.0}
V=v${V#v}
OUT=${HUBFED_KUBEFED_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/kubefed/$V}

if [ -x "$OUT/controller-manager" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_KUBEFED_BIN_DIR:-}" ]; then
  echo "HUBFED_KUBEFED_BIN_DIR=$HUBFED_KUBEFED_BIN_DIR does not hold controller-manager" >&2
  exit 1
fi
. "$(dirname "$0")/go-module-build.sh"
go_module_workdir "KubeFed's controller-manager" kubefedbins "$OUT.tmp"

# `go install sigs.k8s.io/kubefed/cmd/controller-manager@$V` does not work through every
# module proxy (it lists the module's versions first); a throwaway module that requires the
# release does.
echo "building KubeFed's controller-manager $V into $OUT (first time only, ~1 min)" >&2
go get "sigs.k8s.io/kubefed/cmd/controller-manager@$V" >&2
mkdir -p "$OUT.tmp"
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kubefed/pkg/version.version=$V" \
  -o "$OUT.tmp/controller-manager" sigs.k8s.io/kubefed/cmd/controller-manager >&2
mkdir -p "$OUT"
mv "$OUT.tmp/controller-manager" "$OUT/controller-manager"
echo "$OUT"
