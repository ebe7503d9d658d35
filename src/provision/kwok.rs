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

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeSpec, NodeStatus, Taint as K8sTaint};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, VolumeAttachment, VolumeError, VolumeNodeResources,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Error, NodeRef, Provisioner, Result};
use crate::cluster::is_node_ready;
use crate::config::KubernetesSettings;
use crate::model::{
    BackendSpec, ErrorCode, Instance, InstanceError, InstanceState, KwokBackendSpec, NodeGroupId,
    NodeGroupSpec, TemplateNode, labels, millis,
};

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

/// Capacity requested but not created yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingNode {
    name: String,
    due_unix_ms: u64,
}

/// A simulated failed instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailedNode {
    name: String,
    code: ErrorCode,
    message: String,
}

/// One group's durable state, stored as JSON under the group id in the state ConfigMap.
/// Invariant at rest: `target == live nodes + pending + failed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupRecord {
    target: u32,
    /// Nodes ever created, for failure injection.
    #[serde(default)]
    created: u32,
    #[serde(default)]
    pending: Vec<PendingNode>,
    #[serde(default)]
    failed: Vec<FailedNode>,
    /// Nodes whose deletion was decided but may not have happened yet.
    #[serde(default)]
    deleting: Vec<String>,
}

impl GroupRecord {
    fn pending_count(&self) -> u32 {
        u32::try_from(self.pending.len()).unwrap_or(u32::MAX)
    }
}

/// What this process last read of a group, for reads while the API server is unreachable.
#[derive(Debug, Clone, Default)]
struct LastKnown {
    target: Option<u32>,
    instances: Option<Vec<Instance>>,
}

