use super::*;
use crate::audit::{Event, Record, Verdict};
use crate::scaleup::test_support::{decision, gang as gang_id};
use crate::scaleup::track::{Timeouts, Tracker};

fn open(id: &str, at_ms: i64, nodes: u32, gang: Option<&str>) -> Open {
    Open {
        scale_up_id: id.into(),
        node_group: "h100".into(),
        gang: gang.map(gang_id),
        nodes,
        gang_nodes: 0,
        phase: Phase::Requested,
        requested_at_ms: at_ms,
        formed_at_ms: None,
        attached_at_ms: None,
        repair: crate::scaleup::Repair::default(),
    }
}

fn node(name: &str, created_unix: i64, ready: bool) -> NodeProgress {
    NodeProgress {
        name: name.into(),
        created_unix,
        ready,
    }
}

fn group(nodes: Vec<NodeProgress>, pending: u32, failed: &[&str]) -> Facts {
    let mut f = Facts::default();
    f.groups.insert(
        "h100".into(),
        GroupFacts {
            nodes,
            pending,
            failed: failed.iter().map(|s| (*s).to_owned()).collect(),
            ..GroupFacts::default()
        },
    );
    f
}

fn with_gang(mut f: Facts, name: &str, p: GangProgress) -> Facts {
    f.gangs.insert(("ml".into(), name.into()), p);
    f
}

fn gang(min: u32, bound: u32, running: u32, needed: u32, attached: u32) -> GangProgress {
    GangProgress {
        min_count: min,
        created_unix: 90,
        formed: bound >= min,
        bound,
        running,
        volumes_needed: needed,
        volumes_attached: attached,
        ..GangProgress::default()
    }
}

fn one(open: &Open, facts: &Facts) -> Observation {
    observe(std::slice::from_ref(open), facts)
        .remove(&open.key())
        .expect("an observation")
}

#[test]
fn a_group_whose_instances_were_not_read_gives_no_news() {
    let o = open("s", 100_000, 2, Some("a"));
    assert!(observe(&[o], &Facts::default()).is_empty());
}

#[test]
fn node_phases_follow_the_scale_ups_own_nodes() {
    let o = open("s", 100_500, 2, None);
    // A node registered before the request is not this scale-up's.
    let f = group(vec![node("old", 99, true)], 2, &[]);
    assert_eq!(one(&o, &f).phase, Phase::InstancesCreated);
    let f = group(vec![node("old", 99, true), node("n1", 100, true)], 1, &[]);
    assert_eq!(one(&o, &f).phase, Phase::InstancesCreated);
    let f = group(vec![node("n1", 101, true), node("n2", 102, false)], 0, &[]);
    assert_eq!(one(&o, &f).phase, Phase::NodesRegistered);
    let f = group(vec![node("n1", 101, true), node("n2", 102, true)], 0, &[]);
    let obs = one(&o, &f);
    assert_eq!(obs.phase, Phase::NodesReady);
    assert_eq!(obs.detail.as_deref(), Some("2/2 nodes ready"));
    assert_eq!(
        obs.outcome, None,
        "the tracker decides success without a gang"
    );
}

#[test]
fn concurrent_scale_ups_of_one_group_share_nodes_first_come_first_served() {
    let first = open("s1", 100_000, 1, None);
    let second = open("s2", 105_000, 2, None);
    let f = group(
        vec![
            node("a", 101, true),
            node("b", 106, true),
            node("c", 107, true),
        ],
        0,
        &[],
    );
    let obs = observe(&[second.clone(), first.clone()], &f);
    assert_eq!(obs[&first.key()].detail.as_deref(), Some("1/1 nodes ready"));
    assert_eq!(
        obs[&second.key()].detail.as_deref(),
        Some("2/2 nodes ready")
    );
    // Without node c the later scale-up is short of one, not the earlier one.
    let f = group(vec![node("a", 101, true), node("b", 106, true)], 0, &[]);
    let obs = observe(&[first.clone(), second.clone()], &f);
    assert_eq!(obs[&first.key()].phase, Phase::NodesReady);
    assert_eq!(obs[&second.key()].phase, Phase::Requested);
}

