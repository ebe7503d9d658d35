//! Packing a gang's unbound members onto fresh nodes of one shape.
//!
//! # Algorithm
//!
//! First-fit decreasing over vectors of limits (cpu, memory, ephemeral storage, pod slots,
//! every extended resource the shape offers, and the attach limit of every CSI driver the shape
//! limits):
//!
//! 1. Every member is checked alone against a fresh node (taints, node selector, node affinity,
//!    each limit); the first failure makes the whole gang unfittable.
//! 2. Members are sorted by their dominant share — the largest fraction of any one limit they
//!    use — largest first, ties broken by pod name, so the result depends only on the input.
//! 3. Each member goes onto the first open node that still has room in every dimension, or a
//!    new node when none has.
//!
//! A node is only ever given members whose sums stay within every limit, so a returned count
//! never under-counts. For a homogeneous gang (all members' demands equal, the common case)
//! first-fit decreasing fills each node before opening the next, so the result is computed in
//! closed form: `per_node` is the least `limit / use` over the limits a member uses, and the
//! count is the exact minimum, `ceil(n / per_node)`. For mixed gangs first-fit decreasing may use more nodes than an
//! optimal packing (bin packing is NP-hard), never fewer than the plan really needs.

use crate::model::{Gang, Member, PodDemand};

use super::explain::Reason;
use super::predicates::check_into;
use super::shape::NodeShape;

/// How a gang's unbound members pack onto fresh nodes of one shape.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangFit {
    /// Nodes that host every unbound member.
    pub nodes_all: u32,
    /// Nodes that host enough unbound members for the gang to reach `min_count` together with
    /// its bound members: 0 when already reached, `nodes_all` when the gang has too few pods to
    /// reach it at all. Never more than `nodes_all`.
    pub nodes_min: u32,
    /// Pod names per node of the `nodes_all` plan, in packing order.
    pub placement: Vec<Vec<String>>,
}

/// A packing by member index (into the gang's unbound members).
struct Packing {
    nodes_all: u32,
    nodes_min: u32,
    /// Member indices per node; empty unless the placement was asked for.
    bins: Vec<Vec<usize>>,
}

/// Places `gang`'s unbound members onto fresh nodes of `shape` (see the module docs for the
/// algorithm). Bound members are ignored: they already run somewhere.
///
/// The gang's `topology_key`, when set, must be a label of the shape: all nodes of a group
/// share one topology domain, so a group whose nodes lack the label cannot host the gang.
///
/// # Errors
///
/// [`Reason::NothingToPlace`] when no member is unbound, [`Reason::TopologyMissing`], or the
/// first member that cannot run on a fresh node alone ([`Reason::PodTooLarge`],
/// [`Reason::CsiLimit`], [`Reason::Untolerated`], [`Reason::SelectorMismatch`],
/// [`Reason::AffinityMismatch`], [`Reason::UnresolvedClaim`]).
pub fn fit(gang: &Gang, shape: &NodeShape) -> Result<GangFit, Reason> {
    let members: Vec<&Member> = gang.unbound().collect();
    let packing = pack_gang(gang, &members, shape, true)?;
    let placement = packing
        .bins
        .iter()
        .map(|bin| bin.iter().map(|&i| members[i].pod.clone()).collect())
        .collect();
    Ok(GangFit {
        nodes_all: packing.nodes_all,
        nodes_min: packing.nodes_min,
        placement,
    })
}

/// [`fit`] without the placement: `(nodes_all, nodes_min)`.
pub(crate) fn fit_counts(gang: &Gang, shape: &NodeShape) -> Result<(u32, u32), Reason> {
    let members: Vec<&Member> = gang.unbound().collect();
    pack_gang(gang, &members, shape, false).map(|p| (p.nodes_all, p.nodes_min))
}

/// Checks one pod alone against a fresh node of `shape`: every predicate and every limit.
///
/// # Errors
///
/// The first predicate or limit the pod fails, naming `pod`.
pub fn check_pod(pod: &str, demand: &PodDemand, shape: &NodeShape) -> Result<(), Reason> {
    let mut row = vec![0; shape.limits().len()];
    check_into(pod, demand, shape, &mut row)
}

/// Fresh nodes of `shape` that host all of `pods` (e.g. the pending pods that belong to no
/// gang), packed like a gang's members. `Ok(0)` for no pods. Pods are named `pod[<index>]` in
/// reasons; callers that want to skip unhostable pods can filter with [`check_pod`] first.
///
/// # Errors
///
/// The first pod that cannot run on a fresh node alone.
pub fn nodes_for_pods(pods: &[PodDemand], shape: &NodeShape) -> Result<u32, Reason> {
    if pods.is_empty() {
        return Ok(0);
    }
    let names: Vec<String> = (0..pods.len()).map(|i| format!("pod[{i}]")).collect();
    let items: Vec<(&str, &PodDemand)> =
        names.iter().map(String::as_str).zip(pods.iter()).collect();
    let n = u32::try_from(items.len()).unwrap_or(u32::MAX);
    pack(&items, shape, n, false).map(|p| p.nodes_all)
}

fn pack_gang(
    gang: &Gang,
    members: &[&Member],
    shape: &NodeShape,
    placement: bool,
) -> Result<Packing, Reason> {
    if members.is_empty() {
        return Err(Reason::NothingToPlace);
    }
    if let Some(key) = &gang.topology_key
        && !shape.labels().contains_key(key)
    {
        return Err(Reason::TopologyMissing { key: key.clone() });
    }
    let items: Vec<(&str, &PodDemand)> = members
        .iter()
        .map(|m| (m.pod.as_str(), &*m.demand))
        .collect();
    let to_reach_min = gang.min_count.saturating_sub(gang.bound_count());
    pack(&items, shape, to_reach_min, placement)
}

