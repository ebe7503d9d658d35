#!/usr/bin/env python3
"""Prints the soak report: one markdown table, the policies side by side.

    tests/soak/report.py RESULTS_DIR [RESULTS_DIR ...]
    tests/soak/report.py --matrix ROOT


Each RESULTS_DIR is one run's folder, as the soak test writes it (`results.json`,
`audit-report.json` from `gangscaler audit report`, `audit.jsonl`, `ca-metrics.txt`,
`gangscaler-metrics.txt`). With `--matrix`, every run folder under ROOT, grouped by capacity
ratio and arm, each figure as the median, minimum and maximum over the seeds. How each figure is measured: tests/soak/README.md. Python standard
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


def load(run_dir):
    """One run's raw results: results.json, the audit report, CA's and gangscaler's metrics."""
    res = json.loads(read(os.path.join(run_dir, "results.json")))
    audit = json.loads(read(os.path.join(run_dir, "audit-report.json"), "{}") or "{}")
    ca = read(os.path.join(run_dir, "ca-metrics.txt"), "")
    gs = read(os.path.join(run_dir, "gangscaler-metrics.txt"), "")
    return res, audit, ca, gs


def node_seconds(timeline):
    """GPU node-seconds in all, integrated over the runner's timeline."""
    return sum(a["nodes"] * (b["tS"] - a["tS"]) for a, b in zip(timeline, timeline[1:]))


def formation_seconds(fit):
    """Created → formed, seconds, of each fittable gang that formed."""
    return [max(0.0, (g["formedMs"] - g["createdMs"]) / 1000)
            for g in fit if g.get("formedMs") and g.get("createdMs")]


def ca_loop_mean(loops):
    """CA's mean loop time during the replay, from the first and last scrape."""
    if len(loops) >= 2 and loops[-1]["count"] > loops[0]["count"]:
        return (loops[-1]["sum"] - loops[0]["sum"]) / (loops[-1]["count"] - loops[0]["count"])
    return None


def arm(res):
    """The arm's name: the policy, and whether reservation was on."""
    return res["policy"] + (" + reservation" if res.get("reservation") else "")


def figures(run_dir):
    """The report's rows for one run, as (figure, value) pairs."""
    res, audit, ca, gs = load(run_dir)
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
    node_s = node_seconds(tl)
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
    form_s = formation_seconds(fit)
    rows.append(("**Gang formation P50 / P95** (created → all members Running)",
                 f"{secs(nearest_rank(form_s, 50))} / {secs(nearest_rank(form_s, 95))}"))
    rows.append(("Fittable gangs started", pct(len(form_s), len(fit))))
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
    mean = ca_loop_mean(rp["caLoop"])
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
    return arm(res), rows


def fleet(trace):
    """The trace's fleet: capacity ratio, provisioning time and stock-out share (traces
    written before these were parameters had 1.2, 15 s and none)."""
    g = (trace.get("groups") or [{}])[0]
    delay = g.get("provisionDelayS", 15.0)
    jitter = g.get("provisionJitterS", 0.0)
    provisioning = f"{delay:g} s" if not jitter else f"{delay:g}–{delay + jitter:g} s"
    return f"{trace.get('capacityRatio', 1.2):g}; {provisioning}; {g.get('stockout', 0.0):g}"


def numbers(run_dir):
    """The figures the matrix aggregates over seeds, as numbers (None where not measured)."""
    res, audit, ca, _ = load(run_dir)
    rp = res["replay"]
    idle = res["idle"]
    node_s = node_seconds(rp["timeline"])
    fit = [g for g in rp["gangs"] if g["fits"]]
    form_s = formation_seconds(fit)
    ov = audit.get("overall", {})
    ps = rp["gangscalerProc"]
    tck = rp["clkTck"] or 100
    causes = idle.get("causeNodeMinutes") or {}
    out = {
        "idle": idle["idleNodeMinutes"],
        "all": node_s / 60,
        "share": 100 * idle["idleNodeSeconds"] / node_s if node_s else None,
        "peak": idle["maxNodes"],
        "formP50": nearest_rank(form_s, 50),
        "formP95": nearest_rank(form_s, 95),
        "started": 100 * len(form_s) / len(fit) if fit else None,
        "success": (100 * ov.get("outcomes", {}).get("succeeded", 0) / ov["terminal"]
                    if ov.get("terminal") else None),
        "caLoop": ca_loop_mean(rp["caLoop"]),
        "cpu": (100 * (ps[-1]["cpuTicks"] - ps[0]["cpuTicks"]) / tck / max(rp["durationS"], 1)
                if ps else None),
    }
    for k in CAUSES[:4]:
        out[k] = causes.get(k)
    out["open"] = (causes["openUnused"] + causes["openAfterJob"]) if causes else None
    return res, out


