//! Watchers and reflector stores that keep a lean copy of the objects the adapters read: pods,
//! PVCs, PVs, StorageClasses, CSIDrivers and the gang objects of the scheduling API version the
//! cluster serves (found by discovery), plus CSINodes and VolumeAttachments for scale-up
//! accounting, DaemonSets for node reservation, and a [`NodeTable`] of the Nodes. [`ClusterView::snapshot`] turns the stores into
//! an [`ObjectSet`], the only bridge to the pure adapters and planner.
//!
//! Memory: pods, by far the most numerous objects, are not kept as `k8s-openapi` objects but as
//! [`CompactPod`](super::CompactPod)s (a few hundred bytes each instead of ~14 KB) in our own
//! [`PodStore`], which snapshots share instead of copying. Nodes are not kept at all: each watch event is reduced
//! to its [`NodeSummary`](super::node::NodeSummary) (creation time, readiness, the scale-down
//! annotations) in the [`NodeTable`]. Every other object loses `managedFields`.
//!
//! Gangs: every event also reaches the [`GangIndex`], which keeps the gang view current;
//! [`ClusterView::gang_view`] reads it without building a snapshot. The index holds its own
//! pointers to the same [`CompactPod`](super::CompactPod)s.
//!
//! Outages: when a watch fails (the API server is down or refuses), its store keeps the last
//! objects it had and the view answers from them, but it is *stale* ([`ClusterView::stale`])
//! from that failure until the watcher has listed its kind completely again. The failed watcher
//! is replaced by a fresh one, which lists instead of resuming, retrying with a backoff of 0.5 s
//! doubling to 10 s: the new list is what says the view has caught up, since a resumed watch
//! reports nothing until an object changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{GangIndex, GangObject, GangView, IdleNode, NodeTable, ObjectSet, adapters};
use crate::telemetry::Chain;

mod pods;
mod stores;

use pods::lock;
pub use pods::{PodStore, PodWriter, SharedIndex};
use stores::{
    dynamic_store, node_watcher, nodes_listed, spawn_pod_watcher, storage_store, typed_store,
};

/// Errors starting the cluster view.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// API discovery failed.
    #[error("discovering the scheduling.k8s.io API versions")]
    Discovery(#[source] kube::Error),
}

/// The scheduling API group that carries Workload and PodGroup.
const SCHEDULING_GROUP: &str = "scheduling.k8s.io";
/// Gang kinds we watch in whatever version is chosen.
const GANG_KINDS: [&str; 3] = ["Workload", "PodGroup", "CompositePodGroup"];

/// A live, lean view of the cluster objects gang admission needs.
pub struct ClusterView {
    pods: PodStore,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    drivers: Store<CSIDriver>,
    /// What the scale-up lifecycle reads of each Node, fed by the node watcher (the only copy
    /// of the Nodes gangscaler keeps).
    node_table: Arc<Mutex<NodeTable>>,
    /// Becomes true once the node watcher has listed every Node.
    nodes_listed: tokio::sync::watch::Receiver<bool>,
    csi_nodes: Store<CSINode>,
    attachments: Store<VolumeAttachment>,
    /// DaemonSets, watched only when some group reserves at start
    /// ([`ClusterView::watch_daemon_sets`]): a group they run on without tolerating the
    /// reservation taint reserves nothing (`planner::reservation`).
    daemon_sets: std::sync::OnceLock<Store<DaemonSet>>,
    gangs: Vec<(ApiResource, Store<DynamicObject>)>,
    gang_api: Option<String>,
    index: SharedIndex,
    ready: Arc<AtomicBool>,
    health: Arc<Health>,
    /// For watchers started after [`ClusterView::start`].
    client: kube::Client,
}

impl std::fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterView")
            .field("gang_api", &self.gang_api)
            .field("ready", &self.is_ready())
            .field("stale", &self.stale())
            .finish()
    }
}

fn drop_managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// A DaemonSet is read for its pod template's placement only.
fn drop_daemon_set_status(d: &mut DaemonSet) {
    d.metadata.managed_fields = None;
    d.status = None;
}

/// Which watchers have failed since they last listed their kind completely, and since when.
/// Shared by every watcher task of one view.
#[derive(Debug, Default)]
struct Health {
    failing: Mutex<BTreeMap<String, Instant>>,
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Instant>> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a failure of `kind`'s watcher; true if it was healthy until now.
    fn failed(&self, kind: &str) -> bool {
        let mut failing = self.lock();
        if failing.contains_key(kind) {
            return false;
        }
        failing.insert(kind.to_owned(), crate::clock::mono_std());
        true
    }

    /// Records a complete list of `kind`; true if its watcher had failed before.
    fn listed(&self, kind: &str) -> bool {
        self.lock().remove(kind).is_some()
    }

    fn stale(&self) -> Option<Stale> {
        let failing = self.lock();
        let since = failing.values().min()?;
        Some(Stale {
            kinds: failing.keys().cloned().collect(),
            for_: since.elapsed(),
        })
    }
}

