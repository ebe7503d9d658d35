//! The pod store: [`CompactPod`](crate::cluster::CompactPod)s shared by the view's snapshots,
//! and the writer that applies watch events to it and to the gang index.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use tracing::warn;

use crate::cluster::objects::{PodEntry, PodSet};
use crate::cluster::{CompactPod, GangIndex, ObjectSet, PodKey};
use crate::telemetry::Chain;

/// The pods of the cluster as [`CompactPod`]s, by namespace and name: the reading half, cheap
/// to clone. A [`PodWriter`] fills it from watcher events.
#[derive(Debug, Clone)]
pub struct PodStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub(super) struct Shared {
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

    /// Runs `f` over every pod, read-locked (keep it short: the pod writer waits meanwhile).
    pub fn with_pods<T>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &CompactPod>) -> T) -> T {
        let pods = self.read();
        f(&mut pods.iter().map(|e| e.0.as_ref()))
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
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
        compact: impl Fn(&K) -> Result<CompactPod, crate::cluster::Error>,
    ) {
        let entry = |object: &K| match compact(object) {
            Ok(pod) => Some(PodEntry(Arc::new(pod))),
            Err(e) => {
                let pod = PodKey::of(object.meta());
                warn!(%pod, error = %Chain(&e), "pod does not decode; left out");
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