/// Checks and packs `items`; `min` is how many of them must be placed for `nodes_min`.
/// `bins` is filled only when `placement` is asked for.
fn pack(
    items: &[(&str, &PodDemand)],
    shape: &NodeShape,
    min: u32,
    placement: bool,
) -> Result<Packing, Reason> {
    let limits = shape.limits();
    let d = limits.len();
    let n = items.len();
    let min = usize::try_from(min).unwrap_or(usize::MAX);
    let Some(((first_pod, first), rest)) = items.split_first() else {
        return Ok(Packing {
            nodes_all: 0,
            nodes_min: 0,
            bins: Vec::new(),
        });
    };
    let mut rows = vec![0u64; n * d];
    check_into(first_pod, first, shape, &mut rows[..d])?;
    // Gangs are usually homogeneous: identical demands pass the same checks and pack in
    // closed form.
    if rest.iter().all(|(_, demand)| demand == first) {
        return Ok(uniform(items, &rows[..d], limits, min, placement));
    }
    for (i, (pod, demand)) in items.iter().enumerate().skip(1) {
        let (done, row) = rows.split_at_mut(i * d);
        if items[i - 1].1 == *demand {
            row[..d].copy_from_slice(&done[(i - 1) * d..]);
        } else {
            check_into(pod, demand, shape, &mut row[..d])?;
        }
    }
    let keys: Vec<u64> = rows.chunks_exact(d).map(|r| dominant(r, limits)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        keys[b]
            .cmp(&keys[a])
            .then_with(|| items[a].0.cmp(items[b].0))
    });

    let bins = first_fit(&order, &rows, limits);
    let nodes_all = count(bins.len());
    let nodes_min = if min == 0 {
        0
    } else if min >= n {
        nodes_all
    } else {
        // Two valid plans for `min` members; take the smaller. (a) The `min` smallest members
        // packed alone. (b) The fullest nodes of the full plan until they hold `min` members.
        // (b) also guarantees nodes_min <= nodes_all, which first-fit alone does not.
        let alone = count(first_fit(&order[n - min..], &rows, limits).len());
        let mut sizes: Vec<usize> = bins.iter().map(Vec::len).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let (mut held, mut fullest) = (0, 0);
        for s in sizes {
            if held >= min {
                break;
            }
            held += s;
            fullest += 1;
        }
        alone.min(count(fullest))
    };
    Ok(Packing {
        nodes_all,
        nodes_min,
        bins: if placement { bins } else { Vec::new() },
    })
}

/// First-fit decreasing of `items.len()` copies of `row`, in closed form: every key ties, so
/// members go in pod-name order, `per` to a node, where `per` is the least `limit / use` over
/// the limits the row uses.
fn uniform(
    items: &[(&str, &PodDemand)],
    row: &[u64],
    limits: &[u64],
    min: usize,
    placement: bool,
) -> Packing {
    let per = row
        .iter()
        .zip(limits)
        .filter_map(|(&used, &limit)| limit.checked_div(used))
        .min()
        .unwrap_or(u64::MAX);
    // The row passed its checks, so it fits an empty node: per >= 1.
    let per = usize::try_from(per).unwrap_or(usize::MAX).max(1);
    let n = items.len();
    let nodes = |k: usize| count(k.div_ceil(per));
    let bins = if placement {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| items[a].0.cmp(items[b].0));
        order.chunks(per).map(<[usize]>::to_vec).collect()
    } else {
        Vec::new()
    };
    Packing {
        nodes_all: nodes(n),
        nodes_min: if min == 0 { 0 } else { nodes(min.min(n)) },
        bins,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The largest fraction of any limit a row uses, in units of 2^-32 (a row never exceeds a
/// limit, so the value is at most 2^32).
fn dominant(row: &[u64], limits: &[u64]) -> u64 {
    row.iter()
        .zip(limits)
        .filter(|&(_, &limit)| limit > 0)
        .map(|(&used, &limit)| {
            u64::try_from((u128::from(used) << 32) / u128::from(limit)).unwrap_or(u64::MAX)
        })
        .max()
        .unwrap_or(0)
}

/// First fit of `order` (indices into `rows`, each `limits.len()` wide) onto nodes with
/// `limits`. Every row must fit an empty node.
fn first_fit(order: &[usize], rows: &[u64], limits: &[u64]) -> Vec<Vec<usize>> {
    let d = limits.len();
    let row = |i: usize| &rows[i * d..(i + 1) * d];
    let mut free: Vec<u64> = Vec::new();
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let mut previous: Option<(usize, usize)> = None;
    for &i in order {
        let demand = row(i);
        // An item identical to the previous one cannot fit any node before the one that took
        // the previous item: those nodes had no room for it then and have only filled since.
        let start = match previous {
            Some((p, b)) if row(p) == demand => b,
            _ => 0,
        };
        let found = (start..bins.len()).find(|&b| {
            free[b * d..(b + 1) * d]
                .iter()
                .zip(demand)
                .all(|(f, x)| f >= x)
        });
        let b = match found {
            Some(b) => {
                for (f, x) in free[b * d..(b + 1) * d].iter_mut().zip(demand) {
                    *f -= x;
                }
                b
            }
            None => {
                free.extend(limits.iter().zip(demand).map(|(l, x)| l.saturating_sub(*x)));
                bins.push(Vec::new());
                bins.len() - 1
            }
        };
        bins[b].push(i);
        previous = Some((i, b));
    }
    bins
}
