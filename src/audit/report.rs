//! `gangscaler audit report`: what the audit log says about scale-ups in a time window, overall
//! and per node group. A pure function of the records and the window.
//!
//! # Definitions
//!
//! `docs/audit-schema.md` (section "Report") defines every number; in short:
//!
//! - **In the window**: a record whose `tsMs` is in `[since, until)`. An outcome counts in the
//!   window it was recorded in (when the scale-up ended), a decision in the window it was made.
//!   `records` counts the records in the window.
//! - **Formation time**: `formedAtMs - requestedAtMs` of each outcome whose gang formed.
//! - **Pending time**: `formedAtMs - pendingSinceMs` of each outcome with both: how long the
//!   gang waited, from its creation until it formed (includes the time before CA asked).
//! - **Start success rate**: `succeeded` outcomes / all outcomes (every terminal outcome,
//!   including `cancelled` and `preempted`). `null` with no outcome.
//! - **Attach failure rate**: `withAttachFailures / formedOrAttachFailed`: of the outcomes that
//!   have `formedAtMs` or are `attachFailed`, those that are `attachFailed` or saw
//!   `attachFailures > 0`, each outcome counted once. `null` when the denominator is 0.
//! - **Open**: lifecycles requested in the window (an accepted decision's `tsMs`, or a phase's
//!   `atMs - elapsedMs` when no decision of it was read) with no outcome recorded before
//!   `until` (any outcome read, without `until`). **Overdue**: the open ones older than
//!   [`Options::overdue_after_ms`] at the report's reference time (`until`, or the time of the
//!   report if that is earlier or there is no `until`).
//! - **Percentiles** by nearest rank: the `p`th percentile of `n` sorted values is the value at
//!   1-based rank `ceil(p * n / 100)`. Always one of the values; no interpolation.
//!
//! Negative durations (a clock stepped back) count as 0. Every number is independent of the
//! order of the records: reading the files in any order gives the same report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use super::record::{Event, GangId, Outcome, Record, ReleaseReason, ReservationAction, elapsed_ms};

/// A half-open time window `[since, until)` in unix milliseconds; `None` is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// Inclusive start.
    pub since_ms: Option<i64>,
    /// Exclusive end.
    pub until_ms: Option<i64>,
}

impl Window {
    /// Everything.
    pub fn all() -> Self {
        Self::default()
    }

    /// `[since, until)`.
    pub fn new(since_ms: Option<i64>, until_ms: Option<i64>) -> Self {
        Self { since_ms, until_ms }
    }

    /// Whether `ts_ms` is in the window.
    pub fn contains(&self, ts_ms: i64) -> bool {
        self.since_ms.is_none_or(|s| ts_ms >= s) && self.until_ms.is_none_or(|u| ts_ms < u)
    }
}

/// P50, P95 and P99 of a set of durations, by nearest rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    /// How many values.
    pub count: u64,
    /// Median, milliseconds.
    pub p50_ms: Option<u64>,
    /// 95th percentile, milliseconds.
    pub p95_ms: Option<u64>,
    /// 99th percentile, milliseconds.
    pub p99_ms: Option<u64>,
    /// Largest value, milliseconds.
    pub max_ms: Option<u64>,
}

impl Percentiles {
    /// The percentiles of `values` (in any order).
    pub fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        Self {
            count: values.len() as u64,
            p50_ms: nearest_rank(&values, 50),
            p95_ms: nearest_rank(&values, 95),
            p99_ms: nearest_rank(&values, 99),
            max_ms: values.last().copied(),
        }
    }
}

