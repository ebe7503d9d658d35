//! The Cluster API backend: a node group is one MachineDeployment, and Cluster API's own
//! controllers (with the infrastructure provider of the fleet) turn its replicas into
//! Machines and Nodes. The management cluster is the only store:
//!
//! - the target size is the MachineDeployment's `spec.replicas`, read and written only
//!   through its **scale subresource**, each write carrying the `resourceVersion` it was
//!   decided from (a conflict re-reads and decides again), with the group's bounds checked
//!   against the value being replaced;
//! - the instances are the Machines labelled with the MachineDeployment's name. A Machine's
//!   instance id is its `spec.providerID` (equal to its Node's) once it has one, and before
//!   that a placeholder `clusterapi-machine://<namespace>/<machine>` that CA may name in a
//!   delete request;
//! - deleting named nodes first marks their Machines with Cluster API's `delete-machine`
//!   annotation and then lowers the replicas by their number in one write, so the
//!   MachineSet deletes exactly those Machines. If the write fails the marks are taken off
//!   again: nothing changes unless everything does.
//!
//! Nothing is kept in memory but a providerID → group index for `NodeGroupForNode`, rebuilt
//! from the listings, so a restarted provider has nothing to recover and can never create a
//! Machine twice: capacity exists only as replicas on the MachineDeployment.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, error, info, warn};

use super::capi_types::{
    DELETE_MACHINE_ANNOTATION, DEPLOYMENT_NAME_LABEL, Machine, MachineDeployment,
};
use super::{Error, NodeRef, Provisioner, Result, kube_error};
use crate::model::{
    BackendSpec, Claim, ClusterApiBackendSpec, Instance, InstanceState, NodeGroupId, NodeGroupSpec,
};
use crate::telemetry::Chain;

mod machines;
pub mod reservation;
#[cfg(test)]
mod tests;

use machines::names;
pub use machines::{CAPACITY_ANNOTATION_PREFIX, capacity_drift, instance_of};

const BACKEND: &str = "clusterapi";
/// Scheme of the placeholder id of a Machine that has no providerID yet.
pub const PLACEHOLDER_SCHEME: &str = "clusterapi-machine://";
/// Cluster API's failure reason for a stock-out or quota (`capierrors.InsufficientResourcesMachineError`).
const INSUFFICIENT_RESOURCES: &str = "InsufficientResources";
/// Optimistic-concurrency retries of one scale write.
const MAX_CONFLICT_RETRIES: usize = 32;
/// The least time between two full re-listings caused by lookups of unknown nodes (CA asks
/// for every node of the cluster each loop, most of them in no group of this backend).
const LOOKUP_REFRESH: Duration = Duration::from_secs(5);
const FIELD_MANAGER: &str = "gangscaler";

/// The placeholder instance id of Machine `name` in `namespace`.
pub fn placeholder_id(namespace: &str, name: &str) -> String {
    format!("{PLACEHOLDER_SCHEME}{namespace}/{name}")
}

/// Which instances belong to which group, from the last listings.
#[derive(Debug, Default)]
struct Index {
    /// Instance id (providerID or placeholder) → group.
    by_id: HashMap<String, NodeGroupId>,
    /// Node name (of Machines with a Node) → group.
    by_name: HashMap<String, NodeGroupId>,
    /// What each group put in the maps, to replace it on the next listing.
    keys: HashMap<NodeGroupId, (Vec<String>, Vec<String>)>,
}

impl Index {
    fn replace(&mut self, group: &NodeGroupId, instances: &[Instance]) {
        if let Some((ids, names)) = self.keys.remove(group) {
            for id in ids {
                if self.by_id.get(&id) == Some(group) {
                    self.by_id.remove(&id);
                }
            }
            for name in names {
                if self.by_name.get(&name) == Some(group) {
                    self.by_name.remove(&name);
                }
            }
        }
        let mut ids = Vec::with_capacity(instances.len());
        let mut names = Vec::with_capacity(instances.len());
        for i in instances {
            self.by_id.insert(i.id.clone(), group.clone());
            ids.push(i.id.clone());
            if !i.node_name.is_empty() {
                self.by_name.insert(i.node_name.clone(), group.clone());
                names.push(i.node_name.clone());
            }
        }
        self.keys.insert(group.clone(), (ids, names));
    }

    fn find(&self, node: &NodeRef) -> Option<NodeGroupId> {
        if !node.provider_id.is_empty() {
            return self.by_id.get(&node.provider_id).cloned();
        }
        self.by_name.get(&node.name).cloned()
    }
}

