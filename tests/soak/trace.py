#!/usr/bin/env python3
"""Writes the soak trace: gang arrivals, deterministic from a seed, as JSON Lines.

Line 1 is a header (the node groups the run configures, the trace's parameters and its
expected size); every other line is one gang, in arrival order. Both policies of a soak replay
the same file. Python standard library only.

    tests/soak/trace.py --seed 1 --minutes 30 --peak-nodes 1000 --out trace.jsonl
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
# Gangs arrive during the first 85 % of the run; the rest is left for the last ones to form.
ARRIVAL_SHARE = 0.85
# Assumed time from arrival to running when sizing the trace (nodes take 15 s to come up,
# CA scans every 2 s; the real figure is measured, not assumed).
STARTUP_S = 60
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


def draw_gang(rng, minutes):
    """One gang's shape and times (arrival set later), from the seeded stream."""
    duration = minutes * 60
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
        "runS": round(rng.uniform(0.2, 0.8) * duration, 1),
        # Deleted this long after its creation if it has not started by then.
        "giveUpS": round(min(600.0, max(120.0, duration / 3)), 1),
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


def build(seed, minutes, peak_nodes):
    rng = random.Random(seed)
    shapes, gaps = [], []
    for _ in range(MAX_GANGS):
        shapes.append(draw_gang(rng, minutes))
        gaps.append(rng.expovariate(1.0))
    window = minutes * 60 * ARRIVAL_SHARE

    def at_rate(rate):
        out, t, pods = [], 0.0, 0
        for i, (shape, gap) in enumerate(zip(shapes, gaps)):
            t += gap / rate
            if t >= window or pods + shape["members"] > MAX_PODS:
                break
            pods += shape["members"]
            out.append(dict(shape, name=f"g{i + 1:04d}", atS=round(t, 1)))
        return out

    # The same seed gives the same gangs and gaps; only the rate scales the gaps, so the
    # expected peak grows with the rate and a bisection finds the rate for `peak_nodes`.
    lo, hi = 1e-4, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_peak(at_rate(mid)) < peak_nodes:
            lo = mid
        else:
            hi = mid
    return hi, at_rate(hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--peak-nodes", type=int, default=1000,
                    help="size the arrivals so the fittable gangs would hold about this many nodes at once")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.minutes <= 0 or a.peak_nodes <= 0:
        sys.exit("--minutes and --peak-nodes must be positive")
    rate, gangs = build(a.seed, a.minutes, a.peak_nodes)
    # Large groups: each holds the largest gang (64 whole-node members) and together they hold
    # the peak with room to spare, so only the gangs made not to fit cannot.
    big = max(72, math.ceil(0.6 * a.peak_nodes))
    header = {
        "kind": "header",
        "seed": a.seed,
        "minutes": a.minutes,
        "peakNodes": a.peak_nodes,
        "gpusPerNode": GPUS_PER_NODE,
        "arrivalsPerMinute": round(rate * 60, 3),
        "groups": [
            {"id": "gpu-a", "maxSize": big, "csiLimit": CSI_LIMIT, "pool": "main"},
            {"id": "gpu-b", "maxSize": big, "csiLimit": CSI_LIMIT, "pool": "main"},
            {"id": "gpu-small", "maxSize": SMALL_POOL_MAX, "csiLimit": CSI_LIMIT, "pool": "small"},
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
