#!/usr/bin/env bash
# Builds external-dns of the pinned release from its Go module (sigs.k8s.io/external-dns) as
# test infrastructure for the multi-cluster DNS tests (e2e/tests/dns_publish.rs: its CRD source
# and coredns provider publish DNSEndpoints to an etcd that CoreDNS serves on loopback), and
# caches it outside the repo. A second call returns at once.
#
#   hack/build-external-dns.sh         # prints the path of the external-dns binary
#   hack/build-external-dns.sh module  # prints external-dns's module directory (its CRDs),
#                                      # downloading the module the first time
#
# EXTERNAL_DNS_VERSION overrides the pinned release (v0.23.0); HUBFED_EXTERNAL_DNS points at an
# existing external-dns binary (nothing is built then). Exits 3 when Go is missing. Nothing
# built or downloaded here belongs in the repository.
set -euo pipefail

V=${EXTERNAL_DNS_VERSION:-v0.23.0}
V=v${V#v}
MODULE=sigs.k8s.io/external-dns
OUT_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/external-dns/$V
OUT=${HUBFED_EXTERNAL_DNS:-$OUT_DIR/external-dns}

# v0.23.0's go.mod asks for Go 1.27.0, newer than the machine's 1.26: the go command takes the
# approved Go 1.27.3 from the Go module proxy like a module (about 76 MB, once per machine),
# for this script only (even `go mod download` of the module needs it). hubfed itself needs
# no newer Go.
TOOLCHAIN=go1.27.3
# The module's directory in the Go module cache (downloaded the first time), empty on failure.
module_dir() {
  local tmp json
  tmp=$(mktemp -d)
  json=$(cd "$tmp" && GOTOOLCHAIN=$TOOLCHAIN GOFLAGS= go mod download -json "$MODULE@$V") || true
  rm -rf "$tmp"
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$json"
}
if [ "${1:-}" = module ]; then
  command -v go >/dev/null || { echo "go is needed to read external-dns's module (https://go.dev)" >&2; exit 3; }
  DIR=$(module_dir)
  [ -d "$DIR" ] || { echo "could not download $MODULE@$V" >&2; exit 1; }
  echo "$DIR"
  exit 0
fi

if [ -x "$OUT" ]; then
  echo "$OUT"
  exit 0
fi
if [ -n "${HUBFED_EXTERNAL_DNS:-}" ]; then
  echo "HUBFED_EXTERNAL_DNS=$HUBFED_EXTERNAL_DNS is not an executable external-dns binary" >&2
  exit 1
fi
command -v go >/dev/null || { echo "go is needed to build external-dns (https://go.dev)" >&2; exit 3; }
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
go_module_workdir external-dns externaldnsbin "$OUT_DIR.tmp"

export GOTOOLCHAIN=$TOOLCHAIN
echo "building external-dns $V into $OUT_DIR (first time only, ~10 min)" >&2
DIR=$(module_dir)
[ -d "$DIR" ] || { echo "could not download $MODULE@$V" >&2; exit 1; }

# Three of the release's dependencies are refused by the module proxy (403 "not available"):
# github.com/civo/civogo, github.com/exoscale/egoscale/v3 (only the civo and exoscale
# providers import them) and github.com/openshift/api at v0.0.0-20260819011109-af5c920502e2
# (only the OpenShift Route source). The tests need none of them, so the release is built
# from a copy of its module (its own go.mod and go.sum) with two changes: the provider
# factory without the civo and exoscale providers (four lines fewer; `--provider=civo` then
# says "unknown dns provider"), and openshift/api at the version openshift/client-go asks
# for, which the proxy serves. (A build overlay cannot replace a file of the module cache.)
cp -r "$DIR" src
chmod -R u+w src
cd src
FACTORY=provider/factory/provider.go
grep -v -E '"sigs.k8s.io/external-dns/provider/(civo|exoscale)"|: +(civo|exoscale)\.New,' \
  "$DIR/$FACTORY" > "$FACTORY"
[ "$(( $(wc -l < "$DIR/$FACTORY") - $(wc -l < "$FACTORY") ))" -eq 4 ] \
  || { echo "$DIR/$FACTORY is not the one this script knows (civo and exoscale lines)" >&2; exit 1; }
OPENSHIFT_API=v0.0.0-20260810132456-8f52beb625b5
go mod edit -replace="github.com/openshift/api=github.com/openshift/api@$OPENSHIFT_API"

P=$MODULE/pkg/apis/externaldns
LD="-s -w -X $P.Version=$V"
mkdir -p "$OUT_DIR.tmp"
go build -trimpath -ldflags "$LD" -o "$OUT_DIR.tmp/external-dns" . >&2
"$OUT_DIR.tmp/external-dns" --version >&2
rm -rf "$OUT_DIR"
mv "$OUT_DIR.tmp" "$OUT_DIR"
echo "$OUT"