/// The Cluster API backend. See the module documentation.
pub struct ClusterApiProvisioner {
    client: kube::Client,
    index: std::sync::Mutex<Index>,
    /// The groups of this backend, for lookups that re-list.
    groups: std::sync::Mutex<Vec<NodeGroupSpec>>,
    /// When lookups last re-listed every group; held while one does.
    relisted: AsyncMutex<Option<Instant>>,
}

impl std::fmt::Debug for ClusterApiProvisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterApiProvisioner")
            .finish_non_exhaustive()
    }
}

impl ClusterApiProvisioner {
    /// A backend talking to the management cluster through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            index: std::sync::Mutex::new(Index::default()),
            groups: std::sync::Mutex::new(Vec::new()),
            relisted: AsyncMutex::new(None),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spec(group: &NodeGroupSpec) -> Result<&ClusterApiBackendSpec> {
        match &group.backend {
            BackendSpec::ClusterApi(c) => Ok(c),
            other => Err(Error::Backend {
                group: group.id.clone(),
                backend: BACKEND,
                message: format!("the group's backend is {}, not clusterapi", other.kind()),
            }),
        }
    }

    fn deployments(&self, spec: &ClusterApiBackendSpec) -> Api<MachineDeployment> {
        Api::namespaced(self.client.clone(), &spec.namespace)
    }

    fn machines_api(&self, spec: &ClusterApiBackendSpec) -> Api<Machine> {
        Api::namespaced(self.client.clone(), &spec.namespace)
    }

    fn error(group: &NodeGroupSpec, what: &str, e: &kube::Error) -> Error {
        kube_error(&group.id, BACKEND, what, e)
    }

    /// The MachineDeployment's scale: replicas and the resourceVersion to write back.
    async fn read_scale(&self, group: &NodeGroupSpec) -> Result<(u32, Scale)> {
        let spec = Self::spec(group)?;
        let scale = self
            .deployments(spec)
            .get_scale(&spec.name)
            .await
            .map_err(|e| {
                Self::error(
                    group,
                    &format!(
                        "reading the scale of MachineDeployment {}/{}",
                        spec.namespace, spec.name
                    ),
                    &e,
                )
            })?;
        let replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let replicas = u32::try_from(replicas).map_err(|_| Error::Backend {
            group: group.id.clone(),
            backend: BACKEND,
            message: format!(
                "MachineDeployment {}/{} has negative replicas {replicas}",
                spec.namespace, spec.name
            ),
        })?;
        Ok((replicas, scale))
    }

    /// Sets the replicas to `decide(current)` with optimistic concurrency: the write carries
    /// the resourceVersion `current` was read at, and a conflict reads and decides again.
    /// `decide` refusing writes nothing. Returns the new replicas.
    async fn rescale(
        &self,
        group: &NodeGroupSpec,
        mut decide: impl FnMut(u32) -> Result<u32>,
    ) -> Result<u32> {
        let spec = Self::spec(group)?;
        let api = self.deployments(spec);
        for attempt in 0..MAX_CONFLICT_RETRIES {
            let (current, scale) = self.read_scale(group).await?;
            let next = decide(current)?;
            let body = Scale {
                metadata: kube::api::ObjectMeta {
                    name: Some(spec.name.clone()),
                    namespace: Some(spec.namespace.clone()),
                    resource_version: scale.metadata.resource_version.clone(),
                    ..Default::default()
                },
                spec: Some(ScaleSpec {
                    replicas: Some(i32::try_from(next).unwrap_or(i32::MAX)),
                }),
                status: None,
            };
            match api
                .replace_scale(&spec.name, &PostParams::default(), &body)
                .await
            {
                Ok(_) => {
                    info!(node_group.id = %group.id, machine_deployment = %spec.name, namespace = %spec.namespace, from = current, to = next, "MachineDeployment replicas changed");
                    return Ok(next);
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group.id, attempt, "MachineDeployment scale changed meanwhile; deciding again");
                    super::conflict_pause().await;
                }
                Err(e) => {
                    return Err(Self::error(
                        group,
                        &format!(
                            "writing the scale of MachineDeployment {}/{}",
                            spec.namespace, spec.name
                        ),
                        &e,
                    ));
                }
            }
        }
        Err(Error::Backend {
            group: group.id.clone(),
            backend: BACKEND,
            message: format!(
                "the scale of MachineDeployment {}/{} still conflicted after {MAX_CONFLICT_RETRIES} attempts",
                spec.namespace, spec.name
            ),
        })
    }

    /// The MachineDeployment's Machines.
    async fn machines(&self, group: &NodeGroupSpec) -> Result<Vec<Machine>> {
        let spec = Self::spec(group)?;
        let lp = ListParams::default().labels(&format!("{DEPLOYMENT_NAME_LABEL}={}", spec.name));
        let list = self.machines_api(spec).list(&lp).await.map_err(|e| {
            Self::error(
                group,
                &format!(
                    "listing the Machines of MachineDeployment {}/{}",
                    spec.namespace, spec.name
                ),
                &e,
            )
        })?;
        Ok(list.items)
    }

    /// Sets (`true`) or removes (`false`) the delete-machine annotation of `machine`.
    async fn mark(&self, group: &NodeGroupSpec, machine: &str, on: bool) -> Result<()> {
        let spec = Self::spec(group)?;
        let value = if on {
            serde_json::Value::String("yes".to_owned())
        } else {
            serde_json::Value::Null
        };
        let patch =
            serde_json::json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: value}}});
        self.machines_api(spec)
            .patch(
                machine,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| {
                Self::error(
                    group,
                    &format!(
                        "annotating Machine {}/{machine} for deletion",
                        spec.namespace
                    ),
                    &e,
                )
            })
    }

    /// Re-lists every group for a lookup, at most once per [`LOOKUP_REFRESH`].
    async fn relist_for_lookup(&self) {
        let mut last = self.relisted.lock().await;
        if last.is_some_and(|t| t.elapsed() < LOOKUP_REFRESH) {
            return;
        }
        *last = Some(crate::clock::mono_std());
        let groups = self
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for g in &groups {
            if let Err(e) = self.instances(g).await {
                debug!(node_group.id = %g.id, error = %Chain(&e), "re-listing Machines for a node lookup failed");
            }
        }
    }
}

