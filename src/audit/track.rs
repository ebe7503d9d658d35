//! The lifecycle of each scale-up, kept so that a restart neither repeats nor loses a record.
//!
//! A [`Tracker`] is a fold over records: an accepted [`DecisionEvent`] with a `scaleUpId`
//! opens one lifecycle per admitted gang (or one without a gang), in phase
//! [`Phase::Requested`]; a [`PhaseEvent`] moves it forward (never back); an
//! [`OutcomeEvent`] closes it. [`Tracker::plan`] compares each open lifecycle with what the
//! cluster shows now (an [`Observation`], supplied by the caller) and returns the records that
//! bring the log up to date: one [`PhaseEvent`] if a later phase is observed, and one
//! [`OutcomeEvent`] if a terminal outcome is observed or a timeout has passed.
//!
//! [`Recorder`] pairs a tracker with an [`AuditLog`]: it appends each record and only then
//! applies it to the tracker. On restart, [`Recorder::open`] rebuilds the tracker from the log
//! files, so:
//!
//! - **No duplicates.** A phase or outcome is emitted only when it is past what the log holds;
//!   the log holds exactly the acknowledged records, and the tracker is rebuilt from them.
//! - **Nothing dropped.** Observations are of state, not of edges: a transition that happened
//!   while gangscaler was down, or whose record failed to append, is still visible in the
//!   cluster at the next [`Recorder::reconcile`] and is recorded then (at observation time;
//!   phases observed together are recorded as the latest of them).
//!
//! Everything but [`Recorder`]'s I/O is pure: time comes in as `now_ms`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

use super::Result;
use super::log::{AuditLog, Config};
use super::read::{BadLine, read_files, rotated_paths};
use super::record::{
    DecisionEvent, Event, GangId, Outcome, OutcomeEvent, Phase, PhaseEvent, Record, elapsed_ms,
};
use crate::planner;

/// Identity of one lifecycle: a scale-up and, when it was for gangs, one of them.
pub type Key = (String, Option<GangId>);

/// When an open scale-up is given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// `registrationTimeout` when the nodes have not registered this long after the request
    /// (15 minutes by default, CA's `max-node-provision-time`).
    pub registration_ms: u64,
    /// `formationTimeout` when the gang has not formed this long after the request (30 minutes
    /// by default).
    pub formation_ms: u64,
    /// `attachFailed` when the gang's volumes are not attached this long after it formed (10
    /// minutes by default).
    pub attach_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            registration_ms: 15 * 60 * 1000,
            formation_ms: 30 * 60 * 1000,
            attach_ms: 10 * 60 * 1000,
        }
    }
}

/// An open lifecycle, as the log has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Open {
    /// The scale-up.
    pub scale_up_id: String,
    /// Its node group.
    pub node_group: String,
    /// The gang, when the scale-up was for one.
    pub gang: Option<GangId>,
    /// Nodes the scale-up added (`appliedDelta`); 0 when unknown (reopened from a phase
    /// record whose decision was rotated away).
    pub nodes: u32,
    /// The latest phase recorded.
    pub phase: Phase,
    /// When it was requested, unix milliseconds.
    pub requested_at_ms: i64,
    /// When the gang was recorded as formed.
    pub formed_at_ms: Option<i64>,
    /// When its volumes were recorded as attached.
    pub attached_at_ms: Option<i64>,
}

impl Open {
    /// Its key.
    pub fn key(&self) -> Key {
        (self.scale_up_id.clone(), self.gang.clone())
    }
}

/// What the cluster shows now for one open lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The latest phase the cluster shows reached.
    pub phase: Phase,
    /// A terminal outcome the cluster shows, with its reason.
    pub outcome: Option<(Outcome, String)>,
    /// When the gang started pending (its creation), if known.
    pub pending_since_ms: Option<i64>,
    /// Failed volume-attach attempts seen so far.
    pub attach_failures: u32,
    /// Detail for the phase record, e.g. `3/4 nodes ready`.
    pub detail: Option<String>,
}

