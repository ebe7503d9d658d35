//! [`GangView`]: the gangs of one snapshot, as the from-scratch join ([`gangs`](super::gangs()))
//! and the incremental [`GangIndex`](super::GangIndex) both give it, and how long a scheduled
//! condition is trusted in it ([`SCHEDULED_GRACE_SECS`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::adapter::ScheduledCondition;
use super::idle::IdleNode;
use super::problem::Problem;
use crate::model::{Composite, Gang, GangRef, PodDemand};

/// How long a True scheduled condition is trusted while fewer than `minCount` members are
/// bound (binding, volume provisioning and attach take time after the scheduler admits a
/// group). After that the condition is stale: both `PodGroupScheduled` (v1alpha2) and
/// `PodGroupInitiallyScheduled` (v1alpha3/v1beta1) report only the first decision and stay
/// True when members are later evicted and recreated. Equal to the scheduler's 5-minute
/// gang Permit timeout.
pub const SCHEDULED_GRACE_SECS: i64 = 300;

/// Everything the planner needs to know about gangs in one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GangView {
    /// Gangs, sorted by [`GangRef`]; members sorted by pod name. A gang object no live pod
    /// names yet is a gang with no members. Shared: the incremental
    /// [`GangIndex`](super::GangIndex) hands out the gangs that did not change since its last
    /// view without copying them.
    pub gangs: Vec<Arc<Gang>>,
    /// Unbound, ungated pods in no gang (no group link, or a group with the basic policy),
    /// as `namespace/name`, sorted.
    pub ungrouped_pending: Vec<(String, PodDemand)>,
    /// Problems, sorted. Pods held out of both lists are named in the problem that holds them.
    pub problems: Vec<Problem>,
    /// CompositePodGroups with a gang policy, sorted by [`GangRef`], with their child gangs
    /// (read by the composite pass, `src/cluster/composites.rs`).
    pub composites: Vec<Composite>,
    /// Idle nodes by node group ([`idle_nodes`](super::idle_nodes)), which admission credits to
    /// pending gangs before fresh nodes. Filled only by a source that watches nodes (the
    /// cluster watchers); empty otherwise.
    pub idle: BTreeMap<String, Vec<IdleNode>>,
}

impl GangView {
    /// The composite `gang` is a child of, when it names one that has a gang policy.
    pub fn composite_of(&self, gang: &Gang) -> Option<&Composite> {
        let name = gang.composite.as_deref()?;
        self.composites
            .binary_search_by(|c| {
                (c.id.namespace.as_str(), c.id.name.as_str())
                    .cmp(&(gang.id.namespace.as_str(), name))
            })
            .ok()
            .map(|i| &self.composites[i])
    }

    /// The gang `id`, when the view has it.
    pub fn gang(&self, id: &GangRef) -> Option<&Arc<Gang>> {
        self.gangs
            .binary_search_by(|g| g.id.cmp(id))
            .ok()
            .map(|i| &self.gangs[i])
    }
}

/// Whether a scheduled condition still says the gang needs nothing: True, and either the
/// gang is whole or the condition is fresh (see [`SCHEDULED_GRACE_SECS`]).
pub(super) fn trust_scheduled(
    condition: ScheduledCondition,
    bound: usize,
    min_count: u32,
    now: i64,
) -> bool {
    let whole = u32::try_from(bound).unwrap_or(u32::MAX) >= min_count;
    let fresh = condition
        .last_transition_unix
        .is_none_or(|t| now.saturating_sub(t) < SCHEDULED_GRACE_SECS);
    condition.status && (whole || fresh)
}
