//! Provisioning backends behind one trait. A backend owns a group's target size and its
//! instances and applies every change atomically (bounds are checked in the same step that
//! changes the size, so concurrent calls never lose updates or overshoot).
//! Depends on `model`, plus `config` and `cluster`'s object readers for the kwok backend.

pub mod capi_types;
pub mod clusterapi;
pub mod kwok;
pub mod memory;

use async_trait::async_trait;

use crate::model::{Claim, Instance, NodeGroupId, NodeGroupSpec, echo};

/// Provisioning errors. Every variant names the group and the numbers involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Growing by `delta` would pass the group's maximum (or the target is already above it:
    /// a reload lowered `maxSize` below the target).
    #[error(
        "node group {group}: increasing target size {current} by {delta} would exceed max size {max}{}",
        above_max_note(*current, *max)
    )]
    AboveMax {
        /// Group.
        group: NodeGroupId,
        /// Target before the call.
        current: u32,
        /// Requested increase.
        delta: u32,
        /// Group maximum.
        max: u32,
    },
    /// Removing capacity would pass the group's minimum.
    #[error(
        "node group {group}: removing {removing} node(s) from target size {current} would go below min size {min}"
    )]
    BelowMin {
        /// Group.
        group: NodeGroupId,
        /// Target before the call.
        current: u32,
        /// Nodes that would be removed.
        removing: u32,
        /// Group minimum.
        min: u32,
    },
    /// A node named in a delete request is not an instance of the group (the request's names
    /// are shown cut short and escaped).
    #[error(
        "node group {group}: node \"{}\" (providerID \"{}\") does not belong to this group",
        echo(node),
        echo(provider_id)
    )]
    NotInGroup {
        /// Group.
        group: NodeGroupId,
        /// Node name from the request.
        node: String,
        /// providerID from the request.
        provider_id: String,
    },
    /// A target decrease asked to cancel more than the not-yet-created capacity.
    #[error(
        "node group {group}: cannot decrease target size by {requested}: only {pending} node(s) are requested but not yet created (target {target}); existing nodes must be deleted with NodeGroupDeleteNodes"
    )]
    WouldDeleteExisting {
        /// Group.
        group: NodeGroupId,
        /// Requested decrease.
        requested: u32,
        /// Capacity that is not created yet.
        pending: u32,
        /// Current target.
        target: u32,
    },
    /// The backend could not be reached (no connection, or it answered that it is
    /// overloaded or failing: HTTP 429 or 5xx); retrying later may help.
    #[error("node group {group}: {backend} backend unreachable: {message}")]
    Unreachable {
        /// Group.
        group: NodeGroupId,
        /// Backend kind.
        backend: &'static str,
        /// What failed.
        message: String,
    },
    /// The backend itself failed; retrying may help.
    #[error("node group {group}: {backend} backend failed: {message}")]
    Backend {
        /// Group.
        group: NodeGroupId,
        /// Backend kind.
        backend: &'static str,
        /// What failed.
        message: String,
    },
}

/// The tail of an [`Error::AboveMax`] message whose target is already above the maximum.
fn above_max_note(current: u32, max: u32) -> &'static str {
    if current > max {
        " (the target is already above max size: maxSize was lowered below it; no increase is possible until nodes are deleted)"
    } else {
        ""
    }
}

impl Error {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::AboveMax { .. } => "above_max",
            Self::BelowMin { .. } => "below_min",
            Self::NotInGroup { .. } => "not_in_group",
            Self::WouldDeleteExisting { .. } => "would_delete_existing",
            Self::Unreachable { .. } => "unreachable",
            Self::Backend { .. } => "backend",
        }
    }
}

/// Whether `e` says the API server could not be reached or cannot serve now (as opposed to
/// refusing the request).
pub(crate) fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// A Kubernetes API error of a backend, while doing `what` for `group`: [`Error::Unreachable`]
/// when retrying later may help, else [`Error::Backend`].
pub(crate) fn kube_error(
    group: &NodeGroupId,
    backend: &'static str,
    what: &str,
    e: &kube::Error,
) -> Error {
    let (group, message) = (group.clone(), format!("{what}: {e}"));
    if unreachable(e) {
        Error::Unreachable {
            group,
            backend,
            message,
        }
    } else {
        Error::Backend {
            group,
            backend,
            message,
        }
    }
}

/// Builds a Kubernetes client from `kubeconfig`, else the usual inference (`KUBECONFIG`,
/// `~/.kube/config`, in-cluster).
///
/// # Errors
/// When no usable configuration is found.
pub async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Client, kube::Error> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(kube::Error::InferKubeconfig)?
        }
        None => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    };
    kube::Client::try_from(config)
}

