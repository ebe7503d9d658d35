//! Gang admission inside `NodeGroupIncreaseSize`: reads the current gangs from a
//! [`GangSource`], asks the pure planner for a decision, and remembers the nodes requested for
//! each admitted gang (in flight) so that the next call does not ask for them again.
//!
//! **Repair.** A failed instance requested for a gang is charged to that gang alone
//! ([`Admission::charge_failed`]): its nodes in flight drop by one, so the next call on the
//! same group admits exactly the missing nodes, as a repair of the scale-up the instance was
//! requested for ([`AdmittedGang::repair_of`](crate::planner::AdmittedGang::repair_of)).
//! Other gangs' nodes in flight stay counted. A gang all of whose nodes in flight failed no
//! longer counts as in flight elsewhere, so another group may admit it afresh.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::cluster::{self, ClusterView, GangView, ObjectSet, Stale};
use crate::model::reservation::DaemonSetDemand;
use crate::model::{Gang, GangRef, NodeGroupId, NodeGroupSpec};
use crate::planner::{
    self, AdmissionInput, CompositeInput, CompositePlan, Decision, GroupSlot, NodeShape, Order,
    Policy,
};

/// How long nodes requested for a gang count as in flight before they are forgotten (CA's
/// default max-node-provision-time).
pub const IN_FLIGHT_TTL_SECS: i64 = 15 * 60;

/// Why a [`GangSource`] has no view to decide from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// The source has not synced yet.
    NotSynced,
    /// The source may be behind the cluster (its watches failed and have not listed again).
    Stale(Stale),
}

/// Where the current gangs come from.
pub trait GangSource: Send + Sync {
    /// The gangs and ungrouped pending pods now.
    ///
    /// # Errors
    /// [`Unavailable`] while the source has not synced, or may be behind the cluster.
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable>;

    /// Every DaemonSet's placement (node reservation is off for a group one of them would run
    /// on without tolerating the reservation taint); `None` when the source does not watch
    /// DaemonSets.
    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>>;
}

impl GangSource for ClusterView {
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        if !self.is_ready() {
            return Err(Unavailable::NotSynced);
        }
        if let Some(stale) = self.stale() {
            return Err(Unavailable::Stale(stale));
        }
        let mut view = self.gang_view(now_unix);
        view.idle = self.idle_nodes(now_unix);
        Ok(view)
    }

    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        self.daemon_set_demands()
    }
}

/// The idle Ready nodes of `group` in `view` that its pods can use: those whose hard taints
/// its template has too (a node tainted by something else, say a failing GPU, repels them).
/// None on a group without GPUs: idle there means no pod with an extended-resource request,
/// which says nothing of a CPU node's free CPU and memory.
fn idle_of(view: &GangView, group: &NodeGroupSpec) -> u32 {
    if group.gpu.is_none() {
        return 0;
    }
    let usable = view.idle.get(group.id.as_str()).map_or(0, |nodes| {
        nodes
            .iter()
            .filter(|n| {
                n.hard_taints
                    .iter()
                    .all(|k| group.taints.iter().any(|t| &t.key == k))
            })
            .count()
    });
    u32::try_from(usable).unwrap_or(u32::MAX)
}

/// Each group with its shape and target size, as the planner's slots.
fn group_slots<'a>(shapes: &'a [(&NodeGroupSpec, Option<NodeShape>, u32)]) -> Vec<GroupSlot<'a>> {
    shapes
        .iter()
        .map(|(g, shape, target)| GroupSlot {
            id: &g.id,
            shape: shape.as_ref(),
            target: *target,
            max_size: g.max_size,
        })
        .collect()
}

/// A fixed set of objects (the `plan` command and tests).
#[derive(Debug)]
pub struct StaticObjects(pub ObjectSet);

impl GangSource for StaticObjects {
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        Ok(cluster::gangs(&self.0, now_unix))
    }

    /// A fixed object set holds no DaemonSets.
    fn daemon_sets(&self) -> Option<Vec<DaemonSetDemand>> {
        Some(Vec::new())
    }
}

#[derive(Debug, Clone)]
struct InFlight {
    nodes: u32,
    since_unix: i64,
    /// Failed instances charged to the gang, by id, each with the scale-up it was requested
    /// for.
    failed: BTreeMap<String, String>,
}