# The matrix's rows: (key, label, format of one value).
MATRIX_ROWS = [
    ("idle", "**Idle GPU node-minutes**", "{:.1f}"),
    ("saved", "**Saved against `off`** (same seed)", "{:.1f}"),
    ("waiting", "… waiting for the first pod (rest of the gang)", "{:.1f}"),
    ("unused", "… removed unused", "{:.1f}"),
    ("afterJob", "… after the last job until removed", "{:.1f}"),
    ("betweenJobs", "… between jobs", "{:.1f}"),
    ("open", "… still empty at the end", "{:.1f}"),
    ("all", "GPU node-minutes, all", "{:.1f}"),
    ("share", "Idle share", "{:.1f} %"),
    ("peak", "Peak GPU nodes", "{:.0f}"),
    ("started", "Fittable gangs started", "{:.1f} %"),
    ("formP50", "Gang formation P50", "{:.1f} s"),
    ("formP95", "Gang formation P95", "{:.1f} s"),
    ("success", "Start success rate (audit)", "{:.1f} %"),
    ("caLoop", "CA loop mean during the replay", "{:.2f} s"),
    ("cpu", "gangscaler CPU (share of a core)", "{:.1f} %"),
]


def spread(values, fmt):
    """"median (min–max)" of the values, or the one value, or –."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return "–"
    mid = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    if len(v) == 1:
        return fmt.format(mid)
    return f"{fmt.format(mid)} ({fmt.format(v[0])} – {fmt.format(v[-1])})"


def matrix(root):
    """The matrix: per capacity ratio, each arm's figures as median (min – max) over seeds."""
    cells = {}
    for d, _, files in sorted(os.walk(root)):
        if "results.json" not in files:
            continue
        res, num = numbers(d)
        ratio = res["trace"].get("capacityRatio", 1.2)
        cells.setdefault(ratio, {}).setdefault(res["seed"], {})[arm(res)] = (res, num)
    if not cells:
        sys.exit(f"no results.json under {root}")
    order = ["off", "strict", "strict + reservation"]
    for ratio in sorted(cells):
        seeds = cells[ratio]
        arms = sorted({a for runs in seeds.values() for a in runs},
                      key=lambda a: order.index(a) if a in order else len(order))
        for runs in seeds.values():
            off = runs.get("off")
            for a, (_, num) in runs.items():
                num["saved"] = off[1]["idle"] - num["idle"] if off and a != "off" else None
        some = next(iter(next(iter(seeds.values())).values()))[0]
        print(f"### Capacity ratio {ratio:g}\n")
        print(f"Fleet (capacity ratio; provisioning; stock-out share): {fleet(some['trace'])}; "
              f"{some['minutes']:g} min per run; seeds {', '.join(str(x) for x in sorted(seeds))}.")
        print("Each cell: median (min – max) over the seeds that ran that arm "
              f"({', '.join(f'{a} {sum(1 for r in seeds.values() if a in r)}' for a in arms)}).\n")
        print("| figure | " + " | ".join(arms) + " |")
        print("|---|" + "---|" * len(arms))
        for key, label, fmt in MATRIX_ROWS:
            cells_ = [spread([r[a][1].get(key) for r in seeds.values() if a in r], fmt) for a in arms]
            print(f"| {label} | " + " | ".join(cells_) + " |")
        print("\nIdle GPU node-minutes per seed:\n")
        print("| seed | " + " | ".join(arms) + " |")
        print("|---|" + "---|" * len(arms))
        for sd in sorted(seeds):
            print(f"| {sd} | " + " | ".join(
                f"{seeds[sd][a][1]['idle']:.1f}" if a in seeds[sd] else "–" for a in arms) + " |")
        print()


def main():
    dirs = sys.argv[1:]
    if dirs[:1] == ["--matrix"] and len(dirs) == 2:
        matrix(dirs[1])
        return
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
