//! The kwok backend: a group's nodes are real Kubernetes Node objects that kwok keeps alive
//! (no kubelet). The cluster is the source of truth:
//!
//! - each group's target size, its not-yet-created capacity (with the name each node will get
//!   and when it is due), its simulated failures and its nodes being deleted live in one state
//!   ConfigMap, changed only by optimistic-concurrency replaces (resourceVersion), so concurrent
//!   calls and several gangscaler processes never lose or duplicate an update;
//! - Node objects carry the group label and `spec.providerID = kwok://<group>/<node>`, so a
//!   restarted provider recovers its instances by listing them;
//! - a node's name is chosen when its capacity is requested and creating it is idempotent, so a
//!   crash between "create the Node" and "record it" can never create a second node.
//!
//! While the API server cannot be reached, [`Provisioner::target_size`],
//! [`Provisioner::instances`] and name lookups answer from what this process last read of the
//! group ([`Error::Unreachable`] otherwise): the cluster is the only store, so nobody can have
//! changed it meanwhile (short of a partition that leaves another writer connected). Every
//! write this process attempts forgets what it had read of the group, since a write that
//! failed may or may not have been applied. Writes fail with [`Error::Unreachable`].
//!
//! Each Node gets a CSINode carrying the template's CSI attach limits (a kubelet would publish
//! one; the scheduler's volume-limit check reads it), and until that CSINode exists the Node
//! carries [`CSI_STARTUP_TAINT`], as a CSI node plugin's startup taint keeps pods off a node
//! whose driver has not registered. An optional simulated CSI attacher marks
//! this backend's VolumeAttachments attached, since kwok clusters have no external-attacher.
//!
//! The parts: `state` (the state ConfigMap's group records and the last-known answers),
//! `nodes` (the Node and CSINode objects) and `background` (creating due capacity, late
//! devices, the simulated attacher, and the loop that runs them); this file holds the
//! backend and its [`Provisioner`] implementation.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use super::{Error, NodeRef, Provisioner, Result};
use crate::cluster::is_node_ready;
use crate::config::KubernetesSettings;
use crate::model::{
    BackendSpec, Claim, Instance, InstanceError, InstanceState, KwokBackendSpec, NodeGroupId,
    NodeGroupSpec, labels,
};
use crate::telemetry::Chain;

mod background;
mod nodes;
mod state;
#[cfg(test)]
mod tests;

use state::{GroupRecord, LastKnown};

/// Scheme of kwok instance ids: `kwok://<group>/<node name>`.
pub const PROVIDER_ID_SCHEME: &str = "kwok://";
/// Annotation that puts a node under kwok's management.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Annotation without which the attach-detach controller ignores a node.
pub const CONTROLLER_ATTACH_ANNOTATION: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
/// Taint a Node of a group with CSI attach limits carries until its CSINode exists (as a CSI
/// node plugin's startup taint would). It is under cluster-autoscaler's startup-taint prefix,
/// so CA counts the node as still starting and keeps the taint out of its templates.
pub const CSI_STARTUP_TAINT: &str =
    "startup-taint.cluster-autoscaler.kubernetes.io/gangscaler-csi-node";
/// Label marking objects gangscaler manages.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
const MANAGED_BY: &str = "gangscaler";
const FIELD_MANAGER: &str = "gangscaler";
/// Optimistic-concurrency retries before a state update gives up. Each retry waits a short
/// random time so that many writers spread out instead of colliding again.
const MAX_CONFLICT_RETRIES: usize = 64;

/// The kwok provisioning backend.
pub struct KwokProvisioner {
    client: kube::Client,
    settings: KubernetesSettings,
    gpu_label: String,
    /// Serialises materialisation in this process (other processes are kept safe by the
    /// idempotent, name-based creation).
    materialize_lock: Mutex<()>,
    /// What was last read of each group, and the number of writes attempted so far: a read or
    /// write is remembered only if no other write started since it began.
    last_known: std::sync::Mutex<(BTreeMap<NodeGroupId, LastKnown>, u64)>,
    /// A standby under leader election writes nothing: a missing state ConfigMap or group
    /// record is answered as the leader would create it, and changes are refused.
    read_only: std::sync::atomic::AtomicBool,
    /// Wakes [`KwokProvisioner::run`] when an increase made capacity due at once.
    due: tokio::sync::Notify,
    /// [`KwokProvisioner::run`] is running: an increase leaves its due nodes to it, and
    /// answers as soon as its target is stored.
    looping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for KwokProvisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KwokProvisioner")
            .field(
                "state",
                &format!(
                    "{}/{}",
                    self.settings.state_namespace, self.settings.state_config_map
                ),
            )
            .finish()
    }
}

