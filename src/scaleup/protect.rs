//! Scale-down protection of forming gangs. CA's scale-down sees a node empty as long as no pod
//! runs on it, and CA cannot see what keeps a gang from forming (CSI attach limits on a group
//! scaled from zero, nodes that come up one by one), so it may remove the first nodes of a
//! gang while the last ones are on their way, and the gang never forms. While a scale-up has a
//! gang lifecycle open, its nodes (as [`attributed_nodes`](super::observe::attributed_nodes)
//! shares them out) carry CA's `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`
//! and our marker `gangscaler.io/scale-down-protected-for: <scale-up id>`; once its outcome is
//! recorded both are removed, so CA scales down the nodes of a failed or finished gang as
//! usual.
//!
//! A node that already carries `scale-down-disabled` without our marker is someone else's
//! decision and is never touched. The same plan carries node reservation
//! ([`reserve`](super::reserve)): the reservation taint and its annotation are set and removed
//! with the protection. [`plan`] is pure; [`Marker`] applies its [`Changes`] with one patch
//! per node.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};

use super::reserve::{Hold, ReleaseReason, Wanted};
use super::track::Open;
use crate::cluster::{NodeSummary, NodeTable};
use crate::model::reservation::{
    RESERVATION_EFFECT, RESERVATION_TAINT, RESERVED_FOR, toleration_json,
};

pub use crate::model::labels::{SCALE_DOWN_DISABLED, SCALE_DOWN_PROTECTED_FOR as PROTECTED_FOR};

/// The nodes that must be protected now, each with the scale-up it is protected for: the
/// attributed nodes of every scale-up in `open` that still has a gang lifecycle open.
pub fn wanted(
    open: &[Open],
    attributed: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, String> {
    let forming: BTreeSet<&str> = open
        .iter()
        .filter(|o| o.gang.is_some())
        .map(|o| o.scale_up_id.as_str())
        .collect();
    attributed
        .iter()
        .filter(|(id, _)| forming.contains(id.as_str()))
        .flat_map(|(id, nodes)| nodes.iter().map(move |n| (n.clone(), id.clone())))
        .collect()
}

/// What a node carries of the two annotations and of the reservation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marks {
    /// Node name.
    pub name: String,
    /// `scale-down-disabled` is `"true"`.
    pub disabled: bool,
    /// Our marker's value, if present.
    pub protected_for: Option<String>,
    /// The reservation taint's value, if present.
    pub reservation: Option<String>,
    /// The reservation annotation's value (the gang), if present.
    pub reserved_for: Option<String>,
}

impl Marks {
    /// The marks of the nodes `plan` needs to see for `wanted` and `holds`: the wanted and
    /// held ones and the ones carrying something of ours (the others give no change), as the
    /// node table has them, sorted by name.
    pub fn for_plan(
        wanted: &BTreeMap<String, String>,
        holds: &BTreeMap<String, Hold>,
        nodes: &NodeTable,
    ) -> Vec<Self> {
        let names: BTreeSet<&str> = wanted
            .keys()
            .chain(holds.keys())
            .map(String::as_str)
            .chain(nodes.marked())
            .collect();
        names
            .into_iter()
            .filter_map(|name| Some(Self::from_summary(name, nodes.get(name)?)))
            .collect()
    }

    /// The marks of `node` (`None` for a node without a name).
    pub fn of(node: &Node) -> Option<Self> {
        let name = node.metadata.name.as_deref()?;
        Some(Self::from_summary(name, &NodeSummary::of(node)))
    }

    fn from_summary(name: &str, summary: &NodeSummary) -> Self {
        Self {
            name: name.to_owned(),
            disabled: summary.scale_down_disabled,
            protected_for: summary.protected_for.clone(),
            reservation: summary.reservation.clone(),
            reserved_for: summary.reserved_for.clone(),
        }
    }
}

/// The patches that bring the nodes in line with what is wanted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    /// (node, scale-up id) to mark protected.
    pub protect: Vec<(String, String)>,
    /// Nodes whose protection (ours) to remove.
    pub release: Vec<String>,
    /// Nodes protected by us once the changes are applied.
    pub protected: usize,
    /// Nodes to reserve (or to reserve for another gang), with their hold.
    pub hold: Vec<(String, Hold)>,
    /// Nodes whose reservation ends: (node, the taint value it had, why).
    pub unhold: Vec<(String, String, ReleaseReason)>,
    /// Nodes reserved once the changes are applied.
    pub held: usize,
}

impl Changes {
    /// The per-node patches: each node's protection and reservation change, merged.
    pub fn per_node(&self) -> BTreeMap<&str, NodePatch<'_>> {
        let mut out: BTreeMap<&str, NodePatch<'_>> = BTreeMap::new();
        for (node, id) in &self.protect {
            out.entry(node).or_default().protect = Some(Some(id));
        }
        for node in &self.release {
            out.entry(node).or_default().protect = Some(None);
        }
        for (node, hold) in &self.hold {
            out.entry(node).or_default().hold = Some(Some(hold));
        }
        for (node, _, _) in &self.unhold {
            out.entry(node).or_default().hold = Some(None);
        }
        out
    }
}

/// One node's change: `None` leaves that part alone, `Some(None)` removes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodePatch<'a> {
    /// Protect for this scale-up, or release.
    pub protect: Option<Option<&'a str>>,
    /// Reserve with this hold, or release.
    pub hold: Option<Option<&'a Hold>>,
}

