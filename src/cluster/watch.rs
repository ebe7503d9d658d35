//! Watchers and reflector stores that keep a lean copy of the objects the adapters read: pods,
//! PVCs, PVs, StorageClasses, CSIDrivers and the gang objects of the scheduling API version the
//! cluster serves (found by discovery), plus Nodes, CSINodes and VolumeAttachments for scale-up
//! accounting. [`ClusterView::snapshot`] turns the stores into an
//! [`ObjectSet`], the only bridge to the pure adapters and planner.
//!
//! Memory: pods, by far the most numerous objects, are not kept as `k8s-openapi` objects but as
//! [`CompactPod`]s (a few hundred bytes each instead of ~14 KB) in our own [`PodStore`], which
//! snapshots share instead of copying. Every other object loses `managedFields`; nodes also lose
//! annotations (but those of scale-down protection) and their image list, see [`slim_node`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::objects::{PodEntry, PodSet};
use super::{CompactPod, GangObject, ObjectSet, PodKey, adapters};
use crate::model::labels;

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

/// The pods of the cluster as [`CompactPod`]s, by namespace and name: the reading half, cheap
/// to clone. A [`PodWriter`] fills it from watcher events.
#[derive(Debug, Clone)]
pub struct PodStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    pods: RwLock<PodSet>,
    /// True after the first complete list.
    ready: tokio::sync::watch::Sender<bool>,
}

