//! The versioned audit record: one JSON object per line, `{"schema":1,"tsMs":…,"event":…,…}`.
//!
//! Three events: [`DecisionEvent`] (every admission decision, rejections included; an accepted
//! one with a `scaleUpId` opens a scale-up in phase [`Phase::Requested`]), [`PhaseEvent`] (a
//! scale-up, or one gang of it, reached a later lifecycle phase) and [`OutcomeEvent`] (it
//! reached a terminal [`Outcome`]). Field names are camelCase; `docs/audit-schema.md` lists
//! every field. Readers ignore unknown fields, so adding an optional field keeps schema 1;
//! renaming or removing one, or changing a meaning, bumps [`SCHEMA_VERSION`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::GangRef;
use crate::planner;

/// The schema version written in every record and the only one this build reads.
pub const SCHEMA_VERSION: u32 = 1;

/// At most this many deferred gangs are listed in a [`DecisionEvent`]; `deferredTotal` counts
/// them all.
pub const MAX_DEFERRED: usize = 20;

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Schema version ([`SCHEMA_VERSION`]).
    pub schema: u32,
    /// When the record was written, unix milliseconds (UTC).
    pub ts_ms: i64,
    /// What happened; serialised inline with an `event` tag.
    #[serde(flatten)]
    pub event: Event,
}

impl Record {
    /// A record of the current schema.
    pub fn new(ts_ms: i64, event: impl Into<Event>) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            ts_ms,
            event: event.into(),
        }
    }

    /// The record as one line of JSON, without the trailing newline.
    ///
    /// # Errors
    /// The serde error, which plain data cannot produce.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Parses one line. A line of another schema version is refused by name, before its
    /// fields are looked at; unknown fields are ignored.
    ///
    /// # Errors
    /// A message naming what is wrong with the line.
    pub fn parse_line(line: &str) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Probe {
            schema: Option<serde_json::Value>,
        }
        let probe: Probe =
            serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
        match probe.schema {
            None => return Err("missing field `schema`".to_owned()),
            Some(v) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
            Some(v) => {
                return Err(format!(
                    "unsupported schema version {v} (this build reads {SCHEMA_VERSION})"
                ));
            }
        }
        serde_json::from_str(line).map_err(|e| format!("invalid record: {e}"))
    }

    /// The node group the event is about.
    pub fn node_group(&self) -> &str {
        match &self.event {
            Event::Decision(d) => &d.node_group,
            Event::Phase(p) => &p.node_group,
            Event::Outcome(o) => &o.node_group,
            Event::Reservation(r) => &r.node_group,
        }
    }

    /// The lifecycle a phase or outcome is about, as `(scaleUpId, gang)`; `None` for a
    /// decision (which may open several: [`DecisionEvent::opened_lifecycles`]).
    pub fn lifecycle(&self) -> Option<(String, Option<GangId>)> {
        match &self.event {
            Event::Decision(_) | Event::Reservation(_) => None,
            Event::Phase(p) => Some((p.scale_up_id.clone(), p.gang.clone())),
            Event::Outcome(o) => Some((o.scale_up_id.clone(), o.gang.clone())),
        }
    }
}

/// What a record says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    /// An admission decision.
    Decision(DecisionEvent),
    /// A non-terminal lifecycle phase was reached.
    Phase(PhaseEvent),
    /// A terminal outcome was reached.
    Outcome(OutcomeEvent),
    /// A node was reserved for a gang, or its reservation ended.
    Reservation(ReservationEvent),
}

impl From<ReservationEvent> for Event {
    fn from(e: ReservationEvent) -> Self {
        Self::Reservation(e)
    }
}

impl From<DecisionEvent> for Event {
    fn from(e: DecisionEvent) -> Self {
        Self::Decision(e)
    }
}

impl From<PhaseEvent> for Event {
    fn from(e: PhaseEvent) -> Self {
        Self::Phase(e)
    }
}

impl From<OutcomeEvent> for Event {
    fn from(e: OutcomeEvent) -> Self {
        Self::Outcome(e)
    }
}

