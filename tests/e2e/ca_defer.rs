//! Deferral with the real cluster-autoscaler (`admission.deferral`, docs/deferral.md): a gang
//! strict would not admit now is kept out of CA's scale-up with CA's own per-pod
//! `pod-scale-up-delay`, so CA never asks for it and never backs the group off; once room
//! appears the marks are lifted and CA scales it up whole.

use std::time::{Duration, Instant};

use gangscaler::audit::{DeferralEvent, Event, Verdict};
use gangscaler::model::labels::{CA_POD_SCALE_UP_DELAY, DEFERRED};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::harness::eventually;
use super::scenario::{GangSpec, Group, Row, Scenario, Setup};

/// The `deferral` records so far, in order.
fn deferrals(s: &Scenario) -> Vec<DeferralEvent> {
    s.records()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Deferral(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// Member `i` of gang `gang`'s annotations `(delay, hold)`.
async fn marks(s: &Scenario, gang: &str, i: u32) -> (Option<String>, Option<String>) {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let pod = pods.get(&format!("{gang}-{i}")).await.unwrap();
    let a = pod.metadata.annotations.unwrap_or_default();
    (
        a.get(CA_POD_SCALE_UP_DELAY).cloned(),
        a.get(DEFERRED).cloned(),
    )
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_defer_keeps_a_gang_that_cannot_fit_out_of_cas_scale_up_until_room_appears() {
    let window = Duration::from_secs(60);
    let setup = Setup::new("ca-defer", "strict", vec![Group::new("gpu", 4)])
        .deferral("{enabled: true, horizon: 1m}");
    let mut s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("big", 6)).await;
    let deferred = eventually("a deferral record", Duration::from_secs(30), || {
        let d = deferrals(&s);
        async move { d.into_iter().find(|d| d.hold.is_some()) }
    })
    .await;
    assert_eq!(deferred.hold.as_deref(), Some("no_room"), "{deferred:?}");
    assert_eq!(
        deferred.pods, 6,
        "every pending member is marked: {deferred:?}"
    );
    assert_eq!(deferred.gang.as_ref().map(|g| g.name.as_str()), Some("big"));
    // Every member carries the marks: CA's delay at least the horizon past the pod's age.
    for i in 0..6 {
        let (delay, hold) = eventually("the member's marks", Duration::from_secs(15), || {
            let s = &s;
            async move {
                let m = marks(s, "big", i).await;
                m.1.is_some().then_some(m)
            }
        })
        .await;
        assert_eq!(hold.as_deref(), Some("no_room"));
        let secs = delay
            .as_deref()
            .and_then(gangscaler::scaleup::defer::go_duration_secs)
            .unwrap_or(0);
        assert!(
            secs >= 60,
            "the delay keeps it out for the horizon: {delay:?}"
        );
    }
    while created.elapsed() < window {
        s.assert_running();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // CA saw the gang's pods as too young to scale up for: no call, no failure, no backoff.
    assert!(
        s.decisions("gpu").is_empty(),
        "CA asked nothing while the gang was deferred: {:?}",
        s.decisions("gpu")
    );
    s.assert_ca_never_refused().await;
    assert!(
        !s.ca.lines("too new to consider unschedulable").is_empty()
            || !s.ca.lines("No unschedulable pods").is_empty(),
        "CA left the deferred pods out of its scale-up"
    );
    assert!(s.sampler.sample().seen.is_empty(), "no node was added");
    // Room appears: the operator raises maxSize; the marks are lifted and CA scales up.
    s.rewrite_group(&Group::new("gpu", 8));
    let raised = Instant::now();
    let nodes = s.wait_running("big", 6, Duration::from_secs(180)).await;
    let after_raise = raised.elapsed().as_secs_f64();
    let formed = created.elapsed().as_secs_f64();
    assert_eq!(nodes.len(), 6);
    let decisions = s.decisions("gpu");
    assert!(
        decisions.iter().all(|d| d.verdict == Verdict::Accept),
        "nothing was refused: {decisions:?}"
    );
    // Every member's marks are lifted once the gang runs (while its nodes were in flight it
    // may have been held `covered`), and the last record for it is a release.
    for i in 0..6 {
        eventually("the member's marks lifted", Duration::from_secs(20), || {
            let s = &s;
            async move { (marks(s, "big", i).await == (None, None)).then_some(()) }
        })
        .await;
    }
    let ours: Vec<DeferralEvent> = deferrals(&s)
        .into_iter()
        .filter(|d| d.gang.as_ref().is_some_and(|g| g.name == "big"))
        .collect();
    let holds: Vec<Option<&str>> = ours.iter().map(|d| d.hold.as_deref()).collect();
    assert_eq!(holds.first(), Some(&Some("no_room")), "{ours:?}");
    assert_eq!(
        holds.get(1),
        Some(&None),
        "released when room appeared: {ours:?}"
    );
    assert_eq!(holds.last(), Some(&None), "released at the end: {ours:?}");
    assert!(
        holds
            .iter()
            .flatten()
            .all(|h| ["no_room", "covered"].contains(h)),
        "{ours:?}"
    );
    Row::new(&s, "deferred until room (6 × 8 GPU, max 4 → 8)", "gpu", Some(formed))
        .outcome("succeeded")
        .note(format!(
            "deferred (no_room) with no CA call, failure or backoff for {:.0}s; CA scaled it up {after_raise:.0}s after the raise; holds {}",
            window.as_secs_f64(),
            holds.iter().map(|h| h.unwrap_or("released")).collect::<Vec<_>>().join(" → ")
        ))
        .record();
}
