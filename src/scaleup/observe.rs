//! [`observe`]: what the cluster shows of each open lifecycle, as an [`Observation`] the
//! [`Tracker`](super::Tracker) turns into records. Pure: the caller gathers [`Facts`] (nodes
//! and instances of the node groups, gang progress) at one instant and passes them in.
//! Depends on `audit`'s record types and [`progress`](mod@super::progress)'s types only.
//!
//! **Which nodes are a scale-up's.** Where the group's backend keeps claims (memory, kwok,
//! Cluster API: [`GroupFacts::by_claim`]), by claim: a scale-up's nodes, pending and failed
//! instances are the ones claimed for it, and a gang lifecycle's the ones claimed for its
//! gang (its phase counts them against the gang's own node count). A gang lifecycle's own
//! failed instances do not end it: while its gang has not formed they are handed to the
//! tracker to repair ([`Observation::failed`]). Instances without a claim there count for no
//! scale-up.
//!
//! A backend that keeps no claims (none of the shipped ones) gets first come, first served:
//! per node group, open scale-ups in request order each take the oldest not yet taken nodes
//! registered no earlier than their request (to the second), up to the number of nodes they
//! added; instances the backend lists that have not registered yet, and then failed
//! instances, are shared out the same way. Two scale-ups of one group in flight at once may
//! thus swap nodes, which changes no outcome of a gang: gang phases and outcomes come from
//! the gang itself.
//!
//! **Gang lifecycles.** The phase is the later of what its scale-up's nodes and its gang show:
//! `gangFormed` when [`GangProgress::formed`], `volumesAttached` when, in addition, every
//! volume of a bound member that needs attaching is attached. Outcomes, first match wins:
//! `cancelled` (the gang is gone), `preempted` (a member has `DisruptionTarget`),
//! `attachFailed` (a VolumeAttachment reports an attach error), `succeeded` (volumes attached
//! and at least `minCount` members `Running`), `provisionFailed` (the gang has not formed and
//! instances attributed to its scale-up failed, where attribution is not by claim).

use std::collections::BTreeMap;

pub use super::progress::GroupFacts;
use super::progress::{Claimed, GangProgress, NodeProgress};
use super::track::{Key, Observation, Open};
use crate::audit::{Outcome, Phase};
use crate::model::Claim;

/// Everything [`observe`] reads, gathered at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// Per node group whose instances could be read. A lifecycle of a group missing here
    /// gets no observation (no news).
    pub groups: BTreeMap<String, GroupFacts>,
    /// Every gang the cluster has, by (namespace, name).
    pub gangs: BTreeMap<(String, String), GangProgress>,
}

/// What one scale-up got of its group's nodes.
#[derive(Debug, Clone, Default)]
struct Share<'a> {
    /// Registered nodes plus instances not registered yet.
    created: u32,
    registered: u32,
    ready: u32,
    failed: Vec<String>,
    /// By claim: the failed instances, each as `(instance, what the backend said)`.
    charged: Vec<(String, String)>,
    /// Names of the registered nodes.
    nodes: Vec<&'a str>,
}

/// The observation of every lifecycle in `open` that `facts` has news of (see the module
/// docs), by key.
pub fn observe(open: &[Open], facts: &Facts) -> BTreeMap<Key, Observation> {
    let shares = attribute(open, facts);
    open.iter()
        .filter_map(|o| {
            let share = shares.get(&o.scale_up_id)?;
            let observation = match gang_share(o, facts) {
                Some(own) => observe_one(o, o.gang_nodes, &own, facts).repairing(&own),
                None => observe_one(o, o.nodes, share, facts),
            };
            Some((o.key(), observation))
        })
        .collect()
}

/// What was claimed for `open`'s gang alone, when its group attributes by claim and the
/// lifecycle knows its gang's node count.
fn gang_share<'a>(open: &Open, facts: &'a Facts) -> Option<Share<'a>> {
    let g = facts.groups.get(&open.node_group)?;
    let gang = open
        .gang
        .as_ref()
        .filter(|_| g.by_claim && open.gang_nodes > 0)?;
    let claim = Claim::for_gang(&open.scale_up_id, &gang.namespace, &gang.name);
    let mut own = claimed_share(g.claimed.get(&claim).into_iter());
    // Repaired rather than failed: see `Observation::repairing`.
    own.failed.clear();
    Some(own)
}

