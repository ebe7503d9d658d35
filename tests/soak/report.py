#!/usr/bin/env python3
"""Prints the soak report: one markdown table, the policies side by side.

    tests/soak/report.py RESULTS_DIR [RESULTS_DIR ...]
    tests/soak/report.py --matrix ROOT
    tests/soak/report.py --summary RESULTS_DIR --campaign NAME --commit SHA [--repeat N]
    tests/soak/report.py --table SUMMARIES_ROOT
    tests/soak/report.py --check DOC SUMMARIES_ROOT

`--summary` prints one run's summary (small JSON; the scarcity soak commits these under
tests/soak/runs/); `--table` prints the scarcity tables from every summary under the root;
`--check` fails when the tables between the `soak-table` markers of DOC differ from them.


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

import accounting

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
    """The arm's name: the policy, whether reservation and deferral were on, and the order."""
    return (res["policy"] + (" + reservation" if res.get("reservation") else "")
            + (" + deferral" if res.get("deferral") else "")
            + (f" + order {res['order']}" if res.get("order", "age") != "age" else ""))


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


# --- the scarcity soak: one summary per run, tables from the committed summaries ---

SUMMARY_SCHEMA = 1
# The arms, in table order: name → (policy, reservation, deferral, admission order).
ARMS = {"off": ("off", False, False, "age"), "strict": ("strict", False, False, "age"),
        "reserve": ("strict", True, False, "age"), "defer": ("strict", False, True, "age"),
        "fewest": ("strict", False, False, "fewestMissing")}


def audit_decisions(run_dir):
    """The decision records of the run's audit log, in order (unreadable lines skipped)."""
    text = read(os.path.join(run_dir, "audit.jsonl"), "") or ""
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("event") == "decision":
            yield r


def audit_rules(run_dir):
    """Decisions by verdict and rule, from the audit log."""
    out = {}
    for r in audit_decisions(run_dir):
        key = f"{r.get('verdict')}:{r.get('rule')}"
        out[key] = out.get(key, 0) + 1
    return out


def covered_nodes_added(run_dir):
    """Nodes added by calls whose only pending gangs already had their nodes in flight (no gang
    admitted or deferred, at least one covered), past what ungrouped pods needed: nodes added
    for a covered gang (issue 33 item 2; `off` computes the same records)."""
    n = 0
    for r in audit_decisions(run_dir):
        if (r.get("verdict") == "accept" and not r.get("gangs") and not r.get("deferredTotal")
                and r.get("covered", 0) > 0):
            n += max(0, r.get("appliedDelta", 0) - r.get("ungroupedNodes", 0))
    return n


def day_seconds(ms_):
    return (ms_ / 1000.0) % 86400.0


def in_day_window(at, lo_ms, hi_ms):
    """Whether a klog second-of-day lies in [lo_ms, hi_ms] (which span less than a day)."""
    lo, hi = day_seconds(lo_ms), day_seconds(hi_ms)
    return lo <= at <= hi if lo <= hi else (at >= lo or at <= hi)


