#!/usr/bin/env bash
# Builds etcd of a pinned 3.6 release from the go.etcd.io/etcd/server/v3 Go module, as test
# infrastructure for the large-object benchmark only, and caches it outside the repo. A
# second call returns at once. Everything else runs on Debian's etcd (hack/install-etcd.sh).
#
#   hack/build-etcd.sh            # prints the path of the `etcd` binary
#   HUBFED_ETCD=$(hack/build-etcd.sh) HUBFED_ETCD_CATCHUP_ENTRIES=100 make bench BENCH_ARGS=...
#
# Why: etcd keeps its raft log in memory, the entries since its last snapshot plus 5,000 more
# for followers to catch up; 3.5 cannot lower the 5,000, and with ~1 MB objects that alone is
# ~5 GB. 3.6 can (`--snapshot-catchup-entries`). ETCD_VERSION overrides the pinned release.
# Nothing built or downloaded here belongs in the repository.
set -euo pipefail

V=${ETCD_VERSION:-v3.6.16}
V=v${V#v}
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/etcd-build/$V

if [ -x "$OUT/etcd" ]; then
  echo "$OUT/etcd"
  exit 0
fi
. "$(dirname "$0")/go-module-build.sh"
go_module_workdir "etcd $V" etcdbin "$OUT.tmp"

# etcd's own main.go (in the repository's root module) only calls etcdmain.Main; the server
# module, which carries etcdmain, is what the module proxy serves.
echo "building etcd $V into $OUT (first time only, a few minutes)" >&2
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go get "go.etcd.io/etcd/server/v3@$V" >&2
go mod tidy >&2
mkdir -p "$OUT.tmp"
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" . >&2
mkdir -p "$OUT"
mv "$OUT.tmp/etcd" "$OUT/etcd"
echo "$OUT/etcd"
