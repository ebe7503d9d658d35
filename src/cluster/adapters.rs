//! One [`Adapter`] per gang-scheduling API version. An adapter reads the objects of its
//! version into version-free [`Reading`]s (a group pods can name, with its policy); the join
//! of pods to groups and the building of [`Gang`](crate::model::Gang)s is shared
//! ([`gangs`](super::gangs)). Supporting a new version (say `scheduling.k8s.io/v1`) is one
//! new adapter added to [`ALL`].
//!
//! | | v1alpha1 (1.35) | v1alpha2 (1.36) | v1alpha3, v1beta1 (1.37) |
//! |---|---|---|---|
//! | gang object | `Workload` `spec.podGroups[i]` | `PodGroup` | `PodGroup` |
//! | pod link | `spec.workloadRef.{name, podGroup, podGroupReplicaKey}` | `spec.schedulingGroup.podGroupName` | same as 1.36 |
//! | gang name | `<workload>/<podGroup>[/<replicaKey>]` | `metadata.name` | `metadata.name` |
//! | min count | `policy.gang.minCount` | `spec.schedulingPolicy.gang.minCount` | same (now mutable) |
//! | not a gang | `policy.basic` | `spec.schedulingPolicy.basic` | same |
//! | topology | none | `spec.schedulingConstraints.topology[0].key` | same |
//! | priority | none | `spec.priority` | same |
//! | scheduled | none | condition `PodGroupScheduled` | condition `PodGroupInitiallyScheduled` |
//! | created | `metadata.creationTimestamp` | same | same |
//!
//! Without a group priority the gang takes its pods' highest `spec.priority`, else 0.
//! `CompositePodGroup` (1.37 v1alpha3, 1.38 v1beta1) defines no group pods can name: a gang
//! policy on it ([`Reading::Composite`]) makes the PodGroups naming it in
//! `spec.parentCompositePodGroupName` one [`Composite`](crate::model::Composite).

pub use super::adapter::{
    Adapter, CompositeDef, GroupDef, GroupKey, Reading, ScheduledCondition, SchedulingPolicy,
};
use super::{v1alpha1, v1alpha2, v1beta1};

/// Every adapter, most preferred first: when the same group is served in two versions
/// (1.37 serves PodGroups as v1beta1 and v1alpha3), the earlier adapter's reading wins.
pub static ALL: &[&dyn Adapter] = &[
    &v1beta1::V1Beta1,
    &v1beta1::V1Alpha3,
    &v1alpha2::V1Alpha2,
    &v1alpha1::V1Alpha1,
];

/// The adapter for `api_version` and its preference rank (0 is most preferred).
pub fn for_api_version(api_version: &str) -> Option<(usize, &'static dyn Adapter)> {
    ALL.iter()
        .copied()
        .enumerate()
        .find(|(_, a)| a.api_version() == api_version)
}