impl Observation {
    /// The cluster shows `phase` reached and nothing else.
    pub fn at(phase: Phase) -> Self {
        Self {
            phase,
            outcome: None,
            pending_since_ms: None,
            attach_failures: 0,
            detail: None,
        }
    }

    /// Sets a terminal outcome.
    #[must_use]
    pub fn with_outcome(mut self, outcome: Outcome, reason: impl Into<String>) -> Self {
        self.outcome = Some((outcome, reason.into()));
        self
    }

    /// Sets when the gang started pending.
    #[must_use]
    pub fn with_pending_since_ms(mut self, ms: i64) -> Self {
        self.pending_since_ms = Some(ms);
        self
    }

    /// Sets the failed attach attempts.
    #[must_use]
    pub fn with_attach_failures(mut self, n: u32) -> Self {
        self.attach_failures = n;
        self
    }

    /// Sets the detail.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// The open lifecycles, folded from records (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    timeouts: Timeouts,
    open: BTreeMap<Key, Open>,
    issued: u64,
}

impl Tracker {
    /// An empty tracker.
    pub fn new(timeouts: Timeouts) -> Self {
        Self {
            timeouts,
            open: BTreeMap::new(),
            issued: 0,
        }
    }

    /// A tracker that has applied `records`, in order.
    pub fn resume<'a>(timeouts: Timeouts, records: impl IntoIterator<Item = &'a Record>) -> Self {
        let mut t = Self::new(timeouts);
        for r in records {
            t.apply(r);
        }
        t
    }

    /// The open lifecycles, by key.
    pub fn open(&self) -> impl Iterator<Item = &Open> {
        self.open.values()
    }

    /// How many lifecycles are open.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The next scale-up id for a decision at `ts_ms`: `su-<tsMs>-<n>`, with `n` counting the
    /// scale-ups in the log so far.
    pub fn next_id(&self, ts_ms: i64) -> String {
        format!("su-{ts_ms}-{}", self.issued + 1)
    }

    /// Applies one record. Idempotent for phases (a phase not past the recorded one changes
    /// nothing) and outcomes (closing a closed lifecycle changes nothing).
    pub fn apply(&mut self, record: &Record) {
        match &record.event {
            Event::Decision(d) => {
                let Some(id) = d.scale_up_id.as_ref().filter(|_| d.is_accepted()) else {
                    return;
                };
                self.issued += 1;
                let gangs: Vec<Option<GangId>> = if d.gangs.is_empty() {
                    vec![None]
                } else {
                    d.gangs.iter().map(|g| Some(g.gang.clone())).collect()
                };
                for gang in gangs {
                    let key = (id.clone(), gang.clone());
                    self.open.entry(key).or_insert_with(|| Open {
                        scale_up_id: id.clone(),
                        node_group: d.node_group.clone(),
                        gang,
                        nodes: d.applied_delta,
                        phase: Phase::Requested,
                        requested_at_ms: record.ts_ms,
                        formed_at_ms: None,
                        attached_at_ms: None,
                    });
                }
            }
            Event::Phase(p) => {
                // The decision may be in a rotated file that is gone: a phase record carries
                // enough to reopen the lifecycle.
                let key = (p.scale_up_id.clone(), p.gang.clone());
                let open = self.open.entry(key).or_insert_with(|| Open {
                    scale_up_id: p.scale_up_id.clone(),
                    node_group: p.node_group.clone(),
                    gang: p.gang.clone(),
                    nodes: 0,
                    phase: Phase::Requested,
                    requested_at_ms: p
                        .at_ms
                        .saturating_sub(i64::try_from(p.elapsed_ms).unwrap_or(i64::MAX)),
                    formed_at_ms: None,
                    attached_at_ms: None,
                });
                advance(open, p.phase, p.at_ms);
            }
            Event::Outcome(o) => {
                self.open.remove(&(o.scale_up_id.clone(), o.gang.clone()));
            }
        }
    }

    /// The records that bring `open`'s lifecycle up to date with `obs` at `now_ms`: at most one
    /// [`PhaseEvent`] and one [`OutcomeEvent`], in that order. Pure.
    ///
    /// Without an observed outcome, the lifecycle ends with `registrationTimeout` before
    /// `nodesRegistered`, `formationTimeout` before `gangFormed` (gangs only), `attachFailed`
    /// when the volumes are not attached [`Timeouts::attach_ms`] after formation, and
    /// `succeeded` at `nodesReady` when it has no gang.
    pub fn step(&self, open: &Open, obs: &Observation, now_ms: i64) -> Vec<Record> {
        let mut out = Vec::new();
        let mut state = open.clone();
        let elapsed = elapsed_ms(open.requested_at_ms, now_ms);
        if obs.phase > open.phase {
            advance(&mut state, obs.phase, now_ms);
            out.push(Record::new(
                now_ms,
                PhaseEvent {
                    scale_up_id: open.scale_up_id.clone(),
                    node_group: open.node_group.clone(),
                    gang: open.gang.clone(),
                    phase: obs.phase,
                    at_ms: now_ms,
                    elapsed_ms: elapsed,
                    detail: obs.detail.clone(),
                },
            ));
        }
        let outcome = obs.outcome.clone().or_else(|| {
            let t = self.timeouts;
            if state.phase < Phase::NodesRegistered && elapsed > t.registration_ms {
                Some((
                    Outcome::RegistrationTimeout,
                    format!(
                        "nodes not registered {elapsed} ms after the request (limit {} ms)",
                        t.registration_ms
                    ),
                ))
            } else if state.gang.is_some()
                && state.phase < Phase::GangFormed
                && elapsed > t.formation_ms
            {
                Some((
                    Outcome::FormationTimeout,
                    format!(
                        "gang not formed {elapsed} ms after the request (limit {} ms)",
                        t.formation_ms
                    ),
                ))
            } else if let Some(formed) = state
                .formed_at_ms
                .filter(|_| state.phase < Phase::VolumesAttached)
                && elapsed_ms(formed, now_ms) > t.attach_ms
            {
                Some((
                    Outcome::AttachFailed,
                    format!(
                        "volumes not attached {} ms after the gang formed (limit {} ms)",
                        elapsed_ms(formed, now_ms),
                        t.attach_ms
                    ),
                ))
            } else if state.gang.is_none() && state.phase >= Phase::NodesReady {
                Some((Outcome::Succeeded, "nodes ready (no gang)".to_owned()))
            } else {
                None
            }
        });
        if let Some((outcome, reason)) = outcome {
            out.push(Record::new(
                now_ms,
                OutcomeEvent {
                    scale_up_id: open.scale_up_id.clone(),
                    node_group: open.node_group.clone(),
                    gang: open.gang.clone(),
                    outcome,
                    requested_at_ms: open.requested_at_ms,
                    formed_at_ms: state.formed_at_ms,
                    attached_at_ms: state.attached_at_ms,
                    pending_since_ms: obs.pending_since_ms,
                    attach_failures: obs.attach_failures,
                    duration_ms: elapsed,
                    reason,
                },
            ));
        }
        out
    }

    /// [`step`](Self::step) over every open lifecycle `observe` has news of (`None`: no news,
    /// e.g. the cluster view is not synced). Pure: apply the records after appending them.
    pub fn plan(
        &self,
        now_ms: i64,
        mut observe: impl FnMut(&Open) -> Option<Observation>,
    ) -> Vec<Record> {
        self.open
            .values()
            .filter_map(|open| observe(open).map(|obs| self.step(open, &obs, now_ms)))
            .flatten()
            .collect()
    }
}

