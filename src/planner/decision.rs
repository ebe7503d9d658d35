//! The record of one admission ([`Decision`]): the verdict, the rule of the table in
//! [`admit`](mod@super::admit)'s module docs that produced it, the gangs admitted, deferred and
//! covered, and the one sentence that names the numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::model::{Gang, GangRef, NodeGroupId};

use super::explain::Reason;

/// How strictly `NodeGroupIncreaseSize` is held to whole gangs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Policy {
    /// Round up to whole gangs, trim to what admitted gangs and ungrouped pods can use, and
    /// reject a scale-up that would host only part of a gang.
    #[default]
    Strict,
    /// Round up to whole gangs, never trim, never reject.
    RoundUp,
    /// Apply CA's delta as asked (gang records are still computed for the audit).
    Off,
}

impl Policy {
    /// The spelling used in configuration and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::RoundUp => "roundUp",
            Self::Off => "off",
        }
    }
}

/// Which of the pending gangs of one priority gets nodes first when headroom is short
/// (`admission.order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Order {
    /// Older first.
    #[default]
    Age,
    /// Fewest nodes still missing first (its whole need less the nodes in flight for it), then
    /// older first: the gangs nearest to forming go first, at the risk that a large gang waits
    /// while smaller ones keep arriving.
    FewestMissing,
}

impl Order {
    /// The spelling used in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Age => "age",
            Self::FewestMissing => "fewestMissing",
        }
    }

    /// Orders two pending gangs, each with the nodes it still misses: priority (higher
    /// first), then by `self`, then age (older first) and id.
    pub fn compare(self, a: &Gang, a_missing: u32, b: &Gang, b_missing: u32) -> std::cmp::Ordering {
        let by_missing = match self {
            Self::Age => std::cmp::Ordering::Equal,
            Self::FewestMissing => a_missing.cmp(&b_missing),
        };
        b.priority
            .cmp(&a.priority)
            .then(by_missing)
            .then_with(|| a.admission_order(b))
    }
}

/// Whether the increase goes ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Add `applied_delta` nodes.
    Accept,
    /// Add nothing; the RPC fails.
    Reject,
}

/// Which rule of the table in [`admit`](mod@super::admit)'s module docs produced the decision (a
/// bounded label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The group is at max size.
    AtMax,
    /// Policy `Off`.
    Passthrough,
    /// No pending gang needs nodes of this group.
    NoGangs,
    /// Gangs were admitted.
    GangsAdmitted,
    /// No gang fits; `Strict` accepted nodes for ungrouped pods.
    UngroupedOnly,
    /// No gang fits; `RoundUp` accepted CA's delta.
    NoGangFitsRoundUp,
    /// No gang fits and nothing else needs the nodes; `Strict` rejected.
    NoGangFits,
    /// Every pending gang this group can host already has its nodes in flight (the group's
    /// target holds them), and no ungrouped pod needs one; `Strict` rejected.
    AllCovered,
    /// A composite was admitted whole across groups: this group, which CA asked for, adds its
    /// share (see [`combine`](super::combine)).
    CompositeAdmitted,
    /// This group adds its share of a composite admitted on another group's increase.
    CompositeShare,
    /// This group adds its share of a gang spread over the groups of its pool, admitted on
    /// another group's increase (see [`admit`](mod@super::admit), spread).
    SpreadShare,
}

impl Rule {
    /// The label, e.g. `gangs_admitted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtMax => "at_max",
            Self::Passthrough => "passthrough",
            Self::NoGangs => "no_gangs",
            Self::GangsAdmitted => "gangs_admitted",
            Self::UngroupedOnly => "ungrouped_only",
            Self::NoGangFitsRoundUp => "no_gang_fits_round_up",
            Self::NoGangFits => "no_gang_fits",
            Self::AllCovered => "all_covered",
            Self::CompositeAdmitted => "composite_admitted",
            Self::CompositeShare => "composite_share",
            Self::SpreadShare => "spread_share",
        }
    }
}