#[test]
fn attributed_nodes_name_the_nodes_each_scale_up_took() {
    let first = open("s1", 100_000, 1, None);
    let second = open("s2", 105_000, 2, Some("a"));
    let f = group(
        vec![
            node("old", 99, true),
            node("a", 101, true),
            node("b", 106, true),
        ],
        1,
        &[],
    );
    let nodes = attributed_nodes(&[second, first], &f);
    assert_eq!(nodes["s1"], ["a"]);
    assert_eq!(
        nodes["s2"],
        ["b"],
        "a not-yet-registered instance has no name"
    );
    assert!(
        attributed_nodes(&[open("s3", 1, 1, None)], &Facts::default()).is_empty(),
        "no news of the group, no attribution"
    );
}

#[test]
fn failed_instances_fail_the_scale_up_that_is_short_of_nodes() {
    let first = open("s1", 100_000, 1, None);
    let second = open("s2", 105_000, 2, Some("a"));
    let f = with_gang(
        group(
            vec![node("a", 101, true)],
            1,
            &["n9: stockout: no capacity"],
        ),
        "a",
        gang(2, 0, 0, 0, 0),
    );
    let obs = observe(&[first.clone(), second.clone()], &f);
    assert_eq!(obs[&first.key()].outcome, None);
    let (outcome, reason) = obs[&second.key()].outcome.clone().unwrap();
    assert_eq!(outcome, Outcome::ProvisionFailed);
    assert_eq!(reason, "1 instance(s) failed: n9: stockout: no capacity");
    // A gang that formed anyway (on other capacity) is not failed by its scale-up.
    let f = with_gang(
        group(vec![], 0, &["n9: stockout: no capacity"]),
        "a",
        gang(2, 2, 0, 0, 0),
    );
    assert_eq!(one(&second, &f).outcome, None);
}

#[test]
fn gang_phases_and_outcomes_in_order_of_precedence() {
    let o = open("s", 100_000, 2, Some("a"));
    let nodes = || group(vec![node("n1", 101, true), node("n2", 101, true)], 0, &[]);
    let obs = one(&o, &with_gang(nodes(), "a", gang(2, 1, 1, 1, 0)));
    assert_eq!((obs.phase, obs.outcome.clone()), (Phase::NodesReady, None));
    assert_eq!(obs.pending_since_ms, Some(90_000));

    let obs = one(&o, &with_gang(nodes(), "a", gang(2, 2, 2, 2, 1)));
    assert_eq!((obs.phase, obs.outcome.clone()), (Phase::GangFormed, None));

    let obs = one(&o, &with_gang(nodes(), "a", gang(2, 2, 1, 2, 2)));
    assert_eq!(obs.phase, Phase::VolumesAttached);
    assert_eq!(obs.outcome, None, "attached but only 1 of 2 running");

    let obs = one(&o, &with_gang(nodes(), "a", gang(2, 2, 2, 2, 2)));
    assert_eq!(obs.outcome.unwrap().0, Outcome::Succeeded);

    let mut failing = gang(2, 2, 2, 2, 1);
    failing.attach_errors = vec!["w-1/ckpt: disk busy".into()];
    let obs = one(&o, &with_gang(nodes(), "a", failing.clone()));
    assert_eq!(obs.attach_failures, 1);
    assert_eq!(
        obs.outcome.unwrap(),
        (
            Outcome::AttachFailed,
            "attach error: w-1/ckpt: disk busy".to_owned()
        )
    );

    failing.disrupted = vec!["w-0".into()];
    let obs = one(&o, &with_gang(nodes(), "a", failing));
    assert_eq!(obs.outcome.unwrap().0, Outcome::Preempted);

    let obs = one(&o, &nodes());
    assert_eq!(obs.outcome.unwrap().0, Outcome::Cancelled);
}

/// Feeds a sequence of cluster states through observe and the tracker, as the lifecycle
/// loop does, and returns every record written.
fn run(tracker: &mut Tracker, steps: &[(i64, Facts)]) -> Vec<Record> {
    let mut all = Vec::new();
    for (now, facts) in steps {
        let open: Vec<Open> = tracker.open().cloned().collect();
        let observed = observe(&open, facts);
        let records = tracker.plan(*now, |o| observed.get(&o.key()).cloned());
        for r in &records {
            tracker.apply(r);
        }
        all.extend(records);
    }
    all
}

