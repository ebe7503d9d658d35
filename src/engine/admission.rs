//! Gang admission inside `NodeGroupIncreaseSize`: reads the current gangs from a
//! [`GangSource`], asks the pure planner for a decision, and remembers the nodes requested for
//! each admitted gang (in flight) so that the next call does not ask for them again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::cluster::{self, ClusterView, GangView, ObjectSet};
use crate::model::{GangRef, NodeGroupId, NodeGroupSpec};
use crate::planner::{self, AdmissionInput, Decision, NodeShape, Policy};

/// How long nodes requested for a gang count as in flight before they are forgotten (CA's
/// default max-node-provision-time).
pub const IN_FLIGHT_TTL_SECS: i64 = 15 * 60;

/// Where the current gangs come from.
pub trait GangSource: Send + Sync {
    /// The gangs and ungrouped pending pods now, or `None` while the source has not synced.
    fn view(&self, now_unix: i64) -> Option<GangView>;
}

impl GangSource for ClusterView {
    fn view(&self, now_unix: i64) -> Option<GangView> {
        self.is_ready()
            .then(|| cluster::gangs(&self.snapshot(), now_unix))
    }
}

/// A fixed set of objects (the `plan` command and tests).
#[derive(Debug)]
pub struct StaticObjects(pub ObjectSet);

impl GangSource for StaticObjects {
    fn view(&self, now_unix: i64) -> Option<GangView> {
        Some(cluster::gangs(&self.0, now_unix))
    }
}

#[derive(Debug, Clone)]
struct InFlight {
    group: NodeGroupId,
    nodes: u32,
    since_unix: i64,
}

/// Admission state: the policy, the gang source and the in-flight ledger.
pub struct Admission {
    policy: Policy,
    source: Arc<dyn GangSource>,
    in_flight: Mutex<BTreeMap<GangRef, InFlight>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("policy", &self.policy)
            .finish()
    }
}

impl Admission {
    /// Admission with `policy` over `source`.
    pub fn new(policy: Policy, source: Arc<dyn GangSource>) -> Self {
        Self {
            policy,
            source,
            in_flight: Mutex::new(BTreeMap::new()),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Decides an increase of `group` (at `target`) by CA's `ca_delta`; `None` while the gang
    /// source has not synced.
    pub fn decide(
        &self,
        group: &NodeGroupSpec,
        gpu_label: &str,
        target: u32,
        ca_delta: u32,
        now_unix: i64,
    ) -> Option<Decision> {
        let view = self.source.view(now_unix)?;
        let shape = NodeShape::from_group(group, gpu_label);
        let in_flight = self.in_flight_for(&view, &group.id, now_unix);
        let ungrouped_nodes = shape.as_ref().map_or(0, |shape| {
            let hostable: Vec<_> = view
                .ungrouped_pending
                .iter()
                .filter(|(name, d)| planner::check_pod(name, d, shape).is_ok())
                .map(|(_, d)| d.clone())
                .collect();
            planner::nodes_for_pods(&hostable, shape).unwrap_or(0)
        });
        Some(planner::admit(&AdmissionInput {
            group: &group.id,
            shape: shape.as_ref(),
            max_size: group.max_size,
            target,
            ca_delta,
            policy: self.policy,
            gangs: &view.gangs,
            in_flight: &in_flight,
            ungrouped_nodes,
        }))
    }

    /// Remembers the nodes an applied decision requested for each admitted gang.
    pub fn record(&self, decision: &Decision, now_unix: i64) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for a in &decision.admitted {
            let entry = ledger.entry(a.gang.clone()).or_insert_with(|| InFlight {
                group: decision.group.clone(),
                nodes: 0,
                since_unix: now_unix,
            });
            entry.nodes = entry.nodes.saturating_add(a.nodes);
            entry.since_unix = now_unix;
        }
    }

    /// Drops ledger entries of gangs that are no longer pending or are too old, and returns the
    /// nodes in flight for `group`'s gangs.
    fn in_flight_for(
        &self,
        view: &GangView,
        group: &NodeGroupId,
        now_unix: i64,
    ) -> BTreeMap<GangRef, u32> {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ledger.retain(|gang, f| {
            now_unix - f.since_unix < IN_FLIGHT_TTL_SECS
                && view.gangs.iter().any(|g| &g.id == gang && g.is_pending())
        });
        ledger
            .iter()
            .filter(|(_, f)| &f.group == group)
            .map(|(g, f)| (g.clone(), f.nodes))
            .collect()
    }
}
