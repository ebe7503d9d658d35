use super::*;
use crate::audit::Verdict;
use crate::scaleup::test_support::{decision, gang};

fn short() -> Timeouts {
    Timeouts {
        registration_ms: 100,
        formation_ms: 1_000,
        attach_ms: 500,
    }
}

#[test]
fn an_accepted_decision_opens_one_lifecycle_per_gang_and_a_rejection_none() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        5,
        decision(None, Verdict::Reject, &["a"]).with_scale_up_id("x"),
    ));
    t.apply(&Record::new(5, decision(None, Verdict::Accept, &["a"])));
    assert_eq!(t.open_count(), 0);
    t.apply(&Record::new(
        10,
        decision(Some("s1"), Verdict::Accept, &["a", "b"]),
    ));
    t.apply(&Record::new(11, decision(Some("s2"), Verdict::Accept, &[])));
    let keys: Vec<Key> = t.open().map(Open::key).collect();
    assert_eq!(
        keys,
        [
            ("s1".to_owned(), Some(gang("a"))),
            ("s1".to_owned(), Some(gang("b"))),
            ("s2".to_owned(), None),
        ]
    );
    assert!(t.open().all(|o| o.phase == Phase::Requested));
    assert_eq!(t.next_id(99), "su-99-3");
}

#[test]
fn phases_only_move_forward_and_repeats_emit_nothing() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        0,
        decision(Some("s"), Verdict::Accept, &["a"]),
    ));
    let open = t.open().next().unwrap().clone();
    let recs = t.step(&open, &Observation::at(Phase::NodesReady), 50);
    assert_eq!(recs.len(), 1);
    t.apply(&recs[0]);
    let open = t.open().next().unwrap().clone();
    assert_eq!(open.phase, Phase::NodesReady);
    assert!(
        t.step(&open, &Observation::at(Phase::NodesReady), 60)
            .is_empty()
    );
    assert!(
        t.step(&open, &Observation::at(Phase::InstancesCreated), 60)
            .is_empty()
    );
}

#[test]
fn timeouts_close_lifecycles_that_stall() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        0,
        decision(Some("s"), Verdict::Accept, &["a"]),
    ));
    let open = t.open().next().unwrap().clone();
    assert!(
        t.step(&open, &Observation::at(Phase::Requested), 100)
            .is_empty()
    );
    let recs = t.step(&open, &Observation::at(Phase::InstancesCreated), 101);
    assert_eq!(recs.len(), 2);
    let Event::Outcome(o) = &recs[1].event else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::RegistrationTimeout);
    assert_eq!(o.duration_ms, 101);

    let recs = t.step(&open, &Observation::at(Phase::NodesReady), 1_001);
    let Event::Outcome(o) = &recs[1].event else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::FormationTimeout);
    assert_eq!(o.formed_at_ms, None);
}

#[test]
fn a_scale_up_without_gangs_whose_nodes_never_get_ready_times_out() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(0, decision(Some("s"), Verdict::Accept, &[])));
    let open = t.open().next().unwrap().clone();
    let registered = Observation::at(Phase::NodesRegistered);
    let recs = t.step(&open, &registered, 100);
    assert!(recs.iter().all(|r| !matches!(r.event, Event::Outcome(_))));
    let recs = t.step(&open, &registered, 101);
    let Some(Event::Outcome(o)) = recs.last().map(|r| &r.event) else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::RegistrationTimeout);
    assert!(o.reason.contains("not Ready"), "{}", o.reason);
}

#[test]
fn a_scale_up_without_gangs_succeeds_when_its_nodes_are_ready() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(0, decision(Some("s"), Verdict::Accept, &[])));
    let recs = t.plan(40, |_| Some(Observation::at(Phase::NodesReady)));
    assert_eq!(recs.len(), 2);
    let Event::Outcome(o) = &recs[1].event else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::Succeeded);
    for r in &recs {
        t.apply(r);
    }
    assert_eq!(t.open_count(), 0);
}

#[test]
fn an_observed_outcome_carries_the_recorded_times() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        0,
        decision(Some("s"), Verdict::Accept, &["a"]),
    ));
    for r in t.plan(30, |_| Some(Observation::at(Phase::GangFormed))) {
        t.apply(&r);
    }
    let recs = t.plan(45, |_| {
        Some(
            Observation::at(Phase::VolumesAttached)
                .with_outcome(Outcome::Succeeded, "running")
                .with_pending_since_ms(-20)
                .with_attach_failures(1),
        )
    });
    let Event::Outcome(o) = &recs[1].event else {
        panic!("{recs:?}")
    };
    assert_eq!(
        (o.formed_at_ms, o.attached_at_ms, o.pending_since_ms),
        (Some(30), Some(45), Some(-20))
    );
    assert_eq!((o.attach_failures, o.duration_ms), (1, 45));
}

