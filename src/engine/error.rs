//! The engine's errors; `grpc::status` maps each to one gRPC code.

use crate::model::{NodeGroupId, echo};
use crate::provision;

/// Engine errors; `grpc::status` maps each to one gRPC code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No node group has this id (shown cut short and escaped: it comes from the request).
    #[error("node group \"{}\" not found", echo(.0))]
    GroupNotFound(String),
    /// The request is malformed (bad delta, bad timestamps, missing node).
    #[error("{0}")]
    InvalidRequest(String),
    /// The group has no template node (no `capacity` configured).
    #[error("node group {0} has no template node: set capacity in its configuration")]
    NoTemplate(NodeGroupId),
    /// No price is known for the group.
    #[error("node group {0} has no price configured")]
    NoPrice(NodeGroupId),
    /// The node is not managed by any node group (names shown cut short and escaped).
    #[error(
        "node \"{}\" (providerID \"{}\") is not managed by any node group",
        echo(name),
        echo(provider_id)
    )]
    NodeNotManaged {
        /// Node name.
        name: String,
        /// providerID.
        provider_id: String,
    },
    /// This provider does not implement the call.
    #[error("{0} is not implemented by gangscaler")]
    Unsupported(&'static str),
    /// A configured backend kind has no provisioner (a wiring bug).
    #[error("node group {group}: no {kind} backend is running")]
    NoBackend {
        /// Group.
        group: NodeGroupId,
        /// Backend kind.
        kind: &'static str,
    },
    /// Gang admission refused the increase (policy `strict`: it would host only part of a gang).
    #[error("node group {group}: scale-up rejected by gang admission: {reason}")]
    Rejected {
        /// Group.
        group: NodeGroupId,
        /// The decision's reason, naming gangs and numbers.
        reason: String,
    },
    /// The cluster view has not synced yet; deciding from a partial cache is refused.
    #[error("node group {0}: the cluster view is not synced yet; retry shortly")]
    NotSynced(NodeGroupId),
    /// The cluster view may be behind the cluster (its watches are failing, e.g. the API
    /// server is unreachable); deciding from stale objects is refused.
    #[error(
        "node group {group}: the cluster view is stale ({stale}); no scale-up is decided until it is current again"
    )]
    ViewStale {
        /// Group.
        group: NodeGroupId,
        /// Which watches fail, and for how long.
        stale: crate::cluster::Stale,
    },
    /// The decision record of an accepted scale-up could not be made durable, so the scale-up
    /// was not applied: no node was requested. Retried by CA after its node-group backoff.
    #[error(
        "node group {group}: scale-up of {nodes} node(s) not applied: its decision could not be recorded in the audit log ({why}); nothing was provisioned"
    )]
    AuditUnwritable {
        /// Group.
        group: NodeGroupId,
        /// Nodes the refused decision would have added.
        nodes: u32,
        /// The write error and its causes.
        why: String,
    },
    /// A scale-up recorded but never applied was due to be ended, but its outcome could not be
    /// made durable; the next lifecycle tick tries again.
    #[error(
        "node group {group}: scale-up {scale_up} was recorded but never applied, and its end could not be recorded in the audit log ({why})"
    )]
    UnappliedUnrecorded {
        /// Group.
        group: NodeGroupId,
        /// The scale-up.
        scale_up: String,
        /// The write error and its causes.
        why: String,
    },
    /// Instances of ended lifecycles were due to be withdrawn, but the record of it could not
    /// be made durable, so nothing was withdrawn; the next lifecycle tick tries again.
    #[error(
        "node group {group}: {instances} instance(s) of ended lifecycles not withdrawn: the withdrawal could not be recorded in the audit log ({why})"
    )]
    WithdrawalUnrecorded {
        /// Group.
        group: NodeGroupId,
        /// Instances that would have been withdrawn.
        instances: u32,
        /// The write error and its causes.
        why: String,
    },
    /// The task running a `NodeGroupIncreaseSize` ended without an answer: it panicked, or
    /// the runtime is shutting down (group name shown cut short and escaped).
    #[error(
        "node group \"{}\": the increase ended without an answer: {why}",
        echo(group)
    )]
    Interrupted {
        /// Group, as the request named it.
        group: String,
        /// The task's end.
        why: String,
    },
    /// The backend refused or failed.
    #[error(transparent)]
    Provision(#[from] provision::Error),
    /// This replica may not change anything now: it is a standby under leader election, is
    /// taking over, or lost the Lease (the message names the leader).
    #[error(transparent)]
    NotLeader(#[from] crate::leader::NotLeader),
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