/// The `p`th percentile (0–100) of ascending `sorted` by nearest rank; `None` if empty.
pub fn nearest_rank(sorted: &[u64], p: u32) -> Option<u64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let p = usize::try_from(p.min(100)).unwrap_or(100);
    let rank = (p * n).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// The numbers for one node group, or overall.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Admission decisions.
    pub decisions: u64,
    /// Accepted decisions.
    pub accepted: u64,
    /// Rejected decisions.
    pub rejected: u64,
    /// Sum of CA's deltas.
    pub nodes_asked: u64,
    /// Sum of applied deltas.
    pub nodes_applied: u64,
    /// Outcomes by kind; every kind is present.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// All outcomes.
    pub terminal: u64,
    /// Lifecycles requested in the window and still open at its end.
    pub open: u64,
    /// Of `open`, those older than [`Report::overdue_after_ms`] at [`Report::as_of_ms`].
    pub overdue: u64,
    /// `succeeded / terminal`.
    pub start_success_rate: Option<f64>,
    /// Outcomes that have `formedAtMs` or are `attachFailed`: the attach failure rate's
    /// denominator.
    pub formed_or_attach_failed: u64,
    /// Of those, the ones that are `attachFailed` or saw `attachFailures > 0`, each once:
    /// the attach failure rate's numerator. Not the `attachFailed` outcome count, which is
    /// `outcomes.attachFailed`.
    pub with_attach_failures: u64,
    /// `withAttachFailures / formedOrAttachFailed`.
    pub attach_failure_rate: Option<f64>,
    /// Formation time.
    pub formation: Percentiles,
    /// Pending time.
    pub pending: Percentiles,
    /// `reservation` records with action `reserved`: nodes reserved for a gang (a patch
    /// retried after a failure is recorded, and counted, again).
    pub reserved: u64,
    /// `reservation` records with action `released`, by reason; every reason is present.
    pub released: BTreeMap<&'static str, u64>,
    /// Instances in `withdrawal` records (a withdrawal retried after a failure is recorded,
    /// and counted, again).
    pub withdrawn: u64,
    /// `repair` records: failed instances charged to the gang they were requested for.
    pub repairs: u64,
    /// `deferral` records with a hold: gangs kept out of CA's scale-up (again after each
    /// start), by hold; every hold is present.
    pub deferred: BTreeMap<&'static str, u64>,
    /// Nodes added by decisions that repair (`gangs[].nodes` with `repairOf`).
    pub repair_nodes: u64,
}

#[derive(Default)]
struct Acc {
    stats: Stats,
    formation: Vec<u64>,
    pending: Vec<u64>,
}

impl Acc {
    fn finish(mut self) -> Stats {
        let s = &mut self.stats;
        for o in Outcome::ALL {
            s.outcomes.entry(o.as_str()).or_insert(0);
        }
        for r in ReleaseReason::ALL {
            s.released.entry(r.as_str()).or_insert(0);
        }
        for h in HOLDS {
            s.deferred.entry(h).or_insert(0);
        }
        let succeeded = s
            .outcomes
            .get(Outcome::Succeeded.as_str())
            .copied()
            .unwrap_or(0);
        s.start_success_rate = ratio(succeeded, s.terminal);
        s.attach_failure_rate = ratio(s.with_attach_failures, s.formed_or_attach_failed);
        s.formation = Percentiles::of(self.formation);
        s.pending = Percentiles::of(self.pending);
        self.stats
    }
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// The default [`Options::overdue_after_ms`]: 40 minutes, the default `formationTimeout` (30
/// minutes) plus `attachTimeout` (10 minutes). With the default timeouts a running gangscaler
/// has by then ended every gang lifecycle that did not reach `volumesAttached`.
pub const DEFAULT_OVERDUE_AFTER_MS: u64 = 40 * 60 * 1000;

/// What a report needs besides the records and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// When the report is made, unix milliseconds: the reference time for `overdue` when the
    /// window has no end or ends later. `None`: only `until` is a reference.
    pub now_ms: Option<i64>,
    /// An open lifecycle requested more than this long before the reference time is overdue.
    pub overdue_after_ms: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            now_ms: None,
            overdue_after_ms: DEFAULT_OVERDUE_AFTER_MS,
        }
    }
}

impl Options {
    /// The defaults: no `now`, overdue after [`DEFAULT_OVERDUE_AFTER_MS`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets when the report is made.
    #[must_use]
    pub fn with_now_ms(mut self, now_ms: i64) -> Self {
        self.now_ms = Some(now_ms);
        self
    }