/// Why the view may be behind the cluster: these watchers failed and have not listed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// Kinds whose watcher failed, sorted.
    pub kinds: Vec<String>,
    /// How long since the first of them failed.
    pub for_: Duration,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "watches of {} failing for {}s",
            self.kinds.join(", "),
            self.for_.as_secs()
        )
    }
}

impl ClusterView {
    /// Discovers the gang API version the cluster serves (the most preferred one an adapter
    /// supports) and starts every watcher. Call [`ClusterView::wait_ready`] before planning.
    ///
    /// # Errors
    /// [`WatchError::Discovery`] when the API server cannot be asked.
    pub async fn start(
        client: kube::Client,
        shutdown: &CancellationToken,
    ) -> Result<Self, WatchError> {
        let groups = client
            .list_api_groups()
            .await
            .map_err(WatchError::Discovery)?;
        let served: Vec<String> = groups
            .groups
            .iter()
            .filter(|g| g.name == SCHEDULING_GROUP)
            .flat_map(|g| g.versions.iter().map(|v| v.group_version.clone()))
            .collect();
        let gang_api = adapters::ALL
            .iter()
            .map(|a| a.api_version())
            .find(|v| served.iter().any(|s| s == v))
            .map(str::to_owned);
        let health = Arc::new(Health::default());
        let index: SharedIndex = Arc::new(Mutex::new(GangIndex::new()));
        let mut gangs = Vec::new();
        if let Some(api) = &gang_api {
            let resources = client
                .list_api_group_resources(api)
                .await
                .map_err(WatchError::Discovery)?;
            let version = api.split_once('/').map(|(_, v)| v).unwrap_or_default();
            for r in resources
                .resources
                .iter()
                .filter(|r| GANG_KINDS.contains(&r.kind.as_str()) && !r.name.contains('/'))
            {
                let gvk = GroupVersionKind::gvk(SCHEDULING_GROUP, version, &r.kind);
                let ar = ApiResource::from_gvk_with_plural(&gvk, &r.name);
                let store = dynamic_store(&client, &ar, &index, &health, shutdown);
                gangs.push((ar.clone(), store));
            }
            info!(gang.api = %api, kinds = gangs.len(), "watching gang objects");
        } else {
            warn!(served = ?served, "the cluster serves no gang-scheduling API gangscaler understands; every pod is treated as ungrouped");
        }
        // 1.35 links pods through spec.workloadRef, which the typed Pod of this build lacks.
        let (pods, writer) = PodStore::new();
        let writer = writer.with_index(Arc::clone(&index));
        if gang_api.as_deref() == Some("scheduling.k8s.io/v1alpha1") {
            let ar = ApiResource::erase::<Pod>(&());
            let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
            spawn_pod_watcher(api, writer, PodWriter::apply_dynamic, &health, shutdown);
        } else {
            let api = Api::<Pod>::all(client.clone());
            spawn_pod_watcher(api, writer, PodWriter::apply_pod, &health, shutdown);
        }
        let h = &health;
        let node_table = Arc::new(Mutex::new(NodeTable::new()));
        Ok(Self {
            pods,
            pvcs: storage_store(&client, "PersistentVolumeClaim", &index, h, shutdown),
            pvs: storage_store(&client, "PersistentVolume", &index, h, shutdown),
            classes: storage_store(&client, "StorageClass", &index, h, shutdown),
            drivers: storage_store(&client, "CSIDriver", &index, h, shutdown),
            nodes_listed: node_watcher(&client, Arc::clone(&node_table), h, shutdown),
            node_table,
            csi_nodes: typed_store(&client, "CSINode", drop_managed_fields, h, shutdown),
            attachments: typed_store(
                &client,
                "VolumeAttachment",
                drop_managed_fields,
                h,
                shutdown,
            ),
            daemon_sets: std::sync::OnceLock::new(),
            client,
            gangs,
            gang_api,
            index,
            ready: Arc::new(AtomicBool::new(false)),
            health,
        })
    }

    /// Waits until every store has its initial list.
    pub async fn wait_ready(&self) {
        let _ = tokio::join!(
            self.pods.wait_until_ready(),
            self.pvcs.wait_until_ready(),
            self.pvs.wait_until_ready(),
            self.classes.wait_until_ready(),
            self.drivers.wait_until_ready(),
            nodes_listed(self.nodes_listed.clone()),
            self.csi_nodes.wait_until_ready(),
            self.attachments.wait_until_ready(),
            async {
                if let Some(d) = self.daemon_sets.get() {
                    let _ = d.wait_until_ready().await;
                }
            },
            futures::future::join_all(self.gangs.iter().map(|(_, s)| s.wait_until_ready())),
        );
        self.ready.store(true, Ordering::Release);
        info!("cluster view synced");
    }

