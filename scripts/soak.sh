#!/usr/bin/env bash
# The trace-driven soak with the real cluster-autoscaler (tests/soak/README.md): builds what it
# needs, writes one trace, replays it under each policy in turn (a fresh control plane, CA and
# gangscaler per policy) and prints the report table. Not part of CI.
#
# Usage: scripts/soak.sh [--minutes N] [--policy strict|off|both] [--seed S] [--peak-nodes N]
#   --minutes     length of each run (default 30)
#   --policy      admission policy, or both (default both: strict, then off)
#   --seed        trace seed (default 1)
#   --peak-nodes  size the trace so the gangs would hold about this many nodes at once
#                 (default 1000; e.g. 60 for a quick check)
# Results: target/soak-results/<UTC time>-seed<S>/{trace.jsonl,<policy>/,report.md}.
# Cargo and the runs go under `nice -n ${SOAK_NICE:-15}`; set SOAK_NICE=0 on a machine of
# your own. E2E_KEEP_LOGS=1 keeps each run's control-plane logs (their folder is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=30 policy=both seed=1 peak=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --peak-nodes) peak=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$policy" in
  both) policies="strict off" ;;
  strict|off|roundUp) policies=$policy ;;
  *) echo "--policy is strict, off, roundUp or both, not $policy" >&2; exit 2 ;;
esac
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gangscaler/target-soak}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export GOTOOLCHAIN=local
nice_cmd=(nice -n "${SOAK_NICE:-15}")
log() { printf '[soak] %s\n' "$*" >&2; }

log "control plane, kwok and CA (tests/e2e/build.sh; nothing is rebuilt on a warm cache)"
"${nice_cmd[@]}" tests/e2e/build.sh "${E2E_K8S_MINOR:-1.36}" >/dev/null
log "gangscaler (release, as deployed) and the soak test"
"${nice_cmd[@]}" cargo build --release --locked --bin gangscaler
"${nice_cmd[@]}" cargo test --all-features --locked --test soak --no-run
# The runs measure the release binary's CPU and memory, not the test profile's build.
export GANGSCALER_BIN=${GANGSCALER_BIN:-$CARGO_TARGET_DIR/release/gangscaler}

out=target/soak-results/$(date -u +%Y%m%dT%H%M%SZ)-seed$seed
mkdir -p "$out"
log "trace: $(python3 tests/soak/trace.py --seed "$seed" --minutes "$minutes" --peak-nodes "$peak" --out "$out/trace.jsonl")"
failed=0
dirs=()
for p in $policies; do
  log "replaying under $p ($minutes min; log $out/$p.log)"
  start=$(date +%s)
  if SOAK_TRACE=$PWD/$out/trace.jsonl SOAK_POLICY=$p SOAK_RESULTS=$PWD/$out/$p \
    "${nice_cmd[@]}" cargo test --all-features --locked --test soak -- --ignored --nocapture \
    >"$out/$p.log" 2>&1; then
    log "$p done in $(( $(date +%s) - start )) s"
  else
    log "$p FAILED after $(( $(date +%s) - start )) s; see $out/$p.log"
    failed=1
  fi
  dirs+=("$out/$p")
done
python3 tests/soak/report.py "${dirs[@]}" | tee "$out/report.md"
log "results in $out"
exit $failed
