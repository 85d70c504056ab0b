# syntax=docker/dockerfile:1
# The hubfed-controller image (hubfed-controller, the pull-mode agent hubfed-agent, hubfedctl),
# for those who build with Docker or BuildKit:
#
#   docker build -t ghcr.io/hubfed/hubfed-controller:0.1.0 .
#
# `make image` builds the same image without a daemon (hack/build-image.sh): the final stage
# below is what it assembles, from the build machine's own files instead of the distroless
# base. Static binaries (glibc linked in; rustls: no OpenSSL), a base with only CA
# certificates, passwd/group and nsswitch.conf, a non-root user, nothing writable needed (the
# chart mounts the root file system read-only).
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# An explicit --target keeps the static flag off build scripts and proc macros.
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
      --target x86_64-unknown-linux-gnu -p hubfed-controller -p hubfedctl --bins

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/hubfed-controller \
     /src/target/x86_64-unknown-linux-gnu/release/hubfed-agent \
     /src/target/x86_64-unknown-linux-gnu/release/hubfedctl /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hubfed-controller"]