    /// Whether every store has synced.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Starts watching DaemonSets (node reservation needs them: see
    /// [`daemon_set_demands`](Self::daemon_set_demands)); call before
    /// [`wait_ready`](Self::wait_ready). A second call does nothing.
    pub fn watch_daemon_sets(&self, shutdown: &CancellationToken) {
        self.daemon_sets.get_or_init(|| {
            info!("watching DaemonSets for node reservation");
            typed_store(
                &self.client,
                "DaemonSet",
                drop_daemon_set_status,
                &self.health,
                shutdown,
            )
        });
    }

    /// Every DaemonSet's placement, as node reservation reads it; `None` when DaemonSets are
    /// not watched.
    pub fn daemon_set_demands(&self) -> Option<Vec<crate::model::reservation::DaemonSetDemand>> {
        let store = self.daemon_sets.get()?;
        Some(
            store
                .state()
                .iter()
                .filter_map(|d| super::daemon_set_demand(d))
                .collect(),
        )
    }

    /// `Some` while the view may be behind the cluster: a watcher failed (e.g. the API server
    /// is unreachable) and has not completed a new list since. The stores keep the last
    /// objects they had meanwhile, so reads still answer from them.
    pub fn stale(&self) -> Option<Stale> {
        self.health.stale()
    }

    /// The gang API version in use, if any.
    pub fn gang_api(&self) -> Option<&str> {
        self.gang_api.as_deref()
    }

    /// The pods, compacted.
    pub fn pods(&self) -> &PodStore {
        &self.pods
    }

    /// Runs `f` on the [`NodeTable`], locked (keep it short: the node watcher waits
    /// meanwhile).
    pub fn with_node_table<T>(&self, f: impl FnOnce(&NodeTable) -> T) -> T {
        f(&lock(&self.node_table))
    }

    /// The idle nodes by node group now ([`idle_nodes`](super::idle_nodes)).
    pub fn idle_nodes(&self, now_unix: i64) -> BTreeMap<String, Vec<IdleNode>> {
        let table = lock(&self.node_table);
        self.pods
            .with_pods(|pods| super::idle_nodes(&table, pods, now_unix))
    }

    /// The CSINodes, as watched.
    pub fn csi_nodes(&self) -> Vec<Arc<CSINode>> {
        self.csi_nodes.state()
    }

    /// The VolumeAttachments, as watched.
    pub fn volume_attachments(&self) -> Vec<Arc<VolumeAttachment>> {
        self.attachments.state()
    }

    /// The gang view now, from the incremental [`GangIndex`]: the same view
    /// [`gangs`](super::gangs) builds over [`ClusterView::snapshot`], without the snapshot.
    pub fn gang_view(&self, now_unix: i64) -> GangView {
        lock(&self.index).view(now_unix)
    }

    /// Runs `f` on the gang index, locked (keep it short: the watchers wait meanwhile).
    pub fn with_index<T>(&self, f: impl FnOnce(&mut GangIndex) -> T) -> T {
        f(&mut lock(&self.index))
    }

    /// A point-in-time view of the stores for the adapters. Pods are shared with the store
    /// (one pointer copied per pod); the other, far fewer, objects are copied.
    pub fn snapshot(&self) -> ObjectSet {
        let mut set = self.pods.to_object_set();
        for o in self.pvcs.state() {
            set.insert_pvc((*o).clone());
        }
        for o in self.pvs.state() {
            set.insert_pv((*o).clone());
        }
        for o in self.classes.state() {
            set.insert_storage_class((*o).clone());
        }
        for o in self.drivers.state() {
            set.insert_csi_driver((*o).clone());
        }
        for (ar, store) in &self.gangs {
            for o in store.state() {
                match serde_json::to_value(&*o) {
                    Ok(v) => set.insert_gang_object(GangObject::new(
                        ar.api_version.clone(),
                        ar.kind.clone(),
                        v,
                    )),
                    Err(e) => {
                        warn!(object = %o.name_any(), error = %Chain(&e), "gang object does not encode; skipped")
                    }
                }
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::utils::Backoff;

    use super::stores::Retry;
    use super::*;

    #[test]
    fn a_kind_is_stale_from_its_first_failure_until_it_lists_again() {
        let h = Health::default();
        assert_eq!(h.stale(), None);
        assert!(h.failed("Pod"), "first failure restarts the watch");
        assert!(!h.failed("Pod"), "later failures only retry");
        assert!(h.failed("Node"));
        let stale = h.stale().unwrap();
        assert_eq!(stale.kinds, ["Node", "Pod"]);
        assert!(
            stale
                .to_string()
                .starts_with("watches of Node, Pod failing for ")
        );
        assert!(h.listed("Pod"));
        assert!(
            !h.listed("Pod"),
            "a healthy kind listing again changes nothing"
        );
        assert_eq!(h.stale().unwrap().kinds, ["Node"]);
        assert!(h.listed("Node"));
        assert_eq!(h.stale(), None);
    }

    #[test]
    fn retries_double_up_to_the_cap_and_start_over_after_a_reset() {
        let mut r = Retry::new();
        let delays: Vec<u64> = r.by_ref().take(7).map(|d| d.as_millis() as u64).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        r.reset();
        assert_eq!(r.next(), Some(Duration::from_millis(500)));
    }
}
