//! Admission of one `NodeGroupIncreaseSize` call: which pending gangs the new nodes are for,
//! and how many nodes to add so that no gang is scaled up only in part.
//!
//! # Rules
//!
//! `headroom = max_size - target`. Candidates are the pending gangs ([`Gang::is_pending`]) that
//! [`fit`](super::fit()) places on the group's shape. A candidate's need is its `nodes_all` and
//! `nodes_min` minus the nodes already requested for it and not yet used (`in_flight`); a
//! candidate whose `nodes_all` is covered that way is *covered* and needs nothing. A pending gang
//! the group cannot host is *unhostable*. A gang the group could host but for a member's volume
//! claim whose CSI driver cannot be resolved ([`Reason::UnresolvedClaim`]) is *held*: it is
//! listed first among the deferred gangs with that reason and gets no nodes, since its attach
//! count, and so its node count, is unknown (sizing it with those volumes counted toward no
//! driver would under-count it, and the scheduler will not place it until they resolve).
//!
//! 1. **Admission.** Candidates are taken by priority (higher first), then age (older first),
//!    then id. Each is admitted whole if its full need fits the headroom still left; otherwise
//!    with its `minCount` need if that fits (the record says `minCount`); otherwise it is
//!    deferred and the next one is considered (backfill: headroom does not come back by
//!    waiting, so one oversized gang does not block smaller ones). A candidate whose
//!    `minCount` need is already covered and whose full need does not fit is covered.
//! 2. **Applied delta** (`gang_need` = the admitted gangs' nodes, `ungrouped` = nodes the
//!    pending pods outside any gang would need on this group, computed by the caller with
//!    [`nodes_for_pods`](super::nodes_for_pods)):
//!
//!    | Situation | `Strict` | `RoundUp` | `Off` |
//!    |---|---|---|---|
//!    | headroom is 0 | reject | reject | reject |
//!    | no candidate needs nodes, every one covered here¹, `ungrouped == 0` | reject | CA's delta | CA's delta |
//!    | no candidate needs nodes (otherwise) | CA's delta | CA's delta | CA's delta |
//!    | gangs admitted | `max(gang_need, min(ca_delta, gang_need + ungrouped))` | `max(ca_delta, gang_need)` | CA's delta |
//!    | none admitted, `ungrouped > 0` | `min(ca_delta, ungrouped)` | CA's delta | CA's delta |
//!    | none admitted, `ungrouped == 0` | reject | CA's delta | CA's delta |
//!
//!    ¹ At least one gang is covered by this group's in-flight nodes, and the group's target
//!    holds them all (`target ≥` their sum): CA asking again for such gangs (they wait on
//!    something new nodes do not bring, such as a device plugin advertising late) would only
//!    add idle nodes. A target below the sum means some of those requests never reached the
//!    backend, and CA's delta applies.
//!
//!    Every result is then capped at the headroom (`capped` in the record). `Strict` rounds
//!    CA's delta up to whole admitted gangs and trims it to what admitted gangs and ungrouped
//!    pods can use, since any further node could only host part of a deferred gang. Gang
//!    needs are summed per gang (no sharing of nodes between gangs is assumed), which may
//!    over-count but never under-counts.
//!
//! The planner does not decide *which* pods land on the new nodes (the scheduler does); it
//! decides how many nodes make the admitted gangs whole.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Gang, GangRef, NodeGroupId};

use super::explain::Reason;
use super::fit::fit_counts;
use super::shape::NodeShape;

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

/// Everything one admission decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionInput<'a> {
    /// The group CA wants to grow.
    pub group: &'a NodeGroupId,
    /// Its node shape; `None` when it has no template (then no gang can be placed on it).
    pub shape: Option<&'a NodeShape>,
    /// Its maximum size.
    pub max_size: u32,
    /// Its current target size.
    pub target: u32,
    /// The delta CA asked for.
    pub ca_delta: u32,
    /// The admission policy.
    pub policy: Policy,
    /// Gangs to consider; those not pending, or that this group cannot host, are skipped.
    pub gangs: &'a [Arc<Gang>],
    /// Nodes of this group already requested for a gang and not yet used by it.
    pub in_flight: &'a BTreeMap<GangRef, u32>,
    /// Gangs with nodes requested on *another* group and not yet used, with that group: their
    /// need is being met there, so this group adds nothing for them (two groups would
    /// otherwise each provision the whole gang).
    pub elsewhere: &'a BTreeMap<GangRef, NodeGroupId>,
    /// Nodes of this group the pending pods outside any gang would need.
    pub ungrouped_nodes: u32,
    /// Composites deferred by [`place_composites`](super::place_composites) in this decision:
    /// listed first among the deferred gangs, so that under `Strict` their children's pods
    /// never get CA's delta through the "no gang needs nodes" row.
    pub deferred_composites: &'a [DeferredGang],
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