/// A gang's identity as recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangId {
    /// Namespace.
    pub namespace: String,
    /// Name (see [`GangRef::name`]).
    pub name: String,
    /// API version of the object, e.g. `scheduling.k8s.io/v1alpha2`.
    pub api_version: String,
    /// `PodGroup` or `Workload`.
    #[serde(default)]
    pub kind: String,
}

impl From<&GangId> for GangRef {
    fn from(g: &GangId) -> Self {
        Self {
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            api_version: g.api_version.clone(),
            kind: g.kind.clone(),
        }
    }
}

impl From<&GangRef> for GangId {
    fn from(g: &GangRef) -> Self {
        Self {
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            api_version: g.api_version.clone(),
            kind: g.kind.clone(),
        }
    }
}

impl fmt::Display for GangId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Accept or reject, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// The increase went ahead with `appliedDelta` nodes.
    Accept,
    /// Nothing was added.
    Reject,
}

/// How much of a gang an admission covers, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Extent {
    /// Every unbound member.
    Whole,
    /// Enough members to reach `minCount`.
    MinCount,
}

/// An admitted gang in a [`DecisionEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangSummary {
    /// The gang.
    pub gang: GangId,
    /// Its priority.
    pub priority: i32,
    /// Whole, or just enough for `minCount`.
    pub extent: Extent,
    /// Nodes added for it.
    pub nodes: u32,
    /// Nodes already requested for it and not yet used, before this decision.
    pub in_flight: u32,
}

/// A deferred gang in a [`DecisionEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeferredSummary {
    /// The gang.
    pub gang: GangId,
    /// Its priority.
    pub priority: i32,
    /// Why it was deferred, one sentence naming the numbers.
    pub reason: String,
}

/// One admission decision (`NodeGroupIncreaseSize`), accepted or rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionEvent {
    /// Id of the scale-up this decision started; `null` when nothing was requested (rejected,
    /// or an applied delta of 0). An id opens one lifecycle per admitted gang, or one without a
    /// gang when none was admitted.
    #[serde(default)]
    pub scale_up_id: Option<String>,
    /// The node group.
    pub node_group: String,
    /// Admission policy: `strict`, `roundUp` or `off`.
    pub policy: String,
    /// Accept or reject.
    pub verdict: Verdict,
    /// The rule that decided (a bounded label, e.g. `gangs_admitted`).
    pub rule: String,
    /// Target size before the increase.
    pub target: u32,
    /// Maximum size.
    pub max_size: u32,
    /// `maxSize - target`.
    pub headroom: u32,
    /// The delta CA asked for.
    pub ca_delta: u32,
    /// Nodes added (0 when rejected).
    pub applied_delta: u32,
    /// The rule wanted more than the headroom and was cut to it.
    pub capped: bool,
    /// Nodes the admitted gangs need.
    pub gang_nodes: u32,
    /// Nodes ungrouped pending pods need.
    pub ungrouped_nodes: u32,
    /// Admitted gangs, in admission order.
    pub gangs: Vec<GangSummary>,
    /// The first [`MAX_DEFERRED`] deferred gangs, in admission order.
    pub deferred: Vec<DeferredSummary>,
    /// How many gangs were deferred in all.
    pub deferred_total: u32,
    /// How many gangs were already covered by in-flight nodes.
    pub covered: u32,
    /// How many pending gangs this group cannot host at all.
    pub unhostable: u32,
    /// How long deciding and provisioning took, when the caller measured it.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// One sentence naming the numbers.
    pub reason: String,
    /// Why the nodes added are not reserved although the group's configuration says they are
    /// (a DaemonSet that runs on the group lacks the toleration); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_off: Option<String>,
    /// Composites (CompositePodGroups) this decision admits, each with every node group's
    /// target size before the decision and the nodes it adds there: one cross-group scale-up,
    /// recorded whole in the record of the group CA asked for and in each other group's
    /// record of it. Absent without composites.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub composites: Vec<CompositeSummary>,
}