/// One share of the instances of `claims`: their nodes oldest first, then their pending and
/// failed instances.
fn claimed_share<'a>(claims: impl Iterator<Item = &'a Claimed>) -> Share<'a> {
    let mut share = Share::default();
    let mut nodes: Vec<&NodeProgress> = Vec::new();
    for c in claims {
        nodes.extend(&c.nodes);
        share.created = share.created.saturating_add(c.pending);
        share.charged.extend(c.failed.iter().cloned());
        share
            .failed
            .extend(c.failed.iter().map(|(_, why)| why.clone()));
    }
    nodes.sort_by(|a, b| (a.created_unix, &a.name).cmp(&(b.created_unix, &b.name)));
    for node in nodes {
        share.nodes.push(&node.name);
        share.registered += 1;
        share.ready += u32::from(node.ready);
    }
    share.created = share.created.saturating_add(share.registered);
    share
}

/// The registered nodes each open scale-up got (see the module docs), by scale-up id; a
/// scale-up of a group missing from `facts` is absent.
pub fn attributed_nodes(open: &[Open], facts: &Facts) -> BTreeMap<String, Vec<String>> {
    attribute(open, facts)
        .into_iter()
        .map(|(id, share)| (id, share.nodes.into_iter().map(str::to_owned).collect()))
        .collect()
}

/// The registered nodes of open scale-ups, as node marking reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Each scale-up's ([`attributed_nodes`]), by scale-up id.
    pub by_scale_up: BTreeMap<String, Vec<String>>,
    /// Each gang lifecycle's own, by key, where its group attributes by claim and the
    /// lifecycle knows its gang's node count: the nodes claimed for that gang, oldest first.
    /// Reservation holds these for the gang by name.
    pub by_gang: BTreeMap<Key, Vec<String>>,
}

/// The [`Attribution`] of `open` from `facts`.
pub fn attribution(open: &[Open], facts: &Facts) -> Attribution {
    Attribution {
        by_scale_up: attributed_nodes(open, facts),
        by_gang: open
            .iter()
            .filter_map(|o| {
                let own = gang_share(o, facts)?;
                Some((o.key(), own.nodes.into_iter().map(str::to_owned).collect()))
            })
            .collect(),
    }
}

/// Shares each group's nodes, pending and failed instances among its open scale-ups.
fn attribute<'a>(open: &[Open], facts: &'a Facts) -> BTreeMap<String, Share<'a>> {
    // One entry per scale-up: (group, requested at, id, nodes).
    let mut scale_ups: Vec<(&str, i64, &str, u32)> = open
        .iter()
        .map(|o| {
            (
                o.node_group.as_str(),
                o.requested_at_ms,
                o.scale_up_id.as_str(),
                o.nodes,
            )
        })
        .collect();
    scale_ups.sort_unstable();
    scale_ups.dedup();
    let mut shares = BTreeMap::new();
    let mut by_group: BTreeMap<&str, Vec<(i64, &str, u32)>> = BTreeMap::new();
    for (group, at, id, n) in scale_ups {
        by_group.entry(group).or_default().push((at, id, n));
    }
    for (group, list) in by_group {
        let Some(g) = facts.groups.get(group) else {
            continue;
        };
        if g.by_claim {
            for (_, id, _) in list {
                let claims = g
                    .claimed
                    .iter()
                    .filter(|(c, _)| c.scale_up == id)
                    .map(|(_, c)| c);
                shares.insert(id.to_owned(), claimed_share(claims));
            }
            continue;
        }
        let mut nodes: Vec<&NodeProgress> = g.nodes.iter().collect();
        nodes.sort_by(|a, b| (a.created_unix, &a.name).cmp(&(b.created_unix, &b.name)));
        let mut taken = vec![false; nodes.len()];
        let mut pending = g.pending;
        let mut failed = g.failed.iter();
        for (at_ms, id, n) in list {
            let since = at_ms.div_euclid(1000);
            let mut share = Share::default();
            for (i, node) in nodes.iter().enumerate() {
                if share.registered >= n {
                    break;
                }
                if !taken[i] && node.created_unix >= since {
                    taken[i] = true;
                    share.nodes.push(&node.name);
                    share.registered += 1;
                    share.ready += u32::from(node.ready);
                }
            }
            let from_pending = pending.min(n - share.registered);
            pending -= from_pending;
            share.created = share.registered + from_pending;
            let missing = n - share.created;
            share.failed = failed.by_ref().take(missing as usize).cloned().collect();
            shares.insert(id.to_owned(), share);
        }
    }
    shares
}

