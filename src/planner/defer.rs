//! Deferral: which pending gangs Cluster Autoscaler should not be asked about now, because
//! gangscaler would add nothing for them if it were (issue 33: steer CA without failures).
//!
//! A rejected `NodeGroupIncreaseSize` is a failed scale-up to CA, which backs the group off.
//! A gang kept out of CA's scale-up costs CA nothing: the engine marks its pending members
//! with CA's per-pod `pod-scale-up-delay`, so CA does not consider them until the mark is
//! lifted or runs out. This module decides, purely, which gangs to mark and why.
//!
//! # Rules (policy `strict` only; `roundUp` and `off` defer nothing)
//!
//! Pending gangs are taken in admission order (priority, higher first; then the configured
//! [`Order`]: `age`, older first, or `fewestMissing`, fewest nodes missing on the group that
//! needs fewest, then older first; id), against every group's headroom (`maxSize - target`),
//! as admission would spend it:
//!
//! 1. A child of a composite is left to the composite pass (never deferred here).
//! 2. A gang with nodes in flight on a group (requested for it, not used yet) is **covered**
//!    when those nodes hold its whole need on that group's shape, or its `minCount` need when
//!    the whole need does not fit what is left there. Otherwise its missing nodes are taken
//!    from that group's headroom, or it waits (**no room**, or **behind** a gang taken before
//!    it), as below: repairs stay on the group its nodes were requested on.
//! 3. A gang no group can host ([`fit`](super::fit())) is **unhostable**: CA cannot know
//!    everything gangscaler checks (CSI attach limits, RDMA, topology, claims that do not
//!    resolve), and a call for it would be refused.
//! 4. Otherwise the gang takes its whole need from the hosting group with the most headroom
//!    left (ties by id), else its `minCount` need, spending the group's idle Ready nodes
//!    (`idle`, as admission credits them) before its headroom; a gang without a topology key
//!    that no group holds alone may instead take it over several groups that host it with
//!    the same node counts, most headroom first (as admission spreads it, see
//!    [`spread`](mod@super::spread)): its whole need, else its `minCount` need; if there is no
//!    room for either, it waits:
//!    **behind** the gangs taken before it when some hosting group had room for it before
//!    them, else **no room**.
//!
//! The result is advisory: CA still decides when to scale, and a call that arrives anyway is
//! decided by [`admit`](super::admit()) as before.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::model::{Gang, GangRef, NodeGroupId};

use super::composite::GroupSlot;
use super::decision::{Order, Policy};
use super::explain::Reason;
use super::fit::fit_counts;
use super::spread::take_pooled;

/// Everything one deferral pass depends on.
#[derive(Debug, Clone, Copy)]
pub struct DeferralInput<'a> {
    /// Every node group, with its shape, target and maximum.
    pub groups: &'a [GroupSlot<'a>],
    /// The gangs; those not pending are skipped.
    pub gangs: &'a [Arc<Gang>],
    /// Nodes requested for a gang and not yet used, with the group they were requested on.
    pub in_flight: &'a BTreeMap<GangRef, (NodeGroupId, u32)>,
    /// The admission policy.
    pub policy: Policy,
    /// The order of pending gangs of one priority.
    pub order: Order,
    /// Idle Ready nodes per group ([`AdmissionInput::idle_nodes`](super::AdmissionInput)):
    /// spent on the gangs taken, in order, before headroom.
    pub idle: &'a BTreeMap<NodeGroupId, u32>,
}

/// Why a gang is kept out of CA's scale-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Hold {
    /// Its nodes are in flight on `group`.
    Covered {
        /// The group they were requested on.
        group: NodeGroupId,
        /// Nodes in flight.
        in_flight: u32,
    },
    /// No group can host it.
    Unhostable {
        /// Why the first group cannot (groups in id order).
        reason: Reason,
    },
    /// No hosting group has room for its `minCount` need, even before any other gang.
    NoRoom {
        /// Its smallest `minCount` need over the hosting groups.
        need: u32,
        /// The most headroom any hosting group has.
        headroom: u32,
    },
    /// A hosting group had room for it, but gangs taken before it (higher priority, or
    /// older) use that room.
    Behind {
        /// Its smallest `minCount` need over the hosting groups.
        need: u32,
        /// The gang taken last before it on the group that had room.
        ahead: GangRef,
    },
}