/// Milliseconds since the Unix epoch. Due times are persisted, so they must be wall-clock
/// based to survive restarts.
fn now_ms() -> u64 {
    u64::try_from(crate::clock::now_ms()).unwrap_or(0)
}

/// A short random suffix (base 36) for node names.
fn random_suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    let mut n = h.finish();
    let mut s = String::with_capacity(5);
    for _ in 0..5 {
        let d = u32::try_from(n % 36).unwrap_or(0);
        s.push(char::from_digit(d, 36).unwrap_or('x'));
        n /= 36;
    }
    s
}

fn spec(group: &NodeGroupSpec) -> KwokBackendSpec {
    match &group.backend {
        BackendSpec::Kwok(k) => k.clone(),
        BackendSpec::Memory(_) | BackendSpec::ClusterApi(_) => KwokBackendSpec {
            provision_delay: Duration::ZERO,
            provision_stagger: Duration::ZERO,
            provision_jitter: Duration::ZERO,
            device_delay: Duration::ZERO,
            failure: None,
            attach: None,
        },
    }
}

/// The providerID of a kwok node.
pub fn provider_id(group: &NodeGroupId, node: &str) -> String {
    format!("{PROVIDER_ID_SCHEME}{group}/{node}")
}

/// `(group, node)` from a kwok providerID.
pub fn parse_provider_id(id: &str) -> Option<(&str, &str)> {
    id.strip_prefix(PROVIDER_ID_SCHEME)?.split_once('/')
}

