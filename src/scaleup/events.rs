//! The Kubernetes Events a scale-up's lifecycle records produce, on the gang object: when
//! the gang formed, when its volumes attached and how the scale-up ended (reasons
//! [`REASON_FORMED`], [`REASON_VOLUMES_ATTACHED`], [`REASON_SUCCEEDED`] and [`REASON_FAILED`]).
//! A pure mapping from an [`Appended`] record;
//! [`EventPublisher`](crate::events::EventPublisher) publishes the result. Depends
//! on `audit`'s record types, `events` (the publisher and the reasons) and `model`.

use super::recorder::Appended;
use crate::audit::{Event as AuditEvent, GangId, Outcome, Phase};
use crate::events::{
    REASON_FAILED, REASON_FORMED, REASON_REPAIRING, REASON_SUCCEEDED, REASON_VOLUMES_ATTACHED,
};
use crate::model::GangRef;

/// The events an appended lifecycle record produces (gang lifecycles only), each as `(gang,
/// reason, type, note)`: formed when it is the first record showing the gang formed, volumes
/// attached when it records that phase, and succeeded or failed for an outcome. Pure, for
/// tests; [`EventPublisher::publish`](crate::events::EventPublisher::publish) publishes them.
pub fn events_for(appended: &Appended) -> Vec<(GangRef, &'static str, &'static str, String)> {
    let mut out = Vec::new();
    match &appended.record.event {
        AuditEvent::Phase(p) => {
            let Some(gang) = &p.gang else { return out };
            let gang = gang_ref(gang);
            let secs = p.elapsed_ms as f64 / 1000.0;
            if appended.first_formed().is_some() {
                out.push((
                    gang.clone(),
                    REASON_FORMED,
                    "Normal",
                    format!(
                        "scale-up {} of node group {}: gang formed {secs:.1} s after the request",
                        p.scale_up_id, p.node_group
                    ),
                ));
            }
            if p.phase >= Phase::VolumesAttached {
                out.push((
                    gang,
                    REASON_VOLUMES_ATTACHED,
                    "Normal",
                    format!(
                        "scale-up {} of node group {}: every volume attached {secs:.1} s after the request",
                        p.scale_up_id, p.node_group
                    ),
                ));
            }
        }
        AuditEvent::Outcome(o) => {
            let Some(gang) = &o.gang else { return out };
            let secs = o.duration_ms as f64 / 1000.0;
            let (reason, type_) = if o.outcome == Outcome::Succeeded {
                (REASON_SUCCEEDED, "Normal")
            } else {
                (REASON_FAILED, "Warning")
            };
            out.push((
                gang_ref(gang),
                reason,
                type_,
                format!(
                    "scale-up {} of node group {}: {} after {secs:.1} s: {}",
                    o.scale_up_id,
                    o.node_group,
                    o.outcome.as_str(),
                    o.reason
                ),
            ));
        }
        AuditEvent::Repair(r) => out.push((
            gang_ref(&r.gang),
            REASON_REPAIRING,
            "Warning",
            format!(
                "scale-up {} of node group {}: instance {} failed ({}); the gang waits for a replacement ({} failed, {} replaced so far)",
                r.scale_up_id, r.node_group, r.instance, r.reason, r.failed, r.replaced
            ),
        )),
        AuditEvent::Decision(_)
        | AuditEvent::Reservation(_)
        | AuditEvent::Withdrawal(_)
        | AuditEvent::Deferral(_) => {}
    }
    out
}