fn phases(records: &[Record]) -> Vec<(i64, String)> {
    records
        .iter()
        .map(|r| match &r.event {
            Event::Phase(p) => (r.ts_ms, p.phase.as_str().to_owned()),
            Event::Outcome(o) => (r.ts_ms, o.outcome.as_str().to_owned()),
            Event::Decision(_) => (r.ts_ms, "decision".to_owned()),
            Event::Reservation(_) => (r.ts_ms, "reservation".to_owned()),
            Event::Withdrawal(_) => (r.ts_ms, "withdrawal".to_owned()),
            Event::Repair(_) => (r.ts_ms, "repair".to_owned()),
            Event::Deferral(_) => (r.ts_ms, "deferral".to_owned()),
        })
        .collect()
}

fn tracker_with(o: &Open) -> Tracker {
    let mut t = Tracker::new(Timeouts::default());
    let mut d = decision(Some(&o.scale_up_id), Verdict::Accept, &["a"]);
    d.applied_delta = o.nodes;
    t.apply(&Record::new(o.requested_at_ms, d));
    t
}

#[test]
fn out_of_order_and_duplicate_watch_states_never_move_a_lifecycle_back_or_twice() {
    let o = open("s", 100_000, 2, Some("a"));
    let mut t = tracker_with(&o);
    let nodes = || group(vec![node("n1", 101, true), node("n2", 101, true)], 0, &[]);
    let formed = || with_gang(nodes(), "a", gang(2, 2, 0, 2, 0));
    let stale = || {
        with_gang(
            group(vec![node("n1", 101, false)], 1, &[]),
            "a",
            gang(2, 0, 0, 0, 0),
        )
    };
    let attached = || with_gang(nodes(), "a", gang(2, 2, 0, 2, 2));
    let started = || with_gang(nodes(), "a", gang(2, 2, 2, 2, 2));
    let records = run(
        &mut t,
        &[
            // The pods' watch ran ahead of the nodes' watch: formed is seen first.
            (110_000, formed()),
            // The same state again (a re-list), then an older state from a lagging store.
            (111_000, formed()),
            (112_000, stale()),
            (113_000, attached()),
            (114_000, attached()),
            (115_000, started()),
            (116_000, started()),
        ],
    );
    assert_eq!(
        phases(&records),
        [
            (110_000, "gangFormed".to_owned()),
            (113_000, "volumesAttached".to_owned()),
            (115_000, "succeeded".to_owned()),
        ]
    );
    let Event::Outcome(out) = &records[2].event else {
        panic!("{records:?}")
    };
    assert_eq!(
        (out.formed_at_ms, out.attached_at_ms, out.duration_ms),
        (Some(110_000), Some(113_000), 15_000)
    );
    assert_eq!(t.open_count(), 0);
    assert!(run(&mut t, &[(117_000, started())]).is_empty());
}

#[test]
fn timeouts_end_lifecycles_the_cluster_never_finishes() {
    let t0 = 1_000_000;
    let timeouts = Timeouts::default();
    // Never forms: one member needs a toleration no group offers.
    let o = open("s", t0, 1, Some("a"));
    let mut t = tracker_with(&o);
    let f = with_gang(
        group(vec![node("n1", 1_001, true)], 0, &[]),
        "a",
        gang(2, 1, 1, 0, 0),
    );
    let late = t0 + i64::try_from(timeouts.formation_ms).unwrap() + 1;
    let records = run(&mut t, &[(t0 + 5_000, f.clone()), (late, f)]);
    assert_eq!(
        phases(&records),
        [
            (t0 + 5_000, "nodesReady".to_owned()),
            (late, "formationTimeout".to_owned())
        ]
    );

    // Forms but a volume never attaches (no VolumeAttachment status at all).
    let o = open("s", t0, 1, Some("a"));
    let mut t = tracker_with(&o);
    let f = with_gang(
        group(vec![node("n1", 1_001, true)], 0, &[]),
        "a",
        gang(1, 1, 1, 1, 0),
    );
    let late = t0 + 5_000 + i64::try_from(timeouts.attach_ms).unwrap() + 1;
    let records = run(
        &mut t,
        &[(t0 + 5_000, f.clone()), (late - 2, f.clone()), (late, f)],
    );
    assert_eq!(
        phases(&records),
        [
            (t0 + 5_000, "gangFormed".to_owned()),
            (late, "attachFailed".to_owned())
        ]
    );
}

/// `f` with its group's instances filed by claim, as a backend that keeps claims lists them.
fn claimed(mut f: Facts, by: &[(Claim, Claimed)]) -> Facts {
    let g = f.groups.get_mut("h100").expect("the group");
    g.by_claim = true;
    g.claimed = by.iter().cloned().collect();
    f
}

