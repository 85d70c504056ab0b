#!/usr/bin/env bash
# Builds the hubfed-controller container image as an OCI image archive, without a container
# daemon: `make image`.
#
#   hack/build-image.sh [OUT.tar]     # default: target/image/hubfed-controller-<version>.oci.tar
#
# The image is what the Dockerfile's final stage makes (gcr.io/distroless/cc-debian12:nonroot
# plus the three binaries), assembled here from the build machine's own Debian files, since no
# base image can be pulled: the binaries in /usr/local/bin, the C runtime they link against
# (exactly the libraries `ldd` lists), the CA bundle, /etc/passwd and /etc/group with the
# `nonroot` user (65532), an empty /tmp. User 65532, entrypoint hubfed-controller (the
# pull-mode agent runs from the same image with the command hubfed-agent).
#
# The archive is an OCI image layout (tar), tagged ghcr.io/hubfed/hubfed-controller:<version>
# — the default image of charts/hubfed and charts/hubfed-agent. Load it with `docker load -i`
# (Docker 25+), `ctr -n k8s.io images import`, `podman load -i`; push it with `skopeo copy
# oci-archive:<file> docker://…`.
#
# Tool: umoci (Debian package `umoci`): it writes OCI layouts and layers from a plain
# directory, daemonless and unprivileged, which is all this needs (buildah needs container
# storage and a runtime, and cannot run here). Set HUBFED_IMAGE_BINARIES to a directory that
# holds release binaries to skip the cargo build.
set -euo pipefail
cd "$(dirname "$0")/.."

REPOSITORY=ghcr.io/hubfed/hubfed-controller
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
OUT=${1:-target/image/hubfed-controller-$VERSION.oci.tar}
BINARIES=${HUBFED_IMAGE_BINARIES:-target/release}

command -v umoci >/dev/null || {
  echo "umoci is needed (Debian: apt-get install --no-install-recommends umoci)" >&2
  exit 1
}
if [ -z "${HUBFED_IMAGE_BINARIES:-}" ]; then
  step_start=$(date +%s)
  echo "image: cargo build --release (hubfed-controller, hubfed-agent, hubfedctl)" >&2
  cargo build --release --locked -p hubfed-controller -p hubfedctl --bins
  echo "image: binaries built in $(( $(date +%s) - step_start ))s" >&2
fi
for bin in hubfed-controller hubfed-agent hubfedctl; do
  [ -x "$BINARIES/$bin" ] || { echo "$BINARIES/$bin is missing" >&2; exit 1; }
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ROOT=$W/rootfs
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/ssl/certs" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"
install -m 0755 "$BINARIES/hubfed-controller" "$BINARIES/hubfed-agent" "$BINARIES/hubfedctl" \
  "$ROOT/usr/local/bin/"

# The C runtime: each library `ldd` resolves for the binaries, at the same path, and the
# dynamic loader. glibc ≥ 2.34 has DNS resolution in libc itself.
for bin in hubfed-controller hubfed-agent hubfedctl; do
  ldd "$BINARIES/$bin" | awk '/=> \//{print $3} /^[ \t]*\//{print $1}'
done | sort -u | while read -r lib; do
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
done
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