def summary(run_dir, campaign, commit, repeat=1):
    """One run's figures over its measured window, as the JSON the tables are built from."""
    res, audit, ca, gs = load(run_dir)
    rp, trace = res["replay"], res["trace"]
    start = rp["startedMs"]
    end = start + int(rp["durationS"] * 1000)
    lo = start + int(trace.get("warmupS", 0) * 1000)
    window = (lo, end)
    gangs = rp["gangs"]
    created = {g["name"]: g["createdMs"] for g in gangs if g.get("createdMs")}
    lives = res.get("nodes") or {}
    minutes = lambda x: round(x / 60000.0, 2)
    idle = {k: minutes(v) for k, v in accounting.causes(lives, created, window).items()}
    idle["total"] = round(sum(v for k, v in idle.items()), 2)
    per_gang = accounting.assembly(lives, created, window)
    wait = sum(w for w, _ in per_gang.values())
    floor = sum(f for _, f in per_gang.values())
    node_ms = sum(accounting.clip(l["firstSeenMs"], l.get("goneMs") or end, lo, end)
                  for l in lives.values())
    fit = [g for g in gangs if g["fits"]]
    started = [g for g in fit if g.get("formedMs") and lo <= g["formedMs"] <= end]
    by_name = {g["name"]: g for g in gangs}
    run_s = run_times(res["tracePath"])
    gpus_per_node = trace.get("gpusPerNode", 8)
    work = sum(g["members"] * g["gpus"] / gpus_per_node * run_s.get(g["name"], 0) / 60 for g in started)
    arrived = [g for g in fit if g.get("createdMs") and g["createdMs"] >= lo]
    # Formation has second precision (a condition's timestamp): a gang that started at once
    # can read a little before its creation.
    to_start = [max(0.0, (g["formedMs"] - g["createdMs"]) / 1000) for g in arrived if g.get("formedMs")]
    backoffs = {}
    for b in res.get("caBackoffs", []):
        if b.get("atDayS") is not None and in_day_window(b["atDayS"], lo, end):
            backoffs[b["errorCode"] or "?"] = backoffs.get(b["errorCode"] or "?", 0) + 1
    failed = {l.get("reason", "?"): v for l, v in series(ca, "cluster_autoscaler_failed_scale_ups_total", {}) if v}
    q, total, count = histogram(gs, "grpc_server_handling_seconds", {"grpc_method": "NodeGroupIncreaseSize"})
    ps = rp["gangscalerProc"]
    tck = rp["clkTck"] or 100
    in_win = [p for p in ps if p["tS"] * 1000 + start >= lo] if ps and "tS" in ps[0] else ps
    cpu = None
    if in_win and len(in_win) > 1:
        cpu = 100 * (in_win[-1]["cpuTicks"] - in_win[0]["cpuTicks"]) / tck / max((in_win[-1]["tS"] - in_win[0]["tS"]), 1)
    ov = audit.get("overall", {})
    g0 = (trace.get("groups") or [{}])[0]
    key = (res["policy"], bool(res.get("reservation")), bool(res.get("deferral")),
           res.get("order", "age"))
    arm_name = next((a for a, k in ARMS.items() if k == key), arm(res))
    r2 = lambda x: None if x is None else round(x, 2)
    return {
        "schema": SUMMARY_SCHEMA,
        "campaign": campaign,
        "commit": commit,
        "measuredAt": time_iso(start),
        "arm": arm_name,
        "seed": res["seed"],
        "capacityRatio": trace.get("capacityRatio"),
        "repeat": repeat,
        "ca": res["ca"],
        "k8s": res["k8s"],
        "trace": {k: trace.get(k) for k in ("minutes", "warmupS", "drainS", "runS", "giveUpS",
                                            "peakNodes", "gangs", "pods", "unfittable",
                                            "warmGangs", "warmNodes", "expectedPeakNodes")}
                 | {"provisionS": [g0.get("provisionDelayS"), (g0.get("provisionDelayS") or 0) + (g0.get("provisionJitterS") or 0)],
                    "stockout": g0.get("stockout")},
        "windowMinutes": minutes(end - lo),
        "gpuNodeMinutes": minutes(node_ms),
        "peakNodes": res["idle"]["maxNodes"],
        "idleNodeMinutes": idle,
        "assembly": {"gangs": len(per_gang), "waitNodeMinutes": minutes(wait),
                     "floorNodeMinutes": minutes(floor),
                     "ratio": r2(wait / floor) if floor else None},
        "work": {"gangsStarted": len(started), "gpuNodeMinutesStarted": r2(work),
                 "fittableArrived": len(arrived),
                 "arrivedNotStarted": sum(1 for g in arrived if not g.get("formedMs"))},
        "timeToStartS": {"p50": r2(nearest_rank(to_start, 50)), "p95": r2(nearest_rank(to_start, 95)),
                         "n": len(to_start)},
        "caBackoffs": backoffs,
        "caFailedScaleUps": failed,
        "decisions": audit_rules(run_dir),
        "coveredNodesAdded": covered_nodes_added(run_dir),
        "nodesAskedApplied": [ov.get("nodesAsked", 0), ov.get("nodesApplied", 0)],
        "increaseSizeMs": {"p50": r2(q(0.5) * 1000) if q(0.5) is not None else None,
                           "p95": r2(q(0.95) * 1000) if q(0.95) is not None else None,
                           "calls": int(count)},
        "gangscaler": {"cpuCorePercent": r2(cpu),
                       "peakRssMiB": r2(max(p["vmHwmKb"] for p in ps) / 1024) if ps else None},
    }


def run_times(trace_path):
    """Each gang's run time in the trace, by name."""
    out = {}
    for line in (read(trace_path, "") or "").splitlines():
        d = json.loads(line)
        if d.get("kind") == "gang":
            out[d["name"]] = d["runS"]
    if not out:
        sys.exit(f"{trace_path}: no gangs (the summary needs the run's trace)")
    return out


