# syntax=docker/dockerfile:1
# gangscaler image for builders with registry access: a Rust builder stage makes a static
# binary (rustls + ring, no OpenSSL, no libc at run time), the final stage is `scratch` with
# that one file, run as uid/gid 65532 (non-root, no shell, nothing else in the image).
#
#   docker build -t gangscaler:dev .
#   buildah bud -t gangscaler:dev .
#
# Without a registry (this repository's CI), scripts/image.sh builds the same final stage from
# a binary built on the host with docker/Dockerfile.local.

# The toolchain CI tests with (Cargo.toml's rust-version is the oldest that builds).
ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The whole source tree (minus .dockerignore): Cargo.toml names test and bench targets whose
# files must exist. protoc comes from the vendored protoc crate (build.rs).
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    RUSTFLAGS="-C target-feature=+crt-static" \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin gangscaler \
    && install -D -m 0555 target/x86_64-unknown-linux-gnu/release/gangscaler /out/gangscaler

FROM scratch
COPY --from=builder /out/gangscaler /gangscaler
USER 65532:65532
ENTRYPOINT ["/gangscaler"]
CMD ["serve", "--config", "/etc/gangscaler/config"]