impl InFlight {
    /// Nodes requested and not failed.
    fn live(&self) -> u32 {
        self.nodes
            .saturating_sub(u32::try_from(self.failed.len()).unwrap_or(u32::MAX))
    }

    /// The scale-up a repair replaces failed instances of: the latest one with a failure.
    fn repair_of(&self) -> Option<&String> {
        self.failed.values().max()
    }
}

/// Nodes requested for a gang before a restart, as the audit log has them (see
/// [`Admission::resume`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// The gang.
    pub gang: GangRef,
    /// The group its nodes were requested on.
    pub group: NodeGroupId,
    /// Nodes requested for it, repairs included.
    pub nodes: u32,
    /// When they were last requested, unix seconds.
    pub since_unix: i64,
    /// Its failed instances, by id, with the scale-up each was requested for.
    pub failed: BTreeMap<String, String>,
}

/// Admission state: the policy, the gang source and the in-flight ledger.
pub struct Admission {
    policy: Policy,
    order: Order,
    source: Arc<dyn GangSource>,
    /// Per gang and group: a gang spread over several groups has one entry on each.
    in_flight: Mutex<BTreeMap<(GangRef, NodeGroupId), InFlight>>,
    /// Whether a gang short on another group is repaired where CA asks (with deferral on).
    repair_where_asked: bool,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("policy", &self.policy)
            .field("order", &self.order)
            .finish()
    }
}

impl Admission {
    /// Admission with `policy`, candidates of one priority in `order`, over `source`.
    pub fn new(policy: Policy, order: Order, source: Arc<dyn GangSource>) -> Self {
        Self {
            policy,
            order,
            source,
            in_flight: Mutex::new(BTreeMap::new()),
            repair_where_asked: false,
        }
    }

