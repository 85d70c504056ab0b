#!/usr/bin/env bash
# Builds KubeFed's controller-manager and kubefedctl of the pinned release from the
# sigs.k8s.io/kubefed Go module, as test infrastructure for `make bench-kubefed` (hubfed beside
# KubeFed on the same clusters) and the takeover tests (e2e/tests/takeover.rs), and caches them
# outside the repo. A second call returns at once.
#
#   hack/build-kubefed.sh         # prints the directory holding `controller-manager` and `kubefedctl`
#
# KUBEFED_VERSION overrides the pinned release (v0.10.0); HUBFED_KUBEFED_BIN_DIR points at a
# directory that already holds `controller-manager` (nothing is built then). Nothing built or
# downloaded here belongs in the repository.
set -euo pipefail

V=${KUBEFED_VERSION:-v0.10.0}
V=v${V#v}
OUT=${HUBFED_KUBEFED_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/kubefed/$V}

if [ -x "$OUT/controller-manager" ] && [ -x "$OUT/kubefedctl" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_KUBEFED_BIN_DIR:-}" ]; then
  echo "HUBFED_KUBEFED_BIN_DIR=$HUBFED_KUBEFED_BIN_DIR does not hold controller-manager and kubefedctl" >&2
  exit 1
fi
. "$(dirname "$0")/go-module-build.sh"
go_module_workdir "KubeFed's controller-manager" kubefedbins "$OUT.tmp"

# `go install sigs.k8s.io/kubefed/cmd/controller-manager@$V` does not work through every
# module proxy (it lists the module's versions first); a throwaway module that requires the
# release does.
echo "building KubeFed's controller-manager and kubefedctl $V into $OUT (first time only, ~2 min)" >&2
go get "sigs.k8s.io/kubefed/cmd/controller-manager@$V" >&2
mkdir -p "$OUT.tmp" "$OUT"
for cmd in controller-manager kubefedctl; do
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kubefed/pkg/version.version=$V" \
    -o "$OUT.tmp/$cmd" "sigs.k8s.io/kubefed/cmd/$cmd" >&2
  mv "$OUT.tmp/$cmd" "$OUT/$cmd"
done
echo "$OUT"
