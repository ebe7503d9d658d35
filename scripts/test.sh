#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this). Needs Rust (cargo, rustfmt, clippy)
# and Go 1.26 with access to the Rust and Go package registries, the cluster-autoscaler
# sources in ../shared/cluster-autoscaler (see tests/e2e/build.sh), and buildah for the image
# (scripts/install-deps.sh, which .ci/run calls first); installs nothing else.
# Build outputs are cached under $HOME/.cache/gangscaler so warm runs are quick.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gangscaler/target}
# No incremental state: it only helps edit-compile loops and grows the cache by gigabytes.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
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

step "commit subjects at most 72 characters (since the rule)"
scripts/commit-subjects.sh

step "docs: docs/modules.md is what scripts/modules-doc.py writes from src/"
python3 scripts/modules-doc.py --check

step "soak: the accounting of orphan idle and assembly wait (tests/soak/test_accounting.py)"
python3 -m unittest discover -s tests/soak -p 'test_*.py'

step "docs: docs/soak.md's tables are tests/soak/report.py --table tests/soak/runs (the kept run summaries)"
python3 tests/soak/report.py --check docs/soak.md tests/soak/runs

step "validate shipped configs"
cargo run --quiet --locked -- validate --config provider-configs

step "Go wire-conformance test against the built server"
cargo build --quiet --locked --bin gangscaler
GANGSCALER_BIN="$CARGO_TARGET_DIR/debug/gangscaler" tests/conformance/run.sh

step "image: static binary, FROM scratch image (buildah, no registry), validate and serve inside it as uid 65532"
static_bin=$(scripts/image.sh | tail -n 1)

step "e2e: the cluster-autoscaler sources fallback (a fetched tag is checked against its pinned commit)"
tests/e2e/ca-sources-test.sh

step "e2e: build the control plane and the Cluster API core manager (Go module proxy) and cluster-autoscaler 1.36.1 + 1.34.5 (../shared sources), cached under \$HOME/.cache/gangscaler/e2e"
tests/e2e/build.sh --legacy-ca

step "helm lint and helm template: charts/gangscaler with default values and with the HA + cert-manager value set"
# shellcheck source=../tests/e2e/versions.env
. tests/e2e/versions.env
helm="${GANGSCALER_CACHE:-$HOME/.cache/gangscaler}/e2e/helm-$HELM_VERSION/helm"
for values in "" charts/gangscaler/ci/ha-cert-manager-values.yaml; do
  args=()
  [ -n "$values" ] && args=(--values "$values")
  "$helm" lint --strict charts/gangscaler "${args[@]}"
  "$helm" template gangscaler charts/gangscaler --namespace kube-system "${args[@]}" >/dev/null
done

step "e2e: the real cluster-autoscaler drives gangscaler (the static image binary, kwok backend, the chart's ServiceAccount) on etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok"
results="$CARGO_TARGET_DIR/e2e-results/$(date -u +%Y%m%dT%H%M%S)-${E2E_K8S_MINOR:-1.36}.jsonl"
GANGSCALER_BIN="$static_bin" E2E_RESULTS="$results" cargo test --all-features --locked --test e2e -- --ignored --test-threads=1
if command -v python3 >/dev/null; then
  step "e2e results of this run (the table docs/e2e-results.md is written from)"
  scripts/e2e-results.py --command "scripts/test.sh" "$results"
fi

step "all test steps passed"