    /// Repairs a gang some of whose nodes on another group failed on the group CA asks, with
    /// only its missing nodes (see [`planner::AdmissionInput::repair_where_asked`]): for use
    /// with deferral, which keeps the gang out of CA's later asks once it is covered again.
    #[must_use]
    pub fn with_repair_where_asked(mut self, on: bool) -> Self {
        self.repair_where_asked = on;
        self
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The DaemonSets, sorted, that run on `group`'s nodes without tolerating the reservation
    /// taint (see [`planner::blocking_daemon_sets`]); none for a group without a template;
    /// `None` when the source does not watch DaemonSets.
    pub fn blocking_daemon_sets(
        &self,
        group: &NodeGroupSpec,
        gpu_label: &str,
    ) -> Option<Vec<String>> {
        let daemon_sets = self.source.daemon_sets()?;
        let Some(shape) = NodeShape::from_group(group, gpu_label) else {
            return Some(Vec::new());
        };
        Some(
            planner::blocking_daemon_sets(&shape, &daemon_sets)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The gang view one decision is made from ([`Admission::decide_in`]).
    ///
    /// # Errors
    /// [`Unavailable`] while the gang source has not synced or may be behind the cluster.
    pub fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        self.source.view(now_unix)
    }

    /// Whether an increase of `group` (at `target`) may take shares of other groups: for a
    /// composite in `view` (see [`planner::considers_composites`]), for a pending gang
    /// without a topology key that needs more nodes than the group has headroom (see
    /// [`planner::spread`]), or for a gang whose nodes are in flight on another group only
    /// (admission counts them when that group hosts it alike, see
    /// [`planner::AdmissionInput::elsewhere`]). Only then does the decision need
    /// the other groups' target sizes (`others` of [`Admission::decide_in`]).
    pub fn needs_other_groups(
        &self,
        view: &GangView,
        group: &NodeGroupSpec,
        gpu_label: &str,
        target: u32,
    ) -> bool {
        if self.policy == Policy::Off {
            return false;
        }
        let Some(shape) = NodeShape::from_group(group, gpu_label) else {
            return false;
        };
        let headroom = group.max_size.saturating_sub(target);
        let spreads = view.gangs.iter().any(|g| {
            g.is_pending()
                && g.topology_key.is_none()
                && g.composite.is_none()
                && planner::fit::fit_counts(g, &shape).is_ok_and(|(all, _)| all > headroom)
        });
        spreads
            || self.in_flight_elsewhere(&group.id)
            || (!view.composites.is_empty()
                && planner::considers_composites(&view.composites, &view.gangs, &shape))
    }

    /// Whether a gang has live nodes in flight on a group other than `group` and none on
    /// `group`: whether they cover it there is for admission to compare, on that group's
    /// shape.
    fn in_flight_elsewhere(&self, group: &NodeGroupId) -> bool {
        let ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let here: std::collections::BTreeSet<&GangRef> = ledger
            .keys()
            .filter(|(_, on)| on == group)
            .map(|(gang, _)| gang)
            .collect();
        ledger
            .iter()
            .any(|((gang, on), f)| on != group && f.live() > 0 && !here.contains(gang))
    }

    /// [`Admission::decide_in`] a view read now.
    ///
    /// # Errors
    /// [`Unavailable`] while the gang source has not synced or may be behind the cluster: a
    /// decision from a partial or stale view could add nodes for gangs that no longer need
    /// them, or miss gangs that do.
    pub fn decide(
        &self,
        group: &NodeGroupSpec,
        gpu_label: &str,
        target: u32,
        ca_delta: u32,
        others: &[(&NodeGroupSpec, u32)],
        now_unix: i64,
    ) -> Result<(Decision, Vec<Decision>), Unavailable> {
        let view = self.view(now_unix)?;
        Ok(self.decide_in(&view, group, gpu_label, target, ca_delta, others, now_unix))
    }

    /// Decides an increase of `group` (at `target`) by CA's `ca_delta` from `view`, with the other groups
    /// composites may take a share of (`others`, each with its target size, in configuration
    /// order; empty when no composite is pending). Gives the decision for `group` and one per
    /// other group that adds nodes for a composite admitted here.
    #[expect(
        clippy::too_many_arguments,
        reason = "one decision's inputs, each named"
    )]
    pub fn decide_in(
        &self,
        view: &GangView,
        group: &NodeGroupSpec,
        gpu_label: &str,
        target: u32,
        ca_delta: u32,
        others: &[(&NodeGroupSpec, u32)],
        now_unix: i64,
    ) -> (Decision, Vec<Decision>) {
        let shape = NodeShape::from_group(group, gpu_label);
        let (in_flight, elsewhere) = self.in_flight_for(view, &group.id, now_unix);
        let repairs = self.repairs_on(&group.id);
        // Composites first: their children never go through the per-group admission.
        let mut shapes: Vec<(&NodeGroupSpec, Option<NodeShape>, u32)> =
            std::iter::once((group, shape.clone(), target))
                .chain(
                    others
                        .iter()
                        .filter(|(g, _)| g.id != group.id)
                        .map(|(g, t)| (*g, NodeShape::from_group(g, gpu_label), *t)),
                )
                .collect();
        // Configuration order (groups are kept sorted by id).
        shapes.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        let slots = group_slots(&shapes);
        let ledger = self.ledger();
        let composites_on = self.policy != Policy::Off && !view.composites.is_empty();
        let plan = if !composites_on {
            CompositePlan::default()
        } else {
            planner::place_composites(&CompositeInput {
                asked: &group.id,
                groups: &slots,
                composites: &view.composites,
                gangs: &view.gangs,
                in_flight: &ledger,
            })
        };
        let here = plan.nodes_on(&group.id);
        let singles: Vec<Arc<Gang>>;
        let gangs: &[Arc<Gang>] = if composites_on {
            singles = view
                .gangs
                .iter()
                .filter(|g| !plan.children.contains(&g.id))
                .cloned()
                .collect();
            &singles
        } else {
            &view.gangs
        };
        let deferred_composites = plan.deferred_gangs();
        let ungrouped_nodes = shape.as_ref().map_or(0, |shape| {
            let hostable: Vec<_> = view
                .ungrouped_pending
                .iter()
                .filter(|(name, d)| planner::check_pod(name, d, shape).is_ok())
                .map(|(_, d)| d.clone())
                .collect();
            planner::nodes_for_pods(&hostable, shape).unwrap_or(0)
        });
        let spill = if self.policy == Policy::Off {
            Vec::new()
        } else {
            planner::spill_of(
                &group.id,
                &slots,
                |id| {
                    shapes
                        .iter()
                        .find(|(g, _, _)| &g.id == id)
                        .map_or(0, |(g, _, _)| idle_of(view, g))
                },
                |id| plan.nodes_on(id),
            )
        };
        let mut base = planner::admit(&AdmissionInput {
            group: &group.id,
            shape: shape.as_ref(),
            max_size: group.max_size,
            target: target.saturating_add(here),
            ca_delta: ca_delta.saturating_sub(here),
            policy: self.policy,
            order: self.order,
            gangs,
            in_flight: &in_flight,
            elsewhere: &elsewhere,
            ungrouped_nodes,
            idle_nodes: idle_of(view, group),
            spill: &spill,
            deferred_composites: &deferred_composites,
            repair_where_asked: self.repair_where_asked,
        });
        if self.policy != Policy::Off {
            base.mark_repairs(&repairs);
        }
        let spread = planner::spread_shares(&base, &spill);
        let (decision, mut companions) = planner::combine(base, &plan, &slots, ca_delta);
        companions.extend(spread);
        (decision, companions)
    }