/// A record [`Recorder::reconcile`] appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The record.
    pub record: Record,
    /// Its lifecycle just before the record was applied.
    pub before: Option<Open>,
}

impl Appended {
    /// The record is the first to show its gang formed (a phase at or past `gangFormed` of a
    /// lifecycle with a gang that had not formed): the moment formation time is measured.
    pub fn first_formed(&self) -> Option<&PhaseEvent> {
        let Event::Phase(p) = &self.record.event else {
            return None;
        };
        let before = self.before.as_ref()?;
        (p.gang.is_some() && p.phase >= Phase::GangFormed && before.formed_at_ms.is_none())
            .then_some(p)
    }
}

fn record_key(record: &Record) -> Option<Key> {
    match &record.event {
        Event::Decision(_) => None,
        Event::Phase(p) => Some((p.scale_up_id.clone(), p.gang.clone())),
        Event::Outcome(o) => Some((o.scale_up_id.clone(), o.gang.clone())),
    }
}

fn advance(open: &mut Open, phase: Phase, at_ms: i64) {
    if phase <= open.phase {
        return;
    }
    open.phase = phase;
    if phase >= Phase::GangFormed && open.formed_at_ms.is_none() && open.gang.is_some() {
        open.formed_at_ms = Some(at_ms);
    }
    if phase >= Phase::VolumesAttached && open.attached_at_ms.is_none() {
        open.attached_at_ms = Some(at_ms);
    }
}