fn gang_ref(gang: &GangId) -> GangRef {
    GangRef {
        namespace: gang.namespace.clone(),
        name: gang.name.clone(),
        api_version: gang.api_version.clone(),
        kind: gang.kind.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::regarding;

    fn appended(event: AuditEvent, formed_before: Option<i64>) -> Appended {
        use crate::audit::Record;
        use crate::scaleup::Open;
        let gang = match &event {
            AuditEvent::Phase(p) => p.gang.clone(),
            AuditEvent::Outcome(o) => o.gang.clone(),
            AuditEvent::Repair(r) => Some(r.gang.clone()),
            AuditEvent::Decision(_)
            | AuditEvent::Reservation(_)
            | AuditEvent::Withdrawal(_)
            | AuditEvent::Deferral(_) => None,
        };
        Appended {
            record: Record::new(10_000, event),
            before: Some(Open {
                scale_up_id: "su-1".into(),
                node_group: "h100".into(),
                gang,
                nodes: 2,
                gang_nodes: 0,
                phase: Phase::NodesReady,
                requested_at_ms: 0,
                formed_at_ms: formed_before,
                attached_at_ms: None,
                repair: crate::scaleup::Repair::default(),
            }),
        }
    }

    fn phase(phase: Phase, gang: bool) -> AuditEvent {
        AuditEvent::Phase(crate::audit::PhaseEvent {
            scale_up_id: "su-1".into(),
            node_group: "h100".into(),
            gang: gang.then(|| GangId {
                namespace: "ml".into(),
                name: "train".into(),
                api_version: "scheduling.k8s.io/v1alpha2".into(),
                kind: "PodGroup".into(),
            }),
            phase,
            at_ms: 10_000,
            elapsed_ms: 10_000,
            detail: None,
        })
    }

    fn reasons(a: &Appended) -> Vec<(&'static str, &'static str)> {
        events_for(a)
            .into_iter()
            .map(|(_, reason, type_, _)| (reason, type_))
            .collect()
    }

    #[test]
    fn lifecycle_records_give_formed_attached_and_outcome_events_once() {
        // Formed and attached seen together: both events, once.
        let both = appended(phase(Phase::VolumesAttached, true), None);
        assert_eq!(
            reasons(&both),
            [
                (REASON_FORMED, "Normal"),
                (REASON_VOLUMES_ATTACHED, "Normal")
            ]
        );
        // Attached after an earlier formed record: no second formed event.
        let later = appended(phase(Phase::VolumesAttached, true), Some(5_000));
        assert_eq!(reasons(&later), [(REASON_VOLUMES_ATTACHED, "Normal")]);
        let (_, _, _, note) = events_for(&later).remove(0);
        assert!(note.contains("10.0 s after the request"), "{note}");
        // Node phases and scale-ups without a gang publish nothing.
        assert!(reasons(&appended(phase(Phase::NodesReady, true), None)).is_empty());
        assert!(reasons(&appended(phase(Phase::VolumesAttached, false), None)).is_empty());
    }

    #[test]
    fn outcomes_give_a_succeeded_or_a_failed_event() {
        let outcome = |outcome: Outcome| {
            let AuditEvent::Phase(p) = phase(Phase::VolumesAttached, true) else {
                unreachable!()
            };
            AuditEvent::Outcome(crate::audit::OutcomeEvent {
                scale_up_id: p.scale_up_id,
                node_group: p.node_group,
                gang: p.gang,
                outcome,
                requested_at_ms: 0,
                formed_at_ms: Some(4_000),
                attached_at_ms: None,
                pending_since_ms: None,
                attach_failures: 1,
                duration_ms: 10_000,
                reason: "attach error: w-1/ckpt: boom".into(),
            })
        };
        let ok = appended(outcome(Outcome::Succeeded), Some(4_000));
        assert_eq!(reasons(&ok), [(REASON_SUCCEEDED, "Normal")]);
        let failed = appended(outcome(Outcome::AttachFailed), Some(4_000));
        assert_eq!(reasons(&failed), [(REASON_FAILED, "Warning")]);
        let (gang, _, _, note) = events_for(&failed).remove(0);
        assert_eq!(regarding(&gang).name.as_deref(), Some("train"));
        assert_eq!(
            note,
            "scale-up su-1 of node group h100: attachFailed after 10.0 s: attach error: w-1/ckpt: boom"
        );
    }
}