    /// The pending gangs of `view` to keep out of CA's scale-up now (see
    /// [`planner::deferrals`]), over every configured group, each with its target size.
    pub fn deferrals(
        &self,
        view: &GangView,
        groups: &[(&NodeGroupSpec, u32)],
        gpu_label: &str,
    ) -> Vec<planner::Deferral> {
        let shapes: Vec<(&NodeGroupSpec, Option<NodeShape>, u32)> = groups
            .iter()
            .map(|(g, t)| (*g, NodeShape::from_group(g, gpu_label), *t))
            .collect();
        let slots = group_slots(&shapes);
        let ledger = self.ledger();
        planner::deferrals(&planner::DeferralInput {
            groups: &slots,
            gangs: &view.gangs,
            in_flight: &ledger,
            policy: self.policy,
            order: self.order,
            idle: &groups
                .iter()
                .map(|(g, _)| (g.id.clone(), idle_of(view, g)))
                .collect(),
        })
    }

    /// The in-flight ledger as composite admission and deferral read it: per gang, its live
    /// nodes on every group, with the group holding most of them (the first by id on a tie).
    fn ledger(&self) -> BTreeMap<GangRef, (NodeGroupId, u32)> {
        let ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out: BTreeMap<GangRef, (NodeGroupId, u32, u32)> = BTreeMap::new();
        for ((gang, group), f) in ledger.iter() {
            let live = f.live();
            let e = out
                .entry(gang.clone())
                .or_insert_with(|| (group.clone(), 0, live));
            e.1 = e.1.saturating_add(live);
            if live > e.2 {
                (e.0, e.2) = (group.clone(), live);
            }
        }
        out.into_iter()
            .map(|(g, (group, total, _))| (g, (group, total)))
            .collect()
    }