/// An [`AuditLog`] and the [`Tracker`] rebuilt from it: the engine's one handle on the audit.
#[derive(Debug)]
pub struct Recorder {
    log: AuditLog,
    // Held across the append so that the tracker never runs ahead of (or behind) the log.
    tracker: Mutex<Tracker>,
}

/// What [`Recorder::open`] found in the existing log files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resumed {
    /// Files read, oldest first.
    pub files: Vec<PathBuf>,
    /// Records read.
    pub records: usize,
    /// Lines skipped.
    pub bad: Vec<BadLine>,
    /// Lifecycles still open.
    pub open: usize,
    /// Bytes of a torn last line cut off.
    pub repaired_bytes: u64,
}

impl Recorder {
    /// Opens the log at `path` (repairing a torn tail), reads it and its rotated files, and
    /// resumes the lifecycles they leave open.
    ///
    /// # Errors
    /// The [`AuditLog::open`] errors, or [`Error::Read`](super::Error::Read).
    pub fn open(
        path: impl Into<PathBuf>,
        config: Config,
        timeouts: Timeouts,
    ) -> Result<(Self, Resumed)> {
        let log = AuditLog::open(path, config)?;
        let files = rotated_paths(log.path())?;
        let reading = read_files(&files)?;
        let tracker = Tracker::resume(timeouts, &reading.records);
        let resumed = Resumed {
            files,
            records: reading.records.len(),
            bad: reading.bad,
            open: tracker.open_count(),
            repaired_bytes: log.repaired_bytes(),
        };
        Ok((
            Self {
                log,
                tracker: Mutex::new(tracker),
            },
            resumed,
        ))
    }

