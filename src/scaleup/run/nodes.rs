//! The node half of each [`Loop`] tick: scale-down protection and reservation marks on the
//! nodes ([`protect`](super::super::protect), [`reserve`](super::super::reserve)), and the
//! reservation toleration on pending gang members.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tracing::{debug, error, info, warn};

use super::Loop;
use crate::audit::{Record, ReservationAction, ReservationEvent};
use crate::cluster::NodeTable;
use crate::events::REASON_NODE_RESERVED;
use crate::metrics::ReleaseLabels;
use crate::model::ReservationSpec;
use crate::model::reservation::{RESERVATION_TAINT, tolerated, value_for};
use crate::scaleup::observe::Attribution;
use crate::scaleup::protect::{Marks, NodePatch, plan, wanted};
use crate::scaleup::reserve::{self, Hold, ReleaseReason};
use crate::scaleup::track::Open;
use crate::telemetry::Chain;

/// Most pods given the reservation toleration per tick, so a burst of new gangs does not
/// flood the API server; the rest follow at the next ticks.
pub const TOLERATIONS_PER_TICK: usize = 200;

/// The audit record of reserving `node` for `hold`'s gang.
fn reserved_record(node: &str, group: &str, hold: &Hold) -> ReservationEvent {
    ReservationEvent {
        node: node.to_owned(),
        node_group: if group.is_empty() {
            hold.node_group.clone()
        } else {
            group.to_owned()
        },
        action: ReservationAction::Reserved,
        gang: hold.gang.to_string(),
        value: hold.value.clone(),
        scale_up_id: Some(hold.scale_up_id.clone()),
        reason: None,
    }
}

/// The audit record of ending `node`'s reservation with taint `value`.
fn released_record(
    node: &str,
    group: &str,
    gang: &str,
    value: &str,
    reason: ReleaseReason,
) -> ReservationEvent {
    ReservationEvent {
        node: node.to_owned(),
        node_group: group.to_owned(),
        action: ReservationAction::Released,
        gang: gang.to_owned(),
        value: value.to_owned(),
        scale_up_id: None,
        reason: Some(reason),
    }
}

/// Counts a node patch that was not applied back into the gauges: the node keeps what it had.
fn unapplied(protected: &mut usize, held: &mut usize, patch: NodePatch<'_>) {
    match patch.protect {
        Some(Some(_)) => *protected = protected.saturating_sub(1),
        Some(None) => *protected += 1,
        None => {}
    }
    match patch.hold {
        Some(Some(_)) => *held = held.saturating_sub(1),
        Some(None) => *held += 1,
        None => {}
    }
}

/// Measures the provisioning time of every node attributed to an open scale-up that turned
/// Ready: from the scale-up's request to the node's `Ready` transition.
fn measure(
    provisioning: &mut BTreeMap<String, reserve::Provisioning>,
    open: &[Open],
    attributed: &Attribution,
    nodes: &NodeTable,
) {
    for o in open {
        let requested = o.requested_at_ms.div_euclid(1000);
        for name in attributed
            .by_scale_up
            .get(&o.scale_up_id)
            .into_iter()
            .flatten()
        {
            let Some(ready) = nodes.get(name).and_then(|s| s.ready_since_unix) else {
                continue;
            };
            if let Ok(seconds) = u64::try_from(ready - requested) {
                provisioning
                    .entry(o.node_group.clone())
                    .or_default()
                    .observe(name, seconds);
            }
        }
    }
    for p in provisioning.values_mut() {
        p.retain_nodes(|n| nodes.get(n).is_some());
    }
}

/// Sets the measured booking deadline of each group whose files set none.
fn booking_deadlines(
    settings: &mut BTreeMap<String, ReservationSpec>,
    provisioning: &BTreeMap<String, reserve::Provisioning>,
) {
    for (group, spec) in settings.iter_mut() {
        if spec.enabled
            && spec.booking_deadline_measured
            && let Some(p) = provisioning.get(group)
        {
            spec.booking_deadline = p.deadline(spec.booking_deadline);
        }
    }
}

