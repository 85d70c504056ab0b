#!/usr/bin/env bash
# Checks the image archive `make image` writes (run by `make test`):
#   - it is an OCI image layout tagged ghcr.io/hubfed/hubfed-controller:<version>, the
#     default image of both charts (charts/hubfed, charts/hubfed-agent);
#   - its config runs as a non-root user, with hubfed-controller as entrypoint;
#   - unpacked, the entrypoint runs (`--version` prints the version) inside the image's own
#     root file system, with nothing from the machine, and so do hubfedctl (`--version`) and
#     the pull-mode agent hubfed-agent (`--help`; charts/hubfed-agent's command);
#   - it holds nothing but the (static) binaries, the CA bundle, passwd/group/nsswitch.conf
#     and /tmp — no C runtime, no shell;
#   - a name resolves in it (the static glibc's built-in `files` source, with the /etc/hosts
#     a container runtime adds): the controller can reach an API server by host name.
#
#   hack/test-image.sh [ARCHIVE]
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCHIVE=${1:-target/image/hubfed-controller-$VERSION.oci.tar}
NAME=ghcr.io/hubfed/hubfed-controller:$VERSION
fail() { echo "image test: $*" >&2; exit 1; }

[ -f "$ARCHIVE" ] || fail "$ARCHIVE is missing (make image)"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir "$W/layout"
tar -C "$W/layout" -xf "$ARCHIVE"
[ -f "$W/layout/oci-layout" ] || fail "not an OCI image layout"
index_name=$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$W/layout/index.json")
[ "$index_name" = "$NAME" ] || fail "tagged $index_name, not $NAME"
for chart in charts/hubfed charts/hubfed-agent; do
  chart_repo=$(sed -n 's/^  repository: //p' "$chart/values.yaml" | head -1)
  chart_tag=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$chart/Chart.yaml")
  [ "$chart_repo:$chart_tag" = "$NAME" ] || fail "$chart's default image is $chart_repo:$chart_tag, not $NAME"
done

# The config: non-root, the controller as entrypoint.
blob() { echo "$W/layout/blobs/${1/://}"; }
manifest=$(blob "$(jq -r '.manifests[0].digest' "$W/layout/index.json")")
config=$(blob "$(jq -r '.config.digest' "$manifest")")
user=$(jq -r '.config.User' "$config")
case "$user" in
  "" | 0 | 0:* | root | root:*) fail "the image runs as root (User=$user)" ;;
esac
entrypoint=$(jq -r '.config.Entrypoint | join(" ")' "$config")
[ "$entrypoint" = /usr/local/bin/hubfed-controller ] || fail "entrypoint is $entrypoint"

# The file system, layer by layer (gzip tars, applied in order; this image has no whiteouts).
mkdir "$W/rootfs"
for layer in $(jq -r '.layers[].digest' "$manifest"); do
  tar -C "$W/rootfs" -xzf "$(blob "$layer")"
done
unexpected=$(cd "$W/rootfs" && find . -mindepth 1 \( -type f -o -type l \) | sed 's|^\./||' |
  grep -Ev '^(usr/local/bin/(hubfed-controller|hubfed-agent|hubfedctl)|etc/(passwd|group|nsswitch\.conf|ssl/certs/ca-certificates\.crt))$' || true)
[ -z "$unexpected" ] || fail "unexpected files in the image: $unexpected"
size=$(du -sm "$W/rootfs" | cut -f1)

# The entrypoint runs inside the image's root file system alone.
run_in_image() {
  if [ "$(id -u)" = 0 ]; then
    chroot "$W/rootfs" "$@"
  else
    unshare --user --map-root-user chroot "$W/rootfs" "$@"
  fi
}
printed=$(run_in_image /usr/local/bin/hubfed-controller --version) || fail "hubfed-controller --version failed in the image"
case "$printed" in
  *"$VERSION"*) ;;
  *) fail "hubfed-controller --version printed: $printed" ;;
esac
run_in_image /usr/local/bin/hubfedctl --version >/dev/null || fail "hubfedctl --version failed in the image"
# The agent (charts/hubfed-agent runs the image with this command): present, and it runs.
[ -x "$W/rootfs/usr/local/bin/hubfed-agent" ] || fail "hubfed-agent is missing from the image"
run_in_image /usr/local/bin/hubfed-agent --help >/dev/null || fail "hubfed-agent --help failed in the image"
# Name resolution: with the /etc/hosts a runtime provides, `localhost` resolves and the
# connection is refused (a binary that needed NSS modules it cannot load would fail to look
# the name up instead).
printf '127.0.0.1 localhost\n' >"$W/rootfs/etc/hosts"
cat >"$W/rootfs/tmp/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://localhost:1"}}]
users: [{name: hub, user: {token: unused}}]
contexts: [{name: hub, context: {cluster: hub, user: hub}}]
current-context: hub
EOF
resolved=$(run_in_image /usr/local/bin/hubfedctl --kubeconfig /tmp/kubeconfig get clusters 2>&1 || true)
case "$resolved" in
  *"Connection refused"*) ;;
  *) fail "localhost did not resolve in the image: $resolved" ;;
esac
echo "image test: $NAME ok: user $user, entrypoint $entrypoint, ${size} MiB unpacked, '$printed'"