    /// Sets the age past which an open lifecycle is overdue.
    #[must_use]
    pub fn with_overdue_after_ms(mut self, ms: u64) -> Self {
        self.overdue_after_ms = ms;
        self
    }
}

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The window.
    pub window: Window,
    /// The reference time of `open` and `overdue`: the earlier of `until` and the time of the
    /// report; `null` with neither (then nothing is overdue).
    pub as_of_ms: Option<i64>,
    /// An open lifecycle older than this at `asOfMs` is overdue.
    pub overdue_after_ms: u64,
    /// Records (lines that parsed) in the window.
    pub records: u64,
    /// Every node group together.
    pub overall: Stats,
    /// Per node group, by id: every group named by a record in the window or with an open
    /// lifecycle requested in it.
    pub node_groups: BTreeMap<String, Stats>,
}

impl Report {
    /// Computes the report of `records` (in any order) for `window` with the default
    /// [`Options`] (definitions in the module docs).
    pub fn compute(records: &[Record], window: Window) -> Self {
        Self::compute_with(records, window, Options::default())
    }

    /// Computes the report of `records` (in any order) for `window` (definitions in the
    /// module docs).
    pub fn compute_with(records: &[Record], window: Window, options: Options) -> Self {
        let mut overall = Acc::default();
        let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
        let mut in_window = 0u64;
        for r in records.iter().filter(|r| window.contains(r.ts_ms)) {
            in_window += 1;
            let group = groups.entry(r.node_group().to_owned()).or_default();
            for acc in [&mut overall, group] {
                add(acc, r);
            }
        }
        let as_of_ms = match (window.until_ms, options.now_ms) {
            (Some(u), Some(n)) => Some(u.min(n)),
            (u, n) => u.or(n),
        };
        for life in lifecycles(records).into_values() {
            let open = window.contains(life.requested_at_ms)
                && life
                    .closed_at_ms
                    .is_none_or(|c| window.until_ms.is_some_and(|u| c >= u));
            if !open {
                continue;
            }
            let overdue = as_of_ms
                .is_some_and(|t| elapsed_ms(life.requested_at_ms, t) > options.overdue_after_ms);
            let group = groups.entry(life.node_group.to_owned()).or_default();
            for acc in [&mut overall, group] {
                acc.stats.open += 1;
                acc.stats.overdue += u64::from(overdue);
            }
        }
        Self {
            window,
            as_of_ms,
            overdue_after_ms: options.overdue_after_ms,
            records: in_window,
            overall: overall.finish(),
            node_groups: groups.into_iter().map(|(g, a)| (g, a.finish())).collect(),
        }
    }

    /// The report as a plain-text table, one row per node group and one for all of them,
    /// followed by the non-zero outcome counts.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let bound = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), rfc3339);
        let _ = writeln!(
            s,
            "window: [{}, {}), {} record(s); open as of {}, overdue after {}\n",
            bound(self.window.since_ms),
            bound(self.window.until_ms),
            self.records,
            bound(self.as_of_ms),
            human_ms(self.overdue_after_ms),
        );
        let _ = writeln!(
            s,
            "{:<20} {:>9} {:>8} {:>8} {:>5} {:>7} {:>8} {:>26} {:>26} {:>11}",
            "NODE GROUP",
            "DECISIONS",
            "REJECTED",
            "OUTCOMES",
            "OPEN",
            "OVERDUE",
            "START OK",
            "FORMATION P50/P95/P99",
            "PENDING P50/P95/P99",
            "ATTACH FAIL"
        );
        let rows = self
            .node_groups
            .iter()
            .map(|(g, st)| (g.as_str(), st))
            .chain(std::iter::once(("(all)", &self.overall)));
        for (group, st) in rows {
            let _ = writeln!(
                s,
                "{group:<20} {:>9} {:>8} {:>8} {:>5} {:>7} {:>8} {:>26} {:>26} {:>11}",
                st.decisions,
                st.rejected,
                st.terminal,
                st.open,
                st.overdue,
                percent(st.start_success_rate),
                triple(&st.formation),
                triple(&st.pending),
                percent(st.attach_failure_rate),
            );
        }
        let mut first = true;
        for (group, st) in self
            .node_groups
            .iter()
            .map(|(g, st)| (g.as_str(), st))
            .chain(std::iter::once(("(all)", &self.overall)))
        {
            let counts: Vec<String> = st
                .outcomes
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(o, n)| format!("{o} {n}"))
                .collect();
            if counts.is_empty() {
                continue;
            }
            if first {
                let _ = writeln!(s, "\noutcomes:");
                first = false;
            }
            let _ = writeln!(s, "  {group:<18} {}", counts.join(", "));
        }
        if self.overall.reserved > 0 || self.overall.released.values().any(|n| *n > 0) {
            let released: Vec<String> = self
                .overall
                .released
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(r, n)| format!("{r} {n}"))
                .collect();
            let _ = writeln!(
                s,
                "\nreservations: {} nodes reserved; released: {}",
                self.overall.reserved,
                if released.is_empty() {
                    "none".to_owned()
                } else {
                    released.join(", ")
                }
            );
        }
        if self.overall.repairs > 0 || self.overall.repair_nodes > 0 {
            let _ = writeln!(
                s,
                "\nrepairs: {} failed instance(s) charged to their gangs; {} node(s) added to replace them",
                self.overall.repairs, self.overall.repair_nodes
            );
        }
        if self.overall.deferred.values().any(|n| *n > 0) {
            let by: Vec<String> = self
                .overall
                .deferred
                .iter()
                .map(|(hold, n)| format!("{hold} {n}"))
                .collect();
            let _ = writeln!(
                s,
                "\ndeferred: gangs kept out of CA's scale-up, by hold: {}",
                by.join(", ")
            );
        }
        if self.overall.withdrawn > 0 {
            let _ = writeln!(
                s,
                "\nwithdrawn: {} instance(s) of ended lifecycles, before they were created",
                self.overall.withdrawn
            );
        }
        s
    }
}