/// Waits 5-24 ms before an optimistic-concurrency retry, a random time so that writers who
/// collided spread out instead of colliding again.
pub(crate) async fn conflict_pause() {
    use std::hash::{BuildHasher, Hasher};
    let jitter = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % 20;
    tokio::time::sleep(std::time::Duration::from_millis(5 + jitter)).await;
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A node as CA names it in a delete request: providerID (may be empty), and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// `spec.providerID`, or the instance id for CA's fake nodes; may be empty.
    pub provider_id: String,
    /// Node name.
    pub name: String,
}

/// A provisioning backend. Implementations must be safe under concurrent calls.
#[async_trait]
pub trait Provisioner: Send + Sync + 'static {
    /// The backend kind, e.g. `memory` (a bounded metric label).
    fn kind(&self) -> &'static str;

    /// Makes the backend aware of the configured groups (called at start and on reload).
    /// Groups seen for the first time start at their minimum size.
    ///
    /// # Errors
    /// [`Error::Backend`] if the backend cannot be reached.
    async fn sync_groups(&self, groups: &[NodeGroupSpec]) -> Result<()>;

    /// The group's target size: created instances plus capacity not yet created.
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::Backend`] if the backend cannot answer.
    async fn target_size(&self, group: &NodeGroupSpec) -> Result<u32>;

    /// Raises the target by `delta` (> 0) unless that passes `group.max_size`; returns the
    /// new target. When this returns, [`Provisioner::target_size`] reflects the increase.
    ///
    /// A backend that [keeps claims](Provisioner::keeps_claims) stores `claims[i]` with the
    /// `i`-th instance requested, in the same atomic step that raises the target, and lists it
    /// in [`Instance::claim`](crate::model::Instance) from then on; instances past
    /// `claims.len()` get none. Other backends ignore `claims`.
    ///
    /// # Errors
    /// [`Error::AboveMax`], or [`Error::Backend`].
    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> Result<u32>;

    /// [`Provisioner::increase_for`] without claims.
    ///
    /// # Errors
    /// As [`Provisioner::increase_for`].
    async fn increase(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        self.increase_for(group, delta, &[]).await
    }

    /// Whether this backend stores the claims [`Provisioner::increase_for`] is given and
    /// lists them on its instances, so that nodes and failures are attributed by claim. A
    /// backend that cannot name an instance when it is requested (Cluster API: Machines
    /// appear later, made by the MachineSet controller) keeps none.
    fn keeps_claims(&self) -> bool {
        false
    }

    /// The claims of the group's capacity not created yet, one per claimed instance (in no
    /// particular order); empty for a backend that keeps no claims.
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::Backend`] if the backend cannot answer.
    async fn pending_claims(&self, _group: &NodeGroupSpec) -> Result<Vec<Claim>> {
        Ok(Vec::new())
    }

    /// Withdraws capacity not created yet that was claimed as `claims` (one instance per
    /// entry, where one is still pending with that claim), lowering the target by as many;
    /// returns how many were withdrawn. Never touches a created instance or unclaimed
    /// capacity; a backend that keeps no claims withdraws nothing.
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::Backend`]; nothing is withdrawn then.
    async fn withdraw(&self, _group: &NodeGroupSpec, _claims: &[Claim]) -> Result<u32> {
        Ok(0)
    }

    /// Cancels `delta` (> 0) units of capacity that is not created yet; returns the new target.
    ///
    /// # Errors
    /// [`Error::WouldDeleteExisting`] if fewer than `delta` units are pending, or [`Error::Backend`].
    async fn decrease_target(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32>;

    /// Deletes the named instances, all or none, lowering the target by their number; returns
    /// the new target. Instances whose creation failed can always be deleted; healthy ones
    /// not below `group.min_size`.
    ///
    /// # Errors
    /// [`Error::NotInGroup`], [`Error::BelowMin`], or [`Error::Backend`].
    async fn delete(&self, group: &NodeGroupSpec, nodes: &[NodeRef]) -> Result<u32>;

    /// The group's instances.
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::Backend`] if the backend cannot answer.
    async fn instances(&self, group: &NodeGroupSpec) -> Result<Vec<Instance>>;

    /// The group owning the instance with this providerID, else with this node name.
    ///
    /// # Errors
    /// [`Error::Backend`] if the backend cannot be reached.
    async fn lookup(&self, node: &NodeRef) -> Result<Option<NodeGroupId>>;

    /// Why this backend's Nodes for `group` would not carry the reservation taint from
    /// registration, so reservation must stay off for the group; `None` when they would, or
    /// the group does not reserve. Backends that create Nodes themselves (kwok) taint them and
    /// keep the default; Cluster API reads the MachineDeployment's template.
    ///
    /// # Errors
    /// [`Error::Unreachable`] or [`Error::Backend`] if the backend cannot answer.
    async fn reservation_blocker(&self, group: &NodeGroupSpec) -> Result<Option<String>> {
        let _ = group;
        Ok(None)
    }
}
