//! [`unseen`]: the gangs Cluster Autoscaler cannot see. CA scales up only for pods that
//! kube-scheduler marked `PodScheduled=False` with reason `Unschedulable`; a gang whose
//! members never get a verdict (a scheduler plugin that fails before recording one, or a
//! `schedulerName` no running scheduler serves) is ignored by CA forever, and nobody is told.
//! This module finds such gangs and says why, in words an operator can act on. Pure: the
//! clock and the threshold are arguments.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{Gang, GangRef};

/// A pending gang none of whose members carries a scheduler verdict, past the threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unseen {
    /// The gang.
    pub gang: GangRef,
    /// Members without a verdict (all of them: none is bound).
    pub members: u32,
    /// The gang's `minCount`.
    pub min_count: u32,
    /// Seconds since the gang was created.
    pub age_secs: i64,
    /// Distinct non-default `schedulerName`s the members name, sorted.
    pub schedulers: Vec<String>,
}

/// The gangs in `gangs` that CA cannot see at `now_unix`: a gang is *unseen* when it is
/// pending ([`Gang::is_pending`]), it has at least `minCount` members (fewer is an incomplete
/// gang that the scheduler holds at PreEnqueue, not this problem), none of its members is
/// bound, every member lacks a verdict ([`Member::verdict`](crate::model::Member::verdict)),
/// and it was created at least `after` ago. In the order of `gangs`.
pub fn unseen(gangs: &[Arc<Gang>], now_unix: i64, after: Duration) -> Vec<Unseen> {
    gangs
        .iter()
        .filter_map(|g| {
            let members = u32::try_from(g.members.len()).unwrap_or(u32::MAX);
            let age_secs = now_unix.saturating_sub(g.created_unix);
            let old_enough = u64::try_from(age_secs).is_ok_and(|s| Duration::from_secs(s) >= after);
            let unseen = g.is_pending()
                && members > 0
                && members >= g.min_count
                && g.bound_count() == 0
                && g.no_verdict_count() == members
                && old_enough;
            unseen.then(|| Unseen {
                gang: g.id.clone(),
                members,
                min_count: g.min_count,
                age_secs,
                schedulers: g
                    .no_verdict_schedulers()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            })
        })
        .collect()
}

impl Unseen {
    /// What is wrong and the likely cause, for an Event note and the operator.
    pub fn message(&self) -> String {
        let head = format!(
            "{} member(s) of this gang (minCount {}) have had no scheduler verdict (no PodScheduled condition, or one with reason SchedulerError) for {}s",
            self.members, self.min_count, self.age_secs
        );
        let cause = if self.schedulers.is_empty() {
            "kube-scheduler likely failed before recording one, e.g. kube-scheduler 1.37+'s \
             DynamicResources PodGroupPostFilter fails (\"not found\") in a cycle where no \
             member reached its PreFilter, always while the cluster has no Node (fix: disable \
             DynamicResources at plugins.podGroupPostFilter in every scheduler profile); check \
             kube-scheduler's log"
                .to_owned()
        } else {
            let names = self
                .schedulers
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>();
            format!(
                "they name schedulerName {}, and no scheduler named {} may be running",
                names.join(", "),
                names.join(" or ")
            )
        };
        format!(
            "{head}: {cause}. Cluster Autoscaler only scales up for pods marked \
             PodScheduled=False/Unschedulable, so it cannot see this gang"
        )
    }
}

#[cfg(test)]
mod tests;