fn claim(id: &str, gang: &str) -> Claim {
    Claim::for_gang(id, "ml", gang)
}

fn gang_open(id: &str, at_ms: i64, nodes: u32, gang: &str, gang_nodes: u32) -> Open {
    Open {
        gang_nodes,
        ..open(id, at_ms, nodes, Some(gang))
    }
}

#[test]
fn a_failure_claimed_for_a_later_gang_is_charged_to_it_not_to_the_oldest_short_scale_up() {
    let first = gang_open("s1", 100_000, 2, "a", 2);
    let second = gang_open("s2", 101_000, 2, "b", 2);
    let gangs = |f| {
        with_gang(
            with_gang(f, "a", gang(2, 0, 0, 0, 0)),
            "b",
            gang(2, 0, 0, 0, 0),
        )
    };
    // s2's first node registered and its second stocked out; s1's nodes are still being
    // created (kwok lists no instance before its Node exists).
    let failure = "h100-x: stockout: no capacity";
    let flat = gangs(group(vec![node("h100-y", 102, true)], 0, &[failure]));
    // Without claims (a backend that keeps none), the failure goes to the oldest scale-up
    // that is short, and the registered node to the oldest too.
    let obs = observe(&[first.clone(), second.clone()], &flat);
    assert_eq!(
        obs[&first.key()].outcome.as_ref().map(|o| o.0),
        Some(Outcome::ProvisionFailed)
    );
    // By claim, each is its own gang's.
    let by_claim = claimed(
        gangs(group(vec![], 0, &[])),
        &[(
            claim("s2", "b"),
            Claimed {
                nodes: vec![node("h100-y", 102, true)],
                pending: 0,
                failed: vec![("id-x".to_owned(), failure.to_owned())],
            },
        )],
    );
    let obs = observe(&[first.clone(), second.clone()], &by_claim);
    assert_eq!(obs[&first.key()].outcome, None, "{:?}", obs[&first.key()]);
    assert_eq!(obs[&first.key()].phase, Phase::Requested);
    assert!(
        obs[&first.key()].failed.is_empty(),
        "{:?}",
        obs[&first.key()]
    );
    // The failure is b's to repair, not an outcome.
    let b = &obs[&second.key()];
    assert_eq!(b.outcome, None, "{b:?}");
    assert_eq!(b.failed, [("id-x".to_owned(), failure.to_owned())]);
    assert_eq!(
        attributed_nodes(&[first, second], &by_claim)["s2"],
        ["h100-y"]
    );
}

#[test]
fn each_gang_of_one_scale_up_counts_the_nodes_claimed_for_it() {
    let a = gang_open("s", 100_000, 4, "a", 2);
    let b = gang_open("s", 100_000, 4, "b", 2);
    let gangs = with_gang(
        with_gang(group(vec![], 0, &[]), "a", gang(2, 0, 0, 0, 0)),
        "b",
        gang(2, 0, 0, 0, 0),
    );
    let f = claimed(
        gangs,
        &[
            (
                claim("s", "a"),
                Claimed {
                    nodes: vec![node("n1", 101, true), node("n2", 101, true)],
                    ..Claimed::default()
                },
            ),
            (
                claim("s", "b"),
                Claimed {
                    pending: 2,
                    ..Claimed::default()
                },
            ),
        ],
    );
    let obs = observe(&[a.clone(), b.clone()], &f);
    assert_eq!(
        obs[&a.key()].phase,
        Phase::NodesReady,
        "{:?}",
        obs[&a.key()]
    );
    assert_eq!(obs[&b.key()].phase, Phase::InstancesCreated);
    // The scale-up as a whole has all four.
    assert_eq!(attributed_nodes(&[a], &f)["s"], ["n1", "n2"]);
}

#[test]
fn instances_without_a_claim_count_for_no_scale_up_where_the_backend_keeps_claims() {
    let o = gang_open("s", 100_000, 2, "a", 2);
    let f = claimed(
        with_gang(
            group(vec![node("stray", 101, true)], 1, &["old: stockout: x"]),
            "a",
            gang(2, 0, 0, 0, 0),
        ),
        &[],
    );
    let obs = one(&o, &f);
    assert_eq!(obs.outcome, None, "{obs:?}");
    assert_eq!(obs.phase, Phase::Requested);
    assert!(attributed_nodes(&[o], &f)["s"].is_empty());
}
