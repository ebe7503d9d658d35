//! Watchers and reflector stores that keep a lean copy of the objects the adapters read: pods,
//! PVCs, PVs, StorageClasses, CSIDrivers and the gang objects of the scheduling API version the
//! cluster serves (found by discovery), plus CSINodes and VolumeAttachments for scale-up
//! accounting and a [`NodeTable`] of the Nodes. [`ClusterView::snapshot`] turns the stores into
//! an [`ObjectSet`], the only bridge to the pure adapters and planner.
//!
//! Memory: pods, by far the most numerous objects, are not kept as `k8s-openapi` objects but as
//! [`CompactPod`]s (a few hundred bytes each instead of ~14 KB) in our own [`PodStore`], which
//! snapshots share instead of copying. Nodes are not kept at all: each watch event is reduced
//! to its [`NodeSummary`](super::node::NodeSummary) (creation time, readiness, the scale-down
//! annotations) in the [`NodeTable`]. Every other object loses `managedFields`.
//!
//! Gangs: every event also reaches the [`GangIndex`], which keeps the gang view current;
//! [`ClusterView::gang_view`] reads it without building a snapshot. The index holds its own
//! pointers to the same [`CompactPod`]s.
//!
//! Outages: when a watch fails (the API server is down or refuses), its store keeps the last
//! objects it had and the view answers from them, but it is *stale* ([`ClusterView::stale`])
//! from that failure until the watcher has listed its kind completely again. The failed watcher
//! is replaced by a fresh one, which lists instead of resuming, retrying with a backoff of 0.5 s
//! doubling to 10 s: the new list is what says the view has caught up, since a resumed watch
//! reports nothing until an object changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::objects::{PodEntry, PodSet};
use super::{
    CompactPod, GangIndex, GangObject, GangView, NodeTable, ObjectSet, PodKey, StorageKind,
    adapters,
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
            index: None,
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
    index: Option<SharedIndex>,
}

/// The gang index shared by the watchers (writers) and the view (reader).
pub type SharedIndex = Arc<Mutex<GangIndex>>;

/// Locks `m`; a panic while it was held leaves what was written so far, which the next
/// event or re-list corrects.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PodWriter {
    /// Also hands every change to `index`.
    #[must_use]
    pub fn with_index(mut self, index: SharedIndex) -> Self {
        self.index = Some(index);
        self
    }

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
                if let Some(index) = &self.index {
                    let mut index = lock(index);
                    match &entry {
                        Some(entry) => index.apply_pod(Arc::clone(&entry.0)),
                        None => index.delete_pod(&key),
                    }
                }
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
                let key = PodKey::of(object.meta());
                if let Some(index) = &self.index {
                    lock(index).delete_pod(&key);
                }
                self.store.write().remove(&key);
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
                if let Some(index) = &self.index {
                    lock(index).replace_pods(&listed);
                }
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
    /// What the scale-up lifecycle reads of each Node, fed by the node watcher (the only copy
    /// of the Nodes gangscaler keeps).
    node_table: Arc<Mutex<NodeTable>>,
    /// Becomes true once the node watcher has listed every Node.
    nodes_listed: tokio::sync::watch::Receiver<bool>,
    csi_nodes: Store<CSINode>,
    attachments: Store<VolumeAttachment>,
    gangs: Vec<(ApiResource, Store<DynamicObject>)>,
    gang_api: Option<String>,
    index: SharedIndex,
    ready: Arc<AtomicBool>,
    health: Arc<Health>,
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

/// The retry delays of a failing watch: 0.5 s doubling to at most [`Retry::MAX`], back to the
/// start after an event is received.
#[derive(Debug, Clone, Copy)]
struct Retry {
    next: Duration,
}

impl Retry {
    const FIRST: Duration = Duration::from_millis(500);
    /// Kept short so a view is current again soon after the API server returns.
    const MAX: Duration = Duration::from_secs(10);

    fn new() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(Self::MAX);
        Some(delay)
    }
}

impl Backoff for Retry {
    fn reset(&mut self) {
        *self = Self::new();
    }
}

/// A fresh watch stream of `api`: it starts with a complete list.
fn watch_stream<K>(api: &Api<K>) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    watcher(api.clone(), watcher::Config::default())
        .backoff(Retry::new())
        .boxed()
}

