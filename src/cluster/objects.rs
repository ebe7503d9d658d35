//! [`ObjectSet`]: a plain snapshot of the Kubernetes objects the adapters read, filled from
//! multi-document YAML, JSON values, `DynamicObject`s or typed objects. No I/O.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::meta::{DEFAULT_NAMESPACE, join_path, object_name};
use super::pod::{CompactPod, PodKey, WorkloadRef};
use super::{Error, Location, Result};

/// API group of the gang-scheduling kinds.
pub(crate) const SCHEDULING_GROUP: &str = "scheduling.k8s.io";

/// Kinds of [`SCHEDULING_GROUP`] kept as [`GangObject`]s (`PriorityClass` is not one).
const GANG_KINDS: [&str; 3] = ["Workload", "PodGroup", "CompositePodGroup"];

const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// A shared [`CompactPod`] ordered (and found) by its [`PodKey`].
#[derive(Debug, Clone)]
pub(crate) struct PodEntry(pub Arc<CompactPod>);

impl PartialEq for PodEntry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for PodEntry {}

impl PartialOrd for PodEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PodEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl Borrow<PodKey> for PodEntry {
    fn borrow(&self) -> &PodKey {
        self.0.key()
    }
}

/// Pods by namespace and name. Cloning one copies pointers, not pods.
pub(crate) type PodSet = BTreeSet<PodEntry>;

/// A gang-scheduling object (`scheduling.k8s.io` `Workload`, `PodGroup`,
/// `CompositePodGroup`) of any version, kept as JSON: these kinds change shape every release
/// and only one version is in `k8s-openapi` per feature, so each adapter decodes its own.
#[derive(Debug, Clone, PartialEq)]
pub struct GangObject {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    value: Value,
}

impl GangObject {
    /// Wraps an object whose type is known (e.g. from the watcher's `ApiResource`); the
    /// namespace defaults to `default` and the name to empty when `metadata` lacks them.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>, value: Value) -> Self {
        let namespace = str_at(&value, "/metadata/namespace")
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_owned();
        let name = str_at(&value, "/metadata/name")
            .unwrap_or_default()
            .to_owned();
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace,
            name,
            value,
        }
    }

    /// `apiVersion`, e.g. `scheduling.k8s.io/v1alpha2`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// `kind`, e.g. `PodGroup`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `metadata.namespace` (`default` when absent).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name` (empty when absent).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The whole object.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Its identity: (kind, namespace, name, apiVersion). One object may be served in two
    /// versions, which are two gang objects.
    pub fn key(&self) -> GangObjectKey {
        (
            self.kind.clone(),
            self.namespace.clone(),
            self.name.clone(),
            self.api_version.clone(),
        )
    }
}

/// The identity of a [`GangObject`]: (kind, namespace, name, apiVersion). Sets iterate gang
/// objects in this order.
pub type GangObjectKey = (String, String, String, String);

/// The storage kinds demand resolution reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    /// PersistentVolumeClaim.
    Pvc,
    /// PersistentVolume.
    Pv,
    /// StorageClass.
    StorageClass,
    /// CSIDriver.
    CsiDriver,
}

/// An I/O-free snapshot of the objects the adapters read: pods (as [`CompactPod`]s, shared
/// with the watchers' store and with clones of the set), PVCs, PVs, StorageClasses,
/// CSIDrivers (`storage.k8s.io/v1`) and gang objects. Inserting an object with the same
/// identity as an earlier one replaces it. Iteration order is by namespace and name, so
/// everything derived from a set is deterministic.
#[derive(Debug, Clone, Default)]
pub struct ObjectSet {
    pods: PodSet,
    pvcs: BTreeMap<(String, String), PersistentVolumeClaim>,
    pvs: BTreeMap<String, PersistentVolume>,
    storage_classes: BTreeMap<String, StorageClass>,
    csi_drivers: BTreeMap<String, CSIDriver>,
    /// Keyed by (kind, namespace, name, apiVersion): one object may be served in two versions.
    gang_objects: BTreeMap<GangObjectKey, GangObject>,
}

