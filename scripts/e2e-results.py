#!/usr/bin/env python3
"""Renders docs/e2e-results.md from the rows the CA-driven e2e scenarios append to
target/e2e-results/<k8s-minor>.jsonl (one JSON object per scenario run; see
tests/e2e/scenario.rs, `Row`).

Usage: scripts/e2e-results.py [--command CMD] [--previous docs/e2e-results.md [--drop SCENARIO]...]
                              FILE.jsonl [FILE.jsonl ...] > docs/e2e-results.md

A scenario run more than once keeps its last row. With --previous, the rows of an earlier
rendering's "Every scenario" table come first (as rounded there), so a run of some scenarios
updates their rows and keeps the others; --drop removes the earlier rows of a scenario that no
longer exists under that name. The headline is the difference in idle GPU node-minutes between
`strict` and `off` for every scenario run under both.
"""

import argparse
import datetime
import json
import os
import platform
import sys


def machine():
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            mem = f", {kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def fmt_s(v):
    return "never" if v is None else f"{v:.1f} s"


def parse_s(cell):
    cell = cell.strip()
    return None if cell == "never" else float(cell.removesuffix(" s"))


def previous_rows(path):
    """The rows of the "Every scenario" table of an earlier rendering, as JSON rows."""
    rows = []
    section = False
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                section = line.strip() == "## Every scenario"
                continue
            if not section or not line.startswith("| 1."):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) != 11:
                sys.exit(f"{path}: a row of {len(cells)} cells, expected 11: {line.strip()}")
            k8s, ca, scenario, policy, asks, applied, formed, window, idle, outcome, note = cells
            rows.append({
                "k8s": k8s, "ca": ca, "scenario": scenario, "policy": policy.strip("`"),
                "ca_asks": [] if asks == "—" else asks.split(", "),
                "applied": [] if applied == "—" else [int(a) for a in applied.split(", ")],
                "formed_s": parse_s(formed), "window_s": parse_s(window),
                "idle_gpu_node_min": float(idle), "outcome": outcome, "note": note,
            })
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--command", default="")
    ap.add_argument("--scan-interval", default="2s")
    ap.add_argument("--previous", help="an earlier docs/e2e-results.md whose rows to keep")
    ap.add_argument("--drop", action="append", default=[],
                    help="a scenario name whose earlier rows to drop (repeatable)")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    rows = {}
    if args.previous:
        for r in previous_rows(args.previous):
            if r["scenario"] not in args.drop:
                rows[(r["k8s"], r["scenario"], r["policy"], r["ca"])] = r
    for path in args.files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not JSON: {e}")
                rows[(r["k8s"], r["scenario"], r["policy"], r["ca"])] = r
    if not rows:
        sys.exit("no rows")
    out = []
    w = out.append
    w("# e2e results: gangscaler with the real Cluster Autoscaler")
    w("")
    w("Written by `scripts/e2e-results.py` from the rows the CA-driven e2e scenarios recorded")
    w("(`tests/e2e/ca_*.rs`); not edited by hand.")
    w("")
    w(f"- Generated: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    w(f"- Machine: {machine()}")
    w(f"- CA: `--scan-interval={args.scan_interval}`, `--expander=least-waste` unless noted, initial node-group "
      "backoff 30 s, scale-down unneeded time 20 s (4 s in the scale-down scenarios); all flags in "
      "`tests/e2e/harness.rs` (`autoscaler_flags`)")
    w("- Nodes: kwok nodes of 8 GPUs, due 15 s after the request (a real GPU node takes minutes: the idle "
      "node-minutes that come from waiting on provisioning rounds grow with it); in the scale-down scenarios "
      "due 2 s after it, 5 s apart, with their RDMA devices advertised 25 s after they register")
    w("- Cluster API rows: the real Cluster API core manager (v1.14.2) scales MachineDeployments; a stand-in "
      "infrastructure provider (test-only, `tests/e2e/capi.rs`) turns each Machine into a kwok node 8 s after "
      "its infrastructure machine is created")
    w("- CA waits 30 s after a GPU pod is created before it scales up for it (`unschedulablePodWithGpuTimeBuffer` "
      "in CA's `static_autoscaler.go`, not a flag): every time to form below includes it")
    if args.command:
        w(f"- Command: `{args.command}`")
    w("- Idle GPU node-minutes: the time each GPU node existed with no GPU pod bound to it, "
      "sampled every second, from the gang's creation to the end of the scenario's window "
      "(until every member ran, or the fixed window when it never formed).")
    w("")
    # Headline: strict vs off per scenario.
    pairs = {}
    for (k8s, scenario, policy, ca), r in rows.items():
        pairs.setdefault((k8s, scenario, ca), {})[policy] = r
    head = [(k, p) for k, p in sorted(pairs.items()) if "strict" in p and "off" in p]
    if head:
        w("## Headline: idle GPU node-minutes saved against CA alone")
        w("")
        w("`off` applies CA's delta as asked and does not protect nodes (CA alone); `strict` is gangscaler's default.")
        w("")
        w("| Kubernetes | CA | Scenario | off | strict | saved | formed (off → strict) |")
        w("|---|---|---|---|---|---|---|")
        total = 0.0
        uncounted = 0
        for (k8s, scenario, ca), p in head:
            off, strict = p["off"], p["strict"]
            saved = off["idle_gpu_node_min"] - strict["idle_gpu_node_min"]
            if off["formed_s"] is None and strict["formed_s"] is not None:
                # Under off the members sat on nodes (not idle by this measure) of a gang that
                # never trained: the idle figures do not compare, the formation does.
                uncounted += 1
                cell = f"{saved:.2f} (not in total¹)"
            else:
                total += saved
                cell = f"**{saved:.2f}**"
            w(f"| {k8s} | {ca} | {scenario} | {off['idle_gpu_node_min']:.2f} | {strict['idle_gpu_node_min']:.2f} "
              f"| {cell} | {fmt_s(off['formed_s'])} → {fmt_s(strict['formed_s'])} |")
        w(f"| | | **total** | | | **{total:.2f}** | |")
        w("")
        w("Each node here has 8 GPUs: GPU-minutes are 8 × the node-minutes.")
        if uncounted:
            w("")
            w("¹ The gang never formed under `off` and did under `strict`. A node counts as idle only "
              "while no GPU pod is bound to it, so the members that `off` placed on nodes CA then "
              "removed count as busy although the gang never trained: for these rows the saving is "
              "the formation itself, not the idle figure, and they stay out of the total.")
        w("")
    w("## Every scenario")
    w("")
    w("| Kubernetes | CA | Scenario | Policy | CA's asks | Applied | Time to form | Window | Idle GPU node-min | Outcome | Note |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for (k8s, scenario, policy, ca), r in sorted(rows.items()):
        asks = ", ".join(r["ca_asks"]) or "—"
        applied = ", ".join(str(a) for a in r["applied"]) or "—"
        w(f"| {k8s} | {ca} | {scenario} | `{policy}` | {asks} | {applied} | {fmt_s(r['formed_s'])} "
          f"| {r['window_s']:.0f} s | {r['idle_gpu_node_min']:.2f} | {r['outcome']} | {r['note']} |")
    w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
