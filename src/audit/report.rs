//! `gangscaler audit report`: what the audit log says about scale-ups in a time window, overall
//! and per node group. A pure function of the records and the window.
//!
//! # Definitions
//!
//! - **In the window**: a record whose `tsMs` is in `[since, until)`. An outcome counts in the
//!   window it was recorded in (when the scale-up ended), a decision in the window it was made.
//! - **Formation time**: `formedAtMs - requestedAtMs` of each outcome whose gang formed.
//! - **Pending time**: `formedAtMs - pendingSinceMs` of each outcome with both: how long the
//!   gang waited, from its creation until it formed (includes the time before CA asked).
//! - **Start success rate**: `succeeded` outcomes / all outcomes (every terminal outcome,
//!   including `cancelled` and `preempted`). `null` with no outcome.
//! - **Attach failure rate**: outcomes that are `attachFailed` or saw `attachFailures > 0` /
//!   outcomes that reached `gangFormed` (have `formedAtMs`) or are `attachFailed`. `null` when
//!   the denominator is 0.
//! - **Open**: lifecycles opened by a decision in the window with no outcome in the records.
//! - **Percentiles** by nearest rank: the `p`th percentile of `n` sorted values is the value at
//!   1-based rank `ceil(p * n / 100)`. Always one of the values; no interpolation.
//!
//! Negative durations (a clock stepped back) count as 0.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use super::record::{Event, GangId, Outcome, Record, elapsed_ms};

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
    /// Open lifecycles.
    pub open: u64,
    /// `succeeded / terminal`.
    pub start_success_rate: Option<f64>,
    /// Outcomes that reached `gangFormed` or are `attachFailed`.
    pub formed: u64,
    /// Of those, how many had attach failures.
    pub attach_failed: u64,
    /// `attachFailed / formed`.
    pub attach_failure_rate: Option<f64>,
    /// Formation time.
    pub formation: Percentiles,
    /// Pending time.
    pub pending: Percentiles,
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
        let succeeded = s
            .outcomes
            .get(Outcome::Succeeded.as_str())
            .copied()
            .unwrap_or(0);
        s.start_success_rate = ratio(succeeded, s.terminal);
        s.attach_failure_rate = ratio(s.attach_failed, s.formed);
        s.formation = Percentiles::of(self.formation);
        s.pending = Percentiles::of(self.pending);
        self.stats
    }
}

#[allow(clippy::cast_precision_loss, reason = "counts are far below 2^52")]
fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The window.
    pub window: Window,
    /// Records in the window.
    pub records: u64,
    /// Every node group together.
    pub overall: Stats,
    /// Per node group, by id.
    pub node_groups: BTreeMap<String, Stats>,
}

impl Report {
    /// Computes the report of `records` for `window` (definitions in the module docs).
    pub fn compute(records: &[Record], window: Window) -> Self {
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
        for (node_group, requested_at_ms) in open_lifecycles(records) {
            if window.contains(requested_at_ms) {
                overall.stats.open += 1;
                groups.entry(node_group.to_owned()).or_default().stats.open += 1;
            }
        }
        Self {
            window,
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
            "window: [{}, {}), {} record(s)\n",
            bound(self.window.since_ms),
            bound(self.window.until_ms),
            self.records
        );
        let _ = writeln!(
            s,
            "{:<20} {:>9} {:>8} {:>8} {:>5} {:>8} {:>26} {:>26} {:>11}",
            "NODE GROUP",
            "DECISIONS",
            "REJECTED",
            "OUTCOMES",
            "OPEN",
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
                "{group:<20} {:>9} {:>8} {:>8} {:>5} {:>8} {:>26} {:>26} {:>11}",
                st.decisions,
                st.rejected,
                st.terminal,
                st.open,
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
        s
    }
}

/// The lifecycles `records` leave open, each as (node group, requested at): the fold the
/// scale-up tracker resumes from, without its phases. An accepted decision opens
/// [`DecisionEvent::opened_lifecycles`](super::DecisionEvent::opened_lifecycles); a phase
/// reopens its lifecycle when its decision was rotated away, requested at
/// [`PhaseEvent::requested_at_ms`](super::PhaseEvent::requested_at_ms); an outcome closes its
/// lifecycle.
fn open_lifecycles(records: &[Record]) -> Vec<(&str, i64)> {
    let mut open: BTreeMap<(String, Option<GangId>), (&str, i64)> = BTreeMap::new();
    for r in records {
        match &r.event {
            Event::Decision(d) => {
                for key in d.opened_lifecycles() {
                    open.entry(key).or_insert((d.node_group.as_str(), r.ts_ms));
                }
            }
            Event::Phase(p) => {
                let key = (p.scale_up_id.clone(), p.gang.clone());
                open.entry(key)
                    .or_insert((p.node_group.as_str(), p.requested_at_ms()));
            }
            Event::Outcome(o) => {
                open.remove(&(o.scale_up_id.clone(), o.gang.clone()));
            }
        }
    }
    open.into_values().collect()
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
        }
        Event::Phase(_) => {}
        Event::Outcome(o) => {
            s.terminal += 1;
            *s.outcomes.entry(o.outcome.as_str()).or_insert(0) += 1;
            if o.formed_at_ms.is_some() || o.outcome == Outcome::AttachFailed {
                s.formed += 1;
                if o.attach_failures > 0 || o.outcome == Outcome::AttachFailed {
                    s.attach_failed += 1;
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
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_the_documented_element() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 50), Some(50));
        assert_eq!(nearest_rank(&v, 95), Some(95));
        assert_eq!(nearest_rank(&v, 99), Some(99));
        assert_eq!(nearest_rank(&[7], 50), Some(7));
        assert_eq!(nearest_rank(&[1, 2, 3, 4], 50), Some(2));
        assert_eq!(nearest_rank(&[1, 2, 3, 4, 5], 50), Some(3));
        assert_eq!(nearest_rank(&[1, 2, 3, 4, 5], 0), Some(1));
        assert_eq!(nearest_rank(&[], 50), None);
    }

    #[test]
    fn nearest_rank_is_always_one_of_the_values_and_monotone_in_p() {
        for n in 1..60u64 {
            let v: Vec<u64> = (0..n).map(|i| i * i).collect();
            let mut last = 0;
            for p in 0..=100 {
                let x = nearest_rank(&v, p).unwrap();
                assert!(v.contains(&x));
                assert!(x >= last, "n={n} p={p}");
                last = x;
            }
            assert_eq!(nearest_rank(&v, 100), v.last().copied());
        }
    }

    #[test]
    fn the_window_is_half_open() {
        let w = Window::new(Some(10), Some(20));
        assert!(!w.contains(9));
        assert!(w.contains(10));
        assert!(w.contains(19));
        assert!(!w.contains(20));
        assert!(Window::all().contains(i64::MIN));
    }

    #[test]
    fn durations_and_times_are_written_for_people() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(12_345), "12.3s");
        assert_eq!(human_ms(245_000), "4m05s");
        assert_eq!(human_ms(7_620_000), "2h07m");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_777_636_800_123), "2026-05-01T12:00:00.123Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(i64::MAX), format!("{}ms", i64::MAX));
        assert_eq!(rfc3339(-5), "-5ms");
    }
}