impl KwokProvisioner {
    /// A backend using `client`; `gpu_label` is the label CA uses for GPU nodes.
    pub fn new(
        client: kube::Client,
        settings: KubernetesSettings,
        gpu_label: impl Into<String>,
    ) -> Self {
        Self {
            client,
            settings,
            gpu_label: gpu_label.into(),
            materialize_lock: Mutex::new(()),
            last_known: std::sync::Mutex::new((BTreeMap::new(), 0)),
            read_only: std::sync::atomic::AtomicBool::new(false),
            due: tokio::sync::Notify::new(),
            looping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// While `read_only` (a standby under leader election) this backend writes nothing to
    /// the cluster: reads of a group it has no state for yet answer the initial state (at
    /// `minSize`) without creating it, and every change fails with [`Error::Backend`].
    pub fn set_read_only(&self, read_only: bool) {
        self.read_only
            .store(read_only, std::sync::atomic::Ordering::Release);
    }

    fn is_read_only(&self) -> bool {
        self.read_only.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Builds a client from the settings' kubeconfig, else the usual inference.
    ///
    /// # Errors
    /// When no usable configuration is found.
    pub async fn client(settings: &KubernetesSettings) -> Result<kube::Client, kube::Error> {
        super::kube_client(settings.kubeconfig.as_deref()).await
    }

    fn backend_error(group: &NodeGroupId, what: &str, e: &kube::Error) -> Error {
        super::kube_error(group, "kwok", what, e)
    }
}

#[async_trait]
impl Provisioner for KwokProvisioner {
    fn kind(&self) -> &'static str {
        "kwok"
    }

    async fn sync_groups(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        for g in groups {
            self.record(g).await?;
        }
        Ok(())
    }

    async fn target_size(&self, group: &NodeGroupSpec) -> Result<u32> {
        let writes = self.writes();
        match self.record(group).await {
            Ok(record) => {
                self.remember(writes, &group.id, |k| k.target = Some(record.target));
                Ok(record.target)
            }
            Err(e) => self.last_known(&group.id, e, "target size", |k| k.target),
        }
    }

    fn keeps_claims(&self) -> bool {
        true
    }

    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> Result<u32> {
        // A delta past the maximum is refused below whatever the target; computing its due
        // times first would allocate one entry per requested node (up to 2^31).
        let mut dues = if delta <= group.max_size {
            state::pending_nodes(group, delta)
        } else {
            Vec::new()
        };
        for (due, claim) in dues.iter_mut().zip(claims) {
            due.claim = Some(claim.to_string());
        }
        let (record, ()) = self
            .update(group, |r| {
                let new = r.target.saturating_add(delta);
                if new > group.max_size {
                    return Err(Error::AboveMax {
                        group: group.id.clone(),
                        current: r.target,
                        delta,
                        max: group.max_size,
                    });
                }
                r.target = new;
                r.pending.extend(dues.iter().cloned());
                Ok(())
            })
            .await?;
        // The target is committed: the call has succeeded. Nodes already due are created by
        // the kwok loop, woken now, so the call answers without waiting for them; without a
        // loop (a provisioner used alone) they are created here where possible. A failure is
        // the loop's to retry (it materialises every group each period), never the call's:
        // reporting it would tell the engine that nothing was added while the target says
        // otherwise.
        if !dues.iter().any(|p| p.due_unix_ms <= now_ms()) {
            return Ok(record.target);
        }
        if self.looping.load(std::sync::atomic::Ordering::Acquire) {
            self.due.notify_one();
        } else if let Err(e) = self.materialize(group).await {
            tracing::warn!(
                node_group.id = %group.id,
                target = record.target,
                error = %Chain(&e),
                "target raised; creating its due nodes failed and is retried by the kwok loop"
            );
        }
        Ok(record.target)
    }

    async fn pending_claims(&self, group: &NodeGroupSpec) -> Result<Vec<Claim>> {
        let record = self.record(group).await?;
        Ok(record
            .pending
            .iter()
            .filter_map(|p| p.claim.as_deref().and_then(Claim::parse))
            .collect())
    }

    async fn withdraw(&self, group: &NodeGroupSpec, claims: &[Claim]) -> Result<u32> {
        let texts: Vec<String> = claims.iter().map(ToString::to_string).collect();
        let take = |r: &GroupRecord| -> Vec<String> {
            let mut left: Vec<&String> = texts.iter().collect();
            let mut names = Vec::new();
            for p in &r.pending {
                let Some(pos) = p
                    .claim
                    .as_ref()
                    .and_then(|c| left.iter().position(|l| *l == c))
                else {
                    continue;
                };
                left.swap_remove(pos);
                names.push(p.name.clone());
            }
            names
        };
        // Not while due nodes are being created: a node created from an entry withdrawn
        // meanwhile would be a node beyond the target.
        let _materializing = self.materialize_lock.lock().await;
        // Read first: a tick with nothing to withdraw writes nothing.
        if take(&self.record(group).await?).is_empty() {
            return Ok(0);
        }
        let (_, removed) = self
            .update(group, |r| {
                let names = take(r);
                r.pending.retain(|p| !names.contains(&p.name));
                let n = u32::try_from(names.len()).unwrap_or(u32::MAX);
                r.target = r.target.saturating_sub(n);
                Ok(n)
            })
            .await?;
        Ok(removed)
    }

    async fn decrease_target(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        let (record, ()) = self
            .update(group, |r| {
                let pending = r.pending_count();
                if delta > pending {
                    return Err(Error::WouldDeleteExisting {
                        group: group.id.clone(),
                        requested: delta,
                        pending,
                        target: r.target,
                    });
                }
                for _ in 0..delta {
                    r.pending.pop();
                }
                r.target = r.target.saturating_sub(delta);
                Ok(())
            })
            .await?;
        Ok(record.target)
    }

    async fn delete(&self, group: &NodeGroupSpec, nodes: &[NodeRef]) -> Result<u32> {
        let live: BTreeSet<String> = self
            .list_nodes(&group.id)
            .await?
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let (record, names) = self
            .update(group, |r| {
                let failed: BTreeSet<&str> = r.failed.iter().map(|f| f.name.as_str()).collect();
                let mut names: Vec<String> = Vec::new();
                for node in nodes {
                    let name = if node.provider_id.is_empty() {
                        Some(node.name.as_str()).filter(|n| live.contains(*n))
                    } else {
                        parse_provider_id(&node.provider_id)
                            .filter(|(g, n)| {
                                *g == group.id.as_str() && (live.contains(*n) || failed.contains(n))
                            })
                            .map(|(_, n)| n)
                    };
                    let Some(name) = name.filter(|n| !r.deleting.iter().any(|d| d == n)) else {
                        return Err(Error::NotInGroup {
                            group: group.id.clone(),
                            node: node.name.clone(),
                            provider_id: node.provider_id.clone(),
                        });
                    };
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_owned());
                    }
                }
                let removing = u32::try_from(names.len()).unwrap_or(u32::MAX);
                let healthy = names.iter().any(|n| !failed.contains(n.as_str()));
                if healthy && r.target.saturating_sub(removing) < group.min_size {
                    return Err(Error::BelowMin {
                        group: group.id.clone(),
                        current: r.target,
                        removing,
                        min: group.min_size,
                    });
                }
                r.target = r.target.saturating_sub(removing);
                r.failed.retain(|f| !names.contains(&f.name));
                for n in &names {
                    if live.contains(n) {
                        r.deleting.push(n.clone());
                    }
                }
                Ok(names)
            })
            .await?;
        for name in names.iter().filter(|n| live.contains(*n)) {
            self.delete_node(&group.id, name).await?;
        }
        let done: BTreeSet<String> = names.into_iter().collect();
        self.update(group, |r| {
            r.deleting.retain(|n| !done.contains(n));
            Ok(())
        })
        .await?;
        Ok(record.target)
    }

