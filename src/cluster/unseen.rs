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
mod tests {
    use super::*;
    use crate::model::{Member, PodDemand};

    const NOW: i64 = 1_788_264_000;
    const AFTER: Duration = Duration::from_secs(120);

    /// A pending gang `name` created `age` seconds before [`NOW`], with `members` members
    /// without a verdict and `min_count` 2.
    fn gang(name: &str, members: usize, age: i64) -> Gang {
        Gang {
            id: GangRef {
                namespace: "ml".into(),
                name: name.into(),
                api_version: "scheduling.k8s.io/v1beta1".into(),
                kind: "PodGroup".into(),
            },
            min_count: 2,
            members: (0..members)
                .map(|i| Member {
                    pod: format!("{name}-{i}"),
                    node: None,
                    demand: PodDemand::default().into(),
                    verdict: false,
                    scheduler_name: None,
                })
                .collect(),
            priority: 0,
            created_unix: NOW - age,
            topology_key: None,
            composite: None,
            scheduled: false,
        }
    }

    fn names(unseen: &[Unseen]) -> Vec<&str> {
        unseen.iter().map(|u| u.gang.name.as_str()).collect()
    }

    #[test]
    fn a_whole_gang_without_verdicts_past_the_threshold_is_unseen() {
        let got = unseen(&[gang("train", 2, 120).into()], NOW, AFTER);
        assert_eq!(
            got,
            [Unseen {
                gang: gang("train", 0, 0).id,
                members: 2,
                min_count: 2,
                age_secs: 120,
                schedulers: Vec::new(),
            }]
        );
        let message = got[0].message();
        assert!(
            message.starts_with("2 member(s) of this gang (minCount 2)"),
            "{message}"
        );
        assert!(message.contains("for 120s"), "{message}");
        assert!(message.contains("DynamicResources"), "{message}");
        assert!(message.contains("PodGroupPostFilter"), "{message}");
        assert!(message.contains("kube-scheduler's log"), "{message}");
        assert!(
            message.contains("Cluster Autoscaler only scales up for pods marked"),
            "{message}"
        );
        assert!(
            message.len() <= 1000,
            "fits an Event note: {}",
            message.len()
        );
    }

    #[test]
    fn a_gang_below_min_count_is_not_flagged() {
        // An incomplete gang waits at PreEnqueue without a verdict; that is not this problem.
        assert!(unseen(&[gang("partial", 1, 3600).into()], NOW, AFTER).is_empty());
        assert!(unseen(&[gang("empty", 0, 3600).into()], NOW, AFTER).is_empty());
    }

    #[test]
    fn a_gang_younger_than_the_threshold_is_not_flagged() {
        assert!(unseen(&[gang("young", 2, 119).into()], NOW, AFTER).is_empty());
        assert_eq!(
            names(&unseen(&[gang("young", 2, 119).into()], NOW + 1, AFTER)),
            ["young"]
        );
    }

    #[test]
    fn one_member_with_a_verdict_means_not_flagged() {
        let mut g = gang("tried", 3, 3600);
        g.members[1].verdict = true;
        assert!(unseen(&[g.into()], NOW, AFTER).is_empty());
    }

    #[test]
    fn a_bound_member_means_not_flagged() {
        let mut g = gang("started", 3, 3600);
        g.members[0].node = Some("gpu-0".into());
        assert!(unseen(&[g.into()], NOW, AFTER).is_empty());
    }

    #[test]
    fn a_gang_reported_scheduled_is_not_flagged() {
        let mut g = gang("admitted", 2, 3600);
        g.scheduled = true;
        assert!(unseen(&[g.into()], NOW, AFTER).is_empty());
    }

    #[test]
    fn a_non_default_scheduler_name_appears_in_the_message() {
        let mut g = gang("custom", 3, 600);
        g.members[0].scheduler_name = Some("volcano".into());
        g.members[2].scheduler_name = Some("volcano".into());
        let got = unseen(&[g.into()], NOW, AFTER);
        assert_eq!(got[0].schedulers, ["volcano"]);
        let message = got[0].message();
        assert!(
            message.contains("no scheduler named \"volcano\" may be running"),
            "{message}"
        );
        assert!(!message.contains("DynamicResources"), "{message}");
        assert!(
            message.contains("Cluster Autoscaler only scales up for pods marked"),
            "{message}"
        );
    }

    #[test]
    fn several_scheduler_names_are_listed_once_each() {
        let mut g = gang("mixed", 2, 600);
        g.members[0].scheduler_name = Some("b-sched".into());
        g.members[1].scheduler_name = Some("a-sched".into());
        let got = unseen(&[g.into()], NOW, AFTER);
        assert_eq!(got[0].schedulers, ["a-sched", "b-sched"]);
        assert!(
            got[0]
                .message()
                .contains("no scheduler named \"a-sched\" or \"b-sched\" may be running")
        );
    }

    #[test]
    fn only_the_unseen_gangs_are_returned_in_order() {
        let mut seen = gang("seen", 2, 600);
        seen.members[0].verdict = true;
        let got = unseen(
            &[
                gang("a", 2, 600).into(),
                seen.into(),
                gang("b", 4, 600).into(),
            ],
            NOW,
            AFTER,
        );
        assert_eq!(names(&got), ["a", "b"]);
        assert_eq!(got[1].members, 4);
    }
}
