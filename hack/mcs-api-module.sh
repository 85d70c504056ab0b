#!/usr/bin/env bash
# Prints the directory of the Multi-Cluster Services API's Go module (sigs.k8s.io/mcs-api,
# pinned release) in the Go module cache, downloading it through the module proxy the first
# time. Tests read upstream's CRDs from it; nothing from it belongs in the repository.
#
#   hack/mcs-api-module.sh        # e.g. /root/go/pkg/mod/sigs.k8s.io/mcs-api@v0.5.2
#
# MCS_API_VERSION overrides the pinned release (v0.5.2). Exits 3 when Go is missing.
set -euo pipefail

V=${MCS_API_VERSION:-v0.5.2}
V=v${V#v}
command -v go >/dev/null || { echo "go is needed to read the MCS API's module (https://go.dev)" >&2; exit 3; }
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
dir="$(go env GOMODCACHE)/sigs.k8s.io/mcs-api@$V"
if [ ! -d "$dir" ]; then
  # `go mod download` needs no module of its own for an explicit module@version.
  (cd "$(mktemp -d)" && go mod download "sigs.k8s.io/mcs-api@$V" >&2)
fi
[ -d "$dir" ] || { echo "the MCS API's module $V is not in $dir after download" >&2; exit 1; }
echo "$dir"
