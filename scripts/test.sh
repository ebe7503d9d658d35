#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Needs Rust (cargo, rustfmt, clippy)
# and Go 1.26 with access to the Rust and Go package registries; installs nothing else.
# Build outputs are cached under $HOME/.cache/gangscaler so warm runs are quick.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gangscaler/target}
export CARGO_TERM_COLOR=never
step() { printf '\n==> %s\n' "$*"; }

step "toolchain"
cargo --version
go version

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, -D warnings)"
cargo clippy --all-targets --all-features --locked -- -D warnings

step "cargo test"
cargo test --all-features --locked

step "cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked --quiet

step "validate shipped configs"
cargo run --quiet --locked -- validate provider-configs

step "Go wire-conformance test against the built server"
cargo build --quiet --locked --bin gangscaler
GANGSCALER_BIN="$CARGO_TARGET_DIR/debug/gangscaler" tests/conformance/run.sh

step "e2e: build the control plane from the Go module proxy (cached under \$HOME/.cache/gangscaler/e2e)"
tests/e2e/build.sh

step "e2e: kwok backend against etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok"
cargo test --all-features --locked --test e2e -- --ignored --test-threads=1

step "all test steps passed"