/// Compares `nodes` with `wanted` protection (see [`wanted`]) and `reserve`'s holds. A wanted
/// node that is already disabled without our marker is left alone; a node with our marker
/// that is no longer wanted (its scale-up ended, or protection is off) is released. A held
/// node whose taint or annotation differs from its hold is reserved again; a node with our
/// taint or annotation that is not held is released when [`Wanted::release_reason`] gives a
/// reason. Nodes not in `nodes` are ignored.
pub fn plan(wanted: &BTreeMap<String, String>, reserve: &Wanted, nodes: &[Marks]) -> Changes {
    let mut changes = Changes::default();
    for n in nodes {
        match reserve.holds.get(&n.name) {
            Some(h) => {
                if n.reservation.as_deref() != Some(h.value.as_str())
                    || n.reserved_for.as_deref() != Some(h.gang.to_string().as_str())
                {
                    changes.hold.push((n.name.clone(), h.clone()));
                }
                changes.held += 1;
            }
            None if n.reservation.is_some() || n.reserved_for.is_some() => {
                let value = n.reservation.as_deref().unwrap_or_default();
                match reserve.release_reason(&n.name, value) {
                    Some(reason) => {
                        changes
                            .unhold
                            .push((n.name.clone(), value.to_owned(), reason));
                    }
                    None => changes.held += 1,
                }
            }
            None => {}
        }
        let ours = n.protected_for.is_some();
        match wanted.get(&n.name) {
            // Disabled without our marker: someone else's decision.
            Some(_) if n.disabled && !ours => {}
            Some(id) => {
                if !(n.disabled && n.protected_for.as_ref() == Some(id)) {
                    changes.protect.push((n.name.clone(), id.clone()));
                }
                changes.protected += 1;
            }
            None if ours => changes.release.push(n.name.clone()),
            None => {}
        }
    }
    changes
}

/// Applies [`Changes`] to Node objects, and the reservation toleration to pods.
#[derive(Clone)]
pub struct Marker {
    nodes: Api<Node>,
    client: kube::Client,
}

/// Why a node patch failed; the caller retries at its next tick.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The API server refused or could not be reached.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The object changed between the read and the write (the patch carries the
    /// resourceVersion it read).
    #[error("{0} changed while its reservation taint or toleration was being written")]
    Conflict(String),
}

impl PatchError {
    /// The node is gone.
    pub fn not_found(&self) -> bool {
        matches!(self, Self::Api(kube::Error::Api(e)) if e.code == 404)
    }
}

impl std::fmt::Debug for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marker").finish_non_exhaustive()
    }
}

impl Marker {
    /// A marker patching nodes through `client` (needs `get` and `patch` on nodes, and on
    /// pods for [`Marker::tolerate`]).
    pub fn new(client: kube::Client) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            client,
        }
    }

    /// Adds the toleration of reservation `value` to pod `namespace/name`, unless it has it.
    /// Reads the pod and writes its whole toleration list back with the resourceVersion read,
    /// so a concurrent change (another writer adding the same toleration) makes this attempt
    /// fail rather than duplicate or lose one; the caller retries at its next tick. Existing
    /// tolerations are sent back unchanged, as the API server requires.
    ///
    /// # Errors
    /// The API server's error, or [`PatchError::Conflict`].
    pub async fn tolerate(
        &self,
        namespace: &str,
        name: &str,
        value: &str,
    ) -> Result<(), PatchError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = pods.get(name).await?;
        let current = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        if current.iter().any(|t| {
            t.key.as_deref() == Some(RESERVATION_TAINT) && t.value.as_deref() == Some(value)
        }) {
            return Ok(());
        }
        let mut tolerations: Vec<serde_json::Value> = current
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()
            .map_err(kube::Error::SerdeError)?;
        tolerations.push(toleration_json(value));
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "spec": {"tolerations": tolerations},
        });
        match pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(PatchError::Conflict(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies one node's [`NodePatch`] in one JSON merge patch: the protection annotations
    /// (`scale-down-disabled` and our marker, both set or both removed) and the reservation
    /// annotation, and, when the reservation changes, the node's taints with ours replaced.
    /// A taint change reads the node first and sends the resourceVersion it read, so another
    /// writer's taints are never lost; a conflict is returned, to be retried.
    ///
    /// # Errors
    /// The API server's error, or [`PatchError::Conflict`].
    pub async fn apply(&self, node: &str, change: NodePatch<'_>) -> Result<(), PatchError> {
        let mut annotations = serde_json::Map::new();
        if let Some(id) = change.protect {
            annotations.insert(SCALE_DOWN_DISABLED.into(), id.map(|_| "true").into());
            annotations.insert(PROTECTED_FOR.into(), id.into());
        }
        let mut patch = serde_json::json!({});
        if let Some(hold) = change.hold {
            annotations.insert(RESERVED_FOR.into(), hold.map(|h| h.gang.to_string()).into());
            let current = self.nodes.get(node).await?;
            let mut taints: Vec<serde_json::Value> = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default()
                .iter()
                .filter(|t| t.key != RESERVATION_TAINT)
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()
                .map_err(kube::Error::SerdeError)?;
            if let Some(h) = hold {
                taints.push(serde_json::json!({
                    "key": RESERVATION_TAINT,
                    "value": h.value,
                    "effect": RESERVATION_EFFECT.as_str(),
                }));
            }
            patch = serde_json::json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints},
            });
        }
        patch["metadata"]["annotations"] = annotations.into();
        match self
            .nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(PatchError::Conflict(node.into())),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