impl PodStore {
    /// An empty store and the writer that fills it.
    pub fn new() -> (Self, PodWriter) {
        let store = Self {
            shared: Arc::new(Shared {
                pods: RwLock::new(PodSet::new()),
                ready: tokio::sync::watch::Sender::new(false),
            }),
        };
        let writer = PodWriter {
            store: store.clone(),
            buffer: None,
        };
        (store, writer)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, PodSet> {
        self.shared
            .pods
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, PodSet> {
        self.shared
            .pods
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether there are no pods.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The pod `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CompactPod>> {
        let key = PodKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.read().get(&key).map(|e| Arc::clone(&e.0))
    }

    /// Every pod, by namespace and name (shared, not copied).
    pub fn pods(&self) -> Vec<Arc<CompactPod>> {
        self.read().iter().map(|e| Arc::clone(&e.0)).collect()
    }

    /// An [`ObjectSet`] holding the current pods and nothing else. The pods are shared: this
    /// copies one pointer per pod.
    pub fn to_object_set(&self) -> ObjectSet {
        let pods = self.read().clone();
        ObjectSet::with_pods(pods)
    }

    /// Whether the first complete list has arrived.
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.shared.ready.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = ready.wait_for(|r| *r).await;
    }
}

/// The writing half of a [`PodStore`]: applies watcher events, compacting each pod. A
/// re-list (`Init`, `InitApply`..., `InitDone`) is buffered and swapped in whole, so pods
/// deleted while the watch was down vanish.
#[derive(Debug)]
pub struct PodWriter {
    store: PodStore,
    buffer: Option<PodSet>,
}

impl PodWriter {
    /// Applies an event of typed pods.
    pub fn apply_pod(&mut self, event: Event<Pod>) {
        self.apply(event, |p| Ok(CompactPod::from_pod(p)));
    }

    /// Applies an event of pods watched as `DynamicObject`s (keeps the 1.35
    /// `spec.workloadRef`). A pod that does not decode is logged and left out.
    pub fn apply_dynamic(&mut self, event: Event<DynamicObject>) {
        self.apply(event, CompactPod::from_dynamic);
    }

    fn apply<K: Resource>(
        &mut self,
        event: Event<K>,
        compact: impl Fn(&K) -> Result<CompactPod, super::Error>,
    ) {
        let entry = |object: &K| match compact(object) {
            Ok(pod) => Some(PodEntry(Arc::new(pod))),
            Err(e) => {
                let pod = PodKey::of(object.meta());
                warn!(%pod, error = %e, "pod does not decode; left out");
                None
            }
        };
        match event {
            Event::Apply(object) => {
                let key = PodKey::of(object.meta());
                let entry = entry(&object);
                let mut pods = self.store.write();
                match entry {
                    Some(entry) => {
                        pods.replace(entry);
                    }
                    // The previous version is stale: leave the pod out, as when listed.
                    None => {
                        pods.remove(&key);
                    }
                }
            }
            Event::Delete(object) => {
                self.store.write().remove(&PodKey::of(object.meta()));
            }
            Event::Init => self.buffer = Some(PodSet::new()),
            Event::InitApply(object) => {
                if let Some(entry) = entry(&object) {
                    let entry = self.unchanged_or(entry);
                    self.buffer.get_or_insert_default().replace(entry);
                }
            }
            Event::InitDone => {
                let listed = self.buffer.take().unwrap_or_default();
                let previous = std::mem::replace(&mut *self.store.write(), listed);
                // Dropped outside the lock.
                drop(previous);
                self.store.shared.ready.send_replace(true);
            }
        }
    }

    /// The stored pod equal to `entry`, if any (so a re-list of unchanged pods holds one copy
    /// of each, not two), else `entry`.
    fn unchanged_or(&self, entry: PodEntry) -> PodEntry {
        match self.store.read().get(entry.0.key()) {
            Some(stored) if *stored.0 == *entry.0 => stored.clone(),
            _ => entry,
        }
    }
}

/// A live, lean view of the cluster objects gang admission needs.
pub struct ClusterView {
    pods: PodStore,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    drivers: Store<CSIDriver>,
    nodes: Store<Node>,
    csi_nodes: Store<CSINode>,
    attachments: Store<VolumeAttachment>,
    gangs: Vec<(ApiResource, Store<DynamicObject>)>,
    gang_api: Option<String>,
    ready: Arc<AtomicBool>,
}

impl std::fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterView")
            .field("gang_api", &self.gang_api)
            .field("ready", &self.is_ready())
            .finish()
    }
}

/// Drops what no consumer reads from a node: managed fields, the image list (often the
/// largest part of a Node) and every annotation but the two of scale-down protection.
pub fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(a) = node.metadata.annotations.as_mut() {
        a.retain(|k, _| k == labels::SCALE_DOWN_DISABLED || k == labels::SCALE_DOWN_PROTECTED_FOR);
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
}

fn drop_managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Spawns a reflector for `api` into a new store, modified by `slim`, until `shutdown`.
fn spawn_reflector<K>(
    name: &'static str,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    slim: fn(&mut K),
    shutdown: CancellationToken,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(slim)
        .reflect(writer)
        .touched_objects();
    drive(stream, name.to_owned(), shutdown, |_| {});
}

/// Polls a watch stream until `shutdown`, handing each item to `on_item` and logging errors
/// (the stream retries with backoff), inside a `watch` span named after the kind.
fn drive<S, T>(
    stream: S,
    kind: String,
    shutdown: CancellationToken,
    mut on_item: impl FnMut(T) + Send + 'static,
) where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(
        async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(item)) => on_item(item),
                        Some(Err(e)) => warn!(error = %e, "watch error; retrying with backoff"),
                        None => return,
                    },
                }
            }
        }
        .instrument(info_span!("watch", kind = %kind)),
    );
}

fn typed_store<K>(
    client: &kube::Client,
    name: &'static str,
    slim: fn(&mut K),
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let (reader, writer) = reflector::store();
    spawn_reflector(
        name,
        Api::<K>::all(client.clone()),
        writer,
        slim,
        shutdown.clone(),
    );
    reader
}

/// Spawns a watcher for `api` that feeds `writer` through `apply`, until `shutdown`.
fn spawn_pod_watcher<K>(
    api: Api<K>,
    mut writer: PodWriter,
    apply: fn(&mut PodWriter, Event<K>),
    shutdown: &CancellationToken,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    drive(stream, "Pod".to_owned(), shutdown.clone(), move |event| {
        apply(&mut writer, event);
    });
}

fn dynamic_store(
    client: &kube::Client,
    ar: &ApiResource,
    shutdown: &CancellationToken,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let api = Api::<DynamicObject>::all_with(client.clone(), ar);
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(drop_managed_fields::<DynamicObject>)
        .reflect(writer)
        .touched_objects();
    drive(stream, ar.kind.clone(), shutdown.clone(), |_| {});
    reader
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
                gangs.push((ar.clone(), dynamic_store(&client, &ar, shutdown)));
            }
            info!(gang.api = %api, kinds = gangs.len(), "watching gang objects");
        } else {
            warn!(served = ?served, "the cluster serves no gang-scheduling API gangscaler understands; every pod is treated as ungrouped");
        }
        // 1.35 links pods through spec.workloadRef, which the typed Pod of this build lacks.
        let (pods, writer) = PodStore::new();
        if gang_api.as_deref() == Some("scheduling.k8s.io/v1alpha1") {
            let ar = ApiResource::erase::<Pod>(&());
            let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
            spawn_pod_watcher(api, writer, PodWriter::apply_dynamic, shutdown);
        } else {
            let api = Api::<Pod>::all(client.clone());
            spawn_pod_watcher(api, writer, PodWriter::apply_pod, shutdown);
        }
        Ok(Self {
            pods,
            pvcs: typed_store(
                &client,
                "PersistentVolumeClaim",
                drop_managed_fields,
                shutdown,
            ),
            pvs: typed_store(&client, "PersistentVolume", drop_managed_fields, shutdown),
            classes: typed_store(&client, "StorageClass", drop_managed_fields, shutdown),
            drivers: typed_store(&client, "CSIDriver", drop_managed_fields, shutdown),
            nodes: typed_store(&client, "Node", slim_node, shutdown),
            csi_nodes: typed_store(&client, "CSINode", drop_managed_fields, shutdown),
            attachments: typed_store(&client, "VolumeAttachment", drop_managed_fields, shutdown),
            gangs,
            gang_api,
            ready: Arc::new(AtomicBool::new(false)),
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
            self.nodes.wait_until_ready(),
            self.csi_nodes.wait_until_ready(),
            self.attachments.wait_until_ready(),
            futures::future::join_all(self.gangs.iter().map(|(_, s)| s.wait_until_ready())),
        );
        self.ready.store(true, Ordering::Release);
        info!("cluster view synced");
    }

    /// Whether every store has synced.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The gang API version in use, if any.
    pub fn gang_api(&self) -> Option<&str> {
        self.gang_api.as_deref()
    }

    /// The pods, compacted.
    pub fn pods(&self) -> &PodStore {
        &self.pods
    }

    /// The nodes, as watched (slimmed).
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// The CSINodes, as watched.
    pub fn csi_nodes(&self) -> Vec<Arc<CSINode>> {
        self.csi_nodes.state()
    }

    /// The VolumeAttachments, as watched.
    pub fn volume_attachments(&self) -> Vec<Arc<VolumeAttachment>> {
        self.attachments.state()
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
                        warn!(object = %o.name_any(), error = %e, "gang object does not encode; skipped")
                    }
                }
            }
        }
        set
    }
}
