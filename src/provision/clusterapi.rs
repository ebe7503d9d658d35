//! The Cluster API backend: a node group is one MachineDeployment, and Cluster API's own
//! controllers (with the infrastructure provider of the fleet) turn its replicas into
//! Machines and Nodes. The management cluster is the only store:
//!
//! - the target size is the MachineDeployment's `spec.replicas`, each write carrying the
//!   `resourceVersion` it was decided from (a conflict re-reads and decides again), with the
//!   group's bounds checked against the value being replaced;
//! - the instances are the Machines labelled with the MachineDeployment's name. A Machine's
//!   instance id is its `spec.providerID` (equal to its Node's) once it has one, and before
//!   that a placeholder `clusterapi-machine://<namespace>/<machine>` that CA may name in a
//!   delete request;
//! - deleting named nodes first marks their Machines with Cluster API's `delete-machine`
//!   annotation and then lowers the replicas by their number in one write, so the
//!   MachineSet deletes exactly those Machines. If the write fails the marks are taken off
//!   again: nothing changes unless everything does.
//!
//! - which scale-up (and gang) each Machine was requested for is kept in a claim [`ledger`]
//!   on the MachineDeployment, written in the same merge patch as the replicas an increase,
//!   a `DecreaseTargetSize` or a withdrawal sets; the Machines take its pending claims by the
//!   ledger's rule when the group is listed;
//! - withdrawing the claims of ended lifecycles takes their pending replicas back, then
//!   deletes their Machines that have neither a providerID nor a Node yet, as a delete
//!   request does.
//!
//! Nothing is kept in memory but a providerID → group index for `NodeGroupForNode`, rebuilt
//! from the listings, so a restarted provider has nothing to recover and can never create a
//! Machine twice: capacity exists only as replicas on the MachineDeployment, and its claims
//! only in the ledger beside them.

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

pub mod ledger;
mod machines;
pub mod reservation;
#[cfg(test)]
mod tests;

