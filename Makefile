# hubfed — build, test, demo, bench, generate.
# `make test` is what CI runs (.ci/run installs the tools first).

SHELL := /bin/bash
CARGO ?= cargo
# Where `make clusters-up` keeps a person's local clusters.
CLUSTERS_DIR ?= $(HOME)/.cache/hubfed/clusters
MEMBERS ?= 2

.PHONY: all build tools fmt-check lint clippy-driver unit monitoring image image-check e2e test generate clusters-up clusters-down demo bench bench-kubefed clean

all: build

build:
	$(CARGO) build --workspace --all-targets

## tools: build/cache kube-apiserver, kube-controller-manager, kube-scheduler, kubelet (pinned in hack/KUBE_VERSION), etcd, helm, KubeFed v0.10.0's controller-manager and kubefedctl (the takeover tests), and external-dns v0.23.0 and CoreDNS v1.15.0 (a real DNS answer, e2e/tests/dns_publish.rs)
tools:
	@echo "==> test tools: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, etcd, helm, KubeFed, external-dns, CoreDNS (built once and cached)"
	@hack/build-kube.sh >/dev/null
	@hack/build-kube.sh kubelet >/dev/null
	@hack/install-etcd.sh >/dev/null
	@hack/build-helm.sh >/dev/null
	@hack/build-kubefed.sh >/dev/null
	@[ -n "$(SKIP_DNS_TOOLS)" ] || hack/build-external-dns.sh >/dev/null
	@[ -n "$(SKIP_DNS_TOOLS)" ] || hack/build-coredns.sh >/dev/null
	@echo "kube binaries: $$(hack/build-kube.sh)"
	@echo "kubelet:       $$(hack/build-kube.sh kubelet)/kubelet"
	@echo "etcd:          $$(hack/install-etcd.sh)"
	@echo "helm:          $$(hack/build-helm.sh)"
	@echo "KubeFed:       $$(hack/build-kubefed.sh)"
	@[ -n "$(SKIP_DNS_TOOLS)" ] || echo "external-dns:  $$(hack/build-external-dns.sh)"
	@[ -n "$(SKIP_DNS_TOOLS)" ] || echo "CoreDNS:       $$(hack/build-coredns.sh)"

fmt-check:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## unit: tests that need no cluster
unit:
	$(CARGO) test --workspace --exclude hubfed-e2e

## e2e: tests against real hub + member kube-apiservers. The test binaries mostly wait (one
## alone keeps the 2 cores 20-47 % busy), so they run in three lanes side by side
## (hack/e2e-lanes.sh): E2E_BESIDE (grace periods, soaks, outages), E2E_SECOND (staged rollouts,
## pods, pull mode, shutdown, large objects) and the rest; the two lanes' output follows the rest's.
## E2E_BESIDE= E2E_SECOND= runs everything in one sequence.
E2E_BESIDE ?= placement_policy hub_identity faults backoff partition health_flap list_slots missing_crds mcs mcs_pull \
	dns_records cluster_topology
E2E_SECOND ?= rollout_state rollout scheduling pull pull_agent rollout_restart shutdown hub_member \
	large_object_room takeover status_hold list_turn
e2e: tools image
	$(CARGO) build -p hubfed-controller -p hubfedctl --bins
	$(CARGO) test -p hubfed-e2e --no-run
	CARGO="$(CARGO)" hack/e2e-lanes.sh "$(E2E_BESIDE)" "$(E2E_SECOND)"

## monitoring: promtool checks of the alert rules and their unit tests, dashboard queries
monitoring:
	hack/check-monitoring.sh

## image: the container image as an OCI archive, target/image/hubfed-controller-<version>.oci.tar (no Docker needed)
image:
	hack/build-image.sh

## image-check: build the image and check it (non-root, entrypoint runs, nothing extra)
image-check: image
	hack/test-image.sh

## test: what CI runs. It lints while it builds: the workspace's own crates are compiled by
## clippy-driver — what `cargo clippy -- -D warnings` runs, here with code generation — so the
## lints of `make lint` hold for every target the tests build (lib, bins, tests; the same set
## as --all-targets here) without `make lint`'s separate check build of every crate (2.3 min
## less CI on 2 cores, docs/development.md). The dependencies are compiled by rustc as always;
## the release image is built without it (hack/build-image.sh).
CLIPPY_DRIVER ?= $(shell command -v clippy-driver)
test: export RUSTC_WORKSPACE_WRAPPER = $(CLIPPY_DRIVER)
test: export CLIPPY_ARGS = -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
test: fmt-check clippy-driver unit monitoring image-check e2e