impl ObjectSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads multi-document YAML of mixed kinds (`---`-separated; a `kind: List` or
    /// `<Kind>List` document contributes its `items`). Kinds the adapters do not read are
    /// skipped; empty documents are skipped (but counted in document numbers). Parsing is
    /// bounded by [`crate::yaml::OBJECTS`] (size, alias expansion, depth, node count).
    ///
    /// # Errors
    /// The first document that is not YAML (or exceeds the YAML budget), not an object, lacks `apiVersion`/`kind`, or is a
    /// kind we read that does not match its schema; the error names the 1-based document
    /// number, the list item, the kind and name, and the offending field path.
    pub fn from_yaml_documents(text: &str) -> Result<Self> {
        let documents =
            crate::yaml::documents(text, &crate::yaml::OBJECTS).map_err(|e| Error::Yaml {
                document: e.document,
                message: e.error.message,
            })?;
        let mut set = Self::new();
        for document in documents {
            if document.value.is_null() {
                continue;
            }
            let at = Location {
                document: Some(document.number),
                item: None,
            };
            set.insert_at(document.value, at)?;
        }
        Ok(set)
    }

    /// Inserts one object (or the items of a list) given as JSON, dispatching on
    /// `apiVersion` and `kind`. Returns how many objects were kept (0 for kinds we do not
    /// read). Pods inserted this way keep their 1.35 `spec.workloadRef`.
    ///
    /// # Errors
    /// As [`ObjectSet::from_yaml_documents`], without a document number.
    pub fn insert_value(&mut self, value: Value) -> Result<usize> {
        self.insert_at(value, Location::default())
    }

    /// Inserts a `kube` [`DynamicObject`](kube::core::DynamicObject), e.g. from a watcher over
    /// an `ApiResource`. Watch a 1.35 cluster's pods this way (not as typed v1.36 pods) to
    /// keep `spec.workloadRef`.
    ///
    /// # Errors
    /// As [`ObjectSet::insert_value`]; also when the object carries no type fields.
    pub fn insert_dynamic(&mut self, object: kube::core::DynamicObject) -> Result<usize> {
        let value = serde_json::to_value(&object).map_err(|e| Error::Decode {
            at: Location::default(),
            kind: object
                .types
                .as_ref()
                .map_or_else(String::new, |t| t.kind.clone()),
            name: object.metadata.name.clone().unwrap_or_default(),
            path: ".".into(),
            message: e.to_string(),
        })?;
        self.insert_value(value)
    }

    /// Inserts a typed pod, compacted (no 1.35 `spec.workloadRef`: the v1.36 type has no such
    /// field).
    pub fn insert_pod(&mut self, pod: Pod) {
        self.insert_compact_pod(Arc::new(CompactPod::from_pod(&pod)));
    }

    /// Inserts a compacted pod, shared.
    pub fn insert_compact_pod(&mut self, pod: Arc<CompactPod>) {
        self.pods.replace(PodEntry(pod));
    }

    /// Inserts a PersistentVolumeClaim.
    pub fn insert_pvc(&mut self, pvc: PersistentVolumeClaim) {
        let key = namespaced_key(
            pvc.metadata.namespace.as_deref(),
            pvc.metadata.name.as_deref(),
        );
        self.pvcs.insert(key, pvc);
    }

    /// Inserts a PersistentVolume.
    pub fn insert_pv(&mut self, pv: PersistentVolume) {
        self.pvs
            .insert(pv.metadata.name.clone().unwrap_or_default(), pv);
    }

    /// Inserts a StorageClass.
    pub fn insert_storage_class(&mut self, class: StorageClass) {
        self.storage_classes
            .insert(class.metadata.name.clone().unwrap_or_default(), class);
    }

    /// Inserts a CSIDriver.
    pub fn insert_csi_driver(&mut self, driver: CSIDriver) {
        self.csi_drivers
            .insert(driver.metadata.name.clone().unwrap_or_default(), driver);
    }

    /// Inserts a gang object of any version (unknown versions are reported by
    /// [`gangs`](super::gangs), not rejected here).
    pub fn insert_gang_object(&mut self, object: GangObject) {
        self.gang_objects.insert(object.key(), object);
    }

    /// Removes the pod `key`; returns it if it was there.
    pub(crate) fn remove_pod(&mut self, key: &PodKey) -> Option<Arc<CompactPod>> {
        self.pods.take(key).map(|e| e.0)
    }

    /// Every pod, shared (a pointer copied per pod).
    #[cfg(test)]
    pub(crate) fn pod_set(&self) -> PodSet {
        self.pods.clone()
    }

    /// The shared pod `key`.
    pub(crate) fn pod_arc(&self, key: &PodKey) -> Option<&Arc<CompactPod>> {
        self.pods.get(key).map(|e| &e.0)
    }

    /// Removes the PVC `namespace/name`.
    pub(crate) fn remove_pvc(&mut self, namespace: &str, name: &str) {
        self.pvcs.remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Removes the PV `name`.
    pub(crate) fn remove_pv(&mut self, name: &str) {
        self.pvs.remove(name);
    }

    /// Removes the StorageClass `name`.
    pub(crate) fn remove_storage_class(&mut self, name: &str) {
        self.storage_classes.remove(name);
    }

    /// Removes the CSIDriver `name`.
    pub(crate) fn remove_csi_driver(&mut self, name: &str) {
        self.csi_drivers.remove(name);
    }

    /// Removes the gang object with identity `key` ([`GangObject::key`]).
    pub(crate) fn remove_gang_object(&mut self, key: &GangObjectKey) -> Option<GangObject> {
        self.gang_objects.remove(key)
    }

    /// The gang object with identity `key`.
    pub(crate) fn gang_object(&self, key: &GangObjectKey) -> Option<&GangObject> {
        self.gang_objects.get(key)
    }

    /// Every PVC, PV, StorageClass and CSIDriver of `other`, replacing this set's.
    pub(crate) fn replace_storage_kind(&mut self, kind: StorageKind, other: &mut ObjectSet) {
        match kind {
            StorageKind::Pvc => std::mem::swap(&mut self.pvcs, &mut other.pvcs),
            StorageKind::Pv => std::mem::swap(&mut self.pvs, &mut other.pvs),
            StorageKind::StorageClass => {
                std::mem::swap(&mut self.storage_classes, &mut other.storage_classes);
            }
            StorageKind::CsiDriver => std::mem::swap(&mut self.csi_drivers, &mut other.csi_drivers),
        }
    }

    /// Pods, by namespace and name.
    pub fn pods(&self) -> impl Iterator<Item = &CompactPod> {
        self.pods.iter().map(|e| &*e.0)
    }

    /// The pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&CompactPod> {
        let key = PodKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.pods.get(&key).map(|e| &*e.0)
    }

    /// Gang objects, by kind, namespace, name and apiVersion.
    pub fn gang_objects(&self) -> impl Iterator<Item = &GangObject> {
        self.gang_objects.values()
    }

    /// The gang objects of `kind`, of any version, in key order.
    pub fn gang_objects_of_kind<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a GangObject> + 'a {
        let from = (kind.to_owned(), String::new(), String::new(), String::new());
        self.gang_objects
            .range(from..)
            .take_while(move |(k, _)| k.0 == kind)
            .map(|(_, o)| o)
    }

    /// The PVC `namespace/name`.
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.pvcs.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// The PV `name`.
    pub fn pv(&self, name: &str) -> Option<&PersistentVolume> {
        self.pvs.get(name)
    }

    /// The StorageClass `name`.
    pub fn storage_class(&self, name: &str) -> Option<&StorageClass> {
        self.storage_classes.get(name)
    }

    /// The default StorageClass, as the `DefaultStorageClass` admission plugin picks it: the
    /// newest class annotated `storageclass.kubernetes.io/is-default-class: "true"` (ties go
    /// to the first name).
    pub fn default_storage_class(&self) -> Option<&StorageClass> {
        self.storage_classes
            .values()
            .filter(|c| {
                let annotations = c.metadata.annotations.as_ref();
                DEFAULT_CLASS_ANNOTATIONS.iter().any(|key| {
                    annotations
                        .and_then(|a| a.get(*key))
                        .is_some_and(|v| v == "true")
                })
            })
            .min_by_key(|c| {
                let created = c
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(i64::MIN, |t| t.0.as_second());
                std::cmp::Reverse(created)
            })
    }

    /// The CSIDriver `name`.
    pub fn csi_driver(&self, name: &str) -> Option<&CSIDriver> {
        self.csi_drivers.get(name)
    }

    /// A set holding `pods` (shared, not copied) and nothing else.
    pub(crate) fn with_pods(pods: PodSet) -> Self {
        Self {
            pods,
            ..Self::default()
        }
    }

    fn insert_at(&mut self, value: Value, at: Location) -> Result<usize> {
        if !value.is_object() {
            return Err(Error::NotAnObject {
                at,
                found: json_type(&value),
            });
        }
        let name = display_name(&value);
        let missing = |field| Error::MissingTypeMeta {
            at,
            field,
            name: name.clone(),
        };
        let api_version = str_at(&value, "/apiVersion")
            .ok_or_else(|| missing("apiVersion"))?
            .to_owned();
        let kind = str_at(&value, "/kind")
            .ok_or_else(|| missing("kind"))?
            .to_owned();
        if let Some(items) = value.get("items").and_then(Value::as_array)
            && kind.ends_with("List")
        {
            return self.insert_items(items, &api_version, &kind, at);
        }
        let (group, _version) = api_version.split_once('/').unwrap_or(("", &api_version));
        match (api_version.as_str(), kind.as_str()) {
            ("v1", "Pod") => {
                let workload_ref = match value.pointer("/spec/workloadRef") {
                    None | Some(Value::Null) => None,
                    Some(r) => Some(decode_at::<WorkloadRef>(
                        r.clone(),
                        at,
                        &kind,
                        &name,
                        "spec.workloadRef",
                    )?),
                };
                let pod = decode::<Pod>(value, at, &kind, &name)?;
                let compact = CompactPod::from_pod_and_ref(&pod, workload_ref.as_ref());
                self.insert_compact_pod(Arc::new(compact));
            }
            ("v1", "PersistentVolumeClaim") => {
                self.insert_pvc(decode(value, at, &kind, &name)?);
            }
            ("v1", "PersistentVolume") => self.insert_pv(decode(value, at, &kind, &name)?),
            ("storage.k8s.io/v1", "StorageClass") => {
                self.insert_storage_class(decode(value, at, &kind, &name)?);
            }
            ("storage.k8s.io/v1", "CSIDriver") => {
                self.insert_csi_driver(decode(value, at, &kind, &name)?);
            }
            _ if group == SCHEDULING_GROUP && GANG_KINDS.contains(&kind.as_str()) => {
                self.insert_gang_object(GangObject::new(api_version, kind, value));
            }
            _ => return Ok(0),
        }
        Ok(1)
    }

    /// Items of `List` (typed as written) or `<Kind>List` (items may omit their type: the
    /// API server leaves it out, so it is taken from the list).
    fn insert_items(
        &mut self,
        items: &[Value],
        api_version: &str,
        list_kind: &str,
        at: Location,
    ) -> Result<usize> {
        let item_kind = list_kind.strip_suffix("List").unwrap_or_default();
        let mut kept = 0;
        for (index, item) in items.iter().enumerate() {
            let mut item = item.clone();
            if let (Value::Object(map), false) = (&mut item, item_kind.is_empty()) {
                map.entry("apiVersion")
                    .or_insert_with(|| Value::String(api_version.to_owned()));
                map.entry("kind")
                    .or_insert_with(|| Value::String(item_kind.to_owned()));
            }
            let item_at = Location {
                item: Some(u32::try_from(index).unwrap_or(u32::MAX)),
                ..at
            };
            kept += self.insert_at(item, item_at)?;
        }
        Ok(kept)
    }
}

fn namespaced_key(namespace: Option<&str>, name: Option<&str>) -> (String, String) {
    (
        namespace.unwrap_or(DEFAULT_NAMESPACE).to_owned(),
        name.unwrap_or_default().to_owned(),
    )
}

/// The string at a JSON pointer, if it is one.
pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// `namespace/name`, `name` or `<unnamed>` (also for an empty name), for messages.
fn display_name(value: &Value) -> String {
    object_name(
        str_at(value, "/metadata/namespace"),
        str_at(value, "/metadata/name"),
    )
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn decode<T: DeserializeOwned>(value: Value, at: Location, kind: &str, name: &str) -> Result<T> {
    decode_at(value, at, kind, name, "")
}

/// Decodes `value`, found at dotted `prefix` inside the object, reporting the full field path.
fn decode_at<T: DeserializeOwned>(
    value: Value,
    at: Location,
    kind: &str,
    name: &str,
    prefix: &str,
) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = join_path(prefix, &e.path().to_string());
        Error::Decode {
            at,
            kind: kind.to_owned(),
            name: name.to_owned(),
            path,
            message: e.into_inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests;
