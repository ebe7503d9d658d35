#!/usr/bin/env python3
"""Prints the soak report: one markdown table, the policies side by side.

    tests/soak/report.py RESULTS_DIR [RESULTS_DIR ...]

Each RESULTS_DIR is one run's folder, as the soak test writes it (`results.json`,
`audit-report.json` from `gangscaler audit report`, `audit.jsonl`, `ca-metrics.txt`,
`gangscaler-metrics.txt`). How each figure is measured: tests/soak/README.md. Python standard
library only.
"""

import json
import math
import os
import re
import sys

SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def series(text, name, want):
    """(labels, value) of every sample of `name` whose labels include `want`."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SERIES.match(line)
        if not m or m.group(1) != name:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        if all(labels.get(k) == v for k, v in want.items()):
            try:
                out.append((labels, float(m.group(3))))
            except ValueError:
                pass
    return out


def histogram(text, name, want):
    """(quantile function, sum, count) of histogram `name` summed over the matching series."""
    buckets = {}
    for labels, v in series(text, name + "_bucket", want):
        le = float(labels["le"].replace("+Inf", "inf"))
        buckets[le] = buckets.get(le, 0.0) + v
    total = sum(v for _, v in series(text, name + "_sum", want))
    count = sum(v for _, v in series(text, name + "_count", want))
    bounds = sorted(buckets)

    def quantile(q):
        # As PromQL's histogram_quantile: linear within the bucket holding the rank.
        if not bounds or count == 0:
            return None
        rank = q * buckets[bounds[-1]]
        lower, below = 0.0, 0.0
        for b in bounds:
            if buckets[b] >= rank:
                if math.isinf(b):
                    return lower
                inside = buckets[b] - below
                return lower + (b - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = b, buckets[b]
        return lower

    return quantile, total, count


# The idle causes as the runner writes them (tests/e2e/idle.rs), in report order.
CAUSES = ["waiting", "unused", "afterJob", "betweenJobs", "openUnused", "openAfterJob"]


def nearest_rank(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[max(1, math.ceil(p * len(v) / 100)) - 1]


def read(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return default


def secs(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f} s"


def ms(x):
    if x is None:
        return "–"
    return f"{x * 1000:.2f} ms" if x < 1 else f"{x:.2f} s"


def pct(n, d):
    return "–" if not d else f"{100.0 * n / d:.1f} % ({n}/{d})"


def figures(run_dir):
    """The report's rows for one run, as (figure, value) pairs."""
    res = json.loads(read(os.path.join(run_dir, "results.json")))
    audit = json.loads(read(os.path.join(run_dir, "audit-report.json"), "{}") or "{}")
    ca = read(os.path.join(run_dir, "ca-metrics.txt"), "")
    gs = read(os.path.join(run_dir, "gangscaler-metrics.txt"), "")
    rp = res["replay"]
    gangs = rp["gangs"]
    rows = []
    trace = res["trace"]
    created = [g for g in gangs if g.get("createdMs")]
    binary = res.get("gangscalerBin") or ""
    build = "release" if "/release/" in binary else ("debug" if "/debug/" in binary else binary)
    rows.append(("Run", f"{res['minutes']:g} min, seed {res['seed']}, CA {res['ca']}, k8s {res['k8s']}, gangscaler {build}"))
    rows.append(("Fleet (capacity ratio; provisioning; stock-out share)", fleet(trace)))
    rows.append(("Gangs arrived / in trace (pods in trace)",
                 f"{len(gangs)} / {trace['gangs']} ({trace['pods']})"))
    errors = sum(1 for g in gangs if g.get("createError"))
    if errors:
        rows.append(("Gangs whose creation failed", str(errors)))

    idle = res["idle"]
    tl = rp["timeline"]
    node_s = sum(a["nodes"] * (b["tS"] - a["tS"]) for a, b in zip(tl, tl[1:]))
    rows.append(("Peak GPU nodes (nodes seen, removed)",
                 f"{idle['maxNodes']} ({idle['nodesSeen']}, {idle['nodesRemoved']})"))
    rows.append(("**Idle GPU node-minutes**", f"{idle['idleNodeMinutes']:.1f}"))
    rows.append(("GPU node-minutes, all (idle share)",
                 f"{node_s / 60:.1f} ({100 * idle['idleNodeSeconds'] / node_s:.1f} %)" if node_s else "–"))
    causes = idle.get("causeNodeMinutes")
    if causes:
        rows.append(("Idle by cause: waiting; unused; after job; between jobs; open at the end",
                     "; ".join(f"{causes[k]:.1f}" for k in CAUSES[:4])
                     + f"; {causes['openUnused'] + causes['openAfterJob']:.1f}"))

    fit = [g for g in gangs if g["fits"]]
    formed = [g for g in fit if g.get("formedMs") and g.get("createdMs")]
    form_s = [max(0.0, (g["formedMs"] - g["createdMs"]) / 1000) for g in formed]
    rows.append(("**Gang formation P50 / P95** (created → all members Running)",
                 f"{secs(nearest_rank(form_s, 50))} / {secs(nearest_rank(form_s, 95))}"))
    rows.append(("Fittable gangs started", pct(len(formed), len(fit))))
    gave_up = sum(1 for g in fit if g.get("end") == "gaveUp")
    rows.append(("Fittable gangs given up (not started within giveUpS)", str(gave_up)))
    unfit = [g for g in gangs if not g["fits"]]
    rows.append(("Unfittable gangs started", f"{sum(1 for g in unfit if g.get('formedMs'))} of {len(unfit)}"))

    ov = audit.get("overall", {})
    outcomes = ov.get("outcomes", {})
    succeeded = outcomes.get("succeeded", 0)
    rows.append(("**Start success rate** (audit: succeeded / ended scale-ups; open)",
                 f"{pct(succeeded, ov.get('terminal', 0))}; {ov.get('open', 0)} open"))
    others = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if v and k != "succeeded")
    rows.append(("Other outcomes (audit)", others or "none"))
    f = ov.get("formation", {})
    p50, p95 = f.get("p50Ms"), f.get("p95Ms")
    rows.append(("Scale-up request → gang formed P50 / P95 (audit)",
                 f"{secs(p50 / 1000 if p50 is not None else None)} / {secs(p95 / 1000 if p95 is not None else None)}"))
    rows.append(("Admission decisions: accepted / rejected; nodes CA asked → applied",
                 f"{ov.get('accepted', 0)} / {ov.get('rejected', 0)}; {ov.get('nodesAsked', 0)} → {ov.get('nodesApplied', 0)}"))

    reserved = ov.get("reserved", 0)
    released = ", ".join(f"{k} {v}" for k, v in sorted(ov.get("released", {}).items()) if v)
    rows.append(("Reservations (audit): nodes reserved; released by reason",
                 f"{reserved}; {released or 'none'}" if res.get("reservation") else "off"))
    failed = series(ca, "cluster_autoscaler_failed_scale_ups_total", {})
    rows.append(("CA failed scale-ups (by reason)",
                 ", ".join(f"{l.get('reason', '?')} {v:.0f}" for l, v in failed if v) or "none"))

    q, total, count = histogram(ca, "cluster_autoscaler_function_duration_seconds", {"function": "main"})
    loops = rp["caLoop"]
    mean = None
    if len(loops) >= 2 and loops[-1]["count"] > loops[0]["count"]:
        mean = (loops[-1]["sum"] - loops[0]["sum"]) / (loops[-1]["count"] - loops[0]["count"])
    rows.append(("**CA loop (function=main) P50 / P95** (whole CA run)", f"{ms(q(0.5))} / {ms(q(0.95))} ({count:.0f} loops)"))
    rows.append(("CA loop mean during the replay", ms(mean)))

    ps = rp["gangscalerProc"]
    tck = rp["clkTck"] or 100
    if ps:
        during = (ps[-1]["cpuTicks"] - ps[0]["cpuTicks"]) / tck
        rows.append(("**gangscaler CPU seconds** (replay; since start)",
                     f"{during:.1f} s ({100 * during / max(rp['durationS'], 1):.1f} % of a core); {ps[-1]['cpuTicks'] / tck:.1f} s"))
        rows.append(("**gangscaler peak RSS** (VmHWM; last VmRSS)",
                     f"{max(p['vmHwmKb'] for p in ps) / 1024:.1f} MiB; {ps[-1]['vmRssKb'] / 1024:.1f} MiB"))
    else:
        rows.append(("gangscaler CPU seconds", "– (no /proc samples)"))
    q, total, count = histogram(gs, "grpc_server_handling_seconds", {"grpc_method": "NodeGroupIncreaseSize"})
    rows.append(("**NodeGroupIncreaseSize latency P50 / P95** (gRPC handling)",
                 f"{ms(q(0.5))} / {ms(q(0.95))} ({count:.0f} calls)"))
    rows.append(("NodeGroupIncreaseSize latency mean", ms(total / count if count else None)))
    name = res["policy"] + (" + reservation" if res.get("reservation") else "")
    return name, rows


def fleet(trace):
    """The trace's fleet: capacity ratio, provisioning time and stock-out share (traces
    written before these were parameters had 1.2, 15 s and none)."""
    g = (trace.get("groups") or [{}])[0]
    delay = g.get("provisionDelayS", 15.0)
    jitter = g.get("provisionJitterS", 0.0)
    provisioning = f"{delay:g} s" if not jitter else f"{delay:g}–{delay + jitter:g} s"
    return f"{trace.get('capacityRatio', 1.2):g}; {provisioning}; {g.get('stockout', 0.0):g}"


def main():
    dirs = sys.argv[1:]
    if not dirs:
        sys.exit(__doc__)
    runs = []
    for d in dirs:
        if not os.path.exists(os.path.join(d, "results.json")):
            print(f"warning: {d} has no results.json; skipped", file=sys.stderr)
            continue
        runs.append(figures(d))
    if not runs:
        sys.exit("no results to report")
    names = [r[0] for r in runs]
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for i, (label, _) in enumerate(runs[0][1]):
        cells = [dict(r[1]).get(label, "–") for r in runs]
        print(f"| {label} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")


if __name__ == "__main__":
    main()