impl Observation {
    /// A gang lifecycle attributed by claim: its failed instances are repaired, not an
    /// outcome, while its gang has not formed.
    fn repairing(mut self, own: &Share<'_>) -> Self {
        if self.phase < Phase::GangFormed {
            self.failed = own.charged.clone();
        }
        self
    }
}

fn node_phase(n: u32, share: &Share<'_>) -> Phase {
    if n == 0 {
        // Reopened from a phase record whose decision was rotated away: the count is unknown.
        Phase::Requested
    } else if share.ready >= n {
        Phase::NodesReady
    } else if share.registered >= n {
        Phase::NodesRegistered
    } else if share.created >= n {
        Phase::InstancesCreated
    } else {
        Phase::Requested
    }
}

/// The observation of `open` from `share`, the instances attributed to it, against the `n`
/// nodes it stands for.
fn observe_one(open: &Open, n: u32, share: &Share<'_>, facts: &Facts) -> Observation {
    let nodes = node_phase(n, share);
    let node_detail = format!("{}/{n} nodes ready", share.ready);
    let provision_failed = (!share.failed.is_empty()).then(|| {
        (
            Outcome::ProvisionFailed,
            format!(
                "{} instance(s) failed: {}",
                share.failed.len(),
                share.failed.join("; ")
            ),
        )
    });
    let Some(gang) = &open.gang else {
        let mut obs = Observation::at(nodes).with_detail(node_detail);
        if nodes < Phase::NodesRegistered {
            obs.outcome = provision_failed;
        }
        return obs;
    };
    let Some(p) = facts
        .gangs
        .get(&(gang.namespace.clone(), gang.name.clone()))
    else {
        return Observation::at(nodes)
            .with_detail(node_detail)
            .with_outcome(Outcome::Cancelled, "the gang was deleted before it started");
    };
    let gang_phase = match (p.formed, p.volumes_ready()) {
        (true, true) => Phase::VolumesAttached,
        (true, false) => Phase::GangFormed,
        (false, _) => Phase::Requested,
    };
    let phase = nodes.max(gang_phase);
    let mut obs = Observation::at(phase)
        .with_pending_since_ms(p.created_unix.saturating_mul(1000))
        .with_attach_failures(u32::try_from(p.attach_errors.len()).unwrap_or(u32::MAX))
        .with_detail(format!(
            "{node_detail}; {}/{} members bound, {} running; {}/{} volumes attached",
            p.bound, p.min_count, p.running, p.volumes_attached, p.volumes_needed
        ));
    obs.outcome = if !p.disrupted.is_empty() {
        Some((
            Outcome::Preempted,
            format!("members disrupted: {}", p.disrupted.join(", ")),
        ))
    } else if !p.attach_errors.is_empty() {
        Some((
            Outcome::AttachFailed,
            format!("attach error: {}", p.attach_errors.join("; ")),
        ))
    } else if phase >= Phase::VolumesAttached && p.started() {
        Some((
            Outcome::Succeeded,
            format!(
                "{} of {} members running, {} volume(s) attached",
                p.running, p.min_count, p.volumes_attached
            ),
        ))
    } else if !p.formed {
        provision_failed
    } else {
        None
    };
    obs
}

#[cfg(test)]
mod tests;
