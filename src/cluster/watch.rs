//! Watchers and reflector stores that keep a lean copy of the objects the adapters read: pods,
//! PVCs, PVs, StorageClasses, CSIDrivers and the gang objects of the scheduling API version the
//! cluster serves (found by discovery). [`ClusterView::snapshot`] turns the stores into an
//! [`ObjectSet`], the only bridge to the pure adapters and planner.
//!
//! Memory: every object loses `managedFields`; pods also lose everything the adapters do not read
//! (images, commands, env, probes, mounts, container statuses, annotations), see [`slim_pod`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, PodStatus};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::{GangObject, ObjectSet, adapters};

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

/// Pods are kept either typed (lean) or, on clusters whose pod link field the typed Pod lacks
/// (`spec.workloadRef` on 1.35), as dynamic objects.
enum PodStore {
    Typed(Store<Pod>),
    Dynamic(Store<DynamicObject>),
}

/// A live, lean view of the cluster objects gang admission needs.
pub struct ClusterView {
    pods: PodStore,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    drivers: Store<CSIDriver>,
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

/// Drops what no adapter reads from a pod, keeping scheduling-relevant fields only.
pub fn slim_pod(pod: &mut Pod) {
    let meta = pod.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.image = None;
            c.command = None;
            c.args = None;
            c.env = None;
            c.env_from = None;
            c.ports = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.lifecycle = None;
            c.security_context = None;
        }
        spec.ephemeral_containers = None;
        spec.security_context = None;
        spec.readiness_gates = None;
        spec.dns_config = None;
        spec.host_aliases = None;
        spec.image_pull_secrets = None;
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            phase: status.phase.take(),
            conditions: status.conditions.take(),
            nominated_node_name: status.nominated_node_name.take(),
            ..PodStatus::default()
        };
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
    tokio::spawn(
        async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => warn!(error = %e, "watch error; retrying with backoff"),
                        None => return,
                    },
                }
            }
        }
        .instrument(info_span!("watch", kind = name)),
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
    let shutdown = shutdown.clone();
    let kind = ar.kind.clone();
    tokio::spawn(
        async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => warn!(error = %e, "watch error; retrying with backoff"),
                        None => return,
                    },
                }
            }
        }
        .instrument(info_span!("watch", kind = %kind)),
    );
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
        let pods = if gang_api.as_deref() == Some("scheduling.k8s.io/v1alpha1") {
            let ar = ApiResource::erase::<Pod>(&());
            PodStore::Dynamic(dynamic_store(&client, &ar, shutdown))
        } else {
            PodStore::Typed(typed_store(&client, "Pod", slim_pod, shutdown))
        };
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
            gangs,
            gang_api,
            ready: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Waits until every store has its initial list.
    pub async fn wait_ready(&self) {
        let pods = async {
            match &self.pods {
                PodStore::Typed(s) => s.wait_until_ready().await,
                PodStore::Dynamic(s) => s.wait_until_ready().await,
            }
        };
        let _ = tokio::join!(
            pods,
            self.pvcs.wait_until_ready(),
            self.pvs.wait_until_ready(),
            self.classes.wait_until_ready(),
            self.drivers.wait_until_ready(),
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

    /// A point-in-time copy of the stores for the adapters.
    pub fn snapshot(&self) -> ObjectSet {
        let mut set = ObjectSet::new();
        match &self.pods {
            PodStore::Typed(s) => {
                for p in s.state() {
                    set.insert_pod((*p).clone());
                }
            }
            PodStore::Dynamic(s) => {
                for p in s.state() {
                    let mut pod = (*p).clone();
                    // Watch list items usually come without apiVersion/kind.
                    pod.types.get_or_insert_with(|| kube::api::TypeMeta {
                        api_version: "v1".to_owned(),
                        kind: "Pod".to_owned(),
                    });
                    if let Err(e) = set.insert_dynamic(pod) {
                        warn!(pod = %p.name_any(), error = %e, "pod does not decode; skipped");
                    }
                }
            }
        }
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