    async fn instances(&self, group: &NodeGroupSpec) -> Result<Vec<Instance>> {
        match self.read_instances(group).await {
            Ok((writes, target, instances)) => {
                self.remember(writes, &group.id, |k| {
                    k.target = Some(target);
                    k.instances = Some(instances.clone());
                });
                Ok(instances)
            }
            Err(e) => self.last_known(&group.id, e, "instances", |k| k.instances.clone()),
        }
    }

    async fn lookup(&self, node: &NodeRef) -> Result<Option<NodeGroupId>> {
        if !node.provider_id.is_empty() {
            return Ok(parse_provider_id(&node.provider_id).map(|(g, _)| NodeGroupId::new(g)));
        }
        if node.name.is_empty() {
            return Ok(None);
        }
        match self.nodes_api().get_opt(&node.name).await {
            Ok(Some(n)) => Ok(n
                .metadata
                .labels
                .as_ref()
                .filter(|l| l.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY))
                .and_then(|l| l.get(labels::NODE_GROUP))
                .map(NodeGroupId::new)),
            Ok(None) => Ok(None),
            Err(e) => {
                let err = Self::backend_error(&NodeGroupId::new(""), "reading a node", &e);
                if !matches!(err, Error::Unreachable { .. }) {
                    return Err(err);
                }
                // Only a node among the instances last read can be answered for.
                let known = self.known();
                let found = known.0.iter().find(|(_, k)| {
                    k.instances
                        .iter()
                        .flatten()
                        .any(|i| i.node_name == node.name)
                });
                match found {
                    Some((group, _)) => Ok(Some(group.clone())),
                    None => Err(err),
                }
            }
        }
    }
}

impl KwokProvisioner {
    /// The group's target and instances, read from the cluster (after materialising), with
    /// the write count before the reads.
    async fn read_instances(&self, group: &NodeGroupSpec) -> Result<(u64, u32, Vec<Instance>)> {
        let writes = self.writes();
        let record = self.materialize_record(group).await?;
        let nodes = self.list_nodes(&group.id).await?;
        let mut out: Vec<Instance> = nodes
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                let state =
                    if record.deleting.contains(&name) || n.metadata.deletion_timestamp.is_some() {
                        InstanceState::Deleting
                    } else if is_node_ready(n) {
                        InstanceState::Running
                    } else {
                        InstanceState::Creating
                    };
                let claim = n
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(labels::REQUESTED_FOR))
                    .and_then(|c| Claim::parse(c));
                Some(Instance {
                    id: provider_id(&group.id, &name),
                    node_name: name,
                    state,
                    error: None,
                    claim,
                })
            })
            .collect();
        out.extend(record.failed.iter().map(|f| Instance {
            id: provider_id(&group.id, &f.name),
            node_name: f.name.clone(),
            state: InstanceState::Creating,
            error: Some(InstanceError {
                code: f.code,
                message: f.message.clone(),
            }),
            claim: f.claim.as_deref().and_then(Claim::parse),
        }));
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((writes, record.target, out))
    }
}