    /// The gangs with failed instances on `group`, each with the scale-up a repair is for.
    fn repairs_on(&self, group: &NodeGroupId) -> BTreeMap<GangRef, String> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|((_, on), _)| on == group)
            .filter_map(|((g, _), f)| Some((g.clone(), f.repair_of()?.clone())))
            .collect()
    }

    /// Remembers nodes requested before a restart, for each gang whose scale-up is still open
    /// and not formed, as the audit log has them (failed instances included), so that a
    /// restart neither forgets nor requests them again, and repairs what failed. Existing
    /// entries are kept.
    pub fn resume(&self, entries: impl IntoIterator<Item = Resumed>) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for r in entries {
            ledger.entry((r.gang, r.group)).or_insert(InFlight {
                nodes: r.nodes,
                since_unix: r.since_unix,
                failed: r.failed,
            });
        }
    }

    /// Remembers the nodes an applied decision requested for each admitted gang on its group:
    /// added to what is in flight for it there (a repair, more of a gang admitted at
    /// `minCount`, or a share of a spread gang). The gang's entries on other groups with no
    /// live node left (all failed) are dropped: these nodes replace them.
    pub fn record(&self, decision: &Decision, now_unix: i64) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for a in &decision.admitted {
            ledger.retain(|(g, on), f| g != &a.gang || on == &decision.group || f.live() > 0);
            let entry = ledger
                .entry((a.gang.clone(), decision.group.clone()))
                .or_insert_with(|| InFlight {
                    nodes: 0,
                    since_unix: now_unix,
                    failed: BTreeMap::new(),
                });
            entry.nodes = entry.nodes.saturating_add(a.nodes);
            entry.since_unix = now_unix;
        }
    }

    /// Forgets the nodes requested on `group`: its instances failed (CA saw the failure in the
    /// same `NodeGroupNodes` listing, and backs the group off) or CA withdrew requested nodes
    /// (`NodeGroupDecreaseTargetSize`), so the gangs they were for may be admitted on another
    /// group.
    pub fn release(&self, group: &str) {
        self.release_where(
            group,
            |_| true,
            "instances failed: the nodes requested for these gangs no longer count as in flight",
        );
    }

    /// Forgets the ledger entries of `group` whose gang `matches`, logging `why` when any.
    fn release_where(&self, group: &str, matches: impl Fn(&GangRef) -> bool, why: &str) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = ledger.len();
        ledger.retain(|(g, on), _| on.as_str() != group || !matches(g));
        let released = before - ledger.len();
        if released > 0 {
            tracing::info!(node_group.id = group, gangs = released, "{why}");
        }
    }

    /// Charges the failed instances of `instances`, a listing of `group`, to the gangs they
    /// were requested for: a failed instance claimed for a gang in flight on the group counts
    /// once against that gang alone (see the module docs), so other gangs' nodes in flight
    /// stay counted; a failed instance without a gang claim (a backend that keeps none, or
    /// one requested before claims were kept) releases every gang of the group, as
    /// [`Self::release`].
    pub fn charge_failed(&self, group: &str, instances: &[crate::model::Instance]) {
        let mut charged: Vec<(&crate::model::Claim, &str)> = Vec::new();
        for i in instances.iter().filter(|i| i.error.is_some()) {
            match i.claim.as_ref().filter(|c| c.gang.is_some()) {
                Some(claim) => charged.push((claim, i.id.as_str())),
                None => return self.release(group),
            }
        }
        if charged.is_empty() {
            return;
        }
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (claim, instance) in charged {
            let Some((ns, name)) = claim.gang.as_ref() else {
                continue;
            };
            let entry = ledger
                .iter_mut()
                .find(|((g, on), _)| on.as_str() == group && g.namespace == *ns && g.name == *name);
            if let Some(((gang, _), f)) = entry
                && f.failed
                    .insert(instance.to_owned(), claim.scale_up.clone())
                    .is_none()
            {
                tracing::info!(node_group.id = group, %gang, instance, scale_up.id = %claim.scale_up, live = f.live(), "a failed instance is charged to the gang it was requested for: its next increase repairs it");
            }
        }
    }

    /// Forgets the gangs on `group` whose failed instances were requested for a scale-up whose
    /// lifecycle of the gang has ended (`open(scale-up, gang)` is false): a repair would claim
    /// nodes for a lifecycle that is over, so the gang is admitted afresh instead.
    pub fn forget_ended_repairs(&self, group: &str, open: impl Fn(&str, &GangRef) -> bool) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = ledger.len();
        ledger.retain(|(g, on), f| {
            on.as_str() != group || f.repair_of().is_none_or(|su| open(su, g))
        });
        if ledger.len() < before {
            tracing::info!(
                node_group.id = group,
                gangs = before - ledger.len(),
                "the lifecycles these gangs' failed instances were requested for have ended: they no longer count as in flight"
            );
        }
    }

    /// Forgets the nodes requested on `group` for `gangs` (namespace, name): they failed or
    /// were withdrawn, so the gangs may be admitted again, there or on another group. Other
    /// gangs' nodes in flight stay counted.
    pub fn release_gangs(&self, group: &str, gangs: &[(&str, &str)]) {
        if gangs.is_empty() {
            return;
        }
        self.release_where(
            group,
            |g| {
                gangs
                    .iter()
                    .any(|(ns, name)| g.namespace == *ns && g.name == *name)
            },
            "the nodes requested for these gangs failed or were withdrawn: they no longer count as in flight",
        );
    }

    /// Drops ledger entries of gangs that are no longer pending or are too old, and returns the
    /// nodes in flight for `group`'s gangs, and the gangs with nodes in flight on another
    /// group (with that group).
    fn in_flight_for(
        &self,
        view: &GangView,
        group: &NodeGroupId,
        now_unix: i64,
    ) -> (
        BTreeMap<GangRef, u32>,
        BTreeMap<GangRef, planner::Elsewhere>,
    ) {
        let mut ledger = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ledger.retain(|(gang, _), f| {
            now_unix - f.since_unix < IN_FLIGHT_TTL_SECS
                && view.gangs.iter().any(|g| &g.id == gang && g.is_pending())
        });
        let here = ledger
            .iter()
            .filter(|((_, on), _)| on == group)
            .map(|((g, _), f)| (g.clone(), f.live()))
            .collect();
        let mut elsewhere: BTreeMap<GangRef, planner::Elsewhere> = BTreeMap::new();
        for ((g, on), f) in ledger.iter() {
            if on == group || f.live() == 0 {
                continue;
            }
            let there = elsewhere
                .entry(g.clone())
                .or_insert_with(|| planner::Elsewhere {
                    group: on.clone(),
                    short: false,
                    nodes: 0,
                });
            there.short |= !f.failed.is_empty();
            there.nodes = there.nodes.saturating_add(f.live());
        }
        (here, elsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Rule;

    const GANG: &str = r#"
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: train, namespace: ml, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
"#;

    fn member(i: u32) -> String {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: train-{i}, namespace: ml, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  schedulingGroup: {{podGroupName: train}}
  containers: [{{name: c, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "8"}}}}}}]
  tolerations: [{{key: nvidia.com/gpu, operator: Exists}}]
