//! The versioned audit record: one JSON object per line, `{"schema":1,"tsMs":…,"event":…,…}`.
//!
//! Seven events: [`DecisionEvent`] (every admission decision, rejections included; an accepted
//! one with a `scaleUpId` opens a scale-up in phase [`Phase::Requested`]), [`PhaseEvent`] (a
//! scale-up, or one gang of it, reached a later lifecycle phase), [`OutcomeEvent`] (it
//! reached a terminal [`Outcome`]), [`ReservationEvent`] (a node reserved or released),
//! [`RepairEvent`] (an instance requested for a gang failed and its lifecycle repairs) and
//! [`WithdrawalEvent`] (instances of ended lifecycles withdrawn before they were created) and
//! [`DeferralEvent`] (a pending gang kept out of CA's scale-up, or let back in).
//! Field names are camelCase; `docs/audit-schema.md` lists every field. Readers ignore unknown fields, so adding an optional field keeps schema 1;
//! renaming or removing one, or changing a meaning, bumps [`SCHEMA_VERSION`].

mod decision;
mod lifecycle;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use decision::{
    CompositeSummary, DecisionEvent, DeferredSummary, Extent, GangSummary, MAX_DEFERRED,
    ShareSummary, SpreadPart, Verdict,
};
pub use lifecycle::{
    DeferralEvent, Outcome, OutcomeEvent, Phase, PhaseEvent, ReleaseReason, RepairEvent,
    ReservationAction, ReservationEvent, WithdrawalEvent,
};

use crate::model::GangRef;

/// The schema version written in every record and the only one this build reads.
pub const SCHEMA_VERSION: u32 = 1;

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
            Event::Withdrawal(w) => &w.node_group,
            Event::Repair(r) => &r.node_group,
            Event::Deferral(d) => &d.node_group,
        }
    }

    /// The lifecycle a phase or outcome is about, as `(scaleUpId, gang)`; `None` for a
    /// decision (which may open several: [`DecisionEvent::opened_lifecycles`]).
    pub fn lifecycle(&self) -> Option<(String, Option<GangId>)> {
        match &self.event {
            Event::Decision(_)
            | Event::Reservation(_)
            | Event::Withdrawal(_)
            | Event::Deferral(_) => None,
            Event::Phase(p) => Some((p.scale_up_id.clone(), p.gang.clone())),
            Event::Outcome(o) => Some((o.scale_up_id.clone(), o.gang.clone())),
            Event::Repair(r) => Some((r.scale_up_id.clone(), Some(r.gang.clone()))),
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
    /// Instances of ended lifecycles were withdrawn before they were created.
    Withdrawal(WithdrawalEvent),
    /// An instance requested for a gang failed; its lifecycle repairs.
    Repair(RepairEvent),
    /// A pending gang was kept out of CA's scale-up, or let back in.
    Deferral(DeferralEvent),
}

impl From<DeferralEvent> for Event {
    fn from(e: DeferralEvent) -> Self {
        Self::Deferral(e)
    }
}

impl From<RepairEvent> for Event {
    fn from(e: RepairEvent) -> Self {
        Self::Repair(e)
    }
}

impl From<WithdrawalEvent> for Event {
    fn from(e: WithdrawalEvent) -> Self {
        Self::Withdrawal(e)
    }
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