/// How much of a gang an admission covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Extent {
    /// Every unbound member.
    Whole,
    /// Enough members to reach `minCount`.
    MinCount,
}

/// A gang the new nodes are for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedGang {
    /// The gang.
    pub gang: GangRef,
    /// Its priority.
    pub priority: i32,
    /// Whole, or just enough for `minCount`.
    pub extent: Extent,
    /// Fresh nodes added for it.
    pub nodes: u32,
    /// Idle Ready nodes of the group credited to it before fresh ones (0 for composite
    /// shares).
    #[serde(skip_serializing_if = "is_zero")]
    pub idle: u32,
    /// Fresh nodes for every unbound member, before in-flight nodes.
    pub nodes_all: u32,
    /// Fresh nodes for `minCount`, before in-flight nodes.
    pub nodes_min: u32,
    /// Nodes already requested for it and not yet used.
    pub in_flight: u32,
    /// The scale-up whose failed instances these nodes replace: set by the caller, which
    /// keeps the in-flight ledger, for a gang whose in-flight nodes failed on this group.
    pub repair_of: Option<String>,
    /// The nodes other groups add for it in the same scale-up, when this group's headroom
    /// alone does not hold its need (a gang without a topology key, spread over the groups
    /// that host it alike); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadShare>,
}

/// Another group's part of a spread gang's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadShare {
    /// The group.
    pub group: NodeGroupId,
    /// Fresh nodes it adds for the gang.
    pub nodes: u32,
    /// Its idle Ready nodes credited to the gang before fresh ones.
    #[serde(skip_serializing_if = "is_zero")]
    pub idle: u32,
}

impl AdmittedGang {
    /// Fresh nodes added for it on every group: here and its spread shares.
    pub fn nodes_everywhere(&self) -> u32 {
        self.spread
            .iter()
            .fold(self.nodes, |n, s| n.saturating_add(s.nodes))
    }
}

/// A gang this group could host but that does not fit the headroom left, or that is held
/// because a member's volume claim has no resolvable CSI driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeferredGang {
    /// The gang.
    pub gang: GangRef,
    /// Its priority.
    pub priority: i32,
    /// Nodes already requested for it and not yet used.
    pub in_flight: u32,
    /// Why: [`Reason::InsufficientHeadroom`], with needs net of in-flight nodes, or
    /// [`Reason::UnresolvedClaim`] for a held gang.
    pub reason: Reason,
}

/// A gang whose need is already covered by nodes requested earlier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CoveredGang {
    /// The gang.
    pub gang: GangRef,
    /// Fresh nodes for every unbound member.
    pub nodes_all: u32,
    /// Fresh nodes for `minCount`.
    pub nodes_min: u32,
    /// Nodes already requested for it and not yet used.
    pub in_flight: u32,
    /// The other group whose requested nodes cover it, when they are not this group's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elsewhere: Option<NodeGroupId>,
}

/// The outcome of one admission, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The group.
    pub group: NodeGroupId,
    /// The policy applied.
    pub policy: Policy,
    /// Accept or reject.
    pub verdict: Verdict,
    /// The rule that decided.
    pub rule: Rule,
    /// Target size before the increase.
    pub target: u32,
    /// Maximum size.
    pub max_size: u32,
    /// `max_size - target`.
    pub headroom: u32,
    /// What CA asked for.
    pub ca_delta: u32,
    /// Nodes to add: at most `headroom`, 0 when rejected (with composites, their children's
    /// nodes on this group included).
    pub applied_delta: u32,
    /// The rule wanted more than the headroom and was cut to it.
    pub capped: bool,
    /// Nodes the admitted gangs need (sum of their `nodes`).
    pub gang_nodes: u32,
    /// Nodes ungrouped pending pods would need (from the input).
    pub ungrouped_nodes: u32,
    /// Admitted gangs, in admission order.
    pub admitted: Vec<AdmittedGang>,
    /// Deferred gangs, in admission order.
    pub deferred: Vec<DeferredGang>,
    /// Gangs covered by in-flight nodes.
    pub covered: Vec<CoveredGang>,
    /// Pending gangs this group cannot host at all.
    pub unhostable: u32,
    /// One human sentence naming the numbers.
    pub reason: String,
    /// Why the nodes of an accepted increase are not reserved although the group's
    /// configuration says they are (a DaemonSet lacks the toleration, see
    /// [`reservation_off_reason`](super::reservation_off_reason)); set by the engine, `None`
    /// from [`admit`](super::admit()).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_off: Option<String>,
    /// Composites this decision admits, with every group's share (this group's and the
    /// others'), see [`combine`](super::combine); empty from [`admit`](super::admit()).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub composites: Vec<CompositeShares>,
}

