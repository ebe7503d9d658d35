#!/usr/bin/env bash
# The trace-driven soak with the real cluster-autoscaler (tests/soak/README.md): builds what it
# needs, writes one trace, replays it under each arm in turn (a fresh control plane, CA and
# gangscaler per run) and prints the report table. Not part of CI.
#
# Usage: scripts/soak.sh --matrix --campaign NAME [--cells CELL,...] [--replace]
#        scripts/soak.sh [--policy strict|off|reserve|defer|fewest|both|all] [--seed S[,S...]]
#                        [--capacity-ratio R[,R...]] [trace options]
#   --matrix             the scarcity soak of docs/soak.md: runs each cell RATIO:SEED:ARM[#N]
#                        (N: a repeat, for the noise) whose summary is not yet committed under
#                        tests/soak/runs/NAME/, and writes it there (default cells: seeds 1
#                        and 2 at ratio 0.6 and seed 1 at 1.2, arms off, strict, defer, reserve, and
#                        0.6:1:off#2). Needs a clean work tree: the summary names the commit.
#   --replace            with --matrix: re-measure the cells named even when their summary is
#                        kept (the new summary replaces it; git keeps the old one)
#   --policy             one arm, both (strict, then off) or all (off, strict, then reserve:
#                        strict with node reservation on); defer is strict with
#                        admission.deferral on (docs/deferral.md); fewest is strict with
#                        admission.order fewestMissing; default all
#   --seed               trace seed, or a list: one trace and one run per arm for each (default 1)
#   --capacity-ratio     the fleet's total maxSize over the trace's peak, or a list (default 0.6)
#   trace options        passed to tests/soak/trace.py (its defaults are the scarcity soak's):
#                        --minutes, --warmup-minutes, --drain-minutes, --peak-nodes,
#                        --run-minutes, --give-up-minutes, --provision-seconds, --stockout
# Results: target/soak-results/<UTC time>/ratio<R>-seed<S>/{trace.jsonl,<arm>/,report.md} per
# cell; with --matrix also the summaries. Cargo and the runs go under
# `nice -n ${SOAK_NICE:-15}`; set SOAK_NICE=0 on a machine of your own. E2E_KEEP_LOGS=1 keeps
# each run's control-plane logs (their folder is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
policy=all seed=1 ratio=0.6 matrix=0 campaign="" cells="" replace=0
targs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --matrix) matrix=1; shift ;;
    --campaign) campaign=$2; shift 2 ;;
    --cells) cells=$2; shift 2 ;;
    --replace) replace=1; shift ;;
    --policy) policy=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --capacity-ratio) ratio=$2; shift 2 ;;
    --minutes|--warmup-minutes|--drain-minutes|--peak-nodes|--run-minutes|--give-up-minutes|\
    --provision-seconds|--stockout) targs+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