/// Watches `api` until `shutdown`, handing each event to `apply`, inside a `watch` span
/// named after the kind. On the first failure after a complete list the kind is marked
/// failing in `health` and the watcher is replaced by a fresh one, so that the next complete
/// list (`InitDone`) marks it healthy again.
fn drive<K>(
    api: Api<K>,
    kind: String,
    health: Arc<Health>,
    shutdown: CancellationToken,
    mut apply: impl FnMut(Event<K>) + Send + 'static,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let span = info_span!("watch", kind = %kind);
    tokio::spawn(
        async move {
            let mut stream = watch_stream(&api);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(event)) => {
                            let listed = matches!(event, Event::InitDone);
                            apply(event);
                            if listed && health.listed(&kind) {
                                info!("watch listed again; this kind is current");
                            }
                        }
                        Some(Err(e)) => {
                            if health.failed(&kind) {
                                warn!(error = %e, "watch failed; answering from the last objects until a new list completes");
                                stream = watch_stream(&api);
                            } else {
                                debug!(error = %e, "watch still failing; retrying with backoff");
                            }
                        }
                        None => return,
                    },
                }
            }
        }
        .instrument(span),
    );
}

/// A store of every `K`, each object modified by `slim`, filled until `shutdown`.
fn typed_store<K>(
    client: &kube::Client,
    name: &'static str,
    slim: fn(&mut K),
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let (reader, mut writer) = reflector::store();
    drive(
        Api::<K>::all(client.clone()),
        name.to_owned(),
        health.clone(),
        shutdown.clone(),
        move |event| writer.apply_watcher_event(&event.modify(slim)),
    );
    reader
}

/// Feeds every Node watch event to `table` until `shutdown`; the receiver turns true at the
/// end of the first complete list.
fn node_watcher(
    client: &kube::Client,
    table: Arc<Mutex<NodeTable>>,
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) -> tokio::sync::watch::Receiver<bool> {
    let (listed, receiver) = tokio::sync::watch::channel(false);
    drive(
        Api::<Node>::all(client.clone()),
        "Node".to_owned(),
        health.clone(),
        shutdown.clone(),
        move |event| {
            lock(&table).apply(&event);
            if matches!(event, Event::InitDone) {
                listed.send_replace(true);
            }
        },
    );
    receiver
}

/// A storage kind demand resolution reads, and how its events reach the [`GangIndex`].
trait IndexedStorage:
    Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
    const KIND: StorageKind;
    fn apply(index: &mut GangIndex, object: Self);
    fn delete(index: &mut GangIndex, object: &Self);
    fn insert(set: &mut ObjectSet, object: Self);
}

fn meta_name<K: Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

impl IndexedStorage for PersistentVolumeClaim {
    const KIND: StorageKind = StorageKind::Pvc;
    fn apply(index: &mut GangIndex, object: Self) {
        index.apply_pvc(object);
    }
    fn delete(index: &mut GangIndex, object: &Self) {
        let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
        index.delete_pvc(namespace, meta_name(object));
    }
    fn insert(set: &mut ObjectSet, object: Self) {
        set.insert_pvc(object);
    }
}

impl IndexedStorage for PersistentVolume {
    const KIND: StorageKind = StorageKind::Pv;
    fn apply(index: &mut GangIndex, object: Self) {
        index.apply_pv(object);
    }
    fn delete(index: &mut GangIndex, object: &Self) {
        index.delete_pv(meta_name(object));
    }
    fn insert(set: &mut ObjectSet, object: Self) {
        set.insert_pv(object);
    }
}

impl IndexedStorage for StorageClass {
    const KIND: StorageKind = StorageKind::StorageClass;
    fn apply(index: &mut GangIndex, object: Self) {
        index.apply_storage_class(object);
    }
    fn delete(index: &mut GangIndex, object: &Self) {
        index.delete_storage_class(meta_name(object));
    }
    fn insert(set: &mut ObjectSet, object: Self) {
        set.insert_storage_class(object);
    }
}

impl IndexedStorage for CSIDriver {
    const KIND: StorageKind = StorageKind::CsiDriver;
    fn apply(index: &mut GangIndex, object: Self) {
        index.apply_csi_driver(object);
    }
    fn delete(index: &mut GangIndex, object: &Self) {
        index.delete_csi_driver(meta_name(object));
    }
    fn insert(set: &mut ObjectSet, object: Self) {
        set.insert_csi_driver(object);
    }
}