/// A composite admitted in a decision, with the target and nodes of every group it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeShares {
    /// The composite.
    pub composite: GangRef,
    /// Its `minGroupCount`.
    pub min_group_count: u32,
    /// Children already formed.
    pub formed: u32,
    /// Children whose nodes were requested earlier.
    pub in_flight: u32,
    /// The topology domain (`key=value`) all children were placed in, when it has a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// One entry per group, in configuration order.
    pub shares: Vec<GroupShare>,
}

/// One group's part of a composite admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupShare {
    /// The group.
    pub group: NodeGroupId,
    /// Its target size before this decision.
    pub target: u32,
    /// Nodes added on it for the composite.
    pub nodes: u32,
    /// The children placed on it.
    pub children: Vec<GangRef>,
}

impl Decision {
    /// Whether the increase goes ahead.
    pub fn is_accepted(&self) -> bool {
        self.verdict == Verdict::Accept
    }

    /// A bounded label for metrics: the rule that decided.
    pub fn kind(&self) -> &'static str {
        self.rule.as_str()
    }

    /// Marks each admitted gang found in `repairs` (gang → the scale-up whose failed
    /// instances on this group its nodes replace) as a repair, and says so in the reason.
    pub fn mark_repairs(&mut self, repairs: &BTreeMap<GangRef, String>) {
        let mut marked = false;
        for a in &mut self.admitted {
            if let Some(of) = repairs.get(&a.gang) {
                a.repair_of = Some(of.clone());
                marked = true;
            }
        }
        if marked {
            // Only a decision that admits gangs marks any, and its sentence does not depend
            // on the template.
            self.reason = explain(self, false);
        }
    }
}

/// At most this many gangs are named in a reason; the record lists them all.
const NAMED: usize = 5;

fn names<T>(items: &[T], one: impl Fn(&T) -> String) -> String {
    let mut s = items
        .iter()
        .take(NAMED)
        .map(one)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        let _ = write!(s, " and {} more", items.len() - NAMED);
    }
    s
}

fn deferred_names(d: &Decision) -> String {
    names(&d.deferred, |g| match &g.reason {
        Reason::InsufficientHeadroom {
            nodes_all,
            nodes_min,
            headroom,
        } => format!(
            "{} needs {nodes_all} nodes ({nodes_min} for minCount) with {headroom} left",
            g.gang
        ),
        other => format!("{} held: {other}", g.gang),
    })
}

/// The other groups' shares of a spread gang, e.g. ` (+ 17 on gpu-b)`; empty when none.
fn spread_names(a: &AdmittedGang) -> String {
    if a.spread.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = a
        .spread
        .iter()
        .map(|s| {
            if s.idle > 0 {
                format!("{} + {} idle on {}", s.nodes, s.idle, s.group)
            } else {
                format!("{} on {}", s.nodes, s.group)
            }
        })
        .collect();
    format!(" (+ {}, spread)", parts.join(", "))
}

fn covered_names(d: &Decision) -> String {
    names(&d.covered, |c| match &c.elsewhere {
        Some(group) => format!("{} on node group {group}", c.gang),
        None => format!("{} {} in flight", c.gang, c.in_flight),
    })
}