    /// The log.
    pub fn log(&self) -> &AuditLog {
        &self.log
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, Tracker> {
        // The tracker is only changed after a successful append, so it is consistent even if
        // a holder panicked.
        self.tracker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open lifecycles.
    pub fn open_scale_ups(&self) -> Vec<Open> {
        self.tracker().open().cloned().collect()
    }

    /// How many lifecycles are open.
    pub fn open_count(&self) -> usize {
        self.tracker().open_count()
    }

    /// Records an admission decision made at `now_ms` (call it after the provisioner
    /// answered). An accepted decision with nodes to add gets a new scale-up id, returned.
    ///
    /// # Errors
    /// The [`AuditLog::append`] errors; the decision is then not recorded.
    pub fn decision(
        &self,
        decision: &planner::Decision,
        now_ms: i64,
        duration_ms: Option<u64>,
    ) -> Result<Option<String>> {
        let mut tracker = self.tracker();
        let mut event = DecisionEvent::from(decision);
        event.duration_ms = duration_ms;
        if decision.is_accepted() && decision.applied_delta > 0 {
            event.scale_up_id = Some(tracker.next_id(now_ms));
        }
        let id = event.scale_up_id.clone();
        let record = Record::new(now_ms, event);
        self.log.append(&record)?;
        tracker.apply(&record);
        Ok(id)
    }

    /// Appends any record (e.g. `provisionFailed` straight after a failed call) and applies it.
    ///
    /// # Errors
    /// The [`AuditLog::append`] errors; the record is then not recorded.
    pub fn record(&self, record: &Record) -> Result<()> {
        let mut tracker = self.tracker();
        self.log.append(record)?;
        tracker.apply(record);
        Ok(())
    }

    /// Brings every open lifecycle up to date with what `observe` says the cluster shows at
    /// `now_ms` (see [`Tracker::plan`]); returns the records appended, each with the
    /// lifecycle as it was before them (for metrics and events that fire on a transition).
    ///
    /// # Errors
    /// The first [`AuditLog::append`] error, with the records appended before it (kept and
    /// applied); the rest are computed again by the next call.
    pub fn reconcile(
        &self,
        now_ms: i64,
        observe: impl FnMut(&Open) -> Option<Observation>,
    ) -> std::result::Result<Vec<Appended>, (super::Error, Vec<Appended>)> {
        let mut tracker = self.tracker();
        let records = tracker.plan(now_ms, observe);
        let mut done = Vec::with_capacity(records.len());
        for record in records {
            let before = record_key(&record).and_then(|k| tracker.open.get(&k).cloned());
            if let Err(e) = self.log.append(&record) {
                return Err((e, done));
            }
            tracker.apply(&record);
            done.push(Appended { record, before });
        }
        Ok(done)
    }
}

/// Records for tests of the tracker and the observer.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::audit::record::{DecisionEvent, GangId, GangSummary, Verdict};

    pub(crate) fn gang(name: &str) -> GangId {
        GangId {
            namespace: "ml".into(),
            name: name.into(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        }
    }

    pub(crate) fn decision(id: Option<&str>, verdict: Verdict, gangs: &[&str]) -> DecisionEvent {
        DecisionEvent {
            scale_up_id: id.map(str::to_owned),
            node_group: "h100".into(),
            policy: "strict".into(),
            verdict,
            rule: "gangs_admitted".into(),
            target: 0,
            max_size: 8,
            headroom: 8,
            ca_delta: 2,
            applied_delta: 2,
            capped: false,
            gang_nodes: 2,
            ungrouped_nodes: 0,
            gangs: gangs
                .iter()
                .map(|g| GangSummary {
                    gang: gang(g),
                    priority: 0,
                    extent: crate::audit::Extent::Whole,
                    nodes: 1,
                    in_flight: 0,
                })
                .collect(),
            deferred: Vec::new(),
            deferred_total: 0,
            covered: 0,
            unhostable: 0,
            duration_ms: None,
            reason: "test".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::Verdict;

    use super::test_support::{decision, gang};

    fn short() -> Timeouts {
        Timeouts {
            registration_ms: 100,
            formation_ms: 1_000,
            attach_ms: 500,
        }
    }

    #[test]
    fn an_accepted_decision_opens_one_lifecycle_per_gang_and_a_rejection_none() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(
            5,
            decision(None, Verdict::Reject, &["a"]).with_scale_up_id("x"),
        ));
        t.apply(&Record::new(5, decision(None, Verdict::Accept, &["a"])));
        assert_eq!(t.open_count(), 0);
        t.apply(&Record::new(
            10,
            decision(Some("s1"), Verdict::Accept, &["a", "b"]),
        ));
        t.apply(&Record::new(11, decision(Some("s2"), Verdict::Accept, &[])));
        let keys: Vec<Key> = t.open().map(Open::key).collect();
        assert_eq!(
            keys,
            [
                ("s1".to_owned(), Some(gang("a"))),
                ("s1".to_owned(), Some(gang("b"))),
                ("s2".to_owned(), None),
            ]
        );
        assert!(t.open().all(|o| o.phase == Phase::Requested));
        assert_eq!(t.next_id(99), "su-99-3");
    }

    #[test]
    fn phases_only_move_forward_and_repeats_emit_nothing() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(
            0,
            decision(Some("s"), Verdict::Accept, &["a"]),
        ));
        let open = t.open().next().unwrap().clone();
        let recs = t.step(&open, &Observation::at(Phase::NodesReady), 50);
        assert_eq!(recs.len(), 1);
        t.apply(&recs[0]);
        let open = t.open().next().unwrap().clone();
        assert_eq!(open.phase, Phase::NodesReady);
        assert!(
            t.step(&open, &Observation::at(Phase::NodesReady), 60)
                .is_empty()
        );
        assert!(
            t.step(&open, &Observation::at(Phase::InstancesCreated), 60)
                .is_empty()
        );
    }

