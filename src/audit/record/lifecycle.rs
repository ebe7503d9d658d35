//! The records of a scale-up's lifecycle after its decision: each [`Phase`] it reaches
//! ([`PhaseEvent`]), its terminal [`Outcome`] ([`OutcomeEvent`]), the reservations of its
//! nodes ([`ReservationEvent`]), each failed instance charged to it ([`RepairEvent`]) and the
//! instances withdrawn once it ended ([`WithdrawalEvent`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::GangId;

/// The non-terminal lifecycle phases of a scale-up, in order. A scale-up only moves forward;
/// a phase observed together with a later one may be skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The increase was applied. Entered by the accepted
    /// [`DecisionEvent`](super::DecisionEvent) that carries the scale-up id; gangscaler
    /// writes no `phase` event for it.
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

/// Instances requested for lifecycles that have ended, and not created yet, are withdrawn:
/// the group's target is lowered by their number and no node comes for them. Written before
/// the backend is asked; a withdrawal that fails (or a crash before it) is tried again, with
/// its record again, so an instance may be in more than one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WithdrawalEvent {
    /// The node group.
    pub node_group: String,
    /// One claim per instance withdrawn: `<scaleUpId>` or `<scaleUpId>/<namespace>/<gang>`,
    /// what the instance was requested for.
    pub claims: Vec<String>,
}

/// A pending gang was kept out of Cluster Autoscaler's scale-up, or let back in
/// (`admission.deferral`): written when its hold changes, before its pods are marked or
/// released, and again for every deferred gang after a start (the loop does not remember holds
/// across restarts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeferralEvent {
    /// The node group a `covered` gang's nodes are in flight on; empty for the other holds,
    /// which are about every group.
    pub node_group: String,
    /// The gang; absent for the members of gangs gone from the cluster whose marks a start
    /// found and lifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangId>,
    /// `covered`, `unhostable`, `no_room` or `behind`; absent when the gang is let back in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    /// One sentence naming the numbers.
    pub reason: String,
    /// Its members marked (or released) by this change.
    pub pods: u32,
}

/// An instance requested for a gang's lifecycle failed before the gang formed: the lifecycle
/// stays open, repairing, and the gang's need becomes the nodes it is missing, so that CA's
/// next ask for it on the same node group gets exactly those (a decision whose `gangs[]`
/// entry has `repairOf`). Written once per failed instance, before anything acts on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairEvent {
    /// The scale-up whose instance failed.
    pub scale_up_id: String,
    /// Its node group.
    pub node_group: String,
    /// The gang the instance was requested for.
    pub gang: GangId,
    /// The failed instance's id (its provider id).
    pub instance: String,
    /// What the backend said of the failure.
    pub reason: String,
    /// Failed instances of this lifecycle recorded so far, this one included.
    pub failed: u32,
    /// Nodes repair decisions have added for it so far.
    pub replaced: u32,
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
