#!/usr/bin/env bash
# Builds the pod sandbox ("pause") image containerd's CRI plugin starts for every pod, as an
# OCI image archive: `registry.k8s.io/pause` cannot be pulled here (no container registry).
#
#   hack/build-pause-image.sh [OUT.tar]   # default: target/image/pause.oci.tar
#
# The image is one static binary, /pause: it holds the pod's namespaces open, reaps zombies
# and exits on SIGINT/SIGTERM — what Kubernetes' own build/pause/linux/pause.c does. Tagged
# hubfed.local/pause:1 (no registry answers to that name: it only ever comes from the
# archive, `ctr -n k8s.io images import`). Needs gcc with a static libc (Debian: libc6-dev)
# and umoci.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=hubfed.local/pause:1
OUT=${1:-target/image/pause.oci.tar}
for tool in gcc umoci; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat >"$W/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(sig == SIGINT || sig == SIGTERM ? 0 : 1); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction quit = {.sa_handler = stop};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &quit, NULL) < 0 || sigaction(SIGTERM, &quit, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0)
    return 1;
  for (;;)
    pause();
}
C
mkdir -p "$W/rootfs"
gcc -Os -static -s -o "$W/rootfs/pause" "$W/pause.c"

LAYOUT=$W/layout
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:1"
umoci unpack --rootless --image "$LAYOUT:1" "$W/bundle" >/dev/null
rm -rf "$W/bundle/rootfs"
cp -a "$W/rootfs" "$W/bundle/rootfs"
umoci repack --image "$LAYOUT:1" "$W/bundle"
umoci config --image "$LAYOUT:1" --config.user 65535:65535 --config.entrypoint /pause \
  --architecture amd64 --os linux --author hubfed
umoci gc --layout "$LAYOUT"
# The full name `ctr import` reads.
python3 - "$LAYOUT/index.json" "$NAME" <<'PY'
import json, sys
path, name = sys.argv[1:]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {})["io.containerd.image.name"] = name
json.dump(index, open(path, "w"))
PY
mkdir -p "$(dirname "$OUT")"
tar -C "$LAYOUT" -cf "$OUT" .
echo "$OUT"
