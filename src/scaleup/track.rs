//! The scale-up state machine: [`Tracker`], a pure fold over audit records that knows which
//! lifecycles are open and which records bring each one up to date.
//!
//! An accepted [`DecisionEvent`](crate::audit::DecisionEvent) with a `scaleUpId` opens one
//! lifecycle per admitted gang (or one without a gang), in phase [`Phase::Requested`]; a
//! [`PhaseEvent`] moves it forward (never back); an [`OutcomeEvent`] closes it.
//!
//! **Repair.** A [`RepairEvent`] charges one failed instance to a gang's lifecycle, which stays
//! open ([`Repair`]): the gang is then missing that node until a later decision adds one for
//! it with `repairOf` naming this scale-up. A repairing lifecycle ends only at a deadline
//! (registration counts from its latest repair), or as `provisionFailed` once its gang is
//! admitted afresh by a later scale-up (on another group, whose nodes it did not get).
//! [`Tracker::plan`] compares each open lifecycle with what the cluster shows now (an
//! [`Observation`], supplied by the caller, see [`observe`](super::observe())) and returns the
//! records that bring the log up to date: one [`PhaseEvent`] if a later phase is observed, and
//! one [`OutcomeEvent`] if a terminal outcome is observed or a timeout has passed.
//!
//! Pure: time comes in as `now_ms`, observations as arguments, and nothing is written; the
//! [`Recorder`](super::Recorder) appends the records and applies them. Depends on `audit`'s
//! record types only.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::audit::record::elapsed_ms;
use crate::audit::{Event, GangId, Outcome, OutcomeEvent, Phase, PhaseEvent, Record, RepairEvent};

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
    /// Its failed instances and their replacements.
    pub repair: Repair,
}

impl Open {
    /// Its key.
    pub fn key(&self) -> Key {
        (self.scale_up_id.clone(), self.gang.clone())
    }

    /// When nodes were last requested for it: its latest repair, else its request.
    pub fn last_request_ms(&self) -> i64 {
        self.repair
            .last_request_ms
            .map_or(self.requested_at_ms, |r| r.max(self.requested_at_ms))
    }
}

/// A gang lifecycle's failed instances, each charged once by a [`RepairEvent`], and the nodes
/// repair decisions added for it since.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repair {
    /// The failed instances, by id.
    pub failed: BTreeSet<String>,
    /// Nodes added by decisions that repair it (`repairOf`).
    pub replaced: u32,
    /// When the latest of those decisions was recorded, unix milliseconds.
    pub last_request_ms: Option<i64>,
}

