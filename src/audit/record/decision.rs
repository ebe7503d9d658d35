//! [`DecisionEvent`]: the record of one admission decision, rejections included, with the
//! gangs it admitted, deferred and found covered, and the composites it placed.

use serde::{Deserialize, Serialize};

use super::GangId;
use crate::planner;

/// At most this many deferred gangs are listed in a [`DecisionEvent`]; `deferredTotal` counts
/// them all.
pub const MAX_DEFERRED: usize = 20;

/// Accept or reject, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// The increase went ahead with `appliedDelta` nodes.
    Accept,
    /// Nothing was added.
    Reject,
}

/// How much of a gang an admission covers, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Extent {
    /// Every unbound member.
    Whole,
    /// Enough members to reach `minCount`.
    MinCount,
}

/// An admitted gang in a [`DecisionEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangSummary {
    /// The gang.
    pub gang: GangId,
    /// Its priority.
    pub priority: i32,
    /// Whole, or just enough for `minCount`.
    pub extent: Extent,
    /// Nodes added for it.
    pub nodes: u32,
    /// Idle Ready nodes of the group credited to it before fresh ones; absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle: u32,
    /// Nodes already requested for it and not yet used, before this decision.
    pub in_flight: u32,
    /// The scale-up whose failed instances these nodes replace (a repair): they are claimed
    /// for that scale-up's lifecycle of the gang, and this decision opens no lifecycle for
    /// the gang. Absent for a fresh admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_of: Option<String>,
    /// The other groups' shares of a gang spread over its pool in the same scale-up (each
    /// also has a decision of its own, rule `spread_share`); absent when it was not spread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadPart>,
}

/// Another group's share of a spread gang in a [`GangSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadPart {
    /// The group.
    pub node_group: String,
    /// Fresh nodes it adds for the gang.
    pub nodes: u32,
    /// Its idle Ready nodes credited to the gang; absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle: u32,
}

/// A deferred gang in a [`DecisionEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeferredSummary {
    /// The gang.
    pub gang: GangId,
    /// Its priority.
    pub priority: i32,
    /// Why it was deferred, one sentence naming the numbers.
    pub reason: String,
}

/// One admission decision (`NodeGroupIncreaseSize`), accepted or rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionEvent {
    /// Id of the scale-up this decision started; `null` when nothing was requested (rejected,
    /// or an applied delta of 0). An id opens one lifecycle per admitted gang, or one without a
    /// gang when none was admitted.
    #[serde(default)]
    pub scale_up_id: Option<String>,
    /// The node group.
    pub node_group: String,
    /// Admission policy: `strict`, `roundUp` or `off`.
    pub policy: String,
    /// Accept or reject.
    pub verdict: Verdict,
    /// The rule that decided (a bounded label, e.g. `gangs_admitted`).
    pub rule: String,
    /// Target size before the increase.
    pub target: u32,
    /// Maximum size.
    pub max_size: u32,
    /// `maxSize - target`.
    pub headroom: u32,
    /// The delta CA asked for.
    pub ca_delta: u32,
    /// Nodes added (0 when rejected).
    pub applied_delta: u32,
    /// The rule wanted more than the headroom and was cut to it.
    pub capped: bool,
    /// Nodes the admitted gangs need.
    pub gang_nodes: u32,
    /// Nodes ungrouped pending pods need.
    pub ungrouped_nodes: u32,
    /// Admitted gangs, in admission order.
    pub gangs: Vec<GangSummary>,
    /// The first [`MAX_DEFERRED`] deferred gangs, in admission order.
    pub deferred: Vec<DeferredSummary>,
    /// How many gangs were deferred in all.
    pub deferred_total: u32,
    /// How many gangs were already covered by in-flight nodes.
    pub covered: u32,
    /// How many pending gangs this group cannot host at all.
    pub unhostable: u32,
    /// How long deciding and provisioning took, when the caller measured it.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// One sentence naming the numbers.
    pub reason: String,
    /// Why the nodes added are not reserved although the group's configuration says they are
    /// (a DaemonSet that runs on the group lacks the toleration); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_off: Option<String>,
    /// Composites (CompositePodGroups) this decision admits, each with every node group's
    /// target size before the decision and the nodes it adds there: one cross-group scale-up,
    /// recorded whole in the record of the group CA asked for and in each other group's
    /// record of it. Absent without composites.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub composites: Vec<CompositeSummary>,
}

/// A composite admitted by a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeSummary {
    /// The composite.
    pub composite: GangId,
    /// Its `minGroupCount`.
    pub min_group_count: u32,
    /// Children already formed.
    pub formed: u32,
    /// Children whose nodes were requested earlier.
    pub in_flight: u32,
    /// The topology domain (`key=value`) all children were placed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Every node group's part, in configuration order.
    pub shares: Vec<ShareSummary>,
}