#[async_trait]
impl Provisioner for ClusterApiProvisioner {
    fn kind(&self) -> &'static str {
        BACKEND
    }

    async fn sync_groups(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        groups.clone_into(
            &mut self
                .groups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // New groups may own nodes the index has not seen: the next unknown node re-lists.
        *self.relisted.lock().await = None;
        let mut seen = BTreeSet::new();
        for g in groups {
            let spec = Self::spec(g)?;
            if !seen.insert((spec.namespace.clone(), spec.name.clone())) {
                return Err(Error::Backend {
                    group: g.id.clone(),
                    backend: BACKEND,
                    message: format!(
                        "MachineDeployment {}/{} already backs another group",
                        spec.namespace, spec.name
                    ),
                });
            }
            // A missing or unreachable MachineDeployment is not fatal at start: it may be
            // created later, and every call on the group names it until then.
            match self.deployments(spec).get_opt(&spec.name).await {
                Ok(Some(md)) => {
                    let annotations = md.metadata.annotations.unwrap_or_default();
                    for drift in capacity_drift(&annotations, g) {
                        warn!(node_group.id = %g.id, machine_deployment = %spec.name, namespace = %spec.namespace, drift = %drift, "the MachineDeployment's capacity annotation disagrees with the node-group template; gangscaler plans with the template");
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    debug!(node_group.id = %g.id, error = %Chain(&e), "reading the MachineDeployment's capacity annotations failed");
                }
            }
            match self.read_scale(g).await {
                Ok((replicas, _)) => {
                    info!(node_group.id = %g.id, machine_deployment = %spec.name, namespace = %spec.namespace, replicas, "Cluster API group ready");
                    if replicas < g.min_size || replicas > g.max_size {
                        warn!(node_group.id = %g.id, replicas, min_size = g.min_size, max_size = g.max_size, "MachineDeployment replicas are outside the group's bounds; CA will bring them back");
                    }
                }
                Err(e) => {
                    error!(node_group.id = %g.id, error = %Chain(&e), "Cluster API group not usable yet");
                }
            }
        }
        Ok(())
    }

    async fn target_size(&self, group: &NodeGroupSpec) -> Result<u32> {
        self.read_scale(group).await.map(|(r, _)| r)
    }

    /// Claims are not kept: a Machine is made by the MachineSet controller after the
    /// replicas change, so no instance can be named when it is requested.
    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        _claims: &[Claim],
    ) -> Result<u32> {
        self.rescale(group, |current| {
            let next = current.saturating_add(delta);
            if next > group.max_size {
                return Err(Error::AboveMax {
                    group: group.id.clone(),
                    current,
                    delta,
                    max: group.max_size,
                });
            }
            Ok(next)
        })
        .await
    }

    async fn decrease_target(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        // Machines that exist (and are not going away) are not "not yet created": only the
        // replicas no Machine stands for yet can be cancelled by lowering the target.
        let existing = self
            .machines(group)
            .await?
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .count();
        let existing = u32::try_from(existing).unwrap_or(u32::MAX);
        self.rescale(group, |current| {
            let pending = current.saturating_sub(existing);
            if delta > pending {
                return Err(Error::WouldDeleteExisting {
                    group: group.id.clone(),
                    requested: delta,
                    pending,
                    target: current,
                });
            }
            Ok(current - delta)
        })
        .await
    }

    async fn delete(&self, group: &NodeGroupSpec, nodes: &[NodeRef]) -> Result<u32> {
        let machines = self.machines(group).await?;
        let instances: Vec<Instance> = machines.iter().map(instance_of).collect();
        // Resolve every node before changing anything: all or nothing.
        let mut doomed: BTreeMap<String, bool> = BTreeMap::new();
        for node in nodes {
            let found = machines
                .iter()
                .zip(&instances)
                .find(|(m, i)| names(m, i, node));
            match found {
                Some((m, i)) => {
                    if i.state == InstanceState::Deleting {
                        // Already going: lowering the replicas again would take another.
                        continue;
                    }
                    let name = m.metadata.name.clone().unwrap_or_default();
                    doomed.insert(name, i.error.is_some());
                }
                None => {
                    return Err(Error::NotInGroup {
                        group: group.id.clone(),
                        node: node.name.clone(),
                        provider_id: node.provider_id.clone(),
                    });
                }
            }
        }
        if doomed.is_empty() {
            return self.target_size(group).await;
        }
        let removing = u32::try_from(doomed.len()).unwrap_or(u32::MAX);
        let healthy = doomed.values().any(|failed| !failed);
        let (current, _) = self.read_scale(group).await?;
        if healthy && current.saturating_sub(removing) < group.min_size {
            return Err(Error::BelowMin {
                group: group.id.clone(),
                current,
                removing,
                min: group.min_size,
            });
        }
        let mut marked = Vec::with_capacity(doomed.len());
        let mut outcome = Ok(());
        for name in doomed.keys() {
            match self.mark(group, name, true).await {
                Ok(()) => marked.push(name.clone()),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let outcome = match outcome {
            Ok(()) => {
                self.rescale(group, |current| {
                    if healthy && current.saturating_sub(removing) < group.min_size {
                        return Err(Error::BelowMin {
                            group: group.id.clone(),
                            current,
                            removing,
                            min: group.min_size,
                        });
                    }
                    Ok(current.saturating_sub(removing))
                })
                .await
            }
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            // Nothing changed but the marks: take them off, so a later scale-down does not
            // pick these Machines for a request that was refused.
            for name in &marked {
                if let Err(e) = self.mark(group, name, false).await {
                    warn!(node_group.id = %group.id, machine = %name, error = %Chain(&e), "removing the delete-machine annotation after a failed delete failed; the Machine stays first in line for the next scale-down");
                }
            }
        } else {
            info!(node_group.id = %group.id, machines = ?marked, "Machines marked for deletion and replicas lowered");
        }
        outcome
    }

    async fn instances(&self, group: &NodeGroupSpec) -> Result<Vec<Instance>> {
        let instances: Vec<Instance> = self
            .machines(group)
            .await?
            .iter()
            .map(instance_of)
            .collect();
        self.index().replace(&group.id, &instances);
        Ok(instances)
    }

    async fn lookup(&self, node: &NodeRef) -> Result<Option<NodeGroupId>> {
        if let Some(g) = self.index().find(node) {
            return Ok(Some(g));
        }
        self.relist_for_lookup().await;
        Ok(self.index().find(node))
    }

    /// Reads the MachineDeployment: its template must register the Machines' Nodes under the
    /// reservation taint ([`reservation::blocker`]).
    async fn reservation_blocker(&self, group: &NodeGroupSpec) -> Result<Option<String>> {
        if !group.reservation.enabled {
            return Ok(None);
        }
        let spec = Self::spec(group)?;
        let md = self
            .deployments(spec)
            .get_opt(&spec.name)
            .await
            .map_err(|e| {
                Self::error(
                    group,
                    &format!(
                        "reading MachineDeployment {}/{} for its template taints",
                        spec.namespace, spec.name
                    ),
                    &e,
                )
            })?;
        Ok(reservation::blocker(
            &format!("{}/{}", spec.namespace, spec.name),
            md.as_ref().map(reservation::template_taints),
        ))
    }
}