/// A composite admitted by a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeSummary {
    /// The composite.
    pub composite: GangId,
    /// Its `minGroupCount`.
    pub min_group_count: u32,
    /// Children already formed.
    pub formed: u32,
    /// Children whose nodes were requested earlier.
    pub in_flight: u32,
    /// The topology domain (`key=value`) all children were placed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Every node group's part, in configuration order.
    pub shares: Vec<ShareSummary>,
}

/// One node group's part of a composite admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareSummary {
    /// The node group.
    pub node_group: String,
    /// Its target size before the decision.
    pub target: u32,
    /// Nodes added on it for the composite.
    pub nodes: u32,
    /// The children placed on it.
    pub children: Vec<GangId>,
}

impl DecisionEvent {
    /// Sets the scale-up id.
    #[must_use]
    pub fn with_scale_up_id(mut self, id: impl Into<String>) -> Self {
        self.scale_up_id = Some(id.into());
        self
    }

    /// Sets how long deciding and provisioning took.
    #[must_use]
    pub fn with_duration_ms(mut self, ms: u64) -> Self {
        self.duration_ms = Some(ms);
        self
    }

    /// Whether the increase went ahead.
    pub fn is_accepted(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// The lifecycles this decision opens, each as `(scaleUpId, gang)`: when it was accepted
    /// with a scale-up id, one per admitted gang, or one without a gang when none was
    /// admitted; none otherwise.
    pub fn opened_lifecycles(&self) -> Vec<(String, Option<GangId>)> {
        let Some(id) = self.scale_up_id.as_ref().filter(|_| self.is_accepted()) else {
            return Vec::new();
        };
        if self.gangs.is_empty() {
            vec![(id.clone(), None)]
        } else {
            self.gangs
                .iter()
                .map(|g| (id.clone(), Some(g.gang.clone())))
                .collect()
        }
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl From<&planner::Decision> for DecisionEvent {
    /// The record of a planner decision, without a scale-up id or duration.
    fn from(d: &planner::Decision) -> Self {
        Self {
            scale_up_id: None,
            node_group: d.group.to_string(),
            policy: d.policy.as_str().to_owned(),
            verdict: match d.verdict {
                planner::Verdict::Accept => Verdict::Accept,
                planner::Verdict::Reject => Verdict::Reject,
            },
            rule: d.rule.as_str().to_owned(),
            target: d.target,
            max_size: d.max_size,
            headroom: d.headroom,
            ca_delta: d.ca_delta,
            applied_delta: d.applied_delta,
            capped: d.capped,
            gang_nodes: d.gang_nodes,
            ungrouped_nodes: d.ungrouped_nodes,
            gangs: d
                .admitted
                .iter()
                .map(|a| GangSummary {
                    gang: GangId::from(&a.gang),
                    priority: a.priority,
                    extent: match a.extent {
                        planner::Extent::Whole => Extent::Whole,
                        planner::Extent::MinCount => Extent::MinCount,
                    },
                    nodes: a.nodes,
                    in_flight: a.in_flight,
                })
                .collect(),
            deferred: d
                .deferred
                .iter()
                .take(MAX_DEFERRED)
                .map(|g| DeferredSummary {
                    gang: GangId::from(&g.gang),
                    priority: g.priority,
                    reason: g.reason.to_string(),
                })
                .collect(),
            deferred_total: count(d.deferred.len()),
            covered: count(d.covered.len()),
            unhostable: d.unhostable,
            duration_ms: None,
            reason: d.reason.clone(),
            reservation_off: d.reservation_off.clone(),
            composites: d
                .composites
                .iter()
                .map(|c| CompositeSummary {
                    composite: GangId::from(&c.composite),
                    min_group_count: c.min_group_count,
                    formed: c.formed,
                    in_flight: c.in_flight,
                    domain: c.domain.clone(),
                    shares: c
                        .shares
                        .iter()
                        .map(|s| ShareSummary {
                            node_group: s.group.to_string(),
                            target: s.target,
                            nodes: s.nodes,
                            children: s.children.iter().map(GangId::from).collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// The non-terminal lifecycle phases of a scale-up, in order. A scale-up only moves forward;
/// a phase observed together with a later one may be skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The increase was applied. Entered by the accepted [`DecisionEvent`] that carries the
    /// scale-up id; gangscaler writes no `phase` event for it.
    Requested,
    /// The backend created the instances.
    InstancesCreated,
    /// Every new node registered with the API server.
    NodesRegistered,
    /// Every new node is `Ready`.
    NodesReady,
    /// The gang reached `minCount` bound members.
    GangFormed,
    /// The gang's volumes are attached.
    VolumesAttached,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Self; 6] = [
        Self::Requested,
        Self::InstancesCreated,
        Self::NodesRegistered,
        Self::NodesReady,
        Self::GangFormed,
        Self::VolumesAttached,
    ];

    /// The spelling used in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::InstancesCreated => "instancesCreated",
            Self::NodesRegistered => "nodesRegistered",
            Self::NodesReady => "nodesReady",
            Self::GangFormed => "gangFormed",
            Self::VolumesAttached => "volumesAttached",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node's reservation changed: the taint that only one gang's members tolerate was set
/// (`reserved`) or removed (`released`). Written before the node is patched; a patch that
/// fails is tried again at the next tick, with its record again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationEvent {
    /// The node.
    pub node: String,
    /// Its node group (its `gangscaler.io/node-group` label; empty when it has none).
    pub node_group: String,
    /// `reserved` or `released`.
    pub action: ReservationAction,
    /// The gang, `<namespace>/<name>`; empty for a node reserved for no gang yet.
    pub gang: String,
    /// The taint value (the gang's hash, or `unassigned`).
    pub value: String,
    /// The scale-up that added the node, when known.
    #[serde(default)]
    pub scale_up_id: Option<String>,
    /// Why a reservation ended (`released` only).
    #[serde(default)]
    pub reason: Option<ReleaseReason>,
}

/// What happened to a node's reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReservationAction {
    /// The node was reserved for the gang.
    Reserved,
    /// The reservation ended.
    Released,
}

/// Why a node's reservation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReleaseReason {
    /// The gang formed: its members are bound.
    Formed,
    /// The node has been Ready for the booking deadline and the gang has not formed.
    BookingDeadline,
    /// No open lifecycle reserves for the gang: its scale-up ended (outcome recorded), or
    /// reservation was turned off for the group.
    Ended,
    /// The node was created under reservation for no gang in particular and no reserving
    /// lifecycle claimed it (its scale-up was for pods outside any gang, or added more nodes
    /// than its gangs needed).
    Unclaimed,
}

impl ReleaseReason {
    /// Every reason, for metrics and the report.
    pub const ALL: [Self; 4] = [
        Self::Formed,
        Self::BookingDeadline,
        Self::Ended,
        Self::Unclaimed,
    ];

    /// The camelCase name used in metrics labels, audit records and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Formed => "formed",
            Self::BookingDeadline => "bookingDeadline",
            Self::Ended => "ended",
            Self::Unclaimed => "unclaimed",
        }
    }
}

/// Terminal outcomes of a scale-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// The gang started.
    Succeeded,
    /// The backend failed to create the instances.
    ProvisionFailed,
    /// The nodes did not register in time.
    RegistrationTimeout,
    /// The gang did not form in time.
    FormationTimeout,
    /// Volumes could not be attached.
    AttachFailed,
    /// The gang went away (deleted) before it started.
    Cancelled,
    /// The gang or its nodes were preempted before it started.
    Preempted,
}

impl Outcome {
    /// Every outcome, success first.
    pub const ALL: [Self; 7] = [
        Self::Succeeded,
        Self::ProvisionFailed,
        Self::RegistrationTimeout,
        Self::FormationTimeout,
        Self::AttachFailed,
        Self::Cancelled,
        Self::Preempted,
    ];

    /// The spelling used in records (also a bounded metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::ProvisionFailed => "provisionFailed",
            Self::RegistrationTimeout => "registrationTimeout",
            Self::FormationTimeout => "formationTimeout",
            Self::AttachFailed => "attachFailed",
            Self::Cancelled => "cancelled",
            Self::Preempted => "preempted",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scale-up (or one gang of it) reached a later non-terminal phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseEvent {
    /// The scale-up.
    pub scale_up_id: String,
    /// Its node group.
    pub node_group: String,
    /// The gang, when the scale-up was for one.
    #[serde(default)]
    pub gang: Option<GangId>,
    /// The phase reached.
    pub phase: Phase,
    /// When it was observed, unix milliseconds.
    pub at_ms: i64,
    /// Milliseconds since the scale-up was requested.
    pub elapsed_ms: u64,
    /// Free-form detail, e.g. `4/4 nodes ready`.
    #[serde(default)]
    pub detail: Option<String>,
}

impl PhaseEvent {
    /// When its scale-up was requested, `atMs - elapsedMs`: what a phase whose decision was
    /// rotated away reopens its lifecycle with.
    pub fn requested_at_ms(&self) -> i64 {
        self.at_ms
            .saturating_sub(i64::try_from(self.elapsed_ms).unwrap_or(i64::MAX))
    }
}

/// A scale-up (or one gang of it) ended. Self-contained: the report needs no other event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeEvent {
    /// The scale-up.
    pub scale_up_id: String,
    /// Its node group.
    pub node_group: String,
    /// The gang, when the scale-up was for one.
    #[serde(default)]
    pub gang: Option<GangId>,
    /// How it ended.
    pub outcome: Outcome,
    /// When it was requested, unix milliseconds.
    pub requested_at_ms: i64,
    /// When the gang formed, if it did.
    #[serde(default)]
    pub formed_at_ms: Option<i64>,
    /// When its volumes were attached, if they were.
    #[serde(default)]
    pub attached_at_ms: Option<i64>,
    /// When the gang started pending (its creation), if known.
    #[serde(default)]
    pub pending_since_ms: Option<i64>,
    /// Failed volume-attach attempts seen.
    #[serde(default)]
    pub attach_failures: u32,
    /// Milliseconds from request to this outcome.
    pub duration_ms: u64,
    /// Why, one sentence.
    pub reason: String,
}

/// Milliseconds from `from` to `to`, 0 if `to` is earlier (clock steps).
pub fn elapsed_ms(from: i64, to: i64) -> u64 {
    u64::try_from(to.saturating_sub(from)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_tag_and_schema_are_inline_and_camel_case() {
        let r = Record::new(
            7,
            OutcomeEvent {
                scale_up_id: "su-1".into(),
                node_group: "h100".into(),
                gang: None,
                outcome: Outcome::ProvisionFailed,
                requested_at_ms: 1,
                formed_at_ms: None,
                attached_at_ms: None,
                pending_since_ms: None,
                attach_failures: 0,
                duration_ms: 6,
                reason: "quota".into(),
            },
        );
        let line = r.to_line().unwrap();
        assert!(
            line.starts_with(r#"{"schema":1,"tsMs":7,"event":"outcome","scaleUpId":"su-1""#),
            "{line}"
        );
        assert!(line.contains(r#""outcome":"provisionFailed""#), "{line}");
        assert_eq!(Record::parse_line(&line).unwrap(), r);
    }

    #[test]
    fn optional_fields_may_be_absent_and_unknown_fields_are_ignored() {
        let line = r#"{"schema":1,"tsMs":3,"event":"phase","scaleUpId":"s","nodeGroup":"g","phase":"gangFormed","atMs":3,"elapsedMs":1,"addedLater":true}"#;
        let r = Record::parse_line(line).unwrap();
        let Event::Phase(p) = r.event else {
            panic!("{r:?}")
        };
        assert_eq!((p.gang, p.detail, p.phase), (None, None, Phase::GangFormed));
    }

    #[test]
    fn spellings_match_serde() {
        for p in Phase::ALL {
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.as_str())
            );
        }
        for o in Outcome::ALL {
            assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::json!(o.as_str())
            );
        }
    }

    #[test]
    fn a_schema_that_is_not_a_number_is_refused_by_name() {
        let err = Record::parse_line(r#"{"schema":"1","tsMs":1,"event":"phase"}"#).unwrap_err();
        assert_eq!(
            err,
            r#"unsupported schema version "1" (this build reads 1)"#
        );
    }
}