#[test]
fn a_phase_whose_decision_was_rotated_away_reopens_its_lifecycle() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        500,
        PhaseEvent {
            scale_up_id: "old".into(),
            node_group: "h100".into(),
            gang: Some(gang("a")),
            phase: Phase::NodesReady,
            at_ms: 500,
            elapsed_ms: 120,
            detail: None,
        },
    ));
    let open = t.open().next().unwrap();
    assert_eq!(open.requested_at_ms, 380);
    assert_eq!(open.phase, Phase::NodesReady);
}

/// A decision of scale-up `id` on `group` that adds one node to repair scale-up `of`'s gang
/// `name`.
fn repair_decision(id: &str, group: &str, name: &str, of: &str) -> crate::audit::DecisionEvent {
    let mut d = decision(Some(id), Verdict::Accept, &[name]);
    d.node_group = group.into();
    d.gangs[0].repair_of = Some(of.into());
    d
}

fn failed(instance: &str) -> Observation {
    Observation::at(Phase::Requested).with_failed(vec![(
        instance.into(),
        format!("{instance}: stockout: no capacity"),
    )])
}

#[test]
fn a_failed_instance_is_recorded_once_and_its_lifecycle_repairs_instead_of_ending() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        0,
        decision(Some("s"), Verdict::Accept, &["a"]),
    ));
    let open = t.open().next().unwrap().clone();
    let recs = t.step(&open, &failed("i-3"), 50);
    let [
        Record {
            event: Event::Repair(r),
            ..
        },
    ] = recs.as_slice()
    else {
        panic!("one repair record, no outcome: {recs:?}")
    };
    assert_eq!((r.scale_up_id.as_str(), r.gang.name.as_str()), ("s", "a"));
    assert_eq!((r.instance.as_str(), r.failed, r.replaced), ("i-3", 1, 0));
    t.apply(&recs[0]);
    let open = t.open().next().unwrap().clone();
    assert_eq!(open.repair.missing(), 1);
    // Seen again (CA has not deleted it yet): nothing new.
    assert!(t.step(&open, &failed("i-3"), 60).is_empty());
    // A decision of another scale-up repairs it: no lifecycle of its own, one node replaced,
    // and the registration deadline counts from the repair.
    t.apply(&Record::new(80, repair_decision("s2", "h100", "a", "s")));
    assert_eq!(t.open_count(), 1, "a repair opens no lifecycle");
    let open = t.open().next().unwrap().clone();
    assert_eq!((open.repair.missing(), open.last_request_ms()), (0, 80));
    let recs = t.step(&open, &Observation::at(Phase::InstancesCreated), 150);
    assert!(
        !recs.iter().any(|r| matches!(r.event, Event::Outcome(_))),
        "150 ms after the request but 70 after the repair: {recs:?}"
    );
    let recs = t.step(&open, &Observation::at(Phase::InstancesCreated), 181);
    let Some(Event::Outcome(o)) = recs.last().map(|r| &r.event) else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::RegistrationTimeout);
    assert!(
        o.reason.contains("latest repair") && o.reason.contains("1 instance(s) failed, 1 replaced"),
        "{}",
        o.reason
    );
    assert_eq!(t.next_id(99), "su-99-3", "the repair decision took an id");
}

#[test]
fn a_repairing_lifecycle_ends_provision_failed_once_another_scale_up_admits_its_gang_afresh() {
    let mut t = Tracker::new(short());
    t.apply(&Record::new(
        0,
        decision(Some("s"), Verdict::Accept, &["a"]),
    ));
    let open = t.open().next().unwrap().clone();
    let recs = t.step(&open, &failed("i-1"), 10);
    t.apply(&recs[0]);
    let mut fresh = decision(Some("s2"), Verdict::Accept, &["a"]);
    fresh.node_group = "other".into();
    t.apply(&Record::new(20, fresh));
    let open = t.get(&("s".to_owned(), Some(gang("a")))).unwrap().clone();
    // Even though the gang shows formed (on the other scale-up's nodes), the repairing one
    // ends as failed: none of its nodes made it.
    let recs = t.step(&open, &Observation::at(Phase::GangFormed), 30);
    let Some(Event::Outcome(o)) = recs.last().map(|r| &r.event) else {
        panic!("{recs:?}")
    };
    assert_eq!(o.outcome, Outcome::ProvisionFailed);
    assert!(
        o.reason
            .contains("admitted again by scale-up s2 of node group other"),
        "{}",
        o.reason
    );
    // The new one is not superseded by anything.
    let new = t.get(&("s2".to_owned(), Some(gang("a")))).unwrap().clone();
    assert!(
        t.step(&new, &Observation::at(Phase::Requested), 30)
            .is_empty()
    );
}