    #[test]
    fn timeouts_close_lifecycles_that_stall() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(
            0,
            decision(Some("s"), Verdict::Accept, &["a"]),
        ));
        let open = t.open().next().unwrap().clone();
        assert!(
            t.step(&open, &Observation::at(Phase::Requested), 100)
                .is_empty()
        );
        let recs = t.step(&open, &Observation::at(Phase::InstancesCreated), 101);
        assert_eq!(recs.len(), 2);
        let Event::Outcome(o) = &recs[1].event else {
            panic!("{recs:?}")
        };
        assert_eq!(o.outcome, Outcome::RegistrationTimeout);
        assert_eq!(o.duration_ms, 101);

        let recs = t.step(&open, &Observation::at(Phase::NodesReady), 1_001);
        let Event::Outcome(o) = &recs[1].event else {
            panic!("{recs:?}")
        };
        assert_eq!(o.outcome, Outcome::FormationTimeout);
        assert_eq!(o.formed_at_ms, None);
    }

    #[test]
    fn a_scale_up_without_gangs_succeeds_when_its_nodes_are_ready() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(0, decision(Some("s"), Verdict::Accept, &[])));
        let recs = t.plan(40, |_| Some(Observation::at(Phase::NodesReady)));
        assert_eq!(recs.len(), 2);
        let Event::Outcome(o) = &recs[1].event else {
            panic!("{recs:?}")
        };
        assert_eq!(o.outcome, Outcome::Succeeded);
        for r in &recs {
            t.apply(r);
        }
        assert_eq!(t.open_count(), 0);
    }

    #[test]
    fn an_observed_outcome_carries_the_recorded_times() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(
            0,
            decision(Some("s"), Verdict::Accept, &["a"]),
        ));
        for r in t.plan(30, |_| Some(Observation::at(Phase::GangFormed))) {
            t.apply(&r);
        }
        let recs = t.plan(45, |_| {
            Some(
                Observation::at(Phase::VolumesAttached)
                    .with_outcome(Outcome::Succeeded, "running")
                    .with_pending_since_ms(-20)
                    .with_attach_failures(1),
            )
        });
        let Event::Outcome(o) = &recs[1].event else {
            panic!("{recs:?}")
        };
        assert_eq!(
            (o.formed_at_ms, o.attached_at_ms, o.pending_since_ms),
            (Some(30), Some(45), Some(-20))
        );
        assert_eq!((o.attach_failures, o.duration_ms), (1, 45));
    }

    #[test]
    fn a_phase_whose_decision_was_rotated_away_reopens_its_lifecycle() {
        let mut t = Tracker::new(short());
        t.apply(&Record::new(
            500,
            PhaseEvent {
                scale_up_id: "old".into(),
                node_group: "h100".into(),
                gang: Some(gang("a")),
                phase: Phase::NodesReady,
                at_ms: 500,
                elapsed_ms: 120,
                detail: None,
            },
        ));
        let open = t.open().next().unwrap();
        assert_eq!(open.requested_at_ms, 380);
        assert_eq!(open.phase, Phase::NodesReady);
    }
}