arms_of() {
  case "$1" in
    both) echo "strict off" ;;
    all) echo "off strict reserve" ;;
    strict|off|roundUp|reserve|defer|fewest) echo "$1" ;;
    *) echo "--policy is strict, off, roundUp, reserve, defer, fewest, both or all, not $1" >&2; exit 2 ;;
  esac
}
# The runs: one "RATIO:SEED:ARM:REPEAT" per line, cells of one trace together.
if [ "$matrix" = 1 ]; then
  [ -n "$campaign" ] || { echo "--matrix needs --campaign NAME (e.g. baseline)" >&2; exit 2; }
  case "$campaign" in *[!A-Za-z0-9._-]*) echo "--campaign is letters, digits, . _ -, not $campaign" >&2; exit 2 ;; esac
  [ ${#targs[@]} -eq 0 ] || { echo "--matrix runs the trace's defaults; drop ${targs[*]}" >&2; exit 2; }
  if ! git diff --quiet HEAD --; then
    echo "--matrix needs a clean work tree (its summaries name the commit); commit or stash first" >&2
    exit 2
  fi
  cells=${cells:-0.6:1:off,0.6:1:strict,0.6:1:defer,0.6:1:reserve,0.6:1:off#2,0.6:2:off,0.6:2:strict,0.6:2:defer,0.6:2:reserve,1.2:1:off,1.2:1:strict,1.2:1:defer,1.2:1:reserve}
  runs=$(for c in ${cells//,/ }; do
    IFS=: read -r r sd a <<<"$c"
    rep=1; case "$a" in *'#'*) rep=${a#*#}; a=${a%%#*} ;; esac
    [ -n "$r" ] && [ -n "$sd" ] && [ -n "$a" ] || { echo "a cell is RATIO:SEED:ARM[#N], not $c" >&2; exit 2; }
    arms_of "$a" >/dev/null
    echo "$r:$sd:$a:$rep"
  done)
else
  runs=$(for r in ${ratio//,/ }; do for sd in ${seed//,/ }; do
    for a in $(arms_of "$policy"); do echo "$r:$sd:$a:1"; done; done; done)
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/gangscaler/target-soak}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export GOTOOLCHAIN=local
nice_cmd=(nice -n "${SOAK_NICE:-15}")
log() { printf '[soak] %s\n' "$*" >&2; }
commit=$(git rev-parse HEAD)

log "control plane, kwok and CA (tests/e2e/build.sh; nothing is rebuilt on a warm cache)"
"${nice_cmd[@]}" tests/e2e/build.sh "${E2E_K8S_MINOR:-1.36}" >/dev/null
log "gangscaler (release, as deployed) and the soak test"
"${nice_cmd[@]}" cargo build --release --locked --bin gangscaler
"${nice_cmd[@]}" cargo test --all-features --locked --test soak --no-run
# The runs measure the release binary's CPU and memory, not the test profile's build.
export GANGSCALER_BIN=${GANGSCALER_BIN:-$CARGO_TARGET_DIR/release/gangscaler}

root=target/soak-results/$(date -u +%Y%m%dT%H%M%SZ)
failed=0
declare -A cell_dirs=()
for run in $runs; do
  IFS=: read -r r sd p rep <<<"$run"
  name=ratio$r-seed$sd-$p$([ "$rep" = 1 ] || echo "-$rep")
  kept=tests/soak/runs/$campaign/$name.json
  if [ "$matrix" = 1 ] && [ "$replace" = 0 ] && [ -e "$kept" ]; then
    log "$name: $kept is kept already; skipped"
    continue
  fi
  out=$root/ratio$r-seed$sd
  if [ ! -e "$out/trace.jsonl" ]; then
    mkdir -p "$out"
    log "trace: $(python3 tests/soak/trace.py --seed "$sd" --capacity-ratio "$r" "${targs[@]}" \
      --out "$out/trace.jsonl")"
  fi
  arm_dir=$out/$p$([ "$rep" = 1 ] || echo "-$rep")
  log "$name: replaying (log $arm_dir.log)"
  start=$(date +%s)
  # The reserve arm is strict with node reservation on in every group; defer is strict with
  # admission.deferral on; fewest is strict with admission.order fewestMissing.
  reserve=0 defer=0 order=age arm_policy=$p
  case "$p" in
    reserve) reserve=1 arm_policy=strict ;;
    defer) defer=1 arm_policy=strict ;;
    fewest) order=fewestMissing arm_policy=strict ;;
  esac
  if SOAK_TRACE=$PWD/$out/trace.jsonl SOAK_POLICY=$arm_policy SOAK_RESERVE=$reserve \
    SOAK_DEFER=$defer SOAK_ORDER=$order \
    SOAK_RESULTS=$PWD/$arm_dir \
    "${nice_cmd[@]}" cargo test --all-features --locked --test soak -- --ignored --nocapture \
    >"$arm_dir.log" 2>&1; then
    log "$name done in $(( $(date +%s) - start )) s"
    if [ "$matrix" = 1 ]; then
      mkdir -p "$(dirname "$kept")"
      python3 tests/soak/report.py --summary "$arm_dir" --campaign "$campaign" --commit "$commit" \
        --repeat "$rep" >"$kept.tmp" && mv "$kept.tmp" "$kept"
      log "$name: summary in $kept"
    fi
  else
    log "$name FAILED after $(( $(date +%s) - start )) s; see $arm_dir.log"
    failed=1
  fi
  cell_dirs[$out]="${cell_dirs[$out]:-} $arm_dir"
done
for out in "${!cell_dirs[@]}"; do
  # shellcheck disable=SC2086 # the arm folders of one cell, space-separated
  python3 tests/soak/report.py ${cell_dirs[$out]} | tee "$out/report.md"
done
if [ "$matrix" = 1 ]; then
  python3 tests/soak/report.py --table tests/soak/runs
fi
log "results in $root"
exit $failed