status: {{phase: Pending}}
"#
        )
    }

    fn admission() -> (Admission, NodeGroupSpec) {
        let docs = [GANG.to_owned(), member(0), member(1)].join("\n---\n");
        let objects = ObjectSet::from_yaml_documents(&docs).expect("objects");
        let mut group = crate::testing::group("h100", 0, 8);
        group.gpu = Some(crate::model::GpuSpec {
            count: 8,
            product: "NVIDIA-H100-80GB-HBM3".into(),
            memory: crate::model::quantity::Quantity::from_units(80 << 30),
            resource_name: "nvidia.com/gpu".into(),
        });
        (
            Admission::new(Policy::Strict, Order::Age, Arc::new(StaticObjects(objects))),
            group,
        )
    }

    fn gang_ref() -> GangRef {
        GangRef {
            namespace: "ml".into(),
            name: "train".into(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        }
    }

    #[test]
    fn a_resumed_in_flight_request_covers_its_gang_after_a_restart() {
        let (fresh, group) = admission();
        let now = 1_800_000_000;
        let d = fresh
            .decide(&group, "nvidia.com/gpu.product", 0, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(
            d.applied_delta, 2,
            "a fresh process admits the whole gang: {d:?}"
        );
        // The same process after a restart, with the request resumed from the audit log:
        // the gang's two nodes are on their way, so nothing is requested again for it.
        let (restarted, group) = admission();
        restarted.resume([Resumed {
            gang: gang_ref(),
            group: group.id.clone(),
            nodes: 2,
            since_unix: now - 10,
            failed: BTreeMap::new(),
        }]);
        let d = restarted
            .decide(&group, "nvidia.com/gpu.product", 2, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(d.covered.len(), 1, "{d:?}");
        assert!(d.admitted.is_empty(), "{d:?}");
        assert_ne!(d.rule, Rule::GangsAdmitted, "{d:?}");
    }

    #[test]
    fn a_resumed_gang_with_a_failed_instance_gets_exactly_the_missing_node_as_a_repair() {
        let (restarted, group) = admission();
        let now = 1_800_000_000;
        // Before the restart: two nodes requested by su-1, one of which failed (a `repair`
        // record), none replaced yet.
        restarted.resume([Resumed {
            gang: gang_ref(),
            group: group.id.clone(),
            nodes: 2,
            since_unix: now - 10,
            failed: BTreeMap::from([("i-2".to_owned(), "su-1".to_owned())]),
        }]);
        let d = restarted
            .decide(&group, "nvidia.com/gpu.product", 2, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(d.applied_delta, 1, "{d:?}");
        assert_eq!(d.admitted[0].repair_of.as_deref(), Some("su-1"), "{d:?}");
        restarted.record(&d, now);
        // Replaced: the gang is covered again.
        let d = restarted
            .decide(&group, "nvidia.com/gpu.product", 3, 1, &[], now + 5)
            .unwrap()
            .0;
        assert!(d.admitted.is_empty(), "{d:?}");
        assert_eq!(d.covered.len(), 1, "{d:?}");
    }

    #[test]
    fn a_gang_whose_repaired_lifecycle_ended_is_forgotten_and_admitted_afresh() {
        let (admission, group) = admission();
        let now = 1_800_000_000;
        admission.resume([Resumed {
            gang: gang_ref(),
            group: group.id.clone(),
            nodes: 2,
            since_unix: now - 10,
            failed: BTreeMap::from([("i-2".to_owned(), "su-1".to_owned())]),
        }]);
        // su-1's lifecycle of the gang is still open: nothing is forgotten.
        admission.forget_ended_repairs(group.id.as_str(), |su, _| su == "su-1");
        let d = admission
            .decide(&group, "nvidia.com/gpu.product", 2, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(d.admitted[0].repair_of.as_deref(), Some("su-1"), "{d:?}");
        // It ended (formation timeout): the gang is admitted afresh, whole, no repair.
        admission.forget_ended_repairs(group.id.as_str(), |_, _| false);
        let d = admission
            .decide(&group, "nvidia.com/gpu.product", 2, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(d.applied_delta, 2, "{d:?}");
        assert_eq!(d.admitted[0].repair_of, None, "{d:?}");
    }

    #[test]
    fn idle_nodes_the_group_template_tolerates_are_credited_and_others_are_not() {
        let (admission, mut group) = admission();
        let now = 1_800_000_000;
        let view = |taints: &[&str]| {
            let mut v = admission.view(now).unwrap();
            let idle = taints
                .iter()
                .enumerate()
                .map(|(i, t)| cluster::IdleNode {
                    name: format!("n{i}"),
                    hard_taints: if t.is_empty() {
                        Vec::new()
                    } else {
                        vec![(*t).to_owned()]
                    },
                })
                .collect();
            v.idle = BTreeMap::from([("h100".to_owned(), idle)]);
            v
        };
        let decide = |v: &GangView, group: &NodeGroupSpec| {
            admission
                .decide_in(v, group, "nvidia.com/gpu.product", 0, 1, &[], now)
                .0
        };
        // One idle node without taints: the gang of 2 takes it and 1 fresh node.
        let d = decide(&view(&[""]), &group);
        assert_eq!((d.admitted[0].nodes, d.admitted[0].idle), (1, 1), "{d:?}");
        assert_eq!(d.applied_delta, 1, "{d:?}");
        // A node tainted by something the template does not have repels the pods.
        let d = decide(&view(&["", "gpu-broken"]), &group);
        assert_eq!((d.admitted[0].nodes, d.admitted[0].idle), (1, 1), "{d:?}");
        // A taint the template has too (the members tolerate it): both nodes count, nothing
        // fresh is needed.
        group.taints.push(crate::model::Taint {
            key: "nvidia.com/gpu".into(),
            value: String::new(),
            effect: crate::model::TaintEffect::NoSchedule,
        });
        let d = decide(&view(&["", "nvidia.com/gpu"]), &group);
        assert_eq!((d.admitted[0].nodes, d.admitted[0].idle), (0, 2), "{d:?}");
        // Deferral spends them the same way: a gang the idle nodes hold is not deferred at
        // target == maxSize.
        group.max_size = 0;
        let held = admission.deferrals(&view(&["", ""]), &[(&group, 0)], "nvidia.com/gpu.product");
        assert!(held.is_empty(), "{held:?}");
        let held = admission.deferrals(&view(&[""]), &[(&group, 0)], "nvidia.com/gpu.product");
        assert_eq!(held.len(), 1, "{held:?}");
        // A group without GPUs credits none: its busy nodes may run no extended-resource pod.
        let v = view(&["", ""]);
        assert_eq!(idle_of(&v, &group), 2);
        group.gpu = None;
        assert_eq!(idle_of(&v, &group), 0);
    }

    #[test]
    fn a_gang_in_flight_on_one_group_is_not_admitted_on_another_until_that_group_fails() {
        let (admission, a) = admission();
        let mut b = a.clone();
        b.id = NodeGroupId::new("h100-b");
        let now = 1_800_000_000;
        let d = admission
            .decide(&a, "nvidia.com/gpu.product", 0, 1, &[], now)
            .unwrap()
            .0;
        assert_eq!(d.applied_delta, 2, "{d:?}");
        admission.record(&d, now);
        // CA asks the second group for the same pods a few seconds later.
        let d = admission
            .decide(&b, "nvidia.com/gpu.product", 0, 1, &[], now + 6)
            .unwrap()
            .0;
        assert!(d.admitted.is_empty(), "admitted twice: {d:?}");
        assert_eq!(d.covered.len(), 1, "{d:?}");
        assert_eq!(d.covered[0].elsewhere.as_ref(), Some(&a.id), "{d:?}");
        // Nor is CA's delta added for it there: no node for a covered gang.
        assert_eq!((d.rule, d.applied_delta), (Rule::AllCovered, 0), "{d:?}");
        // The first group's instances fail: the gang may go to the second.
        admission.release(a.id.as_str());
        let d = admission
            .decide(&b, "nvidia.com/gpu.product", 0, 1, &[], now + 12)
            .unwrap()
            .0;
        assert_eq!(d.applied_delta, 2, "{d:?}");
        assert!(d.covered.is_empty(), "{d:?}");
    }

    #[test]
    fn a_gang_spread_over_two_groups_is_covered_by_both_and_repaired_where_an_instance_failed() {
        let (admission, a) = admission();
        let mut b = a.clone();
        b.id = NodeGroupId::new("h100-b");
        let now = 1_800_000_000;
        // h100 has room for one of the two nodes: the other goes on h100-b in the same
        // scale-up, as a decision of its own.
        let others = [(&b, 0)];
        assert!(admission.needs_other_groups(
            &admission.view(now).unwrap(),
            &a,
            "nvidia.com/gpu.product",
            7
        ));
        let (d, shares) = admission
            .decide(&a, "nvidia.com/gpu.product", 7, 1, &others, now)
            .unwrap();
        assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 1), "{d:?}");
        assert_eq!(shares.len(), 1, "{shares:?}");
        assert_eq!((&shares[0].group, shares[0].applied_delta), (&b.id, 1));
        admission.record(&d, now);
        admission.record(&shares[0], now);
        assert_eq!(
            admission.ledger().get(&gang_ref()),
            Some(&(a.id.clone(), 2)),
            "one entry per gang for composites and deferral, with its nodes on both"
        );
        // CA asks h100-b again for the same pods: nothing is added (h100 is at its max).
        let d = admission
            .decide(&b, "nvidia.com/gpu.product", 1, 1, &[], now + 6)
            .unwrap()
            .0;
        assert_eq!((d.rule, d.applied_delta), (Rule::AllCovered, 0), "{d:?}");
        assert_eq!(d.covered[0].in_flight, 2, "{d:?}");
        // h100-b's instance fails: the next call there replaces exactly it, as a repair of
        // the scale-up it was requested for; h100's node still counts.
        let failed = crate::model::Instance {
            id: "kwok://h100-b-1".into(),
            node_name: "h100-b-1".into(),
            state: crate::model::InstanceState::Creating,
            error: Some(crate::model::InstanceError {
                code: crate::model::ErrorCode::Stockout,
                message: "no capacity".into(),
            }),
            claim: Some(crate::model::Claim::for_gang("su-b", "ml", "train")),
        };
        admission.charge_failed(b.id.as_str(), &[failed]);
        let d = admission
            .decide(&b, "nvidia.com/gpu.product", 1, 1, &[], now + 12)
            .unwrap()
            .0;
        assert_eq!(d.applied_delta, 1, "{d:?}");
        assert_eq!(d.admitted[0].repair_of.as_deref(), Some("su-b"), "{d:?}");
    }
}