/// Consecutive failures of the periodic steps of [`KwokProvisioner::run`], per step and group:
/// the first failure of a streak is logged at warn, the others at debug, and the success that
/// ends it at info with the streak's length. An API-server outage thus logs one warning per
/// step and group, not one per tick.
#[derive(Debug, Default)]
struct Streaks(BTreeMap<(&'static str, String), u64>);

/// How [`Streaks::report`] logged a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logged {
    /// A success after a success: nothing.
    Quiet,
    /// The first failure of a streak.
    Warn,
    /// A later failure of a streak.
    Debug,
    /// The success ending a streak of this many failures.
    Recovered(u64),
}

impl Streaks {
    /// Logs `result` of `step` for `group` (empty for every group) as described above.
    fn report(&mut self, step: &'static str, group: &str, result: Result<()>) -> Logged {
        let key = (step, group.to_owned());
        match result {
            Ok(()) => match self.0.remove(&key) {
                Some(failures) => {
                    info!(
                        node_group.id = group,
                        step, failures, "recovered after failing"
                    );
                    Logged::Recovered(failures)
                }
                None => Logged::Quiet,
            },
            Err(e) => {
                let failures = self.0.entry(key).or_insert(0);
                *failures += 1;
                if *failures == 1 {
                    warn!(node_group.id = group, step, error = %e, "failed; retrying every tick (further failures are logged at debug)");
                    Logged::Warn
                } else {
                    debug!(node_group.id = group, step, error = %e, failures = *failures, "still failing; will retry");
                    Logged::Debug
                }
            }
        }
    }
}

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

    fn known(&self) -> std::sync::MutexGuard<'_, (BTreeMap<NodeGroupId, LastKnown>, u64)> {
        self.last_known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of writes attempted so far; pass it to [`Self::remember`] after a read.
    fn writes(&self) -> u64 {
        self.known().1
    }

    /// Records what a read or write that began after `writes` writes found, unless another
    /// write has started since (its result would be older than that write's).
    fn remember(&self, writes: u64, group: &NodeGroupId, f: impl FnOnce(&mut LastKnown)) {
        let mut known = self.known();
        if known.1 == writes {
            f(known.0.entry(group.clone()).or_default());
        }
    }

    /// Forgets what was read of `group`: a write is about to change it, or may have. Returns
    /// the write count to remember the write's own result with.
    fn forget(&self, group: &NodeGroupId) -> u64 {
        let mut known = self.known();
        known.0.remove(group);
        known.1 += 1;
        known.1
    }

    /// `err`, unless it says the API server is unreachable and `pick` finds an answer in what
    /// was last read of `group`.
    fn last_known<T>(
        &self,
        group: &NodeGroupId,
        err: Error,
        what: &'static str,
        pick: impl FnOnce(&LastKnown) -> Option<T>,
    ) -> Result<T> {
        if !matches!(err, Error::Unreachable { .. }) {
            return Err(err);
        }
        match self.known().0.get(group).and_then(pick) {
            Some(v) => {
                debug!(node_group.id = %group, error = %err, what, "API server unreachable; answering from the last state read");
                Ok(v)
            }
            None => Err(err),
        }
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

    fn state_api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.settings.state_namespace)
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Reads the state ConfigMap, creating it when missing.
    async fn read_state(&self, group: &NodeGroupId) -> Result<ConfigMap> {
        let api = self.state_api();
        let name = &self.settings.state_config_map;
        loop {
            match api.get_opt(name).await {
                Ok(Some(cm)) => return Ok(cm),
                Ok(None) if self.is_read_only() => return Ok(ConfigMap::default()),
                Ok(None) => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(BTreeMap::from([(
                                MANAGED_BY_LABEL.to_owned(),
                                MANAGED_BY.to_owned(),
                            )])),
                            ..ObjectMeta::default()
                        },
                        ..ConfigMap::default()
                    };
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(cm) => return Ok(cm),
                        Err(kube::Error::Api(s)) if s.is_already_exists() => continue,
                        Err(e) => {
                            return Err(Self::backend_error(
                                group,
                                "creating the state ConfigMap",
                                &e,
                            ));
                        }
                    }
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        group,
                        "reading the state ConfigMap",
                        &e,
                    ));
                }
            }
        }
    }

    fn record_of(cm: &ConfigMap, group: &NodeGroupId) -> Result<Option<GroupRecord>> {
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(group.as_str())) else {
            return Ok(None);
        };
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| Error::Backend {
                group: group.clone(),
                backend: "kwok",
                message: format!("state ConfigMap entry for the group does not parse: {e}"),
            })
    }

    /// Reads the group's record (created at min size if missing).
    async fn record(&self, group: &NodeGroupSpec) -> Result<GroupRecord> {
        let cm = self.read_state(&group.id).await?;
        match Self::record_of(&cm, &group.id)? {
            Some(r) => Ok(r),
            None if self.is_read_only() => Ok(self.initial_record(group)),
            None => self.update(group, |_| Ok(())).await.map(|(r, ())| r),
        }
    }

    /// Applies `f` to the group's record with optimistic concurrency; `f` may run several times
    /// and must decide from the record it is given. A refusal from `f` writes nothing.
    async fn update<T>(
        &self,
        group: &NodeGroupSpec,
        mut f: impl FnMut(&mut GroupRecord) -> Result<T>,
    ) -> Result<(GroupRecord, T)> {
        if self.is_read_only() {
            return Err(Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: "this replica is a standby under leader election; only the leader changes node groups".to_owned(),
            });
        }
        let api = self.state_api();
        for _ in 0..MAX_CONFLICT_RETRIES {
            let mut cm = self.read_state(&group.id).await?;
            let mut record = match Self::record_of(&cm, &group.id)? {
                Some(r) => r,
                None => self.initial_record(group),
            };
            let out = f(&mut record)?;
            let text = serde_json::to_string(&record).map_err(|e| Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: format!("encoding state: {e}"),
            })?;
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert(group.id.to_string(), text);
            let writes = self.forget(&group.id);
            match api
                .replace(&self.settings.state_config_map, &PostParams::default(), &cm)
                .await
            {
                Ok(_) => {
                    self.remember(writes, &group.id, |k| k.target = Some(record.target));
                    return Ok((record, out));
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group.id, "state update conflicted; retrying");
                    super::conflict_pause().await;
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        &group.id,
                        "writing the state ConfigMap",
                        &e,
                    ));
                }
            }
        }
        Err(Error::Backend {
            group: group.id.clone(),
            backend: "kwok",
            message: format!(
                "state update still conflicting after {MAX_CONFLICT_RETRIES} attempts"
            ),
        })
    }

    /// A new group starts at min size, all of it requested now.
    fn initial_record(&self, group: &NodeGroupSpec) -> GroupRecord {
        GroupRecord {
            target: group.min_size,
            pending: spec(group)
                .due_times(now_ms(), group.min_size)
                .map(|due| PendingNode {
                    name: format!("{}-{}", group.id, random_suffix()),
                    due_unix_ms: due,
                })
                .collect(),
            ..GroupRecord::default()
        }
    }

    async fn list_nodes(&self, group: &NodeGroupId) -> Result<Vec<Node>> {
        let lp = ListParams::default().labels(&format!("{}={group}", labels::NODE_GROUP));
        self.nodes_api()
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| Self::backend_error(group, "listing nodes", &e))
    }

    /// The Node object for `name`, built from the group's template, without the resources a
    /// device delay holds back.
    fn node_object(&self, group: &NodeGroupSpec, name: &str) -> Result<Node> {
        self.node_object_with(group, name, &late_resources(group))
    }

    /// The Node object for `name`, built from the group's template, leaving out the resources
    /// in `late`.
    fn node_object_with(
        &self,
        group: &NodeGroupSpec,
        name: &str,
        late: &BTreeSet<String>,
    ) -> Result<Node> {
        let template =
            TemplateNode::for_group(group, &self.gpu_label).ok_or_else(|| Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: "the kwok backend needs capacity to build nodes".to_owned(),
            })?;
        let mut node_labels = template.metadata.labels.clone();
        node_labels.insert(labels::HOSTNAME.to_owned(), name.to_owned());
        node_labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
        let mut annotations = template.metadata.annotations.clone();
        annotations.insert(KWOK_NODE_ANNOTATION.to_owned(), "fake".to_owned());
        annotations.insert(CONTROLLER_ATTACH_ANNOTATION.to_owned(), "true".to_owned());
        let quantities = |m: &BTreeMap<String, String>| {
            m.iter()
                .filter(|(k, _)| !late.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                .collect::<BTreeMap<_, _>>()
        };
        Ok(Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(node_labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id(&group.id, name)),
                taints: Some(
                    template
                        .spec
                        .taints
                        .iter()
                        .map(|t| K8sTaint {
                            key: t.key.clone(),
                            value: (!t.value.is_empty()).then(|| t.value.clone()),
                            effect: t.effect.to_owned(),
                            time_added: None,
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&template.status.capacity)),
                allocatable: Some(quantities(&template.status.allocatable)),
                ..NodeStatus::default()
            }),
        })
    }

    /// Creates the Node (idempotent by name) and its CSINode. A group with CSI limits gets its
    /// Node under [`CSI_STARTUP_TAINT`], lifted only once the CSINode exists: the scheduler
    /// sets no attach limit on a node without a CSINode, and a Node that reports no Ready
    /// condition yet is schedulable at once (the node lifecycle controller lifts the not-ready
    /// taint of a node without conditions), so a Node usable before its CSINode could take
    /// more volumes than the limit allows.
    async fn create_node(&self, group: &NodeGroupSpec, name: &str) -> Result<()> {
        let mut node = self.node_object(group, name)?;
        if !group.csi.is_empty()
            && let Some(spec) = node.spec.as_mut()
        {
            spec.taints.get_or_insert_with(Vec::new).push(K8sTaint {
                key: CSI_STARTUP_TAINT.to_owned(),
                effect: "NoSchedule".to_owned(),
                ..K8sTaint::default()
            });
        }
        let _ = self.forget(&group.id);
        let created = match self.nodes_api().create(&PostParams::default(), &node).await {
            Ok(n) => n,
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                self.nodes_api()
                    .get(name)
                    .await
                    .map_err(|e| Self::backend_error(&group.id, "reading an existing node", &e))?
            }
            Err(e) => return Err(Self::backend_error(&group.id, "creating a node", &e)),
        };
        // The apiserver may drop status on create; make sure capacity is there for the
        // scheduler before kwok takes over the node.
        if created
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .is_none()
        {
            let patch = serde_json::json!({ "status": node.status });
            self.nodes_api()
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Self::backend_error(&group.id, "setting node capacity", &e))?;
        }
        if !group.csi.is_empty() {
            self.create_csi_node(group, &created).await?;
            self.lift_csi_startup_taint(&group.id, name).await?;
        }
        info!(node_group.id = %group.id, node.name = name, backend = "kwok", "node created");
        Ok(())
    }

    /// Removes [`CSI_STARTUP_TAINT`] from Node `name`, keeping its other taints. The patch
    /// carries the resourceVersion read, so a concurrent change to the Node's taints (the node
    /// lifecycle controller adds and lifts its own while a new Node settles) is a conflict:
    /// the Node is read again and the lift retried, up to [`MAX_CONFLICT_RETRIES`] times.
    async fn lift_csi_startup_taint(&self, group: &NodeGroupId, name: &str) -> Result<()> {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let current = self
                .nodes_api()
                .get(name)
                .await
                .map_err(|e| Self::backend_error(group, "reading a new node", &e))?;
            let taints = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default();
            if !taints.iter().any(|t| t.key == CSI_STARTUP_TAINT) {
                return Ok(());
            }
            let kept: Vec<&K8sTaint> = taints
                .iter()
                .filter(|t| t.key != CSI_STARTUP_TAINT)
                .collect();
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": kept},
            });
            match self
                .nodes_api()
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    debug!(node_group.id = %group, node.name = name, taint = CSI_STARTUP_TAINT, "CSI startup taint lifted");
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group, node.name = name, "lifting the CSI startup taint conflicted; retrying");
                    super::conflict_pause().await;
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        group,
                        "lifting a node's CSI startup taint",
                        &e,
                    ));
                }
            }
        }
        Err(Error::Backend {
            group: group.clone(),
            backend: "kwok",
            message: format!(
                "lifting the CSI startup taint of node {name}: still conflicting after {MAX_CONFLICT_RETRIES} attempts"
            ),
        })
    }

    async fn create_csi_node(&self, group: &NodeGroupSpec, node: &Node) -> Result<()> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let csi = CSINode {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_owned(),
                    MANAGED_BY.to_owned(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: CSINodeSpec {
                drivers: group
                    .csi
                    .iter()
                    .map(|(driver, count)| CSINodeDriver {
                        name: driver.clone(),
                        node_id: name.clone(),
                        allocatable: Some(VolumeNodeResources {
                            count: Some(i32::try_from(*count).unwrap_or(i32::MAX)),
                        }),
                        topology_keys: None,
                    })
                    .collect(),
            },
        };
        let api: Api<CSINode> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &csi).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(Self::backend_error(&group.id, "creating a CSINode", &e)),
        }
    }

    async fn delete_node(&self, group: &NodeGroupId, name: &str) -> Result<()> {
        let _ = self.forget(group);
        match self
            .nodes_api()
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(Self::backend_error(group, "deleting a node", &e)),
        }
    }

    /// Turns due capacity into Node objects (or simulated failures) and finishes deletions.
    /// Safe to run concurrently and after a crash at any point.
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn materialize(&self, group: &NodeGroupSpec) -> Result<()> {
        self.materialize_record(group).await.map(|_| ())
    }

    /// [`KwokProvisioner::materialize`], returning the group's record as it stands afterwards
    /// so callers need not read it again.
    async fn materialize_record(&self, group: &NodeGroupSpec) -> Result<GroupRecord> {
        let _guard = self.materialize_lock.lock().await;
        let record = self.record(group).await?;
        // The record as last read or written, returned so callers need not read it again.
        let mut latest = record.clone();
        for name in &record.deleting {
            self.delete_node(&group.id, name).await?;
        }
        if !record.deleting.is_empty() {
            let done: BTreeSet<String> = record.deleting.iter().cloned().collect();
            (latest, ()) = self
                .update(group, |r| {
                    r.deleting.retain(|n| !done.contains(n));
                    Ok(())
                })
                .await?;
        }
        let now = now_ms();
        let failure = spec(group).failure;
        for due in record.pending.iter().filter(|p| p.due_unix_ms <= now) {
            // Decide failure under the record's concurrency control.
            let fail;
            (latest, fail) = self
                .update(group, |r| {
                    let Some(pos) = r.pending.iter().position(|p| p.name == due.name) else {
                        return Ok(None);
                    };
                    match &failure {
                        Some(f) if r.created >= f.after_instances => {
                            let p = r.pending.remove(pos);
                            r.created = r.created.saturating_add(1);
                            let failed = FailedNode {
                                name: p.name,
                                code: f.code,
                                message: format!(
                                    "simulated {} in node group {} after {} instance(s)",
                                    f.code, group.id, f.after_instances
                                ),
                            };
                            r.failed.push(failed.clone());
                            Ok(Some(Some(failed)))
                        }
                        _ => Ok(Some(None)),
                    }
                })
                .await?;
            match fail {
                None => continue,
                Some(Some(failed)) => {
                    warn!(node_group.id = %group.id, node.name = %failed.name, code = %failed.code, "simulated instance failure");
                    continue;
                }
                Some(None) => {}
            }
            self.create_node(group, &due.name).await?;
            (latest, ()) = self
                .update(group, |r| {
                    if let Some(pos) = r.pending.iter().position(|p| p.name == due.name) {
                        r.pending.remove(pos);
                        r.created = r.created.saturating_add(1);
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(latest)
    }

    /// Runs [`KwokProvisioner::materialize`] for `groups` every `period` until `shutdown`, and the
    /// simulated attacher for groups that configure one.
    pub async fn run(
        &self,
        groups: impl Fn() -> Vec<NodeGroupSpec>,
        period: Duration,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut streaks = Streaks::default();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let groups: Vec<NodeGroupSpec> = groups()
                .into_iter()
                .filter(|g| matches!(g.backend, BackendSpec::Kwok(_)))
                .collect();
            for g in &groups {
                let result = self.materialize(g).await;
                let _ = streaks.report("materialising kwok nodes", g.id.as_str(), result);
            }
            let result = self.simulate_attach(&groups).await;
            let _ = streaks.report("simulated CSI attacher", "", result);
            for g in &groups {
                let result = self.advertise_devices(g).await;
                let _ = streaks.report("advertising late RDMA resources", g.id.as_str(), result);
            }
        }
    }

    /// Adds the RDMA resources held back by `deviceDelay` to the capacity and allocatable of
    /// `group`'s nodes registered at least that long ago (a simulated device plugin).
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn advertise_devices(&self, group: &NodeGroupSpec) -> Result<()> {
        let late = late_resources(group);
        if late.is_empty() {
            return Ok(());
        }
        let delay = millis(spec(group).device_delay);
        let now = now_ms();
        for node in self.list_nodes(&group.id).await? {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            let has_all = node
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .is_some_and(|c| late.iter().all(|r| c.contains_key(r)));
            let registered = node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0));
            // Whole-second timestamps: count from the end of that second, as the attacher does.
            if has_all || registered.saturating_add(1000).saturating_add(delay) > now {
                continue;
            }
            let full = self.node_object_with(group, name, &BTreeSet::new())?;
            let patch = serde_json::json!({ "status": {
                "capacity": full.status.as_ref().and_then(|s| s.capacity.as_ref()),
                "allocatable": full.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            }});
            self.nodes_api()
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Self::backend_error(&group.id, "advertising RDMA resources", &e))?;
            info!(node_group.id = %group.id, node.name = name, resources = ?late, "simulated device plugin advertised RDMA resources");
        }
        Ok(())
    }

    /// Marks VolumeAttachments on this backend's nodes attached (or failed) once their delay
    /// has passed, for groups with `attach` configured.
    ///
    /// # Errors
    /// A Kubernetes API failure.
    pub async fn simulate_attach(&self, groups: &[NodeGroupSpec]) -> Result<()> {
        let with_attach: Vec<(&NodeGroupSpec, _)> = groups
            .iter()
            .filter_map(|g| spec(g).attach.map(|a| (g, a)))
            .collect();
        if with_attach.is_empty() {
            return Ok(());
        }
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let Some((first, _)) = with_attach.first() else {
            return Ok(());
        };
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| Self::backend_error(&first.id, "listing VolumeAttachments", &e))?;
        // Which group each of our nodes belongs to, from the nodes' own labels.
        let lp = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let owners: BTreeMap<String, String> = self
            .nodes_api()
            .list(&lp)
            .await
            .map_err(|e| Self::backend_error(&first.id, "listing nodes", &e))?
            .items
            .into_iter()
            .filter_map(|n| {
                let group = n.metadata.labels.as_ref()?.get(labels::NODE_GROUP)?.clone();
                Some((n.metadata.name?, group))
            })
            .collect();
        let now = now_ms();
        for va in list.items {
            let node = va.spec.node_name.as_str();
            let Some(owner) = owners.get(node) else {
                continue;
            };
            let Some((g, attach)) = with_attach.iter().find(|(g, _)| g.id.as_str() == owner) else {
                continue;
            };
            let status = va.status.as_ref();
            if status.is_some_and(|s| s.attached || s.attach_error.is_some()) {
                continue;
            }
            let created = va
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
                .unwrap_or(0);
            // creationTimestamp has whole-second precision: count from the end of that second
            // so the simulated attach never comes earlier than the configured delay.
            if created
                .saturating_add(1000)
                .saturating_add(millis(attach.delay))
                > now
            {
                continue;
            }
            let name = va.metadata.name.clone().unwrap_or_default();
            let fails = attach.fail_driver.as_deref() == Some(va.spec.attacher.as_str());
            let status = if fails {
                serde_json::json!({ "status": { "attached": false, "attachError": VolumeError {
                    message: Some(format!("simulated attach failure for driver {}", va.spec.attacher)),
                    time: Some(Time(jiff_now())),
                    error_code: None,
                } } })
            } else {
                serde_json::json!({ "status": { "attached": true } })
            };
            api.patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&status),
            )
            .await
            .map_err(|e| Self::backend_error(&g.id, "updating a VolumeAttachment", &e))?;
            info!(node_group.id = %g.id, node.name = node, volume_attachment = %name, attached = !fails, "simulated CSI attach");
        }
        Ok(())
    }
}

