# Sourced by the hack/build-*.sh scripts that build test infrastructure from a Go module.
#
#   go_module_workdir <what> <module-name> [path to remove on exit]
#
# Checks that go is there (naming <what> in the error), makes a throwaway module
# hubfed.local/<module-name> in a temporary directory, cds into it and removes it (and the
# optional path, e.g. a half-written output directory) when the script exits. GOTOOLCHAIN=local:
# never try to download another Go toolchain.
go_module_workdir() {
  command -v go >/dev/null || { echo "go is needed to build $1 (https://go.dev)" >&2; exit 1; }
  GO_MODULE_WORKDIR=$(mktemp -d)
  GO_MODULE_CLEANUP=${3:-}
  trap 'rm -rf "$GO_MODULE_WORKDIR" ${GO_MODULE_CLEANUP:+"$GO_MODULE_CLEANUP"}' EXIT
  cd "$GO_MODULE_WORKDIR"
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
  go mod init "hubfed.local/$2" >/dev/null 2>&1
}
