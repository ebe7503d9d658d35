//! The watchers: one reflector store per kind, each driven with a retrying backoff and
//! reporting its failures and relists to the view's health.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::pods::{PodWriter, SharedIndex, lock};
use super::{Health, drop_managed_fields};
use crate::cluster::{GangIndex, GangObject, NodeTable, ObjectSet, StorageKind};
use crate::telemetry::Chain;

/// The retry delays of a failing watch: 0.5 s doubling to at most [`Retry::MAX`], back to the
/// start after an event is received.
#[derive(Debug, Clone, Copy)]
pub(super) struct Retry {
    next: Duration,
}

impl Retry {
    const FIRST: Duration = Duration::from_millis(500);
    /// Kept short so a view is current again soon after the API server returns.
    const MAX: Duration = Duration::from_secs(10);

    pub(super) fn new() -> Self {
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
pub(super) fn watch_stream<K>(api: &Api<K>) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
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
pub(super) fn drive<K>(
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
                                warn!(error = %Chain(&e), "watch failed; answering from the last objects until a new list completes");
                                stream = watch_stream(&api);
                            } else {
                                debug!(error = %Chain(&e), "watch still failing; retrying with backoff");
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
pub(super) fn typed_store<K>(
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
pub(super) fn node_watcher(
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
pub(super) trait IndexedStorage:
    Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
    const KIND: StorageKind;
    fn apply(index: &mut GangIndex, object: Self);
    fn delete(index: &mut GangIndex, object: &Self);
    fn insert(set: &mut ObjectSet, object: Self);
}

pub(super) fn meta_name<K: Resource>(o: &K) -> &str {
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
pub(super) fn storage_store<K>(
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
pub(super) fn spawn_pod_watcher<K>(
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
pub(super) fn gang_object(ar: &ApiResource, o: &DynamicObject) -> Option<GangObject> {
    match serde_json::to_value(o) {
        Ok(v) => Some(GangObject::new(ar.api_version.clone(), ar.kind.clone(), v)),
        Err(e) => {
            warn!(object = %o.name_any(), error = %Chain(&e), "gang object does not encode; skipped");
            None
        }
    }
}

pub(super) fn dynamic_store(
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
pub(super) async fn nodes_listed(mut listed: tokio::sync::watch::Receiver<bool>) {
    let _ = listed.wait_for(|l| *l).await;
}
