#!/usr/bin/env bash
# Builds the hubfed-controller container image as an OCI image archive, without a container
# daemon: `make image`.
#
#   hack/build-image.sh [OUT.tar]     # default: target/image/hubfed-controller-<version>.oci.tar
#
# The image is what the Dockerfile's final stage makes (gcr.io/distroless/static-debian12:nonroot
# plus the three binaries), assembled here from the build machine's own files, since no base
# image can be pulled: the binaries in /usr/local/bin — static (glibc linked in with
# `-C target-feature=+crt-static`: no C runtime in the image; the controller and the agent
# allocate with jemalloc, linked in too) —, the CA bundle, /etc/passwd
# and /etc/group with the `nonroot` user (65532), /etc/nsswitch.conf (`hosts: files dns`,
# both built into glibc ≥ 2.34, so a static binary resolves names without loading anything),
# an empty /tmp. User 65532, entrypoint hubfed-controller (the pull-mode agent runs from the
# same image with the command hubfed-agent).
#
# The archive is an OCI image layout (tar), tagged ghcr.io/hubfed/hubfed-controller:<version>
# — the default image of charts/hubfed and charts/hubfed-agent. Load it with `docker load -i`
# (Docker 25+), `ctr -n k8s.io images import`, `podman load -i`; push it with `skopeo copy
# oci-archive:<file> docker://…`.
#
# Tool: umoci (Debian package `umoci`): it writes OCI layouts and layers from a plain
# directory, daemonless and unprivileged, which is all this needs (buildah needs container
# storage and a runtime, and cannot run here). Set HUBFED_IMAGE_BINARIES to a directory that
# holds static release binaries to skip the cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."

REPOSITORY=ghcr.io/hubfed/hubfed-controller
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
OUT=${1:-target/image/hubfed-controller-$VERSION.oci.tar}
TARGET=x86_64-unknown-linux-gnu
BINARIES=${HUBFED_IMAGE_BINARIES:-target/$TARGET/release}

command -v umoci >/dev/null || {
  echo "umoci is needed (Debian: apt-get install --no-install-recommends umoci)" >&2
  exit 1
}
if [ -z "${HUBFED_IMAGE_BINARIES:-}" ]; then
  step_start=$(date +%s)
  echo "image: cargo build --release, static (hubfed-controller, hubfed-agent, hubfedctl)" >&2
  # An explicit --target keeps the static flags off build scripts and proc macros, and the
  # output apart from target/release (the benchmark's binaries).
  # Without `make test`'s clippy-driver (it compiles with fewer optimizations): rustc alone.
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --locked --target "$TARGET" -p hubfed-controller -p hubfedctl --bins
  echo "image: binaries built in $(( $(date +%s) - step_start ))s" >&2
fi
for bin in hubfed-controller hubfed-agent hubfedctl; do
  [ -x "$BINARIES/$bin" ] || { echo "$BINARIES/$bin is missing" >&2; exit 1; }
  # The image has no C runtime: a dynamically linked binary would not start in it.
  if ldd "$BINARIES/$bin" 2>&1 | grep -q '=>'; then
    echo "$BINARIES/$bin is dynamically linked; the image needs static binaries" >&2
    exit 1
  fi
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ROOT=$W/rootfs
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/ssl/certs" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"
install -m 0755 "$BINARIES/hubfed-controller" "$BINARIES/hubfed-agent" "$BINARIES/hubfedctl" \
  "$ROOT/usr/local/bin/"

if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/"
fi
cat >"$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$ROOT/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$ROOT/etc/nsswitch.conf"

LAYOUT=$W/layout
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$VERSION"
umoci unpack --rootless --image "$LAYOUT:$VERSION" "$W/bundle" >/dev/null
rm -rf "$W/bundle/rootfs"
cp -a "$ROOT" "$W/bundle/rootfs"
umoci repack --image "$LAYOUT:$VERSION" "$W/bundle"
umoci config --image "$LAYOUT:$VERSION" \
  --config.user 65532:65532 \
  --config.entrypoint /usr/local/bin/hubfed-controller \
  --config.workingdir / \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.label org.opencontainers.image.title=hubfed-controller \
  --config.label org.opencontainers.image.version="$VERSION" \
  --config.label org.opencontainers.image.source=https://github.com/hubfed/hubfed \
  --architecture amd64 --os linux \
  --author hubfed
umoci gc --layout "$LAYOUT"
# The full name for `docker load` and `ctr import` (they read these annotations).
python3 - "$LAYOUT/index.json" "$REPOSITORY:$VERSION" "$VERSION" <<'EOF'
import json, sys
path, name, tag = sys.argv[1:]
index = json.load(open(path))
for manifest in index["manifests"]:
    annotations = manifest.setdefault("annotations", {})
    annotations["io.containerd.image.name"] = name
    annotations["org.opencontainers.image.ref.name"] = tag
json.dump(index, open(path, "w"))
EOF
mkdir -p "$(dirname "$OUT")"
tar -C "$LAYOUT" -cf "$OUT" .
echo "image: $REPOSITORY:$VERSION -> $OUT ($(du -h "$OUT" | cut -f1))" >&2
echo "$OUT"
