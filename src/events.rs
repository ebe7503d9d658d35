//! Kubernetes Events on the gang object itself (the PodGroup, or the Workload for
//! `v1alpha1`), so `kubectl describe podgroup` shows why a scale-up happened or did not, when
//! the gang formed, when its volumes attached and how the scale-up ended, or that Cluster
//! Autoscaler cannot see the gang because the scheduler never tried it. This module holds the
//! publisher, every reason we use and the events of an admission decision; the events of a
//! scale-up's lifecycle records are built in `scaleup`, which hands them to
//! [`EventPublisher::publish`]. Events are best effort: a failure to publish is logged, never
//! returned. Depends on `model`, `planner` and the Kubernetes client.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tracing::{debug, warn};

use crate::model::GangRef;
use crate::planner::Decision;
use crate::telemetry::Chain;

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
/// Reason of a warning for a pending gang none of whose members carries a scheduler verdict,
/// so Cluster Autoscaler, which scales up only for pods marked `Unschedulable`, cannot see it.
pub const REASON_NOT_SEEN: &str = "GangNotSeenByAutoscaler";
/// Reason of a warning for a gang one of whose requested instances failed: its scale-up
/// repairs (it waits for a replacement) instead of failing.
pub const REASON_REPAIRING: &str = "ScaleUpRepairing";
/// Reason of an event for a gang a node was reserved for.
pub const REASON_NODE_RESERVED: &str = "NodeReserved";
/// Event reason: the nodes added for the gang are not reserved, although its group's
/// configuration reserves, because a DaemonSet that runs on the group lacks the toleration.
pub const REASON_RESERVATION_OFF: &str = "ReservationOff";
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
        if let Some(why) = decision
            .reservation_off
            .as_ref()
            .filter(|_| decision.is_accepted())
        {
            for a in decision.admitted.iter().take(MAX_EVENTS_PER_DECISION) {
                out.push((
                    a.gang.clone(),
                    REASON_RESERVATION_OFF,
                    "Warning",
                    format!(
                        "node group {}: the nodes added for this gang are not reserved for it: {why}",
                        decision.group
                    ),
                ));
            }
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

    /// Publishes the decision's events in the background.
    pub fn decision(&self, decision: &Decision) {
        self.publish(Self::events_for(decision));
    }

    /// Publishes `events`, each as `(gang, reason, type, note)`, in the background: one task
    /// per event, best effort.
    pub fn publish(&self, events: Vec<(GangRef, &'static str, &'static str, String)>) {
        for (gang, reason, type_, note) in events {
            let publisher = self.clone();
            tokio::spawn(async move { publisher.create(&gang, reason, type_, note).await });
        }
    }

    async fn create(&self, gang: &GangRef, reason: &str, type_: &str, note: String) {
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}-", regarding(gang).name.unwrap_or_default())),
                namespace: Some(gang.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(crate::clock::timestamp())),
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
                warn!(pod_group.namespace = %gang.namespace, pod_group.name = %gang.name, reason, error = %Chain(&e), "publishing an event failed")
            }
        }
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
}
