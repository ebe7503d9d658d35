use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::Event;

use super::*;
use crate::model::reservation::RESERVATION_TAINT;
use crate::scaleup::test_support::gang;

const NOW: i64 = 10_000;

fn open(id: &str, at_ms: i64, gang_name: &str, gang_nodes: u32, phase: Phase) -> Open {
    Open {
        scale_up_id: id.into(),
        node_group: "h100".into(),
        gang: Some(gang(gang_name)),
        nodes: gang_nodes,
        gang_nodes,
        phase,
        requested_at_ms: at_ms,
        formed_at_ms: None,
        attached_at_ms: None,
        repair: crate::scaleup::Repair::default(),
    }
}

/// A node Ready since `ready_since` (unix seconds), with the reservation taint `value`.
fn node(name: &str, ready_since: i64, value: Option<&str>) -> Node {
    let taints: Vec<_> = value
        .map(|v| serde_json::json!({"key": RESERVATION_TAINT, "value": v, "effect": "NoSchedule"}))
        .into_iter()
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"taints": taints},
        "status": {"conditions": [{
            "type": "Ready", "status": "True",
            "lastTransitionTime": jiff::Timestamp::from_second(ready_since).unwrap().to_string(),
        }]},
    }))
    .unwrap()
}

fn table(nodes: Vec<Node>) -> NodeTable {
    let mut t = NodeTable::new();
    for n in nodes {
        t.apply(&Event::Apply(n));
    }
    t
}

fn settings(enabled: bool) -> BTreeMap<String, ReservationSpec> {
    BTreeMap::from([(
        "h100".to_owned(),
        ReservationSpec {
            enabled,
            booking_deadline: Duration::from_secs(600),
            booking_deadline_measured: false,
        },
    )])
}

/// Nodes attributed per scale-up, first come, first served (no claims).
fn attributed(pairs: &[(&str, &[&str])]) -> Attribution {
    Attribution {
        by_scale_up: pairs
            .iter()
            .map(|(id, ns)| {
                (
                    (*id).to_owned(),
                    ns.iter().map(|n| (*n).to_owned()).collect(),
                )
            })
            .collect(),
        by_gang: BTreeMap::new(),
    }
}

fn value(name: &str) -> String {
    value_for(&GangRef::from(&gang(name)))
}

fn held(w: &Wanted) -> BTreeMap<&str, String> {
    w.holds
        .iter()
        .map(|(n, h)| (n.as_str(), h.gang.to_string()))
        .collect()
}

fn pairs<'a>(list: &[(&'a str, &str)]) -> BTreeMap<&'a str, String> {
    list.iter().map(|(n, g)| (*n, (*g).to_owned())).collect()
}

#[test]
fn two_gangs_of_one_scale_up_share_its_nodes_by_their_counts_in_request_order() {
    let mut a = open("s1", 1_000, "a", 2, Phase::NodesReady);
    let mut b = open("s1", 1_000, "b", 1, Phase::NodesReady);
    a.nodes = 3;
    b.nodes = 3;
    let nodes = table(vec![
        node("n3", NOW, Some(UNASSIGNED)),
        node("n1", NOW, Some(UNASSIGNED)),
        node("n2", NOW, Some(UNASSIGNED)),
        node("n4", NOW, Some(UNASSIGNED)),
    ]);
    let w = wanted(
        &[b, a],
        &attributed(&[("s1", &["n3", "n1", "n2", "n4"])]),
        &settings(true),
        &nodes,
        NOW,
    );
    assert_eq!(
        held(&w),
        pairs(&[("n1", "ml/a"), ("n2", "ml/a"), ("n3", "ml/b")])
    );
    assert_eq!(w.holds["n1"].value, value("a"));
    // n4 is nobody's: released as unclaimed.
    assert_eq!(
        w.release_reason("n4", UNASSIGNED),
        Some(ReleaseReason::Unclaimed)
    );
}

#[test]
fn a_node_cluster_api_has_not_initialized_is_assigned_only_once_it_has() {
    let a = open("s1", 1_000, "a", 2, Phase::NodesReady);
    let mut fresh = node("n2", NOW, None);
    fresh.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
        key: crate::model::reservation::CLUSTER_API_UNINITIALIZED.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    let attributed = attributed(&[("s1", &["n1", "n2"])]);
    let nodes = table(vec![node("n1", NOW, Some(UNASSIGNED)), fresh]);
    let w = wanted(
        std::slice::from_ref(&a),
        &attributed,
        &settings(true),
        &nodes,
        NOW,
    );
    assert_eq!(held(&w), pairs(&[("n1", "ml/a")]));
    // Cluster API's first reconcile lifts its taint and sets ours, unassigned.
    let nodes = table(vec![
        node("n1", NOW, Some(&value("a"))),
        node("n2", NOW, Some(UNASSIGNED)),
    ]);
    let w = wanted(&[a], &attributed, &settings(true), &nodes, NOW);
    assert_eq!(held(&w), pairs(&[("n1", "ml/a"), ("n2", "ml/a")]));
}

