#!/usr/bin/env bash
# The trace-driven soak with the real cluster-autoscaler (tests/soak/README.md): builds what it
# needs, writes one trace, replays it under each policy in turn (a fresh control plane, CA and
# gangscaler per policy) and prints the report table. Not part of CI.
#
# Usage: scripts/soak.sh [--minutes N] [--policy strict|off|reserve|both|all] [--seed S[,S...]]
#                       [--peak-nodes N] [--capacity-ratio R[,R...]] [--provision-seconds S|LO-HI]
#                       [--stockout P]
#   --minutes            length of each run (default 30)
#   --policy             one arm, both (strict, then off) or all (off, strict, then reserve:
#                        strict with node reservation on); default both
#   --seed               trace seed, or a list: one trace and one run per arm for each (default 1)
#   --peak-nodes         size the trace so the gangs would hold about this many nodes at once
#                        (default 1000; e.g. 60 for a quick check)
#   --capacity-ratio     the fleet's total maxSize over that peak, or a list (default 1.2; 0.6 is
#                        a fleet short of GPUs)
#   --provision-seconds  a node's provisioning time, or a range drawn per node (default 15)
#   --stockout           share of instances that fail with a stock-out (default 0)
# Results: target/soak-results/<UTC time>/ratio<R>-seed<S>/{trace.jsonl,<arm>/,report.md} per
# cell, in ratio-then-seed order, and matrix.md (median, min and max over seeds per ratio and
# arm) when there is more than one seed.
# Cargo and the runs go under `nice -n ${SOAK_NICE:-15}`; set SOAK_NICE=0 on a machine of
# your own. E2E_KEEP_LOGS=1 keeps each run's control-plane logs (their folder is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=30 policy=both seed=1 peak=1000 ratio=1.2 provision=15 stockout=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --peak-nodes) peak=$2; shift 2 ;;
    --capacity-ratio) ratio=$2; shift 2 ;;
    --provision-seconds) provision=$2; shift 2 ;;
    --stockout) stockout=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$policy" in
  both) policies="strict off" ;;
  all) policies="off strict reserve" ;;
  strict|off|roundUp|reserve) policies=$policy ;;
  *) echo "--policy is strict, off, roundUp, reserve, both or all, not $policy" >&2; exit 2 ;;
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

root=target/soak-results/$(date -u +%Y%m%dT%H%M%SZ)
failed=0
for r in ${ratio//,/ }; do
  for sd in ${seed//,/ }; do
    out=$root/ratio$r-seed$sd
    mkdir -p "$out"
    log "trace: $(python3 tests/soak/trace.py --seed "$sd" --minutes "$minutes" --peak-nodes "$peak" \
      --capacity-ratio "$r" --provision-seconds "$provision" --stockout "$stockout" \
      --out "$out/trace.jsonl")"
    dirs=()
    for p in $policies; do
      log "ratio $r, seed $sd: replaying under $p ($minutes min; log $out/$p.log)"
      start=$(date +%s)
      # The reserve arm is strict with node reservation on in every group.
      reserve=0 arm_policy=$p
      if [ "$p" = reserve ]; then reserve=1 arm_policy=strict; fi
      if SOAK_TRACE=$PWD/$out/trace.jsonl SOAK_POLICY=$arm_policy SOAK_RESERVE=$reserve \
        SOAK_RESULTS=$PWD/$out/$p \
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
  done
done
if [ "${seed//,/ }" != "$seed" ]; then
  python3 tests/soak/report.py --matrix "$root" | tee "$root/matrix.md"
fi
log "results in $root"
exit $failed