use ledger::{LEDGER_ANNOTATION, Ledger, Seen};
pub use machines::{CAPACITY_ANNOTATION_PREFIX, capacity_drift, instance_of};
use machines::{existing, names, seen, unborn};

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

    /// Reads the MachineDeployment and its claim [`Ledger`] (the Machines listed when
    /// `list` is set or there is no ledger yet, which adopts them), settles the ledger
    /// against the listing, lets `decide` set the replicas and change the ledger, and writes
    /// both in one merge patch carrying the resourceVersion they were read at (a conflict
    /// reads and decides again). Nothing is written when nothing changed; `decide` refusing
    /// writes nothing. `Ok(None)` when the MachineDeployment does not exist.
    async fn update<T>(
        &self,
        group: &NodeGroupSpec,
        list: bool,
        mut decide: impl FnMut(u32, &mut Ledger, &[Machine]) -> Result<(u32, T)>,
    ) -> Result<Option<(u32, T)>> {
        let spec = Self::spec(group)?;
        let api = self.deployments(spec);
        let what = format!("MachineDeployment {}/{}", spec.namespace, spec.name);
        for attempt in 0..MAX_CONFLICT_RETRIES {
            let Some(md) = api
                .get_opt(&spec.name)
                .await
                .map_err(|e| Self::error(group, &format!("reading {what}"), &e))?
            else {
                return Ok(None);
            };
            let replicas =
                u32::try_from(md.spec.replicas.unwrap_or(0)).map_err(|_| Error::Backend {
                    group: group.id.clone(),
                    backend: BACKEND,
                    message: format!("{what} has negative replicas {:?}", md.spec.replicas),
                })?;
            let read =
                Ledger::read(md.metadata.annotations.as_ref()).map_err(|m| Error::Backend {
                    group: group.id.clone(),
                    backend: BACKEND,
                    message: format!("{what}: {m}"),
                })?;
            let machines = if list || read.is_none() {
                self.machines(group).await?
            } else {
                Vec::new()
            };
            let seen: Vec<Seen> = machines.iter().map(seen).collect();
            let mut ledger = read.clone().unwrap_or_else(|| Ledger::adopting(&seen));
            if list {
                ledger.settle(&seen);
            }
            let (next, value) = decide(replicas, &mut ledger, &machines)?;
            if next == replicas && read.as_ref() == Some(&ledger) {
                return Ok(Some((replicas, value)));
            }
            let mut patch = serde_json::json!({"metadata": {
                "resourceVersion": md.metadata.resource_version,
                "annotations": {LEDGER_ANNOTATION: ledger.text()},
            }});
            if next != replicas {
                patch["spec"] = serde_json::json!({"replicas": next});
            }
            match api
                .patch(&spec.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    if next != replicas {
                        info!(node_group.id = %group.id, machine_deployment = %spec.name, namespace = %spec.namespace, from = replicas, to = next, pending = ledger.pending.len(), "MachineDeployment replicas changed");
                    }
                    return Ok(Some((next, value)));
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group.id, attempt, "MachineDeployment changed meanwhile; deciding again");
                    super::conflict_pause().await;
                }
                Err(e) => return Err(Self::error(group, &format!("writing {what}"), &e)),
            }
        }
        Err(Error::Backend {
            group: group.id.clone(),
            backend: BACKEND,
            message: format!("{what} still conflicted after {MAX_CONFLICT_RETRIES} attempts"),
        })
    }

    /// [`Self::update`] on a MachineDeployment that must exist.
    async fn update_existing<T>(
        &self,
        group: &NodeGroupSpec,
        list: bool,
        decide: impl FnMut(u32, &mut Ledger, &[Machine]) -> Result<(u32, T)>,
    ) -> Result<(u32, T)> {
        let spec = Self::spec(group)?;
        self.update(group, list, decide)
            .await?
            .ok_or_else(|| Error::Backend {
                group: group.id.clone(),
                backend: BACKEND,
                message: format!(
                    "MachineDeployment {}/{} does not exist",
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

    /// Marks Machines `names` with the delete-machine annotation, then sets the replicas to
    /// `lower(current)`, so the MachineSet deletes exactly those. All or nothing: if a mark
    /// or the write fails, the marks made are taken off again.
    async fn remove_machines(
        &self,
        group: &NodeGroupSpec,
        names: &[String],
        lower: impl FnMut(u32) -> Result<u32>,
    ) -> Result<u32> {
        let mut marked = Vec::with_capacity(names.len());
        let mut outcome = Ok(());
        for name in names {
            match self.mark(group, name, true).await {
                Ok(()) => marked.push(name.clone()),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let outcome = match outcome {
            Ok(()) => self.rescale(group, lower).await,
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

    fn keeps_claims(&self) -> bool {
        true
    }

    /// Raises the replicas and appends `claims` to the group's [`ledger`] in one write; the
    /// Machines made for them take the claims by the ledger's rule.
    async fn increase_for(
        &self,
        group: &NodeGroupSpec,
        delta: u32,
        claims: &[Claim],
    ) -> Result<u32> {
        self.update_existing(group, false, |current, ledger, _| {
            let next = current.saturating_add(delta);
            if next > group.max_size {
                return Err(Error::AboveMax {
                    group: group.id.clone(),
                    current,
                    delta,
                    max: group.max_size,
                });
            }
            ledger.request(delta, claims);
            Ok((next, ()))
        })
        .await
        .map(|(next, ())| next)
    }

    /// The claims of replicas no Machine stands for yet, and of claimed Machines that are not
    /// machines yet (no providerID, no Node: withdrawing one deletes it before it is a node).
    async fn pending_claims(&self, group: &NodeGroupSpec) -> Result<Vec<Claim>> {
        let found = self
            .update(group, true, |current, ledger, machines| {
                let mut claims = ledger.pending_claims();
                claims.extend(
                    machines
                        .iter()
                        .filter(|m| unborn(m))
                        .filter_map(|m| ledger.claim_of(m.metadata.name.as_deref()?)),
                );
                Ok((current, claims))
            })
            .await?;
        Ok(found.map(|(_, claims)| claims).unwrap_or_default())
    }

    /// Withdraws pending replicas with the claims (lowering the replicas in the ledger's
    /// write), then, for claims none of those held, claimed Machines that are not machines
    /// yet (no providerID, no Node), marked for deletion and the replicas lowered by as many,
    /// as a delete request is.
    async fn withdraw(&self, group: &NodeGroupSpec, claims: &[Claim]) -> Result<u32> {
        let Some((_, (pending, booting))) = self
            .update(group, true, |current, ledger, machines| {
                let creatable = current.saturating_sub(existing(machines));
                let (withdrawn, left) = ledger.withdraw(claims, creatable);
                let mut booting: Vec<String> = Vec::new();
                for claim in &left {
                    let found = machines.iter().find_map(|m| {
                        let name = m.metadata.name.as_deref()?;
                        (unborn(m)
                            && !booting.iter().any(|b| b == name)
                            && ledger.claim_of(name).as_ref() == Some(claim))
                        .then(|| name.to_owned())
                    });
                    booting.extend(found);
                }
                Ok((current - withdrawn, (withdrawn, booting)))
            })
            .await?
        else {
            return Ok(0);
        };
        if booting.is_empty() {
            return Ok(pending);
        }
        let removing = u32::try_from(booting.len()).unwrap_or(u32::MAX);
        match self
            .remove_machines(group, &booting, |current| {
                Ok(current.saturating_sub(removing))
            })
            .await
        {
            Ok(_) => Ok(pending + removing),
            Err(e) if pending > 0 => {
                warn!(node_group.id = %group.id, withdrawn = pending, machines = ?booting, error = %Chain(&e), "withdrew pending replicas; deleting the booting Machines of ended lifecycles failed and is retried by the next pass");
                Ok(pending)
            }
            Err(e) => Err(e),
        }
    }

    async fn decrease_target(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        // Machines that exist (and are not going away) are not "not yet created": only the
        // replicas no Machine stands for yet can be cancelled by lowering the target, and
        // the newest pending claims go with them.
        self.update_existing(group, true, |current, ledger, machines| {
            let pending = current.saturating_sub(existing(machines));
            if delta > pending {
                return Err(Error::WouldDeleteExisting {
                    group: group.id.clone(),
                    requested: delta,
                    pending,
                    target: current,
                });
            }
            ledger.cancel_newest(delta);
            Ok((current - delta, ()))
        })
        .await
        .map(|(next, ())| next)
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
        // Healthy Machines may not take the group below its minimum: checked before any
        // mark, and again against the replicas the write replaces.
        let lower = |current: u32| {
            if healthy && current.saturating_sub(removing) < group.min_size {
                return Err(Error::BelowMin {
                    group: group.id.clone(),
                    current,
                    removing,
                    min: group.min_size,
                });
            }
            Ok(current.saturating_sub(removing))
        };
        lower(self.read_scale(group).await?.0)?;
        let names: Vec<String> = doomed.into_keys().collect();
        self.remove_machines(group, &names, lower).await
    }

    /// The Machines as instances, each with the claim the group's [`ledger`] gives it
    /// (settling the ledger first).
    async fn instances(&self, group: &NodeGroupSpec) -> Result<Vec<Instance>> {
        let found = self
            .update(group, true, |current, ledger, machines| {
                let instances: Vec<Instance> = machines
                    .iter()
                    .map(|m| Instance {
                        claim: m.metadata.name.as_deref().and_then(|n| ledger.claim_of(n)),
                        ..instance_of(m)
                    })
                    .collect();
                Ok((current, instances))
            })
            .await?;
        let instances = match found {
            Some((_, instances)) => instances,
            // No MachineDeployment, so no ledger: its Machines (if any are left) took no claim.
            None => self
                .machines(group)
                .await?
                .iter()
                .map(instance_of)
                .collect(),
        };
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