#[test]
fn a_node_already_held_for_a_reserving_gang_stays_with_it_whatever_the_attribution() {
    // The attribution moved n1 to s2 (two scale-ups of one group); n1's taint names a.
    let a = open("s1", 1_000, "a", 1, Phase::NodesReady);
    let b = open("s2", 2_000, "b", 1, Phase::NodesReady);
    let nodes = table(vec![
        node("n1", NOW, Some(&value("a"))),
        node("n2", NOW, Some(UNASSIGNED)),
    ]);
    let w = wanted(
        &[a, b],
        &attributed(&[("s1", &["n2"]), ("s2", &["n1"])]),
        &settings(true),
        &nodes,
        NOW,
    );
    assert_eq!(held(&w), pairs(&[("n1", "ml/a"), ("n2", "ml/b")]));
}

#[test]
fn past_the_booking_deadline_a_node_is_neither_held_nor_kept_and_says_why() {
    let a = open("s1", 1_000, "a", 2, Phase::NodesReady);
    let nodes = table(vec![
        node("old", NOW - 600, Some(&value("a"))),
        node("new", NOW - 599, Some(&value("a"))),
    ]);
    let w = wanted(
        &[a],
        &attributed(&[("s1", &["old", "new"])]),
        &settings(true),
        &nodes,
        NOW,
    );
    assert_eq!(held(&w), pairs(&[("new", "ml/a")]));
    assert_eq!(w.booked_out, BTreeSet::from(["old".to_owned()]));
    assert_eq!(
        w.release_reason("old", &value("a")),
        Some(ReleaseReason::BookingDeadline)
    );
}

#[test]
fn a_formed_gang_holds_nothing_and_its_nodes_are_released_as_formed() {
    let a = open("s1", 1_000, "a", 1, Phase::GangFormed);
    let nodes = table(vec![node("n1", NOW - 9_999, Some(&value("a")))]);
    let w = wanted(
        &[a],
        &attributed(&[("s1", &["n1"])]),
        &settings(true),
        &nodes,
        NOW,
    );
    assert!(w.holds.is_empty() && w.booked_out.is_empty(), "{w:?}");
    assert_eq!(
        w.release_reason("n1", &value("a")),
        Some(ReleaseReason::Formed)
    );
}

#[test]
fn with_reservation_off_or_the_lifecycle_closed_nothing_is_held() {
    let a = open("s1", 1_000, "a", 1, Phase::NodesReady);
    let nodes = table(vec![node("n1", NOW, Some(&value("a")))]);
    let att = attributed(&[("s1", &["n1"])]);
    let w = wanted(&[a], &att, &settings(false), &nodes, NOW);
    assert!(w.holds.is_empty());
    assert_eq!(
        w.release_reason("n1", &value("a")),
        Some(ReleaseReason::Ended)
    );
    let w = wanted(&[], &att, &settings(true), &nodes, NOW);
    assert!(w.holds.is_empty());
}

#[test]
fn unassigned_nodes_stay_while_a_reserving_scale_up_has_no_attribution() {
    let a = open("s1", 1_000, "a", 1, Phase::InstancesCreated);
    let nodes = table(vec![node("n1", NOW, Some(UNASSIGNED))]);
    let w = wanted(&[a], &Attribution::default(), &settings(true), &nodes, NOW);
    assert!(!w.complete);
    assert_eq!(w.release_reason("n1", UNASSIGNED), None);
    assert_eq!(
        w.release_reason("n1", &value("zzz")),
        Some(ReleaseReason::Ended),
        "a gang's own reservation whose lifecycle is gone ends regardless"
    );
}

#[test]
fn an_unknown_gang_count_takes_the_whole_scale_up_only_when_it_is_the_only_gang() {
    let a = open("s1", 1_000, "a", 0, Phase::NodesReady);
    let nodes = table(vec![node("n1", NOW, None), node("n2", NOW, None)]);
    let att = attributed(&[("s1", &["n1", "n2"])]);
    let w = wanted(std::slice::from_ref(&a), &att, &settings(true), &nodes, NOW);
    assert_eq!(w.holds.len(), 2);
    let b = open("s1", 1_000, "b", 0, Phase::NodesReady);
    let w = wanted(&[a, b], &att, &settings(true), &nodes, NOW);
    assert!(w.holds.is_empty(), "two gangs, counts unknown: {w:?}");
}