/// A lifecycle's identity: `(scaleUpId, gang)`.
type Key = (String, Option<GangId>);

/// One lifecycle as the records show it, whatever their order.
struct Lifecycle<'a> {
    /// When it was requested: the earliest accepted decision that opened it, or without one,
    /// the earliest `atMs - elapsedMs` of its phases.
    requested_at_ms: i64,
    /// Whether `requested_at_ms` comes from a decision.
    from_decision: bool,
    /// The node group of the record `requested_at_ms` comes from.
    node_group: &'a str,
    /// When its first outcome was recorded.
    closed_at_ms: Option<i64>,
}

/// Every lifecycle the records open, by `(scaleUpId, gang)`: an accepted decision opens
/// [`DecisionEvent::opened_lifecycles`](super::DecisionEvent::opened_lifecycles); a phase
/// whose decision is not in the records (rotated away) opens its own, requested at
/// [`PhaseEvent::requested_at_ms`](super::PhaseEvent::requested_at_ms); an outcome closes it.
/// A set fold rather than a replay, so that the order of the records does not matter; for a
/// log read in order it gives what the scale-up tracker resumes from.
fn lifecycles(records: &[Record]) -> BTreeMap<Key, Lifecycle<'_>> {
    let mut lives: BTreeMap<Key, Lifecycle<'_>> = BTreeMap::new();
    let mut closed: BTreeMap<Key, i64> = BTreeMap::new();
    for r in records {
        match &r.event {
            Event::Decision(d) => {
                for key in d.opened_lifecycles() {
                    note(&mut lives, key, r.ts_ms, true, &d.node_group);
                }
            }
            Event::Phase(p) => {
                let key = (p.scale_up_id.clone(), p.gang.clone());
                note(&mut lives, key, p.requested_at_ms(), false, &p.node_group);
            }
            Event::Outcome(o) => {
                let at = closed
                    .entry((o.scale_up_id.clone(), o.gang.clone()))
                    .or_insert(r.ts_ms);
                *at = (*at).min(r.ts_ms);
            }
            Event::Reservation(_)
            | Event::Withdrawal(_)
            | Event::Repair(_)
            | Event::Deferral(_) => {}
        }
    }
    for (key, at) in closed {
        if let Some(life) = lives.get_mut(&key) {
            life.closed_at_ms = Some(at);
        }
    }
    lives
}