impl Hold {
    /// A bounded label for metrics and records.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Covered { .. } => "covered",
            Self::Unhostable { .. } => "unhostable",
            Self::NoRoom { .. } => "no_room",
            Self::Behind { .. } => "behind",
        }
    }

    /// One sentence naming the numbers (the `deferral` record's `reason`).
    pub fn reason(&self) -> String {
        match self {
            Self::Covered { group, in_flight } => {
                format!("its nodes are in flight: {in_flight} on {group}")
            }
            Self::Unhostable { reason } => format!("no group can host it: {reason}"),
            Self::NoRoom { need, headroom } => format!(
                "no group has room for its {need} node(s): the most any group that can host it \
                 has is {headroom}"
            ),
            Self::Behind { need, ahead } => format!(
                "a group had room for its {need} node(s), but {ahead} and the gangs taken before \
                 it (in admission order) use that room"
            ),
        }
    }
}

/// One gang kept out of CA's scale-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deferral {
    /// The gang.
    pub gang: GangRef,
    /// Why.
    pub hold: Hold,
}

/// A group's headroom as the pass spends it.
struct Room<'a> {
    slot: &'a GroupSlot<'a>,
    left: u32,
    /// Idle nodes not yet spent.
    idle: u32,
    /// Idle nodes before any gang took from it.
    idle_at_start: u32,
    /// The last gang that took from it.
    last: Option<GangRef>,
}

/// The gangs to keep out of CA's scale-up now (rules in the module docs), sorted by gang.
/// Pure: the same input always gives the same result.
pub fn deferrals(input: &DeferralInput<'_>) -> Vec<Deferral> {
    if input.policy != Policy::Strict {
        return Vec::new();
    }
    let mut rooms: Vec<Room<'_>> = input
        .groups
        .iter()
        .map(|slot| Room {
            slot,
            left: slot.headroom(),
            idle: input.idle.get(slot.id).copied().unwrap_or(0),
            idle_at_start: input.idle.get(slot.id).copied().unwrap_or(0),
            last: None,
        })
        .collect();
    rooms.sort_by(|a, b| a.slot.id.cmp(b.slot.id));
    // Each pending gang with its node counts on every group (in `rooms` order), fitted once
    // for both the order and the hold.
    let mut pending: Vec<(&Gang, Vec<Counts>, u32)> = input
        .gangs
        .iter()
        .map(Arc::as_ref)
        .filter(|g| g.is_pending() && g.composite.is_none() && g.unbound().next().is_some())
        .map(|g| {
            let counts = counts_over(g, &rooms);
            let missing = match input.order {
                Order::Age => 0,
                Order::FewestMissing => missing(g, &counts, input.in_flight, &rooms),
            };
            (g, counts, missing)
        })
        .collect();
    pending.sort_by(|(a, _, am), (b, _, bm)| input.order.compare(a, *am, b, *bm));
    let mut out: Vec<Deferral> = pending
        .into_iter()
        .filter_map(|(gang, counts, _)| {
            hold(gang, &counts, input.in_flight, &mut rooms).map(|hold| Deferral {
                gang: gang.id.clone(),
                hold,
            })
        })
        .collect();
    out.sort_by(|a, b| a.gang.cmp(&b.gang));
    out
}

/// What one gang needs of one group: `(nodes_all, nodes_min)` minus what is in flight there.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Need {
    all: u32,
    min: u32,
}

/// The fresh nodes `need` takes of `room` once its idle nodes are spent.
fn fresh(need: u32, room: &Room<'_>) -> u32 {
    need.saturating_sub(room.idle)
}

/// A gang's `(nodes_all, nodes_min)` on one group's shape, or why it cannot be placed there.
type Counts = Result<(u32, u32), Reason>;