#[test]
fn by_claim_a_gang_holds_the_nodes_requested_for_it_and_never_another_gangs() {
    // One scale-up for two gangs, nodes claimed per gang: the older gang a (2 nodes) has one
    // registered so far, b (1 node) has its own. First come, first served would give a b's
    // node; by claim a waits for its second node and b keeps its own.
    let mut a = open("s1", 1_000, "a", 2, Phase::InstancesCreated);
    let mut b = open("s1", 1_000, "b", 1, Phase::NodesReady);
    a.nodes = 3;
    b.nodes = 3;
    let nodes = table(vec![
        node("n1", NOW, Some(UNASSIGNED)),
        node("n2", NOW, Some(UNASSIGNED)),
    ]);
    let mut att = attributed(&[("s1", &["n1", "n2"])]);
    att.by_gang = BTreeMap::from([
        (a.key(), vec!["n2".to_owned()]),
        (b.key(), vec!["n1".to_owned()]),
    ]);
    let w = wanted(&[a.clone(), b.clone()], &att, &settings(true), &nodes, NOW);
    assert_eq!(held(&w), pairs(&[("n1", "ml/b"), ("n2", "ml/a")]));
    // Without claims the older gang takes the first nodes by name, b's included.
    let first_come = attributed(&[("s1", &["n1", "n2"])]);
    let w = wanted(
        &[a.clone(), b.clone()],
        &first_come,
        &settings(true),
        &nodes,
        NOW,
    );
    assert_eq!(held(&w), pairs(&[("n1", "ml/a"), ("n2", "ml/a")]));
    // Two scale-ups: a by claim is short, and b's spare node stays b's (step 3 is off).
    let mut b2 = open("s2", 2_000, "b", 1, Phase::NodesReady);
    b2.nodes = 2;
    let mut att = attributed(&[("s1", &["n2"]), ("s2", &["n1", "n3"])]);
    att.by_gang = BTreeMap::from([
        (a.key(), vec!["n2".to_owned()]),
        (b2.key(), vec!["n1".to_owned(), "n3".to_owned()]),
    ]);
    let nodes = table(vec![
        node("n1", NOW, Some(UNASSIGNED)),
        node("n2", NOW, Some(UNASSIGNED)),
        node("n3", NOW, Some(UNASSIGNED)),
    ]);
    let w = wanted(&[a, b2], &att, &settings(true), &nodes, NOW);
    assert_eq!(held(&w), pairs(&[("n1", "ml/b"), ("n2", "ml/a")]));
    assert_eq!(
        w.release_reason("n3", UNASSIGNED),
        Some(ReleaseReason::Unclaimed)
    );
}

#[test]
fn the_measured_booking_deadline_is_the_provisioning_p95_plus_the_margin() {
    let fallback = Duration::from_secs(600);
    let mut p = Provisioning::default();
    for (i, s) in [60, 90, 120, 150].into_iter().enumerate() {
        p.observe(&format!("n{i}"), s);
    }
    assert_eq!(p.deadline(fallback), fallback, "4 nodes: not measured yet");
    // A node counts once, however many ticks see it.
    p.observe("n0", 5_000);
    assert_eq!(p.p95(), None);
    p.observe("n4", 180);
    assert_eq!(p.p95(), Some(Duration::from_secs(180)));
    assert_eq!(
        p.deadline(fallback),
        Duration::from_secs(180) + BOOKING_MARGIN
    );
    // Twenty nodes: the nearest-rank P95 is the 19th smallest.
    let mut p = Provisioning::default();
    for i in 1..=20 {
        p.observe(&format!("m{i}"), i * 10);
    }
    assert_eq!(p.p95(), Some(Duration::from_secs(190)));
    // Only the most recent nodes count, and a gone node's name may come back as a new one.
    for i in 0..PROVISION_SAMPLES {
        p.observe(&format!("k{i}"), 30);
    }
    assert_eq!(p.p95(), Some(Duration::from_secs(30)));
    p.retain_nodes(|n| n != "k0");
    p.observe("k0", 9_000);
    assert_eq!(p.recent.back(), Some(&9_000));
    // Capped at 24 hours.
    let mut slow = Provisioning::default();
    for i in 0..5 {
        slow.observe(&format!("s{i}"), 200_000);
    }
    assert_eq!(slow.deadline(fallback), Duration::from_secs(24 * 60 * 60));
}
