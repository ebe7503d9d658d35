//! The bridge from Kubernetes objects to the internal gang model: an I/O-free snapshot of the
//! objects we read ([`ObjectSet`]), one adapter per gang-scheduling API version
//! ([`adapters`]), the join of pods to their gangs ([`gangs`]) and per-pod resource demand as
//! the scheduler computes it ([`demand`]), a Node's readiness ([`is_node_ready`]), and the
//! gangs Cluster Autoscaler cannot see because the scheduler recorded no verdict on their
//! members ([`unseen()`]). [`GangIndex`] keeps the same gang view up to date as watch events
//! arrive, so a decision does not rebuild it from every pod. How far a scale-up's gangs have come is computed from these objects
//! in `scaleup`. Depends on `model`, `k8s-openapi` and serde; it does no I/O except in
//! [`watch`], whose watchers fill an [`ObjectSet`]. Pods are kept as [`CompactPod`]s, a few
//! hundred bytes each, shared between the watchers and snapshots.
//!
//! | Kubernetes | Group version | Gang object | Pod link |
//! |---|---|---|---|
//! | 1.35 | `scheduling.k8s.io/v1alpha1` | `Workload.spec.podGroups[]` | `spec.workloadRef` |
//! | 1.36 | `scheduling.k8s.io/v1alpha2` | `PodGroup` | `spec.schedulingGroup.podGroupName` |
//! | 1.37 | `scheduling.k8s.io/v1beta1`, `v1alpha3` | `PodGroup` (`CompositePodGroup` in v1alpha3) | `spec.schedulingGroup.podGroupName` |
//! | 1.38 | `scheduling.k8s.io/v1beta1` | `PodGroup`, `CompositePodGroup` | `spec.schedulingGroup.podGroupName` |
//!
//! A CompositePodGroup with a gang policy becomes a [`Composite`](crate::model::Composite) of
//! the gangs naming it (`spec.parentCompositePodGroupName`), in [`GangView::composites`].

mod adapter;
pub mod adapters;
mod composites;
mod demand;
mod gangs;
mod idle;
mod index;
mod meta;
mod node;
mod objects;
mod pod;
mod problem;
mod unseen;
mod v1alpha1;
mod v1alpha2;
mod v1beta1;
mod view;
pub mod watch;

#[cfg(test)]
mod tests;

use std::fmt;

pub(crate) use demand::attachable_claims;
pub use demand::{daemon_set_demand, demand};
pub use gangs::gangs;
pub(crate) use gangs::{gang_name, link};
pub use idle::{IDLE_GRACE_SECS, IdleNode, idle_nodes};
pub use index::GangIndex;
pub use node::{NodeSummary, NodeTable, is_node_ready};
pub use objects::{GangObject, GangObjectKey, ObjectSet, StorageKind};
pub use pod::{CompactPod, DeferralMarks, PodKey, PodLink};
pub use problem::{ClaimCause, Issue, ObjectRef, Problem};
pub use unseen::{Unseen, unseen};
pub use view::{GangView, SCHEDULED_GRACE_SECS};
pub use watch::{ClusterView, PodStore, PodWriter, SharedIndex, Stale, WatchError};

/// Where in the input an object came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Location {
    /// 1-based YAML document number, when the object came from a multi-document text.
    pub document: Option<u32>,
    /// 0-based index in a `List`'s `items`, when the object was a list item.
    pub item: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.document, self.item) {
            (Some(d), Some(i)) => write!(f, "document {d} item {i}"),
            (Some(d), None) => write!(f, "document {d}"),
            (None, Some(i)) => write!(f, "item {i}"),
            (None, None) => f.write_str("object"),
        }
    }
}

/// Errors reading Kubernetes objects into an [`ObjectSet`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A YAML document is not valid YAML.
    #[error("document {document}: parsing yaml: {message}")]
    Yaml {
        /// 1-based document number.
        document: u32,
        /// Parser message.
        message: String,
    },
    /// A document or list item is not a mapping.
    #[error("{at}: expected an object, found {found}")]
    NotAnObject {
        /// Where.
        at: Location,
        /// What was found instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// An object lacks `apiVersion` or `kind`.
    #[error("{at}: object {name} has no {field}")]
    MissingTypeMeta {
        /// Where.
        at: Location,
        /// `apiVersion` or `kind`.
        field: &'static str,
        /// `namespace/name` of the object, or `<unnamed>`.
        name: String,
    },
    /// An object of a kind the adapters read does not match its schema.
    #[error("{at}: decoding {kind} {name}: {path}: {message}")]
    Decode {
        /// Where.
        at: Location,
        /// Kind of the object.
        kind: String,
        /// `namespace/name` of the object, or `<unnamed>`.
        name: String,
        /// Dotted path of the offending field, e.g. `spec.containers[0].resources`.
        path: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Yaml { .. } => "yaml",
            Self::NotAnObject { .. } => "not_an_object",
            Self::MissingTypeMeta { .. } => "missing_type_meta",
            Self::Decode { .. } => "decode",
        }
    }
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
