# kube-proxy-rs image: the release binary on Debian with the tools each dataplane mode runs
# (nft, iptables with both the nft and legacy back ends, ipset, conntrack) and those the
# operations guide has an operator run inside the pod (curl for the debug and health
# endpoints, ipvsadm to read IPVS; tests/image_tools.rs checks the list). It runs as root; the
# DaemonSet grants the capabilities (NET_ADMIN, NET_RAW; privileged only for the init step).
#
#   docker build -t kube-proxy-rs:v0.1.0 .
FROM rust:1.95-bookworm AS build
# build.rs compiles the eBPF mode's programs (bpf/) with clang for the BPF target.
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang llvm libbpf-dev linux-libc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY bpf bpf
COPY src src
COPY benches benches
# The test support is a member of the workspace and a dev-dependency: cargo reads its manifest.
COPY tests/support tests/support
# The commit `--version=raw` and the start-up line report (the context has no .git):
#   docker build --build-arg GIT_COMMIT=$(git rev-parse HEAD) ...
ARG GIT_COMMIT=""
# Debug info stripped from the image's binary; symbols kept, so backtraces still name functions.
RUN CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release --locked --bin kube-proxy-rs

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables iptables ipset conntrack kmod ipvsadm curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kube-proxy-rs /usr/local/bin/kube-proxy-rs
COPY LICENSE /usr/share/doc/kube-proxy-rs/LICENSE
COPY bpf/README.md bpf/LICENSE.BSD-2-Clause bpf/LICENSE.GPL-2.0 /usr/share/doc/kube-proxy-rs/bpf/
USER 0
ENTRYPOINT ["/usr/local/bin/kube-proxy-rs"]
