//! Kubernetes Events for admission decisions and for what became of the scale-ups, on the gang
//! object itself (the PodGroup, or the Workload for `v1alpha1`), so `kubectl describe
//! podgroup` shows why a scale-up happened or did not, when the gang formed, when its volumes
//! attached and how the scale-up ended. Events are best effort: a failure to publish is
//! logged, never returned.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use crate::audit::{Appended, Event as AuditEvent, GangId, Outcome, Phase};
use crate::model::GangRef;
use crate::planner::Decision;

/// The `reportingController` of our events.
pub const REPORTING_CONTROLLER: &str = "gangscaler.io/admission";
/// Reason of an event for a gang a scale-up was admitted for.
pub const REASON_ADMITTED: &str = "ScaleUpAdmitted";
/// Reason of an event for a gang a strict rejection left waiting.
pub const REASON_REJECTED: &str = "ScaleUpRejected";
/// Reason of an event for a gang that formed after a scale-up.
pub const REASON_FORMED: &str = "ScaleUpGangFormed";
/// Reason of an event for a gang whose volumes attached after a scale-up.
pub const REASON_VOLUMES_ATTACHED: &str = "ScaleUpVolumesAttached";
/// Reason of an event for a gang whose scale-up succeeded.
pub const REASON_SUCCEEDED: &str = "ScaleUpSucceeded";
/// Reason of an event for a gang whose scale-up failed.
pub const REASON_FAILED: &str = "ScaleUpFailed";
/// At most this many gangs get an event per decision.
const MAX_EVENTS_PER_DECISION: usize = 20;

/// Publishes events through a Kubernetes client.
#[derive(Clone)]
pub struct EventPublisher {
    client: kube::Client,
    instance: String,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher")
            .field("instance", &self.instance)
            .finish()
    }
}

/// The object an event about `gang` is attached to.
pub fn regarding(gang: &GangRef) -> ObjectReference {
    // A v1alpha1 gang is a pod group inside a Workload, named `<workload>/<podGroup>[/<key>]`.
    let name = gang.name.split('/').next().unwrap_or(&gang.name).to_owned();
    ObjectReference {
        api_version: Some(gang.api_version.clone()),
        kind: Some(gang.kind.clone()),
        namespace: Some(gang.namespace.clone()),
        name: Some(name),
        ..ObjectReference::default()
    }
}

impl EventPublisher {
    /// A publisher using `client`; `instance` identifies this process (e.g. the host name).
    pub fn new(client: kube::Client, instance: impl Into<String>) -> Self {
        Self {
            client,
            instance: instance.into(),
        }
    }

    /// The events a decision produces: one per admitted gang, and one per waiting gang when
    /// the decision was a rejection. Pure, for tests.
    pub fn events_for(decision: &Decision) -> Vec<(GangRef, &'static str, &'static str, String)> {
        let mut out = Vec::new();
        for a in decision.admitted.iter().take(MAX_EVENTS_PER_DECISION) {
            out.push((
                a.gang.clone(),
                REASON_ADMITTED,
                "Normal",
                format!(
                    "node group {}: {} node(s) requested for this gang ({} for all members, {} for minCount); CA asked {}, {} applied",
                    decision.group, a.nodes, a.nodes_all, a.nodes_min, decision.ca_delta, decision.applied_delta
                ),
            ));
        }
        if !decision.is_accepted() {
            for d in decision.deferred.iter().take(MAX_EVENTS_PER_DECISION) {
                out.push((
                    d.gang.clone(),
                    REASON_REJECTED,
                    "Warning",
                    format!(
                        "node group {}: scale-up rejected so that no partial gang holds GPUs: {}",
                        decision.group, d.reason
                    ),
                ));
            }
        }
        out
    }

    /// The events an appended lifecycle record produces (gang lifecycles only): formed when
    /// it is the first record showing the gang formed, volumes attached when it records that
    /// phase, and succeeded or failed for an outcome. Pure, for tests.
    pub fn events_for_lifecycle(
        appended: &Appended,
    ) -> Vec<(GangRef, &'static str, &'static str, String)> {
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
            AuditEvent::Decision(_) => {}
        }
        out
    }

    /// Publishes a lifecycle record's events in the background.
    pub fn lifecycle(&self, appended: &Appended) {
        for (gang, reason, type_, note) in Self::events_for_lifecycle(appended) {
            let publisher = self.clone();
            tokio::spawn(async move { publisher.publish(&gang, reason, type_, note).await });
        }
    }

    /// Publishes the decision's events in the background.
    pub fn decision(&self, decision: &Decision) {
        for (gang, reason, type_, note) in Self::events_for(decision) {
            let publisher = self.clone();
            tokio::spawn(async move { publisher.publish(&gang, reason, type_, note).await });
        }
    }

    async fn publish(&self, gang: &GangRef, reason: &str, type_: &str, note: String) {
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", regarding(gang).name.unwrap_or_default())),
                namespace: Some(gang.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            action: Some("ScaleUp".to_owned()),
            reason: Some(reason.to_owned()),
            type_: Some(type_.to_owned()),
            regarding: Some(regarding(gang)),
            // The API limits notes to 1 kB.
            note: Some(note.chars().take(1000).collect()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &gang.namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                debug!(pod_group.namespace = %gang.namespace, pod_group.name = %gang.name, reason, "event published")
            }
            Err(e) => {
                warn!(pod_group.namespace = %gang.namespace, pod_group.name = %gang.name, reason, error = %e, "publishing an event failed")
            }
        }
    }
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

    #[test]
    fn a_v1alpha1_gang_is_reported_on_its_workload() {
        let gang = GangRef {
            namespace: "ml".into(),
            name: "train/workers/3".into(),
            api_version: "scheduling.k8s.io/v1alpha1".into(),
            kind: "Workload".into(),
        };
        let r = regarding(&gang);
        assert_eq!(r.name.as_deref(), Some("train"));
        assert_eq!(r.kind.as_deref(), Some("Workload"));
        assert_eq!(r.namespace.as_deref(), Some("ml"));
    }

    fn appended(event: AuditEvent, formed_before: Option<i64>) -> Appended {
        use crate::audit::{Open, Record};
        let gang = match &event {
            AuditEvent::Phase(p) => p.gang.clone(),
            AuditEvent::Outcome(o) => o.gang.clone(),
            AuditEvent::Decision(_) => None,
        };
        Appended {
            record: Record::new(10_000, event),
            before: Some(Open {
                scale_up_id: "su-1".into(),
                node_group: "h100".into(),
                gang,
                nodes: 2,
                phase: Phase::NodesReady,
                requested_at_ms: 0,
                formed_at_ms: formed_before,
                attached_at_ms: None,
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
        EventPublisher::events_for_lifecycle(a)
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
        let (_, _, _, note) = EventPublisher::events_for_lifecycle(&later).remove(0);
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
        let (gang, _, _, note) = EventPublisher::events_for_lifecycle(&failed).remove(0);
        assert_eq!(regarding(&gang).name.as_deref(), Some("train"));
        assert_eq!(
            note,
            "scale-up su-1 of node group h100: attachFailed after 10.0 s: attach error: w-1/ckpt: boom"
        );
    }
}
