#!/usr/bin/env bash
# Provides an etcd binary for the test clusters and prints its path.
#
# Preferred: Debian trixie's etcd-server 3.5.x (>= 3.5.13 enables watch progress, consistent
# lists from the watch cache and streaming lists), unpacked into a cache directory without
# touching the system's apt configuration. Fallback: the system's own etcd-server package.
# HUBFED_ETCD points at an existing etcd binary instead.
set -euo pipefail

if [ -n "${HUBFED_ETCD:-}" ]; then
  [ -x "$HUBFED_ETCD" ] || { echo "HUBFED_ETCD=$HUBFED_ETCD is not executable" >&2; exit 1; }
  echo "$HUBFED_ETCD"; exit 0
fi

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/hubfed/etcd
BIN=$CACHE/root/usr/bin/etcd
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

try_trixie() {
  local mirror state
  mirror=$(grep -rhoE 'https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | head -1 | tr -d ' ')
  mirror=${mirror:-$(grep -rhE '^URIs:.*/debian/?$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')}
  [ -n "$mirror" ] || return 1
  state=$(mktemp -d)
  mkdir -p "$state/lists/partial" "$state/archives/partial"
  echo "deb [trusted=yes] $mirror trixie main" > "$state/sources.list"
  local opts=(-o Dir::Etc::sourcelist="$state/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$state/lists" -o Dir::Cache::Archives="$state/archives" \
    -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >&2 || { rm -rf "$state"; return 1; }
  (cd "$state" && apt-get "${opts[@]}" download -qq etcd-server >&2) || { rm -rf "$state"; return 1; }
  mkdir -p "$CACHE/root"
  dpkg-deb -x "$state"/etcd-server_*.deb "$CACHE/root"
  rm -rf "$state"
  [ -x "$BIN" ]
}

if try_trixie; then
  echo "$BIN"; exit 0
fi
echo "trixie's etcd-server was not available; using the system package" >&2
if ! command -v etcd >/dev/null && [ ! -x /usr/bin/etcd ]; then
  $SUDO apt-get update -qq >&2
  # The package's service is not wanted: the tests start etcd themselves.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >&2
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
command -v etcd || echo /usr/bin/etcd
