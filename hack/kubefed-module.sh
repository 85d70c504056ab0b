#!/usr/bin/env bash
# Prints the directory of KubeFed's Go module (sigs.k8s.io/kubefed, pinned release) in the Go
# module cache, downloading it through the module proxy the first time. Tests read KubeFed's
# own chart, CRDs and e2e sources from it; nothing from it belongs in the repository.
#
#   hack/kubefed-module.sh        # e.g. /root/go/pkg/mod/sigs.k8s.io/kubefed@v0.10.0
#
# KUBEFED_VERSION overrides the pinned release (v0.10.0). Exits 3 when Go is missing.
set -euo pipefail

V=${KUBEFED_VERSION:-v0.10.0}
V=v${V#v}
command -v go >/dev/null || { echo "go is needed to read KubeFed's module (https://go.dev)" >&2; exit 3; }
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
dir="$(go env GOMODCACHE)/sigs.k8s.io/kubefed@$V"
if [ ! -d "$dir" ]; then
  # `go mod download` needs no module of its own for an explicit module@version.
  (cd "$(mktemp -d)" && go mod download "sigs.k8s.io/kubefed@$V" >&2)
fi
[ -d "$dir" ] || { echo "KubeFed's module $V is not in $dir after download" >&2; exit 1; }
echo "$dir"
