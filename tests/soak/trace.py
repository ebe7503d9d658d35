#!/usr/bin/env python3
"""Writes the soak trace: gang arrivals, deterministic from a seed, as JSON Lines.

Line 1 is a header (the node groups the run configures, the trace's parameters and its
expected size); every other line is one gang, in arrival order. Every arm of a soak replays
the same file. Python standard library only.

    tests/soak/trace.py --seed 1 --capacity-ratio 0.6 --out scarce.jsonl   # the scarcity soak
    tests/soak/trace.py --seed 1 --minutes 30 --peak-nodes 1000 --warmup-minutes 0 \
        --drain-minutes 4.5 --run-minutes 6-24 --give-up-minutes 10 \
        --provision-seconds 15 --stockout 0 --out big.jsonl

The run has three phases. **Warm-up** (`--warmup-minutes`): a burst of gangs at the start,
sized so that about 70 % of the fleet (the smaller of the peak and the capacity) runs them, and
the steady arrivals; the figures leave it out. **Measured**: steady Poisson arrivals. **Drain**
(`--drain-minutes`): no arrivals, the figures still counted, so nodes left idle by the last
gangs are seen to go.

The fleet's size is a fraction of the demand: `--capacity-ratio` is the main pool's total
`maxSize` over the trace's expected peak (1.2 by default: room to spare). Below 1 the fleet is
short of GPUs, and a gang that needs more nodes than one group's `maxSize` cannot fit at all.
`--provision-seconds` is a node's provisioning time (one value, or a range drawn from per
node), `--stockout` the share of instances that fail with an out-of-capacity error.
"""

import argparse
import json
import math
import random
import sys

GPUS_PER_NODE = 8
# Attachable volumes per node (the CSI attach limit of every group's template and nodes).
CSI_LIMIT = 4
# The small pool: gangs that pick it with a nodeSelector and more members than this cannot fit.
SMALL_POOL_MAX = 16
# The mean demand over the measured minutes, as a share of --peak-nodes (the peak is above it).
LEVEL_SHARE = 0.8
# Share of the fleet the warm-up burst fills.
WARM_SHARE = 0.7
# CA's --max-node-provision-time in the soak is 5 minutes; a trace keeps every node below it.
MAX_PROVISION_S = 240
# Assumed time from arrival to running when sizing the trace (nodes take 15 s to come up,
# CA scans every 2 s; the real figure is measured, not assumed).
STARTUP_S = 60
# The default capacity ratio: the main pool's total maxSize over the expected peak.
DEFAULT_RATIO = 1.2
# Bounds, whatever the parameters.
MAX_GANGS = 5000
MAX_PODS = 60000

# (low, high) member counts and their weights: mostly small gangs, a tail up to 64.
MEMBER_BUCKETS = [((2, 3), 30), ((4, 7), 28), ((8, 15), 22), ((16, 31), 13), ((32, 64), 7)]
GPU_CHOICES = [(1, 10), (2, 15), (4, 25), (8, 50)]


def weighted(rng, pairs):
    total = sum(w for _, w in pairs)
    x = rng.random() * total
    for value, w in pairs:
        x -= w
        if x < 0:
            return value
    return pairs[-1][0]


