//! Which nodes are held for which gang now: the pure half of node reservation (see
//! [`crate::model::reservation`] and `docs/reservation.md`).
//!
//! A gang lifecycle *reserves* while it is open, its group has reservation on, and its gang has
//! not formed. Each reserving lifecycle holds up to its gang's node count (`gangs[].nodes` of
//! the decision; all of its scale-up's nodes when the scale-up was for that gang alone and the
//! count is unknown), chosen in this order:
//! 1. nodes whose reservation taint already names the gang: the state lives on the Node, so a
//!    restarted or newly elected replica keeps what is held and two scale-ups of one group
//!    that swap nodes in attribution do not move a reservation;
//! 2. then, by name, the nodes requested for it that no other gang holds: where its group's
//!    backend keeps claims (every shipped one), the nodes claimed for this gang of this
//!    scale-up ([`Attribution::by_gang`]); otherwise the nodes attributed to its scale-up
//!    ([`Attribution::by_scale_up`]);
//! 3. then, still short, and only where nodes are not held by claim: the nodes attributed to
//!    its group's other reserving scale-ups that no gang holds (first-come attribution may
//!    swap nodes between two scale-ups of one group while their holds stay put). Nodes of
//!    scale-ups that reserve nothing (pods outside any gang) are never taken. A gang held by
//!    claim never takes a node requested for another gang, whatever their ages: the nodes go
//!    to the gang they were added for.
//!
//! The booking deadline of a group whose files set none is measured ([`Provisioning`]): the
//! P95 of its recent nodes' provisioning times plus a margin.
//!
//! A node whose `Ready` condition turned True `bookingDeadline` or longer ago is *booked out*:
//! it is held no longer, and (see [`Wanted::booked_out`]) it loses its scale-down protection
//! too, so CA may remove it if the gang never used it. Every other node carrying the taint is
//! released, with a [`ReleaseReason`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::observe::Attribution;
use super::track::Open;
pub use crate::audit::ReleaseReason;
use crate::audit::{GangId, Phase};
use crate::cluster::NodeTable;
use crate::model::reservation::{UNASSIGNED, value_for};
use crate::model::{GangRef, ReservationSpec};

/// A node held for a gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The taint value ([`value_for`] of the gang).
    pub value: String,
    /// The gang (`<namespace>/<name>` is the node's annotation).
    pub gang: GangRef,
    /// The scale-up the node was added by.
    pub scale_up_id: String,
    /// Its node group.
    pub node_group: String,
}

/// What reservation wants this tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Node → the gang it is held for.
    pub holds: BTreeMap<String, Hold>,
    /// Nodes of reserving lifecycles past their booking deadline: neither held nor protected.
    pub booked_out: BTreeSet<String>,
    /// Taint values of the gangs whose lifecycle is open in a reserving group and formed.
    pub formed: BTreeSet<String>,
    /// Every reserving lifecycle's scale-up had its nodes attributed this tick. When not (a
    /// backend could not list its instances), nodes under [`UNASSIGNED`] are kept, not
    /// released: one of them may be that scale-up's.
    pub complete: bool,
}

impl Wanted {
    /// Why the reservation with taint `value` on `node`, not held any more, ends; `None` when
    /// it must stay for now (an [`UNASSIGNED`] node while attribution is incomplete).
    pub fn release_reason(&self, node: &str, value: &str) -> Option<ReleaseReason> {
        if self.booked_out.contains(node) {
            Some(ReleaseReason::BookingDeadline)
        } else if self.formed.contains(value) {
            Some(ReleaseReason::Formed)
        } else if value == UNASSIGNED {
            self.complete.then_some(ReleaseReason::Unclaimed)
        } else {
            Some(ReleaseReason::Ended)
        }
    }
}

/// `name` is in the table and may be assigned to a gang now: not a Node Cluster API has yet
/// to initialize ([`CLUSTER_API_UNINITIALIZED`](crate::model::reservation::CLUSTER_API_UNINITIALIZED)).
fn assignable(nodes: &NodeTable, name: &str) -> bool {
    nodes.get(name).is_some_and(|s| !s.uninitialized)
}

/// A reserving lifecycle: its gang's taint value and its booking deadline in seconds.
struct Reserving<'a> {
    open: &'a Open,
    value: String,
    deadline: i64,
}

/// Reserving lifecycles in request order: (requested at, scale-up, gang).
type ByRequest<'a> = BTreeMap<(i64, &'a str, &'a GangId), Reserving<'a>>;

/// What every step of [`wanted`] reads.
struct Pass<'a> {
    attributed: &'a Attribution,
    nodes: &'a NodeTable,
    now_unix: i64,
    reserving: ByRequest<'a>,
    /// Gangs (reserving or not) per scale-up: a scale-up for one gang alone gives it all of
    /// its nodes when the gang's node count is unknown.
    gangs_per_scale_up: BTreeMap<&'a str, u32>,
}

