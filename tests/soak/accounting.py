"""Idle GPU node time split into orphan idle and assembly wait, and the assembly floor, from
the node lives the soak's sampler records (`tests/e2e/idle.rs`, `NodeLife`). Pure functions,
Python standard library only; `tests/soak/test_accounting.py` tests them.

Every idle stretch of a node (alive, no GPU pod bound) is settled by what ended it:

- a member of gang `g` bound: the part after `g` was created is **assembly** (the node waited
  for the rest of `g`'s nodes and for the scheduler); the part before is **orphan** if the node
  had never hosted a pod (it was added for a gang that never ran on it), else **reuse wait**
  (between jobs, before the next gang existed);
- the node went: **orphan** if it never hosted a pod (removed unused), else **after job**
  (held from its last job until removed);
- still open when the window closed: **orphan** if never used, else **after job**.

The causes sum to the idle total. Only the parts inside the measured window count.

The **floor** of a formed gang is the assembly wait its fresh nodes (those whose first GPU pod
is the gang's) would pay had they all been requested at one instant: with `d_i` each node's provisioning time (Node creation minus its
`gangscaler.io/requested-at`, or minus the gang's creation for a node requested before the gang
existed; 0 for a node already up when the gang was created), the gang waits
`sum(max(d) - d_i)` node-seconds. Extra rounds, late asks and slow formation are the
excess of the measured wait of those nodes over it. The idle of reused nodes waiting for the
same gang is in the assembly cause, not in this comparison.
"""

ORPHAN, ASSEMBLY, REUSE, AFTER_JOB = "orphan", "assembly", "reuseWait", "afterJob"
CAUSES = [ORPHAN, ASSEMBLY, REUSE, AFTER_JOB]


def clip(a, b, lo, hi):
    """Length of [a, b] inside [lo, hi], never negative."""
    return max(0, min(b, hi) - max(a, lo))


def stretches(life, end_ms):
    """The idle stretches of one node life as (from, to, ended_by, used_before), where
    ended_by is the gang that bound, "gone", or "open"."""
    out = []
    alive_to = life.get("goneMs") or end_ms
    at, used = life["firstSeenMs"], False
    for busy in life.get("busy", []):
        if busy["fromMs"] >= at:  # zero-length too: the node is one of the gang's
            out.append((at, busy["fromMs"], busy["gang"], used))
        used = True
        at = busy["toMs"] if busy.get("toMs") is not None else alive_to
    if at < alive_to:
        out.append((at, alive_to, "gone" if life.get("goneMs") else "open", used))
    return out


def causes(lives, created_ms, window):
    """Idle node-milliseconds by cause inside `window` (lo, hi) Unix ms, over every node
    life (`lives`: name → life); `created_ms` maps a gang to its creation."""
    lo, hi = window
    out = dict.fromkeys(CAUSES, 0)
    for life in lives.values():
        for a, b, by, used in stretches(life, hi):
            if by in ("gone", "open"):
                out[AFTER_JOB if used else ORPHAN] += clip(a, b, lo, hi)
                continue
            c = min(max(created_ms.get(by, a), a), b)
            out[REUSE if used else ORPHAN] += clip(a, c, lo, hi)
            out[ASSEMBLY] += clip(c, b, lo, hi)
    return out


def assembly(lives, created_ms, window):
    """Per gang whose members first bound inside `window` on at least one fresh node (one whose
    first GPU pod is the gang's): (wait, floor) node-milliseconds over its fresh nodes,
    unclipped. A gang's nodes are those a stretch ended on when the gang bound, each counted
    once (at the gang's first bind on it)."""
    lo, hi = window
    nodes = {}
    for life in lives.values():
        firsts = {}
        for a, b, by, used in stretches(life, hi):
            if by in ("gone", "open") or by not in created_ms or by in firsts:
                continue
            # A node counts once per gang, at the gang's first bind on it.
            firsts[by] = (a, b, used, life)
        for gang, stretch in firsts.items():
            nodes.setdefault(gang, []).append(stretch)
    out = {}
    for gang, ns in nodes.items():
        bound = min(b for _, b, _, _ in ns)
        if not lo <= bound <= hi:
            continue
        c = created_ms[gang]
        # Only the gang's fresh nodes (their first GPU pod is this gang's): a node another gang
        # used first was not provisioned for it, and while busy it did not wait.
        fresh = [(a, b, life) for a, b, used, life in ns if not used]
        if not fresh:
            continue
        wait = sum(b - min(max(c, a), b) for a, b, _ in fresh)
        d = [provisioning(life, c) for _, _, life in fresh]
        out[gang] = (wait, sum(max(d) - x for x in d))
    return out


def provisioning(life, gang_created_ms):
    """A node's provisioning time as the floor counts it: its creation minus its request, or
    minus the gang's creation when it was requested before the gang existed (for another gang:
    the gang waited only for the rest of it); 0 when it was up before the gang was created (or
    says nothing of its request)."""
    created, requested = life.get("createdMs"), life.get("requestedMs")
    if created is None or requested is None or created <= gang_created_ms:
        return 0
    return max(0, created - max(requested, gang_created_ms))