/// A store of every `K` (without managed fields) whose events also reach `index`; a re-list
/// replaces the kind in the index whole.
fn storage_store<K>(
    client: &kube::Client,
    name: &'static str,
    index: &SharedIndex,
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: IndexedStorage,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let (reader, mut writer) = reflector::store();
    let index = Arc::clone(index);
    let mut relist: Option<ObjectSet> = None;
    drive(
        Api::<K>::all(client.clone()),
        name.to_owned(),
        health.clone(),
        shutdown.clone(),
        move |event| {
            let event = event.modify(drop_managed_fields::<K>);
            writer.apply_watcher_event(&event);
            match event {
                Event::Apply(o) => K::apply(&mut lock(&index), o),
                Event::Delete(o) => K::delete(&mut lock(&index), &o),
                Event::Init => relist = Some(ObjectSet::new()),
                Event::InitApply(o) => K::insert(relist.get_or_insert_default(), o),
                Event::InitDone => {
                    let listed = relist.take().unwrap_or_default();
                    lock(&index).replace_storage(K::KIND, listed);
                }
            }
        },
    );
    reader
}

/// Watches `api` into `writer` through `apply`, until `shutdown`.
fn spawn_pod_watcher<K>(
    api: Api<K>,
    mut writer: PodWriter,
    apply: fn(&mut PodWriter, Event<K>),
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    drive(
        api,
        "Pod".to_owned(),
        health.clone(),
        shutdown.clone(),
        move |event| apply(&mut writer, event),
    );
}

/// A gang object as the adapters read it, or `None` (logged) when it does not encode.
fn gang_object(ar: &ApiResource, o: &DynamicObject) -> Option<GangObject> {
    match serde_json::to_value(o) {
        Ok(v) => Some(GangObject::new(ar.api_version.clone(), ar.kind.clone(), v)),
        Err(e) => {
            warn!(object = %o.name_any(), error = %e, "gang object does not encode; skipped");
            None
        }
    }
}

fn dynamic_store(
    client: &kube::Client,
    ar: &ApiResource,
    index: &SharedIndex,
    health: &Arc<Health>,
    shutdown: &CancellationToken,
) -> Store<DynamicObject> {
    let mut writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let reader = writer.as_reader();
    let api = Api::<DynamicObject>::all_with(client.clone(), ar);
    let index = Arc::clone(index);
    let resource = ar.clone();
    let mut relist: Option<Vec<GangObject>> = None;
    drive(
        api,
        ar.kind.clone(),
        health.clone(),
        shutdown.clone(),
        move |event| {
            let event = event.modify(drop_managed_fields::<DynamicObject>);
            writer.apply_watcher_event(&event);
            match &event {
                Event::Apply(o) => {
                    if let Some(object) = gang_object(&resource, o) {
                        lock(&index).apply_gang_object(object);
                    }
                }
                Event::Delete(o) => {
                    let key = (
                        resource.kind.clone(),
                        o.metadata
                            .namespace
                            .clone()
                            .unwrap_or_else(|| "default".into()),
                        o.name_any(),
                        resource.api_version.clone(),
                    );
                    lock(&index).delete_gang_object(&key);
                }
                Event::Init => relist = Some(Vec::new()),
                Event::InitApply(o) => {
                    if let Some(object) = gang_object(&resource, o) {
                        relist.get_or_insert_default().push(object);
                    }
                }
                Event::InitDone => {
                    let listed = relist.take().unwrap_or_default();
                    lock(&index).replace_gang_objects(
                        &resource.api_version,
                        &resource.kind,
                        listed,
                    );
                }
            }
        },
    );
    reader
}

/// Resolves once `listed` is true, or once the node watcher is gone (at shutdown), as a
/// reflector store's wait does when its writer is dropped.
async fn nodes_listed(mut listed: tokio::sync::watch::Receiver<bool>) {
    let _ = listed.wait_for(|l| *l).await;
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
            futures::future::join_all(self.gangs.iter().map(|(_, s)| s.wait_until_ready())),
        );
        self.ready.store(true, Ordering::Release);
        info!("cluster view synced");
    }

    /// Whether every store has synced.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
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
                        warn!(object = %o.name_any(), error = %e, "gang object does not encode; skipped")
                    }
                }
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
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