/// The holds of every reserving lifecycle in `open` (see the module docs). `settings` are the
/// node groups' reservation settings by id (a group missing there reserves nothing);
/// `attributed` the nodes each scale-up and, by claim, each gang lifecycle got; `now_unix` the
/// wall clock in seconds.
pub fn wanted(
    open: &[Open],
    attributed: &Attribution,
    settings: &BTreeMap<String, ReservationSpec>,
    nodes: &NodeTable,
    now_unix: i64,
) -> Wanted {
    let mut w = Wanted {
        complete: true,
        ..Wanted::default()
    };
    let pass = Pass::new(open, attributed, settings, nodes, now_unix, &mut w);
    pass.book_out(&mut w);
    let mut have = pass.keep_marked(&mut w);
    pass.take_attributed(&mut w, &mut have);
    pass.take_spare(&mut w, &mut have);
    w
}

impl<'a> Pass<'a> {
    /// Sorts the open lifecycles out: formed gangs go to `w.formed`; the reserving ones are
    /// kept in request order, and `w.complete` says whether all of them had their nodes
    /// attributed.
    fn new(
        open: &'a [Open],
        attributed: &'a Attribution,
        settings: &BTreeMap<String, ReservationSpec>,
        nodes: &'a NodeTable,
        now_unix: i64,
        w: &mut Wanted,
    ) -> Self {
        let mut pass = Pass {
            attributed,
            nodes,
            now_unix,
            reserving: BTreeMap::new(),
            gangs_per_scale_up: BTreeMap::new(),
        };
        for o in open {
            let (Some(gang), Some(spec)) = (&o.gang, settings.get(&o.node_group)) else {
                continue;
            };
            *pass.gangs_per_scale_up.entry(&o.scale_up_id).or_default() += 1;
            if !spec.enabled {
                continue;
            }
            let value = value_for(&GangRef::from(gang));
            if o.phase >= Phase::GangFormed {
                w.formed.insert(value);
                continue;
            }
            w.complete &= attributed.by_scale_up.contains_key(&o.scale_up_id);
            let deadline = i64::try_from(spec.booking_deadline.as_secs()).unwrap_or(i64::MAX);
            pass.reserving.insert(
                (o.requested_at_ms, o.scale_up_id.as_str(), gang),
                Reserving {
                    open: o,
                    value,
                    deadline,
                },
            );
        }
        pass
    }

    /// Whether `name` turned Ready `deadline` seconds ago or earlier.
    fn booked(&self, name: &str, deadline: i64) -> bool {
        self.nodes
            .get(name)
            .and_then(|s| s.ready_since_unix)
            .is_some_and(|t| t.saturating_add(deadline) <= self.now_unix)
    }

    /// The nodes requested for `o`: claimed for its gang where its group keeps claims, else
    /// attributed to its scale-up.
    fn attributed_to(&self, o: &Open) -> impl Iterator<Item = &'a String> + use<'a> {
        self.attributed
            .by_gang
            .get(&o.key())
            .or_else(|| self.attributed.by_scale_up.get(&o.scale_up_id))
            .into_iter()
            .flatten()
    }

    /// Whether `o`'s nodes are known by claim (step 3 does not apply to it).
    fn by_claim(&self, o: &Open) -> bool {
        self.attributed.by_gang.contains_key(&o.key())
    }

    /// The nodes of a reserving lifecycle's scale-up past its booking deadline.
    fn book_out(&self, w: &mut Wanted) {
        for r in self.reserving.values() {
            for name in self.attributed_to(r.open) {
                if self.booked(name, r.deadline) {
                    w.booked_out.insert(name.clone());
                }
            }
        }
    }

    /// How many nodes the lifecycle `o` holds at most.
    fn needs(&self, o: &Open) -> u32 {
        if o.gang_nodes > 0 {
            o.gang_nodes
        } else if self.gangs_per_scale_up.get(o.scale_up_id.as_str()) == Some(&1) {
            u32::MAX
        } else {
            0
        }
    }

    /// Step 1: what the nodes already hold for a reserving gang stays held. Returns the nodes
    /// each taint value holds.
    fn keep_marked(&self, w: &mut Wanted) -> BTreeMap<String, u32> {
        let by_value: BTreeMap<&str, &Reserving<'a>> = self
            .reserving
            .values()
            .map(|r| (r.value.as_str(), r))
            .collect();
        let mut have: BTreeMap<String, u32> = BTreeMap::new();
        for name in self.nodes.marked() {
            let Some(value) = self.nodes.get(name).and_then(|s| s.reservation.as_deref()) else {
                continue;
            };
            let Some(r) = by_value.get(value) else {
                continue;
            };
            if self.booked(name, r.deadline) {
                w.booked_out.insert(name.to_owned());
                continue;
            }
            w.holds.insert(name.to_owned(), hold(r));
            *have.entry(value.to_owned()).or_default() += 1;
        }
        have
    }