def nodes_needed(members, gpus, volumes):
    """Nodes a gang occupies when its members are packed as tightly as GPUs and volumes allow."""
    per_node = GPUS_PER_NODE // gpus
    if volumes:
        per_node = min(per_node, CSI_LIMIT // volumes)
    return math.ceil(members / per_node)


def draw_gang(rng, run_s, give_up_s):
    """One gang's shape and times (arrival set later), from the seeded stream: it runs for a
    time drawn from `run_s` (low, high) seconds and is given up `give_up_s` after arriving."""
    lo, hi = weighted(rng, MEMBER_BUCKETS)
    gang = {
        "members": rng.randint(lo, hi),
        "gpus": weighted(rng, GPU_CHOICES),
        "volumes": 0,
        # Members select the nodes of this pool (label gangscaler.io/pool).
        "pool": "main",
        "fits": True,
        "why": None,
        # Runs this long once every member runs; then its pods are deleted.
        "runS": round(rng.uniform(*run_s), 1),
        # Deleted this long after its creation if it has not started by then.
        "giveUpS": round(give_up_s, 1),
    }
    kind = rng.random()
    if kind < 0.15:
        gang["volumes"] = rng.randint(1, 3)
        gang["gpus"] = rng.choice([1, 2, 4])
    elif kind < 0.20:
        gang["pool"] = "small"
        gang["gpus"] = GPUS_PER_NODE
        gang["members"] = rng.randint(2, SMALL_POOL_MAX // 2)
    elif kind < 0.25:
        gang["pool"] = "small"
        gang["gpus"] = GPUS_PER_NODE
        gang["members"] = rng.randint(SMALL_POOL_MAX + 1, 64)
        gang["fits"] = False
        gang["why"] = f"needs {gang['members']} nodes of pool small (maxSize {SMALL_POOL_MAX})"
    elif kind < 0.30:
        gang["gpus"] = 2 * GPUS_PER_NODE
        gang["members"] = rng.randint(2, 8)
        gang["fits"] = False
        gang["why"] = f"{gang['gpus']} GPUs per member, nodes have {GPUS_PER_NODE}"
    gang["nodes"] = nodes_needed(gang["members"], min(gang["gpus"], GPUS_PER_NODE), gang["volumes"])
    return gang


def expected_peak(gangs):
    """Peak over time of the nodes the fittable gangs would hold, each from arrival +
    STARTUP_S for its run time."""
    edges = []
    for g in gangs:
        if g["fits"]:
            start = g["atS"] + STARTUP_S
            edges.append((start, g["nodes"]))
            edges.append((start + g["runS"], -g["nodes"]))
    peak = level = 0
    for _, d in sorted(edges):
        level += d
        peak = max(peak, level)
    return peak


def mean_level(gangs, lo_s, hi_s):
    """Mean over [lo_s, hi_s] of the nodes the fittable gangs would hold (as in
    `expected_peak`)."""
    total = 0.0
    for g in gangs:
        if g["fits"]:
            start = g["atS"] + STARTUP_S
            end = start + g["runS"]
            total += g["nodes"] * max(0.0, min(end, hi_s) - max(start, lo_s))
    return total / (hi_s - lo_s)


def build(seed, peak_nodes, measured, run_s, give_up_s, warm_nodes, fits):
    """The trace's gangs: a burst at the start whose fittable gangs hold about `warm_nodes`
    nodes, then Poisson arrivals until the end of the `measured` (start, end) seconds, at the
    rate that makes the fittable gangs hold `LEVEL_SHARE` of `peak_nodes` on average over
    them. `fits(gang)` marks a gang that no group can host."""
    window_s = measured[1]
    rng = random.Random(seed)
    shapes, gaps = [], []
    for _ in range(MAX_GANGS):
        g = draw_gang(rng, run_s, give_up_s)
        fits(g)
        shapes.append(g)
        gaps.append(rng.expovariate(1.0))
    # The burst: the first fittable shapes of the main pool that fit in what is left of it.
    burst, held, rest = [], 0, []
    for shape in shapes:
        if held < warm_nodes and shape["fits"] and shape["pool"] == "main" \
                and held + shape["nodes"] <= warm_nodes:
            held += shape["nodes"]
            burst.append(shape)
        else:
            rest.append(shape)
    gaps = gaps[:len(rest)]

    def at_rate(rate):
        out, pods = [], 0
        for i, shape in enumerate(burst):
            # Spread over the first 10 s, in order.
            pods += shape["members"]
            out.append(dict(shape, name=f"w{i + 1:03d}", atS=round(i * 10.0 / len(burst), 1)))
        t = 0.0
        for i, (shape, gap) in enumerate(zip(rest, gaps)):
            t += gap / rate
            if t >= window_s or pods + shape["members"] > MAX_PODS:
                break
            pods += shape["members"]
            out.append(dict(shape, name=f"g{i + 1:04d}", atS=round(t, 1)))
        return out

    # The same seed gives the same gangs and gaps; only the rate scales the gaps, so the
    # expected level grows with the rate and a bisection finds the rate for the target.
    lo, hi = 1e-4, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_level(at_rate(mid), *measured) < LEVEL_SHARE * peak_nodes:
            lo = mid
        else:
            hi = mid
    return hi, at_rate(hi), held


def number_range(text, flag, unit, zero_ok):
    """`X` or `LO-HI` as (lo, hi); `flag` and `unit` name them in the error, `zero_ok` says
    whether LO may be 0."""
    lo, _, hi = text.partition("-")
    try:
        lo, hi = float(lo), float(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} is {unit[0].upper()} or LO-HI {unit}, not {text!r}")
    if (lo < 0 if zero_ok else lo <= 0) or hi < lo:
        bound = "0 <= LO" if zero_ok else "0 < LO"
        raise argparse.ArgumentTypeError(f"{flag} needs {bound} <= HI, not {text!r}")
    return lo, hi


def provision_range(text):
    """`S` or `LO-HI` seconds, as (delay, jitter) seconds."""
    lo, hi = number_range(text, "--provision-seconds", "seconds", zero_ok=True)
    return lo, hi - lo


def mark_capacity(big):
    """A `fits` for `build`: marks a fittable main-pool gang that needs more nodes than one
    group holds."""
    def mark(g):
        if g["fits"] and g["pool"] == "main" and g["nodes"] > big:
            g["fits"] = False
            g["why"] = f"needs {g['nodes']} nodes, more than one group's maxSize {big}"
    return mark


def minutes_range(text):
    """`M` or `LO-HI` minutes, as (low, high) seconds."""
    lo, hi = number_range(text, "--run-minutes", "minutes", zero_ok=False)
    return lo * 60, hi * 60


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=25,
                    help="length of the run, warm-up and drain included (default 25)")
    ap.add_argument("--warmup-minutes", type=float, default=5,
                    help="the first minutes, left out of the figures (default 5)")
    ap.add_argument("--drain-minutes", type=float, default=4,
                    help="the last minutes, with no arrivals (default 4)")
    ap.add_argument("--peak-nodes", type=int, default=100,
                    help="size the arrivals so the fittable gangs would hold about this many nodes at once")
    ap.add_argument("--capacity-ratio", type=float, default=DEFAULT_RATIO,
                    help="the main pool's total maxSize over the expected peak (default 1.2)")
    ap.add_argument("--run-minutes", type=minutes_range, default=(300.0, 900.0),
                    help="a job's run time once formed: M, or LO-HI drawn per gang (default 5-15)")
    ap.add_argument("--give-up-minutes", type=float, default=15,
                    help="a gang not started this long after arriving is deleted (default 15, at least 10)")
    ap.add_argument("--provision-seconds", type=provision_range, default=(60.0, 120.0),
                    help="a node's provisioning time: S, or LO-HI drawn per node (default 60-180)")
    ap.add_argument("--stockout", type=float, default=0.1,
                    help="share of instances that fail with a stock-out (default 0.1)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.minutes <= 0 or a.peak_nodes <= 0:
        sys.exit("--minutes and --peak-nodes must be positive")
    if a.warmup_minutes < 0 or a.drain_minutes < 0 or a.warmup_minutes + a.drain_minutes >= a.minutes:
        sys.exit(f"--warmup-minutes {a.warmup_minutes} and --drain-minutes {a.drain_minutes} "
                 f"must be non-negative and leave part of --minutes {a.minutes} measured")
    if a.give_up_minutes < 10:
        sys.exit(f"--give-up-minutes must be at least 10 (nodes take minutes to come), not {a.give_up_minutes}")
    if not 0 < a.capacity_ratio <= 10:
        sys.exit(f"--capacity-ratio must be in (0, 10], not {a.capacity_ratio}")
    if not 0 <= a.stockout < 1:
        sys.exit(f"--stockout must be in [0, 1), not {a.stockout}")
    delay, jitter = a.provision_seconds
    if delay + jitter > MAX_PROVISION_S:
        sys.exit(f"--provision-seconds must stay below {MAX_PROVISION_S} s (CA's "
                 f"--max-node-provision-time in the soak is 5 min), not {delay + jitter}")
    # The main pool's two groups share ratio x the expected peak. At the default ratio each
    # also holds the largest gang (64 whole-node members), so only the gangs made not to fit
    # cannot; a scarcer fleet has no such floor, and gangs larger than a group do not fit.
    big = math.ceil(a.capacity_ratio * a.peak_nodes / 2)
    if a.capacity_ratio >= DEFAULT_RATIO:
        big = max(72, big)
    warm_nodes = math.floor(WARM_SHARE * min(a.peak_nodes, 2 * big))
    measured = (a.warmup_minutes * 60, (a.minutes - a.drain_minutes) * 60)
    rate, gangs, warm_held = build(a.seed, a.peak_nodes, measured, a.run_minutes,
                                   a.give_up_minutes * 60, warm_nodes, mark_capacity(big))
    backend = {"provisionDelayS": delay, "provisionJitterS": jitter, "stockout": a.stockout}
    header = {
        "kind": "header",
        "version": 2,
        "seed": a.seed,
        "minutes": a.minutes,
        "warmupS": a.warmup_minutes * 60,
        "drainS": a.drain_minutes * 60,
        "runS": list(a.run_minutes),
        "giveUpS": a.give_up_minutes * 60,
        "peakNodes": a.peak_nodes,
        "gpusPerNode": GPUS_PER_NODE,
        "arrivalsPerMinute": round(rate * 60, 3),
        "capacityRatio": a.capacity_ratio,
        "warmGangs": sum(1 for g in gangs if g["name"].startswith("w")),
        "warmNodes": warm_held,
        "demandPeakNodes": expected_peak([dict(g, fits=True) for g in gangs
                                          if g["gpus"] <= GPUS_PER_NODE]),
        "groups": [
            {"id": "gpu-a", "maxSize": big, "csiLimit": CSI_LIMIT, "pool": "main", **backend},
            {"id": "gpu-b", "maxSize": big, "csiLimit": CSI_LIMIT, "pool": "main", **backend},
            {"id": "gpu-small", "maxSize": SMALL_POOL_MAX, "csiLimit": CSI_LIMIT, "pool": "small",
             **backend},
        ],
        "gangs": len(gangs),
        "pods": sum(g["members"] for g in gangs),
        "unfittable": sum(1 for g in gangs if not g["fits"]),
        "withVolumes": sum(1 for g in gangs if g["volumes"]),
        "expectedPeakNodes": expected_peak(gangs),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for g in gangs:
            f.write(json.dumps({"kind": "gang", **g}) + "\n")
    print(json.dumps({k: v for k, v in header.items() if k != "groups"}))


if __name__ == "__main__":
    main()