/// Which rule of the table in the module docs produced the decision (a bounded label).
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
    /// Nodes added for it.
    pub nodes: u32,
    /// Fresh nodes for every unbound member, before in-flight nodes.
    pub nodes_all: u32,
    /// Fresh nodes for `minCount`, before in-flight nodes.
    pub nodes_min: u32,
    /// Nodes already requested for it and not yet used.
    pub in_flight: u32,
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
    /// from [`admit`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_off: Option<String>,
    /// Composites this decision admits, with every group's share (this group's and the
    /// others'), see [`combine`](super::combine); empty from [`admit`].
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
}

struct Candidate<'a> {
    gang: &'a Gang,
    nodes_all: u32,
    nodes_min: u32,
    in_flight: u32,
}

/// Decides one `NodeGroupIncreaseSize` call (rules in the module docs). Pure: the same input
/// always gives the same decision.
pub fn admit(input: &AdmissionInput<'_>) -> Decision {
    let headroom = input.max_size.saturating_sub(input.target);
    let mut unhostable = 0u32;
    let mut held = Vec::new();
    let mut candidates = Vec::new();
    let mut covered = Vec::new();
    for gang in input.gangs.iter().filter(|g| g.is_pending()) {
        let fitted = input.shape.map(|s| (s, fit_counts(gang, s)));
        let (nodes_all, nodes_min) = match fitted {
            Some((_, Ok(counts))) => counts,
            Some((shape, Err(reason @ Reason::UnresolvedClaim { .. })))
                if fit_counts(&without_unresolved(gang), shape).is_ok() =>
            {
                // The group could host the gang but for volumes whose driver is unknown:
                // held, so that it is neither sized from a partial count nor forgotten.
                held.push(DeferredGang {
                    gang: gang.id.clone(),
                    priority: gang.priority,
                    in_flight: input.in_flight.get(&gang.id).copied().unwrap_or(0),
                    reason,
                });
                continue;
            }
            _ => {
                unhostable += 1;
                continue;
            }
        };
        if let Some(other) = input.elsewhere.get(&gang.id) {
            covered.push(CoveredGang {
                gang: gang.id.clone(),
                nodes_all,
                nodes_min,
                in_flight: 0,
                elsewhere: Some(other.clone()),
            });
            continue;
        }
        let in_flight = input.in_flight.get(&gang.id).copied().unwrap_or(0);
        if nodes_all <= in_flight {
            covered.push(CoveredGang {
                gang: gang.id.clone(),
                nodes_all,
                nodes_min,
                in_flight,
                elsewhere: None,
            });
        } else {
            candidates.push(Candidate {
                gang,
                nodes_all,
                nodes_min,
                in_flight,
            });
        }
    }
    candidates.sort_by(|a, b| {
        b.gang
            .priority
            .cmp(&a.gang.priority)
            .then_with(|| a.gang.created_unix.cmp(&b.gang.created_unix))
            .then_with(|| a.gang.id.cmp(&b.gang.id))
    });

    let mut left = headroom;
    let mut admitted = Vec::new();
    let mut deferred = input.deferred_composites.to_vec();
    deferred.extend(held);
    for c in &candidates {
        let need_all = c.nodes_all - c.in_flight;
        let need_min = c.nodes_min.saturating_sub(c.in_flight);
        let extent = if need_all <= left {
            Some((Extent::Whole, need_all))
        } else if need_min == 0 {
            covered.push(CoveredGang {
                gang: c.gang.id.clone(),
                nodes_all: c.nodes_all,
                nodes_min: c.nodes_min,
                in_flight: c.in_flight,
                elsewhere: None,
            });
            continue;
        } else if need_min <= left {
            Some((Extent::MinCount, need_min))
        } else {
            None
        };
        match extent {
            Some((extent, nodes)) => {
                left -= nodes;
                admitted.push(AdmittedGang {
                    gang: c.gang.id.clone(),
                    priority: c.gang.priority,
                    extent,
                    nodes,
                    nodes_all: c.nodes_all,
                    nodes_min: c.nodes_min,
                    in_flight: c.in_flight,
                });
            }
            None => deferred.push(DeferredGang {
                gang: c.gang.id.clone(),
                priority: c.gang.priority,
                in_flight: c.in_flight,
                reason: Reason::InsufficientHeadroom {
                    nodes_all: need_all,
                    nodes_min: need_min,
                    headroom: left,
                },
            }),
        }
    }
    let gang_nodes: u32 = admitted.iter().map(|a| a.nodes).sum();
    let ca = input.ca_delta;
    let ungrouped = input.ungrouped_nodes;
    let needing = !admitted.is_empty() || !deferred.is_empty();
    // Covered gangs whose in-flight nodes this group's target already holds: CA asking again
    // for them (their members wait on something new nodes do not bring, such as a device
    // plugin advertising late) would only add nodes nobody uses. A target below what the
    // covered gangs count in flight means some requests never reached the backend (a crash
    // between the record and the backend call): CA's delta still applies then.
    let covered_here: u32 = covered
        .iter()
        .filter(|c| c.elsewhere.is_none())
        .map(|c| c.in_flight)
        .sum();
    let all_covered = !covered.is_empty()
        && covered_here > 0
        && input.target >= covered_here
        && input.ungrouped_nodes == 0;

    let (rule, wanted) = if headroom == 0 {
        (Rule::AtMax, None)
    } else if input.policy == Policy::Off {
        (Rule::Passthrough, Some(ca))
    } else if !needing && all_covered && input.policy == Policy::Strict {
        (Rule::AllCovered, None)
    } else if !needing {
        (Rule::NoGangs, Some(ca))
    } else if !admitted.is_empty() {
        let wanted = match input.policy {
            Policy::Strict => gang_nodes.max(ca.min(gang_nodes.saturating_add(ungrouped))),
            Policy::RoundUp | Policy::Off => ca.max(gang_nodes),
        };
        (Rule::GangsAdmitted, Some(wanted))
    } else if input.policy == Policy::RoundUp {
        (Rule::NoGangFitsRoundUp, Some(ca))
    } else if ungrouped > 0 {
        (Rule::UngroupedOnly, Some(ca.min(ungrouped)))
    } else {
        (Rule::NoGangFits, None)
    };
    let (verdict, applied, capped) = match wanted {
        Some(w) => (Verdict::Accept, w.min(headroom), w > headroom),
        None => (Verdict::Reject, 0, false),
    };
    let mut decision = Decision {
        group: input.group.clone(),
        policy: input.policy,
        verdict,
        rule,
        target: input.target,
        max_size: input.max_size,
        headroom,
        ca_delta: ca,
        applied_delta: applied,
        capped,
        gang_nodes,
        ungrouped_nodes: ungrouped,
        admitted,
        deferred,
        covered,
        unhostable,
        reason: String::new(),
        reservation_off: None,
        composites: Vec::new(),
    };
    decision.reason = explain(&decision, input.shape.is_none());
    decision
}

/// `gang` with every member's unresolved claims dropped: what the group could do for it once
/// its volumes resolve (their attach counts aside).
fn without_unresolved(gang: &Gang) -> Gang {
    let mut gang = gang.clone();
    for m in &mut gang.members {
        std::sync::Arc::make_mut(&mut m.demand)
            .unresolved_claims
            .clear();
    }
    gang
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

fn explain(d: &Decision, no_template: bool) -> String {
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
                names(&d.admitted, |a| match a.extent {
                    Extent::Whole => format!("{} {}", a.gang, a.nodes),
                    Extent::MinCount => format!("{} {} for minCount", a.gang, a.nodes),
                })
            )
        }
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
            names(&d.covered, |c| format!(
                "{} {} in flight",
                c.gang, c.in_flight
            )),
            d.target
        ),
        // Written by `combine`, which builds these decisions.
        Rule::CompositeAdmitted | Rule::CompositeShare => String::new(),
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