/// Records that a lifecycle was requested at `at` according to one record: a decision beats
/// a phase; among equals the earliest time wins, then the smallest node group (so that the
/// result does not depend on the order of the records).
fn note<'a>(
    lives: &mut BTreeMap<Key, Lifecycle<'a>>,
    key: Key,
    at: i64,
    from_decision: bool,
    node_group: &'a str,
) {
    let new = Lifecycle {
        requested_at_ms: at,
        from_decision,
        node_group,
        closed_at_ms: None,
    };
    match lives.entry(key) {
        std::collections::btree_map::Entry::Vacant(e) => {
            e.insert(new);
        }
        std::collections::btree_map::Entry::Occupied(mut e) => {
            let old = e.get();
            fn rank<'a>(l: &Lifecycle<'a>) -> (bool, i64, &'a str) {
                (!l.from_decision, l.requested_at_ms, l.node_group)
            }
            if rank(&new) < rank(old) {
                e.insert(new);
            }
        }
    }
}

/// The holds of `deferral` records, as the report counts them.
const HOLDS: [&str; 4] = ["covered", "unhostable", "no_room", "behind"];

/// `hold` as one of [`HOLDS`]; `None` for a hold this build does not know.
fn hold_label(hold: &str) -> Option<&'static str> {
    HOLDS.into_iter().find(|h| *h == hold)
}

fn add(acc: &mut Acc, r: &Record) {
    let s = &mut acc.stats;
    match &r.event {
        Event::Decision(d) => {
            s.decisions += 1;
            if d.is_accepted() {
                s.accepted += 1;
            } else {
                s.rejected += 1;
            }
            s.nodes_asked += u64::from(d.ca_delta);
            s.nodes_applied += u64::from(d.applied_delta);
            s.repair_nodes += d.repairs().iter().map(|(_, n)| u64::from(*n)).sum::<u64>();
        }
        Event::Phase(_) => {}
        Event::Withdrawal(w) => {
            s.withdrawn += u64::try_from(w.claims.len()).unwrap_or(u64::MAX);
        }
        Event::Repair(_) => s.repairs += 1,
        Event::Deferral(d) => {
            if let Some(hold) = d.hold.as_deref().and_then(hold_label) {
                *s.deferred.entry(hold).or_insert(0) += 1;
            }
        }
        Event::Reservation(r) => match (r.action, r.reason) {
            (ReservationAction::Reserved, _) => s.reserved += 1,
            (ReservationAction::Released, reason) => {
                let reason = reason.map_or("unknown", ReleaseReason::as_str);
                *s.released.entry(reason).or_insert(0) += 1;
            }
        },
        Event::Outcome(o) => {
            s.terminal += 1;
            *s.outcomes.entry(o.outcome.as_str()).or_insert(0) += 1;
            if o.formed_at_ms.is_some() || o.outcome == Outcome::AttachFailed {
                s.formed_or_attach_failed += 1;
                if o.attach_failures > 0 || o.outcome == Outcome::AttachFailed {
                    s.with_attach_failures += 1;
                }
            }
            if let Some(formed) = o.formed_at_ms {
                acc.formation.push(elapsed_ms(o.requested_at_ms, formed));
                if let Some(since) = o.pending_since_ms {
                    acc.pending.push(elapsed_ms(since, formed));
                }
            }
        }
    }
}

/// `ms` (unix milliseconds) as RFC 3339 UTC with milliseconds, e.g.
/// `2026-05-01T12:00:00.000Z`.
/// Outside years 1970–9999, the milliseconds followed by `ms`.
pub fn rfc3339(ms: i64) -> String {
    /// 9999-12-31T23:59:59.999Z.
    const LAST: u64 = 253_402_300_799_999;
    match u64::try_from(ms) {
        Ok(ms) if ms <= LAST => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        _ => format!("{ms}ms"),
    }
}

/// A duration for people: `850ms`, `12.3s`, `4m05s`, `2h07m`.
pub fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", ms / 1_000, ms % 1_000 / 100),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

fn triple(p: &Percentiles) -> String {
    let f = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), human_ms);
    format!("{}/{}/{}", f(p.p50_ms), f(p.p95_ms), f(p.p99_ms))
}

fn percent(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

#[cfg(test)]
mod tests;