impl Loop {
    /// Marks the nodes of scale-ups whose gang lifecycle is still open (after this tick's
    /// records) and releases the nodes whose scale-up ended; reserves the nodes each reserving
    /// gang holds ([`reserve`](super::reserve)) and releases the others. Each node changes in
    /// one patch; each reservation change is recorded in the audit log before its patch. A
    /// failed patch is retried at the next tick.
    pub(super) async fn mark_nodes(&mut self, attributed: &Attribution, now_ms: i64) {
        let Some(marker) = &self.marker else {
            return;
        };
        let open = self.recorder.open_scale_ups();
        let mut settings = self.instances.reservations();
        let provisioning = &mut self.provisioning;
        let (mut reserve, carried) = self.view.with_node_table(|nodes| {
            measure(provisioning, &open, attributed, nodes);
            booking_deadlines(&mut settings, provisioning);
            let carried: BTreeSet<String> = nodes
                .marked()
                .filter_map(|n| nodes.get(n)?.reservation.clone())
                .collect();
            let w = reserve::wanted(&open, attributed, &settings, nodes, now_ms.div_euclid(1000));
            (w, carried)
        });
        // Gangs closed after forming, while a node still carries their value.
        self.closed.retain(|value, _| carried.contains(value));
        reserve.formed.extend(
            self.closed
                .iter()
                .filter(|(_, formed)| **formed)
                .map(|(value, _)| value.clone()),
        );
        let mut wanted = if self.protect {
            wanted(&open, &attributed.by_scale_up)
        } else {
            BTreeMap::new()
        };
        // A node booked out is no longer the gang's: CA may take it back.
        wanted.retain(|node, _| !reserve.booked_out.contains(node));
        let (changes, seen) = self.view.with_node_table(|nodes| {
            let marks = Marks::for_plan(&wanted, &reserve.holds, nodes);
            // Each node's group label and reservation annotation, for the audit records.
            let seen: BTreeMap<String, (String, String)> = marks
                .iter()
                .map(|m| {
                    let group = nodes.get(&m.name).and_then(|s| s.node_group.clone());
                    let gang = m.reserved_for.clone();
                    (
                        m.name.clone(),
                        (group.unwrap_or_default(), gang.unwrap_or_default()),
                    )
                })
                .collect();
            (plan(&wanted, &reserve, &marks), seen)
        });
        let mut protected = changes.protected;
        let mut held = changes.held;
        let holds: BTreeMap<&str, &Hold> =
            changes.hold.iter().map(|(n, h)| (n.as_str(), h)).collect();
        let unholds: BTreeMap<&str, (&str, ReleaseReason)> = changes
            .unhold
            .iter()
            .map(|(n, v, r)| (n.as_str(), (v.as_str(), *r)))
            .collect();
        for (node, patch) in changes.per_node() {
            let (group, gang) = seen
                .get(node)
                .map_or(("", ""), |(g, a)| (g.as_str(), a.as_str()));
            // The durable record first: a reservation change is an action on the cluster.
            let record = match patch.hold {
                Some(Some(_)) => holds.get(node).map(|h| reserved_record(node, group, h)),
                Some(None) => unholds
                    .get(node)
                    .map(|(v, r)| released_record(node, group, gang, v, *r)),
                None => None,
            };
            if let Some(record) = record
                && let Err(e) = self.recorder.record(&Record::new(now_ms, record))
            {
                self.metrics.audit_append(false);
                error!(node.name = %node, error = %Chain(&e), "writing a reservation record failed; the node is left as it is and tried again at the next tick");
                unapplied(&mut protected, &mut held, patch);
                continue;
            }
            match marker.apply(node, patch).await {
                Ok(()) => self.patched(node, patch, &holds, &unholds),
                Err(e) if e.not_found() => {}
                Err(e) => {
                    unapplied(&mut protected, &mut held, patch);
                    warn!(node.name = %node, error = %Chain(&e), "changing a node's scale-down protection or reservation failed; will retry");
                }
            }
        }
        self.metrics
            .scale_up_protected_nodes
            .set(i64::try_from(protected).unwrap_or(i64::MAX));
        self.metrics
            .reserved_nodes
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// Logs, counts and publishes one node patch that was applied.
    fn patched(
        &self,
        node: &str,
        patch: NodePatch<'_>,
        holds: &BTreeMap<&str, &Hold>,
        unholds: &BTreeMap<&str, (&str, ReleaseReason)>,
    ) {
        match patch.protect {
            Some(Some(id)) => {
                info!(node.name = %node, scale_up.id = %id, "node kept out of scale-down while its gang forms");
            }
            Some(None) => info!(node.name = %node, "scale-down protection released"),
            None => {}
        }
        let mut events = Vec::new();
        match patch.hold {
            Some(Some(_)) => {
                if let Some(h) = holds.get(node) {
                    info!(node.name = %node, gang = %h.gang, scale_up.id = %h.scale_up_id, reservation = %h.value, "node reserved for its gang");
                    events.push((
                        h.gang.clone(),
                        REASON_NODE_RESERVED,
                        "Normal",
                        format!(
                            "node {node} of node group {} (scale-up {}) reserved for this gang: taint {}={}:NoSchedule",
                            h.node_group, h.scale_up_id, RESERVATION_TAINT, h.value
                        ),
                    ));
                }
            }
            Some(None) => {
                if let Some((value, reason)) = unholds.get(node) {
                    self.metrics
                        .reservations_released
                        .get_or_create(&ReleaseLabels {
                            reason: reason.as_str(),
                        })
                        .inc();
                    info!(node.name = %node, reservation = %value, reason = reason.as_str(), "node reservation released");
                }
            }
            None => {}
        }
        if let Some(publisher) = &self.events
            && !events.is_empty()
        {
            publisher.publish(events);
        }
    }

    /// Adds the reservation toleration to the pending members of every pending gang that lack
    /// it, when some node group reserves: a member tolerates only its own gang's taint value,
    /// so the toleration is harmless before any node is reserved, and members created without
    /// the webhook get it here (Kubernetes allows adding tolerations to an existing pod; see
    /// [`Marker::tolerate`]). At most [`TOLERATIONS_PER_TICK`] pods are patched per tick.
    pub(super) async fn tolerate_members(&mut self, gangs: &[Arc<crate::model::Gang>]) {
        let Some(marker) = &self.marker else {
            return;
        };
        if !self.instances.reservations().values().any(|r| r.enabled) {
            return;
        }
        let mut lacking = Vec::new();
        for gang in gangs.iter().filter(|g| g.is_pending()) {
            let value = value_for(&gang.id);
            for m in gang.unbound() {
                if !tolerated(&m.demand.tolerations, &value) {
                    lacking.push((gang.id.namespace.as_str(), m.pod.as_str(), value.clone()));
                }
            }
        }
        // Pods patched recently whose change the view has not shown yet are not patched again.
        let now_lacking: BTreeSet<(String, String)> = lacking
            .iter()
            .map(|(ns, pod, _)| ((*ns).to_owned(), (*pod).to_owned()))
            .collect();
        self.tolerated.retain(|k| now_lacking.contains(k));
        for (ns, pod, value) in lacking.into_iter().take(TOLERATIONS_PER_TICK) {
            let key = (ns.to_owned(), pod.to_owned());
            if self.tolerated.contains(&key) {
                continue;
            }
            match marker.tolerate(ns, pod, &value).await {
                Ok(()) => {
                    self.metrics.reservation_tolerations_added.inc();
                    debug!(pod.namespace = ns, pod.name = pod, reservation = %value, "reservation toleration added");
                    self.tolerated.insert(key);
                }
                Err(e) => {
                    debug!(pod.namespace = ns, pod.name = pod, error = %Chain(&e), "adding the reservation toleration failed; will retry");
                }
            }
        }
    }
}