/// `gang`'s [`Counts`] on every group of `rooms`, in their order.
fn counts_over(gang: &Gang, rooms: &[Room<'_>]) -> Vec<Counts> {
    rooms
        .iter()
        .map(|room| {
            room.slot
                .shape
                .ok_or(Reason::NoTemplate)
                .and_then(|shape| fit_counts(gang, shape))
        })
        .collect()
}

/// The fewest nodes `gang` (with its `counts` over `rooms`) still misses on a group that can
/// host it (its whole need there less the nodes in flight for it there; only the group they
/// are in flight on counts), or `u32::MAX` when none can.
fn missing(
    gang: &Gang,
    counts: &[Counts],
    in_flight: &BTreeMap<GangRef, (NodeGroupId, u32)>,
    rooms: &[Room<'_>],
) -> u32 {
    let flying = in_flight.get(&gang.id);
    rooms
        .iter()
        .zip(counts)
        .filter_map(|(room, counts)| {
            let &(all, _) = counts.as_ref().ok()?;
            match flying {
                Some((group, _)) if group != room.slot.id => None,
                Some((_, n)) => Some(all.saturating_sub(*n)),
                None => Some(all),
            }
        })
        .min()
        .unwrap_or(u32::MAX)
}

/// Takes a need no hosting group holds alone over several that host the gang alike (the same
/// [`Need`]), most headroom left first, idle nodes before headroom: the whole need, else the
/// `minCount` need. Returns whether it was taken.
fn spread_over(gang: &GangRef, hosting: &[(usize, Need)], rooms: &mut [Room<'_>]) -> bool {
    let wants: [fn(&Need) -> u32; 2] = [|n| n.all, |n| n.min];
    for want in wants {
        for (_, class) in hosting {
            // `rooms` is in id order, so ties of headroom go by id.
            let mut alike: Vec<(usize, u32, u32)> = hosting
                .iter()
                .filter(|(_, n)| n == class)
                .map(|(i, _)| (*i, rooms[*i].left, rooms[*i].idle))
                .collect();
            alike.sort_by_key(|(i, _, _)| *i);
            let need = want(class);
            if alike.len() < 2 || need == 0 {
                continue;
            }
            let (shares, rest) = take_pooled(need, &alike);
            if rest > 0 {
                continue;
            }
            for (i, fresh, idle) in shares {
                rooms[i].idle -= idle;
                rooms[i].left -= fresh;
                rooms[i].last = Some(gang.clone());
            }
            return true;
        }
    }
    false
}

/// Takes `gang`'s need (its `counts` over `rooms`) from `rooms`, or says why it is held.
fn hold(
    gang: &Gang,
    counts: &[Counts],
    in_flight: &BTreeMap<GangRef, (NodeGroupId, u32)>,
    rooms: &mut [Room<'_>],
) -> Option<Hold> {
    let mut first_reason = None;
    // Each hosting group's index and the gang's need there.
    let mut hosting: Vec<(usize, Need)> = Vec::new();
    let flying = in_flight.get(&gang.id);
    for (i, (room, counts)) in rooms.iter().zip(counts).enumerate() {
        let (all, min) = match counts {
            Ok(c) => *c,
            Err(reason) => {
                first_reason.get_or_insert_with(|| reason.clone());
                continue;
            }
        };
        match flying {
            // Repairs stay on the group the gang's nodes were requested on.
            Some((group, _)) if group != room.slot.id => {}
            Some((_, n)) => {
                let need = Need {
                    all: all.saturating_sub(*n),
                    min: min.saturating_sub(*n),
                };
                if need.all == 0
                    || (need.min == 0 && need.all.saturating_sub(room.idle) > room.left)
                {
                    return Some(Hold::Covered {
                        group: room.slot.id.clone(),
                        in_flight: *n,
                    });
                }
                hosting.push((i, need));
            }
            None => hosting.push((i, Need { all, min })),
        }
    }
    if hosting.is_empty() {
        return Some(Hold::Unhostable {
            reason: first_reason.unwrap_or(Reason::NoTemplate),
        });
    }
    let pick = |need: fn(&Need) -> u32, rooms: &[Room<'_>]| {
        hosting
            .iter()
            .filter(|(i, n)| fresh(need(n), &rooms[*i]) <= rooms[*i].left)
            .max_by(|(i, _), (j, _)| {
                rooms[*i]
                    .left
                    .cmp(&rooms[*j].left)
                    .then_with(|| rooms[*j].slot.id.cmp(rooms[*i].slot.id))
            })
            .map(|(i, n)| (*i, need(n)))
    };
    let taken = pick(|n| n.all, rooms).or_else(|| pick(|n| n.min, rooms));
    if let Some((i, nodes)) = taken {
        let credit = nodes.min(rooms[i].idle);
        rooms[i].idle -= credit;
        rooms[i].left -= nodes - credit;
        rooms[i].last = Some(gang.id.clone());
        return None;
    }
    if flying.is_none()
        && gang.topology_key.is_none()
        && gang.composite.is_none()
        && spread_over(&gang.id, &hosting, rooms)
    {
        return None;
    }
    let need = hosting.iter().map(|(_, n)| n.min).min().unwrap_or(0);
    let had_room = hosting
        .iter()
        .filter(|(i, n)| n.min.saturating_sub(rooms[*i].idle_at_start) <= rooms[*i].slot.headroom())
        .find_map(|(i, _)| rooms[*i].last.clone());
    Some(match had_room {
        Some(ahead) => Hold::Behind { need, ahead },
        None => Hold::NoRoom {
            need,
            headroom: hosting
                .iter()
                .map(|(i, _)| rooms[*i].slot.headroom())
                .max()
                .unwrap_or(0),
        },
    })
}