/// The resources a `deviceDelay` holds back from new nodes: the group's RDMA device and
/// bandwidth resources (none without a delay or without RDMA).
fn late_resources(group: &NodeGroupSpec) -> BTreeSet<String> {
    match &group.rdma {
        Some(r) if !spec(group).device_delay.is_zero() => {
            BTreeSet::from([r.resource_name.clone(), r.bandwidth_resource_name.clone()])
        }
        _ => BTreeSet::new(),
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    crate::clock::timestamp()
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

    async fn increase(&self, group: &NodeGroupSpec, delta: u32) -> Result<u32> {
        // A delta past the maximum is refused below whatever the target; computing its due
        // times first would allocate one entry per requested node (up to 2^31).
        let dues: Vec<u64> = if delta <= group.max_size {
            spec(group).due_times(now_ms(), delta).collect()
        } else {
            Vec::new()
        };
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
                for &due in &dues {
                    r.pending.push(PendingNode {
                        name: format!("{}-{}", group.id, random_suffix()),
                        due_unix_ms: due,
                    });
                }
                Ok(())
            })
            .await?;
        if dues.first().is_some_and(|&due| due <= now_ms()) {
            self.materialize(group).await?;
        }
        Ok(record.target)
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
                Some(Instance {
                    id: provider_id(&group.id, &name),
                    node_name: name,
                    state,
                    error: None,
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
        }));
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((writes, record.target, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::unreachable;

    /// A backend whose API server is a closed loopback port: every request fails to connect.
    fn unreachable_backend() -> KwokProvisioner {
        let url: hyper::Uri = "http://127.0.0.1:1".parse().unwrap();
        let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
        KwokProvisioner::new(client, KubernetesSettings::default(), "gpu.product")
    }

    fn instance(node: &str) -> Instance {
        Instance {
            id: provider_id(&NodeGroupId::new("g"), node),
            node_name: node.into(),
            state: InstanceState::Running,
            error: None,
        }
    }

    #[test]
    fn a_failing_step_warns_once_per_streak_and_says_when_it_recovers() {
        let mut s = Streaks::default();
        let fail = || {
            Err(Error::Unreachable {
                group: NodeGroupId::new("g"),
                backend: "kwok",
                message: "connection refused".into(),
            })
        };
        let seen: Vec<Logged> = vec![
            s.report("step", "g", fail()),
            s.report("step", "g", fail()),
            s.report("step", "other", fail()),
            s.report("step", "g", Ok(())),
            s.report("step", "g", Ok(())),
            s.report("step", "g", fail()),
        ];
        assert_eq!(
            seen,
            vec![
                Logged::Warn,
                Logged::Debug,
                Logged::Warn,
                Logged::Recovered(2),
                Logged::Quiet,
                Logged::Warn
            ]
        );
    }

    #[tokio::test]
    async fn an_unreachable_api_server_is_answered_from_the_last_read_until_a_write_is_tried() {
        let p = unreachable_backend();
        let mut g = crate::testing::group("g", 0, 4);
        g.backend = BackendSpec::Kwok(spec(&g));
        // Nothing read yet: the failure is reported, typed as unreachable.
        let err = p.target_size(&g).await.unwrap_err();
        assert!(matches!(err, Error::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains("node group g"), "{err}");

        // As if a read had succeeded before the outage.
        let writes = p.writes();
        p.remember(writes, &g.id, |k| {
            k.target = Some(3);
            k.instances = Some(vec![instance("g-a")]);
        });
        assert_eq!(p.target_size(&g).await.unwrap(), 3);
        assert_eq!(p.instances(&g).await.unwrap(), [instance("g-a")]);
        let by_name = NodeRef {
            provider_id: String::new(),
            name: "g-a".into(),
        };
        assert_eq!(p.lookup(&by_name).await.unwrap(), Some(g.id.clone()));

        // A write that fails before sending anything (reading the state failed) changes
        // nothing; one that was sent may have been applied, so memory is forgotten.
        let err = p.increase(&g, 1).await.unwrap_err();
        assert!(matches!(err, Error::Unreachable { .. }), "{err}");
        assert_eq!(p.target_size(&g).await.unwrap(), 3);
        let _ = p.forget(&g.id);
        assert!(p.target_size(&g).await.is_err());
        assert!(p.instances(&g).await.is_err());

        // A read that began before a write is not remembered.
        let before = p.writes();
        let _ = p.forget(&g.id);
        p.remember(before, &g.id, |k| k.target = Some(1));
        assert!(p.target_size(&g).await.is_err());
    }

    #[test]
    fn refusals_are_not_outages_but_5xx_and_throttling_are() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            }))
        };
        assert!(unreachable(&status(503)));
        assert!(unreachable(&status(500)));
        assert!(unreachable(&status(429)));
        assert!(!unreachable(&status(403)));
        assert!(!unreachable(&status(409)));
        assert!(!unreachable(&status(404)));
    }

    #[test]
    fn provider_ids_round_trip() {
        let id = provider_id(&NodeGroupId::new("h100-8x"), "h100-8x-ab12c");
        assert_eq!(id, "kwok://h100-8x/h100-8x-ab12c");
        assert_eq!(parse_provider_id(&id), Some(("h100-8x", "h100-8x-ab12c")));
        assert_eq!(parse_provider_id("gangscaler-memory://g/g-00001"), None);
        assert_eq!(parse_provider_id("kwok://no-slash"), None);
    }

    #[test]
    fn group_records_round_trip_through_json_and_tolerate_missing_lists() {
        let r = GroupRecord {
            target: 3,
            created: 2,
            pending: vec![PendingNode {
                name: "g-aaaaa".into(),
                due_unix_ms: 5,
            }],
            failed: vec![FailedNode {
                name: "g-bbbbb".into(),
                code: ErrorCode::Stockout,
                message: "m".into(),
            }],
            deleting: vec![],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<GroupRecord>(&text).unwrap(), r);
        let minimal: GroupRecord = serde_json::from_str(r#"{"target":2}"#).unwrap();
        assert_eq!(minimal.target, 2);
        assert!(minimal.pending.is_empty());
    }

    #[tokio::test]
    async fn an_increase_far_past_max_fails_without_a_due_time_per_requested_node() {
        // Nothing listens on port 1: every API call fails at once.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let p = KwokProvisioner::new(client, KubernetesSettings::default(), "gpu");
        let g = crate::testing::group("g", 0, 4);
        // u32::MAX due times would be 32 GiB, computed before the bound was checked.
        let err = p.increase(&g, u32::MAX).await.unwrap_err();
        // The unreachable API server is the answer: the call got there without first
        // allocating a due time per requested node.
        assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    }

    /// What the fake API server of [`a_node_with_csi_limits_is_unusable_until_its_csinode_exists`]
    /// holds, and every moment the Node could take pods with no CSINode to limit them.
    #[derive(Default)]
    struct FakeApi {
        node: Option<serde_json::Value>,
        csinode: bool,
        unlimited: Vec<String>,
        /// How many more Node patches another writer races: just before each, it adds its
        /// own taint and bumps the resourceVersion, as the node lifecycle controller does.
        races: usize,
        /// Patches answered 409 because their resourceVersion was stale.
        conflicts: usize,
    }

    /// RFC 7386 merge of `patch` into `into`.
    fn merge(into: &mut serde_json::Value, patch: &serde_json::Value) {
        match (into, patch) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(k);
                    } else {
                        merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (a, b) => *a = b.clone(),
        }
    }

    /// One request to the fake API server: Nodes (create, get, patch, patch status) and
    /// CSINodes (create). After every Node write it records whether the scheduler could now
    /// place pods on the Node (it has allocatable resources and no startup taint) while no
    /// CSINode carries its attach limit.
    async fn fake_api(
        state: std::sync::Arc<std::sync::Mutex<FakeApi>>,
        req: http::Request<kube::client::Body>,
    ) -> std::result::Result<
        http::Response<http_body_util::Full<bytes::Bytes>>,
        std::convert::Infallible,
    > {
        use http_body_util::BodyExt;
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let path = parts.uri.path().to_owned();
        let method = parts.method.as_str().to_owned();
        let mut st = state.lock().unwrap();
        let not_found = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "not found"});
        let (code, out) = match (method.as_str(), path.as_str()) {
            ("POST", "/api/v1/nodes") => {
                let mut node = body;
                node["metadata"]["uid"] = serde_json::json!("uid-1");
                node["metadata"]["resourceVersion"] = serde_json::json!("1");
                st.node = Some(node.clone());
                (201, node)
            }
            ("POST", "/apis/storage.k8s.io/v1/csinodes") => {
                st.csinode = true;
                (201, body)
            }
            ("GET", p) if p.starts_with("/api/v1/nodes/") => match &st.node {
                Some(n) => (200, n.clone()),
                None => (404, not_found),
            },
            ("PATCH", p) if p.starts_with("/api/v1/nodes/") => {
                let racing = st.races > 0 && !p.ends_with("/status");
                if racing {
                    st.races -= 1;
                }
                match st.node.as_mut() {
                    Some(n) => {
                        let rv: u64 = n["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or_default();
                        if racing {
                            let taint = serde_json::json!({"key": format!("node.kubernetes.io/other-{rv}"), "effect": "NoSchedule"});
                            match n["spec"]["taints"].as_array_mut() {
                                Some(t) => t.push(taint),
                                None => n["spec"]["taints"] = serde_json::json!([taint]),
                            }
                        }
                        let rv = if racing { rv + 1 } else { rv };
                        let stale = body["metadata"]["resourceVersion"]
                            .as_str()
                            .is_some_and(|sent| sent != rv.to_string());
                        if stale {
                            n["metadata"]["resourceVersion"] = serde_json::json!(rv.to_string());
                            let conflict = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "Conflict", "code": 409,
                                "message": "the object has been modified"});
                            st.conflicts += 1;
                            (409, conflict)
                        } else {
                            merge(n, &body);
                            n["metadata"]["resourceVersion"] =
                                serde_json::json!((rv + 1).to_string());
                            (200, n.clone())
                        }
                    }
                    None => (404, not_found),
                }
            }
            _ => (404, not_found),
        };
        if method != "GET"
            && let Some(node) = &st.node
        {
            let has_resources = node["status"]["allocatable"]
                .as_object()
                .is_some_and(|a| !a.is_empty());
            let gated = node["spec"]["taints"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["key"] == CSI_STARTUP_TAINT));
            if has_resources && !gated && !st.csinode {
                st.unlimited.push(format!("{method} {path}"));
            }
        }
        let resp = http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                out.to_string(),
            )))
            .unwrap();
        Ok(resp)
    }

    #[tokio::test]
    async fn a_node_with_csi_limits_is_unusable_until_its_csinode_exists() {
        let state = std::sync::Arc::new(std::sync::Mutex::new(FakeApi::default()));
        let shared = state.clone();
        let service = tower::service_fn(move |req| fake_api(shared.clone(), req));
        let client = kube::Client::new(service, "default");
        let p = KwokProvisioner::new(client, KubernetesSettings::default(), "gpu.product");
        let mut g = crate::testing::group("g", 0, 4);
        g.csi = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 4)]);
        g.backend = BackendSpec::Kwok(spec(&g));

        p.create_node(&g, "g-aaaaa").await.unwrap();

        let st = state.lock().unwrap();
        assert!(st.csinode, "the CSINode was created");
        assert!(
            st.unlimited.is_empty(),
            "the Node was usable with no CSINode after: {:?}",
            st.unlimited
        );
        let node = st.node.as_ref().unwrap();
        let taints = node["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            taints.iter().all(|t| t["key"] != CSI_STARTUP_TAINT),
            "the startup taint is lifted once the CSINode exists: {taints:?}"
        );
        assert!(
            node["status"]["allocatable"]["cpu"].is_string(),
            "the Node has its capacity: {node}"
        );
    }

    #[tokio::test]
    async fn a_concurrent_change_to_the_node_does_not_fail_the_taint_lift_or_lose_its_taint() {
        let state = std::sync::Arc::new(std::sync::Mutex::new(FakeApi {
            races: 3,
            ..FakeApi::default()
        }));
        let shared = state.clone();
        let service = tower::service_fn(move |req| fake_api(shared.clone(), req));
        let client = kube::Client::new(service, "default");
        let p = KwokProvisioner::new(client, KubernetesSettings::default(), "gpu.product");
        let mut g = crate::testing::group("g", 0, 4);
        g.csi = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 4)]);
        g.backend = BackendSpec::Kwok(spec(&g));

        p.create_node(&g, "g-aaaaa").await.unwrap();

        let st = state.lock().unwrap();
        assert_eq!(st.conflicts, 3, "every raced patch was refused as stale");
        let taints: Vec<String> = st.node.as_ref().unwrap()["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t["key"].as_str().map(str::to_owned))
            .collect();
        assert!(
            !taints.iter().any(|k| k == CSI_STARTUP_TAINT),
            "the startup taint was lifted: {taints:?}"
        );
        assert_eq!(
            taints.len(),
            3,
            "the other writer's taints were kept: {taints:?}"
        );
    }

    #[test]
    fn random_suffixes_are_short_dns_safe_and_vary() {
        let a: BTreeSet<String> = (0..50).map(|_| random_suffix()).collect();
        assert!(a.len() > 40, "suffixes should rarely collide: {a:?}");
        assert!(a.iter().all(|s| {
            s.len() == 5
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        }));
    }
}