def time_iso(ms_):
    import datetime
    return datetime.datetime.fromtimestamp(ms_ / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_summaries(root):
    out = []
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".json"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    s = json.load(fh)
                if s.get("schema") == SUMMARY_SCHEMA:
                    out.append(s)
    return out


# Table rows: (label, getter, format, higher_is_better or None).
ROWS = [
    ("**Orphan idle** (GPU node-min)", lambda s: s["idleNodeMinutes"]["orphan"], "{:.1f}"),
    ("Assembly wait, all nodes (GPU node-min)", lambda s: s["idleNodeMinutes"]["assembly"], "{:.1f}"),
    ("Assembly wait of fresh nodes (GPU node-min)", lambda s: s["assembly"]["waitNodeMinutes"], "{:.1f}"),
    ("… its floor", lambda s: s["assembly"]["floorNodeMinutes"], "{:.1f}"),
    ("… wait / floor", lambda s: s["assembly"]["ratio"], "{:.2f}"),
    ("Reuse wait; after job (GPU node-min)",
     lambda s: (s["idleNodeMinutes"]["reuseWait"], s["idleNodeMinutes"]["afterJob"]), "{:.1f}; {:.1f}"),
    ("Idle, all causes (GPU node-min)", lambda s: s["idleNodeMinutes"]["total"], "{:.1f}"),
    ("GPU node-minutes in the window", lambda s: s["gpuNodeMinutes"], "{:.1f}"),
    ("**GPU work started** (GPU node-min)", lambda s: s["work"]["gpuNodeMinutesStarted"], "{:.1f}"),
    ("Gangs started", lambda s: s["work"]["gangsStarted"], "{:.0f}"),
    ("Time to start P50 / P95 (s)", lambda s: (s["timeToStartS"]["p50"], s["timeToStartS"]["p95"]), "{:.0f} / {:.0f}"),
    ("Arrived in the window, not started", lambda s: s["work"]["arrivedNotStarted"], "{:.0f}"),
    ("CA backoffs caused by refusals", lambda s: s["caBackoffs"].get("cloudProviderError", 0), "{:.0f}"),
    ("CA backoffs, other causes", lambda s: sum(v for k, v in s["caBackoffs"].items() if k != "cloudProviderError"), "{:.0f}"),
    ("Nodes added for gangs already covered", lambda s: s.get("coveredNodesAdded"), "{:.0f}"),
    ("NodeGroupIncreaseSize P50 / P95 (ms)", lambda s: (s["increaseSizeMs"]["p50"], s["increaseSizeMs"]["p95"]), "{:.1f} / {:.1f}"),
    ("gangscaler CPU (% of a core); peak RSS (MiB)",
     lambda s: (s["gangscaler"]["cpuCorePercent"], s["gangscaler"]["peakRssMiB"]), "{:.1f}; {:.0f}"),
]
# The rows whose paired difference against `off` the table gives.
PAIRED = [0, 1, 4, 6, 8, 9]


def fmt_value(fmt, v):
    if isinstance(v, tuple):
        return "–" if any(x is None for x in v) else fmt.format(*v)
    return "–" if v is None else fmt.format(v)


def paired_cells(s, off):
    """The paired differences of run `s` against run `off`, one cell per row of PAIRED."""
    cells = []
    for i in PAIRED:
        _, get, _ = ROWS[i]
        a, b = get(s), get(off)
        cells.append("–" if a is None or b is None else f"{a - b:+.1f}")
    return cells


def noise_rows(sums, campaign, runs):
    """Rows of run-to-run noise for a campaign's `off` runs: each `off` run of another campaign
    on the same trace (seed, ratio and trace parameters) against this campaign's. `off` is CA
    alone, the same path at every commit, so two such runs differ only by noise."""
    rows = []
    for off in runs:
        if off["arm"] != "off" or off["repeat"] != 1:
            continue
        for other in sums:
            if (other["campaign"] != campaign and other["arm"] == "off"
                    and other["capacityRatio"] == off["capacityRatio"] and other["seed"] == off["seed"]
                    and other["trace"] == off["trace"] and other["ca"] == off["ca"]):
                name = f"seed {off['seed']} off ({other['campaign']}" + (
                    f" #{other['repeat']}" if other["repeat"] > 1 else "") + ")"
                rows.append(f"| {name} − off | " + " | ".join(paired_cells(other, off)) + " |")
    return rows


def table(root):
    """The scarcity tables: per campaign and capacity ratio, each run as a column, then the
    paired differences against `off` on the same seed, with the run-to-run noise: the `off`
    repeat, and `off` runs of other campaigns on the same trace."""
    sums = load_summaries(root)
    if not sums:
        sys.exit(f"no summaries under {root}")
    lines = []
    order = list(ARMS)
    for campaign in sorted({s["campaign"] for s in sums}):
        for ratio in sorted({s["capacityRatio"] for s in sums if s["campaign"] == campaign}):
            runs = sorted((s for s in sums if s["campaign"] == campaign and s["capacityRatio"] == ratio),
                          key=lambda s: (s["seed"], order.index(s["arm"]) if s["arm"] in order else 9, s["repeat"]))
            commits = sorted({s["commit"][:7] for s in runs})
            t = runs[0]["trace"]
            lines.append(f"#### {campaign}, capacity ratio {ratio:g}\n")
            lines.append(f"Gangscaler {', '.join(commits)}; CA {runs[0]['ca']}, Kubernetes {runs[0]['k8s']}; "
                         f"{t['minutes']:g} min per run ({t['warmupS'] / 60:g} warm-up left out, last "
                         f"{t['drainS'] / 60:g} without arrivals); peak ≈ {t['peakNodes']} nodes; provisioning "
                         f"{t['provisionS'][0]:g}–{t['provisionS'][1]:g} s; stock-outs {t['stockout']:g}.\n")
            heads = [f"seed {s['seed']} {s['arm']}" + (f" #{s['repeat']}" if s["repeat"] > 1 else "") for s in runs]
            lines.append("| figure | " + " | ".join(heads) + " |")
            lines.append("|---|" + "---|" * len(runs))
            for label, get, fmt in ROWS:
                lines.append(f"| {label} | " + " | ".join(fmt_value(fmt, get(s)) for s in runs) + " |")
            diffs = []
            for s in runs:
                off = next((o for o in runs if o["seed"] == s["seed"] and o["arm"] == "off" and o["repeat"] == 1), None)
                if off is None or s is off:
                    continue
                name = f"seed {s['seed']} {s['arm']}" + (f" #{s['repeat']}" if s["repeat"] > 1 else "")
                diffs.append(f"| {name} − off | " + " | ".join(paired_cells(s, off)) + " |")
            diffs.extend(noise_rows(sums, campaign, runs))
            if diffs:
                lines.append("\nPaired differences against `off` on the same seed (an `off #2` row, or "
                             "`off` of another campaign on the same trace, is the run-to-run noise):\n")
                lines.append("| pair | " + " | ".join(ROWS[i][0].replace("**", "") for i in PAIRED) + " |")
                lines.append("|---|" + "---|" * len(PAIRED))
                lines.extend(diffs)
            lines.append("")
    return "\n".join(lines)


BEGIN, END = "<!-- soak-table: begin (tests/soak/report.py --table tests/soak/runs) -->", "<!-- soak-table: end -->"


def check(doc, root):
    text = read(doc, "")
    if BEGIN not in text or END not in text:
        sys.exit(f"{doc}: no {BEGIN!r} … {END!r} markers")
    inside = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    want = table(root).strip()
    if inside != want:
        sys.exit(f"{doc}: the soak tables differ from `tests/soak/report.py --table {root}`; "
                 f"paste its output between the markers")
    print(f"{doc}: soak tables match {root}")


def main():
    dirs = sys.argv[1:]
    if dirs[:1] == ["--matrix"] and len(dirs) == 2:
        matrix(dirs[1])
        return
    if dirs[:1] == ["--summary"]:
        import argparse
        ap = argparse.ArgumentParser(prog="report.py --summary")
        ap.add_argument("run_dir")
        ap.add_argument("--campaign", required=True)
        ap.add_argument("--commit", required=True)
        ap.add_argument("--repeat", type=int, default=1)
        a = ap.parse_args(dirs[1:])
        print(json.dumps(summary(a.run_dir, a.campaign, a.commit, a.repeat), indent=1, sort_keys=True))
        return
    if dirs[:1] == ["--table"] and len(dirs) == 2:
        print(table(dirs[1]))
        return
    if dirs[:1] == ["--check"] and len(dirs) == 3:
        check(dirs[1], dirs[2])
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