    /// Step 2: each reserving gang, in request order, takes its scale-up's nodes by name.
    fn take_attributed(&self, w: &mut Wanted, have: &mut BTreeMap<String, u32>) {
        for r in self.reserving.values() {
            let need = self.needs(r.open);
            let had = have.entry(r.value.clone()).or_default();
            let mut names: Vec<&String> = self.attributed_to(r.open).collect();
            names.sort();
            for name in names {
                if *had >= need {
                    break;
                }
                if w.holds.contains_key(name) || w.booked_out.contains(name) {
                    continue;
                }
                // Held for a gang that is still reserving is kept above; a value no reserving
                // gang has (an ended one) is free to take. Not before Cluster API has set its
                // taints: it would set the reservation back to unassigned.
                if !assignable(self.nodes, name) {
                    continue;
                }
                w.holds.insert(name.clone(), hold(r));
                *had += 1;
            }
        }
    }

    /// Step 3: a gang still short takes the nodes of its group's other reserving scale-ups
    /// that no gang holds (attribution swapped nodes between two scale-ups whose holds
    /// stayed put). Not for gangs held by claim, nor with their nodes.
    fn take_spare(&self, w: &mut Wanted, have: &mut BTreeMap<String, u32>) {
        let mut spare: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
        for r in self.reserving.values().filter(|r| !self.by_claim(r.open)) {
            for name in self.attributed_to(r.open) {
                if !w.holds.contains_key(name)
                    && !w.booked_out.contains(name)
                    && assignable(self.nodes, name)
                {
                    spare
                        .entry(r.open.node_group.as_str())
                        .or_default()
                        .push(name);
                }
            }
        }
        for list in spare.values_mut() {
            list.sort();
            list.dedup();
        }
        for r in self.reserving.values().filter(|r| !self.by_claim(r.open)) {
            let need = self.needs(r.open);
            let had = have.entry(r.value.clone()).or_default();
            let Some(list) = spare.get_mut(r.open.node_group.as_str()) else {
                continue;
            };
            while *had < need && !list.is_empty() {
                let name = list.remove(0);
                w.holds.insert(name.clone(), hold(r));
                *had += 1;
            }
        }
    }
}

/// Fewest provisioning times measured on a group before its booking deadline is measured.
pub const MIN_PROVISION_SAMPLES: usize = 5;
/// Provisioning times kept per group: the most recent nodes.
pub const PROVISION_SAMPLES: usize = 50;
/// What a measured booking deadline adds to the group's provisioning P95: the gang's
/// scheduling once its last node is Ready, its volumes' attachment, and slack.
pub const BOOKING_MARGIN: Duration = Duration::from_secs(2 * 60);
/// The longest booking deadline (as `bookingDeadline` allows).
const MAX_BOOKING: Duration = Duration::from_secs(24 * 60 * 60);

/// The provisioning times of a node group's recent nodes: from the request of the scale-up a
/// node was attributed to until the node turned Ready, each node measured once.
#[derive(Debug, Clone, Default)]
pub struct Provisioning {
    /// Seconds, oldest first, at most [`PROVISION_SAMPLES`].
    recent: VecDeque<u64>,
    /// The nodes measured, so that none counts twice; forgotten once gone
    /// ([`Provisioning::retain_nodes`]).
    measured: BTreeSet<String>,
}

impl Provisioning {
    /// Measures `node`, Ready `seconds` after its request, unless it was measured already.
    pub fn observe(&mut self, node: &str, seconds: u64) {
        if !self.measured.insert(node.to_owned()) {
            return;
        }
        if self.recent.len() == PROVISION_SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(seconds);
    }

    /// Forgets the measured nodes `exists` says are gone (their times stay counted).
    pub fn retain_nodes(&mut self, exists: impl Fn(&str) -> bool) {
        self.measured.retain(|n| exists(n));
    }

    /// The P95 (nearest rank) of the recent times, once [`MIN_PROVISION_SAMPLES`] are in.
    pub fn p95(&self) -> Option<Duration> {
        if self.recent.len() < MIN_PROVISION_SAMPLES {
            return None;
        }
        let mut sorted: Vec<u64> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        // Nearest rank: the ceil(0.95 n)-th smallest.
        let rank = (sorted.len() * 95).div_ceil(100).max(1);
        Some(Duration::from_secs(sorted[rank - 1]))
    }

    /// The booking deadline of a group whose files set none: the P95 plus
    /// [`BOOKING_MARGIN`], at most 24 hours; `fallback` until measured. A reserved node waits
    /// for the rest of its gang's nodes, which were requested with it: rarely longer than
    /// the slowest of them takes to come.
    pub fn deadline(&self, fallback: Duration) -> Duration {
        self.p95()
            .map_or(fallback, |p| (p + BOOKING_MARGIN).min(MAX_BOOKING))
    }
}

/// The hold of one node for the reserving lifecycle `r`.
fn hold(r: &Reserving<'_>) -> Hold {
    let o = r.open;
    Hold {
        value: r.value.clone(),
        gang: o.gang.as_ref().map(GangRef::from).unwrap_or_default(),
        scale_up_id: o.scale_up_id.clone(),
        node_group: o.node_group.clone(),
    }
}

#[cfg(test)]
mod tests;