/// The sentence of `d` (`no_template`: the group has no template node).
pub(super) fn explain(d: &Decision, no_template: bool) -> String {
    let (ca, applied, h) = (d.ca_delta, d.applied_delta, d.headroom);
    let mut s = match d.rule {
        Rule::AtMax => format!(
            "group is at max size {} (target {}); CA asked {ca}",
            d.max_size, d.target
        ),
        Rule::Passthrough => format!("policy off: applying CA's delta {ca}"),
        Rule::NoGangs => {
            let why = if no_template {
                "group has no template node"
            } else {
                "no pending gang needs this group"
            };
            format!("{why}: applying CA's delta {ca}")
        }
        Rule::GangsAdmitted => {
            let how = match applied.cmp(&ca) {
                std::cmp::Ordering::Greater => "rounded up to whole gangs",
                std::cmp::Ordering::Less if d.capped => "cut to the headroom",
                std::cmp::Ordering::Less => "trimmed to what admitted gangs and ungrouped pods use",
                std::cmp::Ordering::Equal => "as asked",
            };
            format!(
                "admitted {} gang(s) needing {} nodes ({}); CA asked {ca}, applying {applied} ({how})",
                d.admitted.len(),
                d.gang_nodes,
                names(&d.admitted, |a| {
                    let idle = if a.idle > 0 {
                        format!(" + {} idle", a.idle)
                    } else {
                        String::new()
                    };
                    match (&a.repair_of, a.extent) {
                        (Some(of), _) => format!(
                            "{} {}{idle} replacing failed instances of {of}",
                            a.gang, a.nodes
                        ),
                        (None, Extent::Whole) => {
                            format!("{} {}{idle}{}", a.gang, a.nodes, spread_names(a))
                        }
                        (None, Extent::MinCount) => format!(
                            "{} {}{idle}{} for minCount",
                            a.gang,
                            a.nodes,
                            spread_names(a)
                        ),
                    }
                })
            )
        }
        Rule::UngroupedOnly if d.deferred.is_empty() => format!(
            "every pending gang this group can host has its nodes in flight ({}); applying {applied} for ungrouped pods needing {} nodes (CA asked {ca})",
            covered_names(d),
            d.ungrouped_nodes
        ),
        Rule::UngroupedOnly => format!(
            "no gang fits headroom {h} ({}); applying {applied} for ungrouped pods needing {} nodes (CA asked {ca})",
            deferred_names(d),
            d.ungrouped_nodes
        ),
        Rule::NoGangFitsRoundUp => format!(
            "no gang fits headroom {h} ({}); policy roundUp: applying CA's delta {ca}",
            deferred_names(d)
        ),
        Rule::NoGangFits => format!(
            "rejected: no gang fits headroom {h} under max size {} (target {}): {}; CA asked {ca}",
            d.max_size,
            d.target,
            deferred_names(d)
        ),
        Rule::AllCovered => format!(
            "rejected: every pending gang this group can host has its nodes in flight ({}; target {}) and no ungrouped pod needs one; CA asked {ca}",
            covered_names(d),
            d.target
        ),
        // Written by `combine` and `spread_shares`, which build these decisions.
        Rule::CompositeAdmitted | Rule::CompositeShare | Rule::SpreadShare => String::new(),
    };
    if d.capped {
        let _ = write!(s, "; capped at headroom {h}");
    }
    if d.rule == Rule::GangsAdmitted && !d.deferred.is_empty() {
        let _ = write!(s, "; deferred {}", deferred_names(d));
    }
    if !d.covered.is_empty() {
        let _ = write!(
            s,
            "; {} gang(s) covered by in-flight nodes",
            d.covered.len()
        );
    }
    s
}

/// Whether a count is 0 (left out of the serialized decision).
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u32) -> bool {
    *n == 0
}