/// One node group's part of a composite admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareSummary {
    /// The node group.
    pub node_group: String,
    /// Its target size before the decision.
    pub target: u32,
    /// Nodes added on it for the composite.
    pub nodes: u32,
    /// The children placed on it.
    pub children: Vec<GangId>,
}

impl DecisionEvent {
    /// Sets the scale-up id.
    #[must_use]
    pub fn with_scale_up_id(mut self, id: impl Into<String>) -> Self {
        self.scale_up_id = Some(id.into());
        self
    }

    /// Sets how long deciding and provisioning took.
    #[must_use]
    pub fn with_duration_ms(mut self, ms: u64) -> Self {
        self.duration_ms = Some(ms);
        self
    }

    /// Whether the increase went ahead.
    pub fn is_accepted(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// The lifecycles this decision opens, each as `(scaleUpId, gang)`: when it was accepted
    /// with a scale-up id, one per admitted gang that is not a repair, or one without a gang
    /// when no gang was admitted; none otherwise (a decision that only repairs opens none: its
    /// nodes belong to the lifecycles they repair, [`DecisionEvent::repairs`]).
    pub fn opened_lifecycles(&self) -> Vec<(String, Option<GangId>)> {
        let Some(id) = self.scale_up_id.as_ref().filter(|_| self.is_accepted()) else {
            return Vec::new();
        };
        if self.gangs.is_empty() {
            vec![(id.clone(), None)]
        } else {
            self.gangs
                .iter()
                .filter(|g| g.repair_of.is_none())
                .map(|g| (id.clone(), Some(g.gang.clone())))
                .collect()
        }
    }

    /// The repairs an accepted decision made, each as `((scaleUpId, gang), nodes)`: the
    /// lifecycle whose failed instances it replaced, and how many nodes it added for it.
    pub fn repairs(&self) -> Vec<((String, Option<GangId>), u32)> {
        if !self.is_accepted() {
            return Vec::new();
        }
        self.gangs
            .iter()
            .filter_map(|g| {
                let of = g.repair_of.clone()?;
                Some(((of, Some(g.gang.clone())), g.nodes))
            })
            .collect()
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl From<&planner::Decision> for DecisionEvent {
    /// The record of a planner decision, without a scale-up id or duration.
    fn from(d: &planner::Decision) -> Self {
        Self {
            scale_up_id: None,
            node_group: d.group.to_string(),
            policy: d.policy.as_str().to_owned(),
            verdict: match d.verdict {
                planner::Verdict::Accept => Verdict::Accept,
                planner::Verdict::Reject => Verdict::Reject,
            },
            rule: d.rule.as_str().to_owned(),
            target: d.target,
            max_size: d.max_size,
            headroom: d.headroom,
            ca_delta: d.ca_delta,
            applied_delta: d.applied_delta,
            capped: d.capped,
            gang_nodes: d.gang_nodes,
            ungrouped_nodes: d.ungrouped_nodes,
            gangs: d
                .admitted
                .iter()
                .map(|a| GangSummary {
                    gang: GangId::from(&a.gang),
                    priority: a.priority,
                    extent: match a.extent {
                        planner::Extent::Whole => Extent::Whole,
                        planner::Extent::MinCount => Extent::MinCount,
                    },
                    nodes: a.nodes,
                    idle: a.idle,
                    in_flight: a.in_flight,
                    repair_of: a.repair_of.clone(),
                    spread: a
                        .spread
                        .iter()
                        .map(|p| SpreadPart {
                            node_group: p.group.to_string(),
                            nodes: p.nodes,
                            idle: p.idle,
                        })
                        .collect(),
                })
                .collect(),
            deferred: d
                .deferred
                .iter()
                .take(MAX_DEFERRED)
                .map(|g| DeferredSummary {
                    gang: GangId::from(&g.gang),
                    priority: g.priority,
                    reason: g.reason.to_string(),
                })
                .collect(),
            deferred_total: count(d.deferred.len()),
            covered: count(d.covered.len()),
            unhostable: d.unhostable,
            duration_ms: None,
            reason: d.reason.clone(),
            reservation_off: d.reservation_off.clone(),
            composites: d
                .composites
                .iter()
                .map(|c| CompositeSummary {
                    composite: GangId::from(&c.composite),
                    min_group_count: c.min_group_count,
                    formed: c.formed,
                    in_flight: c.in_flight,
                    domain: c.domain.clone(),
                    shares: c
                        .shares
                        .iter()
                        .map(|s| ShareSummary {
                            node_group: s.group.to_string(),
                            target: s.target,
                            nodes: s.nodes,
                            children: s.children.iter().map(GangId::from).collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Whether a count is 0 (left out of the record).
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u32) -> bool {
    *n == 0
}
