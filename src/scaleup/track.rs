//! The scale-up state machine: [`Tracker`], a pure fold over audit records that knows which
//! lifecycles are open and which records bring each one up to date.
//!
//! An accepted [`DecisionEvent`](crate::audit::DecisionEvent) with a `scaleUpId` opens one
//! lifecycle per admitted gang (or one without a gang), in phase [`Phase::Requested`]; a
//! [`PhaseEvent`] moves it forward (never back); an [`OutcomeEvent`] closes it.
//! [`Tracker::plan`] compares each open lifecycle with what the cluster shows now (an
//! [`Observation`], supplied by the caller, see [`observe`](super::observe())) and returns the
//! records that bring the log up to date: one [`PhaseEvent`] if a later phase is observed, and
//! one [`OutcomeEvent`] if a terminal outcome is observed or a timeout has passed.
//!
//! Pure: time comes in as `now_ms`, observations as arguments, and nothing is written; the
//! [`Recorder`](super::Recorder) appends the records and applies them. Depends on `audit`'s
//! record types only.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::audit::record::elapsed_ms;
use crate::audit::{Event, GangId, Outcome, OutcomeEvent, Phase, PhaseEvent, Record};

/// Identity of one lifecycle: a scale-up and, when it was for gangs, one of them.
pub type Key = (String, Option<GangId>);

/// When an open scale-up is given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// `registrationTimeout` when the nodes have not registered this long after the request,
    /// or for a scale-up without gangs, have not become Ready (15 minutes by default, CA's
    /// `max-node-provision-time`).
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
    /// Nodes the decision requested for this lifecycle's gang (its `gangs[].nodes`); 0 without
    /// a gang or when unknown.
    pub gang_nodes: u32,
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

    /// A tracker that has applied `records`, in order, except that a lifecycle with an
    /// outcome anywhere among them stays closed: an outcome is final, so a phase record
    /// that comes after it (records merged from several replicas' logs whose clocks
    /// disagree) does not reopen it.
    pub fn resume<'a>(
        timeouts: Timeouts,
        records: impl IntoIterator<Item = &'a Record> + Clone,
    ) -> Self {
        let closed: std::collections::BTreeSet<Key> = records
            .clone()
            .into_iter()
            .filter_map(|r| match &r.event {
                Event::Outcome(o) => Some((o.scale_up_id.clone(), o.gang.clone())),
                _ => None,
            })
            .collect();
        let mut t = Self::new(timeouts);
        for r in records {
            t.apply(r);
            if !closed.is_empty() {
                t.open.retain(|k, _| !closed.contains(k));
            }
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

    /// The open lifecycle `key`, if it is open.
    pub fn get(&self, key: &Key) -> Option<&Open> {
        self.open.get(key)
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
                let opened = d.opened_lifecycles();
                if opened.is_empty() {
                    return;
                }
                self.issued += 1;
                for (id, gang) in opened {
                    let key = (id.clone(), gang.clone());
                    let gang_nodes = d
                        .gangs
                        .iter()
                        .find(|g| Some(&g.gang) == gang.as_ref())
                        .map_or(0, |g| g.nodes);
                    self.open.entry(key).or_insert_with(|| Open {
                        scale_up_id: id,
                        node_group: d.node_group.clone(),
                        gang,
                        nodes: d.applied_delta,
                        gang_nodes,
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
                    gang_nodes: 0,
                    phase: Phase::Requested,
                    requested_at_ms: p.requested_at_ms(),
                    formed_at_ms: None,
                    attached_at_ms: None,
                });
                advance(open, p.phase, p.at_ms);
            }
            Event::Outcome(o) => {
                self.open.remove(&(o.scale_up_id.clone(), o.gang.clone()));
            }
            Event::Reservation(_) | Event::Withdrawal(_) => {}
        }
    }

    /// The records that bring `open`'s lifecycle up to date with `obs` at `now_ms`: at most one
    /// [`PhaseEvent`] and one [`OutcomeEvent`], in that order. Pure.
    ///
    /// Without an observed outcome, the lifecycle ends with `registrationTimeout` before
    /// `nodesRegistered` (before `nodesReady` without a gang), `formationTimeout` before
    /// `gangFormed` (gangs only), `attachFailed`
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
            } else if state.gang.is_none()
                && state.phase < Phase::NodesReady
                && elapsed > t.registration_ms
            {
                // Without a gang nothing else would ever close it.
                Some((
                    Outcome::RegistrationTimeout,
                    format!(
                        "nodes registered but not Ready {elapsed} ms after the request (limit {} ms)",
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

#[cfg(test)]
mod tests;
