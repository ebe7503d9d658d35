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