impl Repair {
    /// Nodes the gang is missing: failed instances not replaced yet.
    pub fn missing(&self) -> u32 {
        u32::try_from(self.failed.len())
            .unwrap_or(u32::MAX)
            .saturating_sub(self.replaced)
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
    /// Failed instances charged to the lifecycle's gang while it has not formed, each as
    /// `(instance, what the backend said)`: each one not yet recorded gets a [`RepairEvent`].
    pub failed: Vec<(String, String)>,
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
            failed: Vec::new(),
        }
    }

    /// Sets the failed instances to repair.
    #[must_use]
    pub fn with_failed(mut self, failed: Vec<(String, String)>) -> Self {
        self.failed = failed;
        self
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
                for (key, nodes) in d.repairs() {
                    if let Some(open) = self.open.get_mut(&key) {
                        open.repair.replaced = open.repair.replaced.saturating_add(nodes);
                        open.repair.last_request_ms = Some(record.ts_ms);
                    }
                }
                if d.scale_up_id.is_none() || !d.is_accepted() {
                    return;
                }
                self.issued += 1;
                let opened = d.opened_lifecycles();
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
                        repair: Repair::default(),
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
                    repair: Repair::default(),
                });
                advance(open, p.phase, p.at_ms);
            }
            Event::Repair(r) => {
                let key = (r.scale_up_id.clone(), Some(r.gang.clone()));
                if let Some(open) = self.open.get_mut(&key) {
                    open.repair.failed.insert(r.instance.clone());
                }
            }
            Event::Outcome(o) => {
                self.open.remove(&(o.scale_up_id.clone(), o.gang.clone()));
            }
            Event::Reservation(_) | Event::Withdrawal(_) | Event::Deferral(_) => {}
        }
    }

    /// The records that bring `open`'s lifecycle up to date with `obs` at `now_ms`: at most one
    /// [`PhaseEvent`], one [`RepairEvent`] per failed instance not recorded yet, and at most
    /// one [`OutcomeEvent`], in that order. Pure.
    ///
    /// Without an observed outcome, the lifecycle ends with `registrationTimeout` before
    /// `nodesRegistered` (before `nodesReady` without a gang; counted from its latest repair),
    /// `formationTimeout` before `gangFormed` (gangs only), `attachFailed`
    /// when the volumes are not attached [`Timeouts::attach_ms`] after formation, and
    /// `succeeded` at `nodesReady` when it has no gang. A repairing lifecycle whose gang a
    /// later scale-up admitted afresh ends `provisionFailed` before anything else.
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
        out.extend(repairs(&mut state, obs, now_ms));
        let outcome = self
            .superseded(&state)
            .or_else(|| obs.outcome.clone())
            .or_else(|| self.deadline(&state, now_ms));
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

    /// `provisionFailed` for a repairing lifecycle whose gang a later open scale-up admitted
    /// afresh: the gang's nodes come from that one now, and the missing ones never will from
    /// this one.
    fn superseded(&self, state: &Open) -> Option<(Outcome, String)> {
        if state.repair.missing() == 0 {
            return None;
        }
        let later = self.open.values().find(|o| {
            o.gang.is_some()
                && o.gang == state.gang
                && o.scale_up_id != state.scale_up_id
                && o.requested_at_ms > state.requested_at_ms
        })?;
        Some((
            Outcome::ProvisionFailed,
            format!(
                "{} instance(s) failed and the gang was admitted again by scale-up {} of node group {}",
                state.repair.failed.len(),
                later.scale_up_id,
                later.node_group
            ),
        ))
    }

    /// The outcome a deadline gives `state` at `now_ms`, if one has passed (or `succeeded`
    /// for a lifecycle without a gang whose nodes are Ready).
    fn deadline(&self, state: &Open, now_ms: i64) -> Option<(Outcome, String)> {
        let t = self.timeouts;
        let elapsed = elapsed_ms(state.requested_at_ms, now_ms);
        let since_request = elapsed_ms(state.last_request_ms(), now_ms);
        if state.phase < Phase::NodesRegistered && since_request > t.registration_ms {
            Some((
                Outcome::RegistrationTimeout,
                format!(
                    "nodes not registered {since_request} ms after the {} (limit {} ms){}",
                    if state.repair.last_request_ms.is_some() {
                        "latest repair"
                    } else {
                        "request"
                    },
                    t.registration_ms,
                    repaired(&state.repair)
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
                    "gang not formed {elapsed} ms after the request (limit {} ms){}",
                    t.formation_ms,
                    repaired(&state.repair)
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

/// A [`RepairEvent`] for each instance in `obs` that `state` (a gang lifecycle) has not
/// recorded yet; `state` takes them in.
fn repairs(state: &mut Open, obs: &Observation, now_ms: i64) -> Vec<Record> {
    let Some(gang) = state.gang.clone() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (instance, reason) in &obs.failed {
        if !state.repair.failed.insert(instance.clone()) {
            continue;
        }
        out.push(Record::new(
            now_ms,
            RepairEvent {
                scale_up_id: state.scale_up_id.clone(),
                node_group: state.node_group.clone(),
                gang: gang.clone(),
                instance: instance.clone(),
                reason: reason.clone(),
                failed: u32::try_from(state.repair.failed.len()).unwrap_or(u32::MAX),
                replaced: state.repair.replaced,
            },
        ));
    }
    out
}

/// `"; 2 instance(s) failed, 1 replaced"` when the lifecycle repaired, else nothing.
fn repaired(r: &Repair) -> String {
    if r.failed.is_empty() {
        String::new()
    } else {
        format!(
            "; {} instance(s) failed, {} replaced",
            r.failed.len(),
            r.replaced
        )
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