clippy-driver:
	@[ -n "$(CLIPPY_DRIVER)" ] || { echo "clippy-driver is missing (rustup component add clippy)" >&2; exit 1; }

## generate: regenerate the CRDs in crds/ from the Rust types, the chart's copies, and the
## override golden file (KubeFed's own override code run by hack/overrides-golden; needs Go)
OVERRIDES_TESTDATA := crates/hubfed-core/testdata/overrides
generate:
	$(CARGO) run -q -p hubfed-api --bin crdgen -- crds
	cp crds/core.yaml crds/federated-types.yaml crds/multiclusterdns.yaml charts/hubfed/crds/
	cp crds/default-ftcs.yaml charts/hubfed/files/
	cd hack/overrides-golden && GOTOOLCHAIN=local GOFLAGS=-mod=mod go run . ../../$(OVERRIDES_TESTDATA)/cases.json > ../../$(OVERRIDES_TESTDATA)/golden.json.new
	mv $(OVERRIDES_TESTDATA)/golden.json.new $(OVERRIDES_TESTDATA)/golden.json
	cd hack/dns-golden && GOTOOLCHAIN=local GOFLAGS=-mod=mod go run . ../../crates/hubfed-core/testdata/dns/cases.json > ../../crates/hubfed-core/testdata/dns/golden.json.new
	mv crates/hubfed-core/testdata/dns/golden.json.new crates/hubfed-core/testdata/dns/golden.json

## clusters-up: a hub and $(MEMBERS) members on loopback, in the background
clusters-up: tools
	@$(CARGO) build -q -p hubfed-testenv --bin hubfed-testenv
	@hack/clusters.sh up "$(CLUSTERS_DIR)" "$(MEMBERS)"

clusters-down:
	@hack/clusters.sh down "$(CLUSTERS_DIR)"

## demo: a local federation (hub + 2 members, hubfed-controller, members joined, examples); Ctrl-C stops it
demo: tools
	@echo "==> building hubfed-testenv, hubfed-controller, hubfedctl (the first build takes a few minutes)"
	@start=$$(date +%s); \
	$(CARGO) build -p hubfed-testenv -p hubfed-controller -p hubfedctl --bins && \
	echo "==> built in $$(( $$(date +%s) - start ))s"
	@hack/demo.sh

## bench: a hub + 10 members; raw apply limit, cold start, propagation latency, memory,
## writes at rest. Results in target/bench/ (result.json, result.md). Parameters go in
## BENCH_ARGS, e.g. make bench BENCH_ARGS="--members 20 --objects 1000"; pull mode (one
## hubfed-agent per member): make bench BENCH_ARGS="--pull --output-dir target/bench/pull".
## Variants (docs/benchmarks.md, "Variants"): --slow-member-ms 500 (one member answers late),
## --unmanaged 100000 (unmanaged objects in a member), --object-bytes 900000 (large objects;
## at full size with --light-members --env-dir DIR --warm-restart false and the etcd and memory
## settings docs/benchmarks.md gives), --light-members (many members); multi-cluster services:
## make bench BENCH_ARGS="--mcs --output-dir target/bench/mcs" (--services 500, --exporters 2)
BENCH_ARGS ?=
bench: tools
	$(CARGO) build --release -p hubfed-controller -p hubfed-e2e --bin hubfed-controller --bin hubfed-agent --bin hubfed-bench
	$(CARGO) run --release -q -p hubfed-e2e --bin hubfed-bench -- $(BENCH_ARGS)

## bench-kubefed: make bench's scenario twice, each on fresh clusters: hubfed, then KubeFed
## v0.10.0's controller-manager (built and cached outside the repo by hack/build-kubefed.sh on
## first use). Results in target/bench/hubfed/, target/bench/kubefed/ and
## target/bench/side-by-side.md (+ .json). BENCH_ARGS go to both runs.
bench-kubefed: tools
	hack/build-kubefed.sh >/dev/null
	$(CARGO) build --release -p hubfed-controller -p hubfed-e2e --bin hubfed-controller --bin hubfed-agent --bin hubfed-bench
	-$(CARGO) run --release -q -p hubfed-e2e --bin hubfed-bench -- --controller hubfed --output-dir target/bench/hubfed $(BENCH_ARGS)
	-$(CARGO) run --release -q -p hubfed-e2e --bin hubfed-bench -- --controller kubefed --output-dir target/bench/kubefed $(BENCH_ARGS)
	$(CARGO) run --release -q -p hubfed-e2e --bin hubfed-bench -- compare target/bench/hubfed/result.json target/bench/kubefed/result.json --output target/bench/side-by-side

clean:
	$(CARGO) clean
