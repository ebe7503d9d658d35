use super::*;
use crate::audit::{GangId, OutcomeEvent, Phase, PhaseEvent, Record};
use crate::scaleup::Open;

fn gang() -> Option<GangId> {
    Some(GangId {
        namespace: "ml".into(),
        name: "train".into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
    })
}

fn before(formed_at_ms: Option<i64>) -> Option<Open> {
    Some(Open {
        scale_up_id: "su-1".into(),
        node_group: "gpu".into(),
        gang: gang(),
        nodes: 2,
        gang_nodes: 0,
        phase: Phase::NodesReady,
        requested_at_ms: 0,
        formed_at_ms,
        attached_at_ms: None,
        repair: crate::scaleup::Repair::default(),
    })
}

fn formed(at_ms: i64, formed_before: Option<i64>) -> Appended {
    Appended {
        record: Record::new(
            at_ms,
            PhaseEvent {
                scale_up_id: "su-1".into(),
                node_group: "gpu".into(),
                gang: gang(),
                phase: Phase::VolumesAttached,
                at_ms,
                elapsed_ms: u64::try_from(at_ms).unwrap(),
                detail: None,
            },
        ),
        before: before(formed_before),
    }
}

fn ended(outcome: Outcome, attach_failures: u32) -> Appended {
    Appended {
        record: Record::new(
            90_000,
            OutcomeEvent {
                scale_up_id: "su-1".into(),
                node_group: "gpu".into(),
                gang: gang(),
                outcome,
                requested_at_ms: 0,
                formed_at_ms: Some(40_000),
                attached_at_ms: Some(70_000),
                pending_since_ms: Some(-30_000),
                attach_failures,
                duration_ms: 90_000,
                reason: "test".into(),
            },
        ),
        before: before(Some(40_000)),
    }
}

fn sample(m: &Metrics, series: &str) -> Option<f64> {
    m.encode().lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

fn unseen(name: &str) -> Unseen {
    Unseen {
        gang: GangRef {
            namespace: "ml".into(),
            name: name.into(),
            api_version: "scheduling.k8s.io/v1beta1".into(),
            kind: "PodGroup".into(),
        },
        members: 4,
        min_count: 4,
        age_secs: 180,
        schedulers: Vec::new(),
    }
}

fn warned_names<'a>(events: &'a [(GangRef, &'static str, &'static str, String)]) -> Vec<&'a str> {
    events.iter().map(|(g, ..)| g.name.as_str()).collect()
}

#[test]
fn a_stale_view_pauses_the_loop_and_sets_the_gauge_until_it_is_current() {
    let m = Metrics::new();
    let mut paused = false;
    assert!(!pause(&m, &mut paused, None));
    assert_eq!(sample(&m, "gangscaler_cluster_view_stale"), Some(0.0));
    let stale = Stale {
        kinds: vec!["Pod".into()],
        for_: Duration::from_secs(3),
    };
    assert!(pause(&m, &mut paused, Some(&stale)));
    assert!(pause(&m, &mut paused, Some(&stale)));
    assert_eq!(sample(&m, "gangscaler_cluster_view_stale"), Some(1.0));
    assert!(!pause(&m, &mut paused, None));
    assert!(!paused);
    assert_eq!(sample(&m, "gangscaler_cluster_view_stale"), Some(0.0));
}

#[test]
fn an_unseen_gang_is_warned_about_once_and_again_after_a_relapse() {
    let m = Metrics::new();
    let mut warned = BTreeSet::new();
    let events = warn_unseen(&m, &mut warned, &[unseen("a"), unseen("b")]);
    assert_eq!(warned_names(&events), ["a", "b"]);
    let (_, reason, type_, note) = &events[0];
    assert_eq!((*reason, *type_), ("GangNotSeenByAutoscaler", "Warning"));
    assert_eq!(note, &unseen("a").message());
    assert_eq!(sample(&m, "gangscaler_gangs_without_verdict"), Some(2.0));

    // Still unseen: no second event. `b` is seen now and forgotten.
    let events = warn_unseen(&m, &mut warned, &[unseen("a")]);
    assert!(events.is_empty());
    assert_eq!(sample(&m, "gangscaler_gangs_without_verdict"), Some(1.0));

    // `b` relapses: warned again; `a` still not.
    let events = warn_unseen(&m, &mut warned, &[unseen("a"), unseen("b")]);
    assert_eq!(warned_names(&events), ["b"]);

    let events = warn_unseen(&m, &mut warned, &[]);
    assert!(events.is_empty() && warned.is_empty());
    assert_eq!(sample(&m, "gangscaler_gangs_without_verdict"), Some(0.0));
}

#[test]
fn formation_is_observed_once_per_lifecycle_and_outcomes_fill_their_metrics() {
    let m = Metrics::new();
    count(&m, &formed(40_000, None));
    // A later phase of a lifecycle that had already formed is not a second formation.
    count(&m, &formed(70_000, Some(40_000)));
    let g = "{node_group=\"gpu\"}";
    assert_eq!(
        sample(
            &m,
            &format!("gangscaler_scaleup_formation_seconds_count{g}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, &format!("gangscaler_scaleup_formation_seconds_sum{g}")),
        Some(40.0)
    );

    count(&m, &ended(Outcome::Succeeded, 0));
    assert_eq!(
        sample(&m, &format!("gangscaler_scaleup_success_seconds_sum{g}")),
        Some(90.0)
    );
    assert_eq!(
        sample(
            &m,
            &format!("gangscaler_scaleup_job_start_delay_seconds_sum{g}")
        ),
        Some(120.0),
        "from the gang's creation, 30 s before the request, to success"
    );
    count(&m, &ended(Outcome::AttachFailed, 0));
    count(&m, &ended(Outcome::AttachFailed, 3));
    count(&m, &ended(Outcome::Preempted, 0));
    assert_eq!(
        sample(
            &m,
            "gangscaler_scaleup_outcomes_total{node_group=\"gpu\",outcome=\"attachFailed\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&m, &format!("gangscaler_scaleup_attach_failures_total{g}")),
        Some(4.0),
        "a timeout counts one failure, three errors three"
    );
    assert_eq!(
        sample(&m, &format!("gangscaler_scaleup_preemptions_total{g}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, &format!("gangscaler_scaleup_success_seconds_count{g}")),
        Some(1.0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_scale_up_wakes_the_loop_at_once_and_is_not_lost_when_it_comes_during_a_tick() {
    use tokio::time::timeout;
    let shutdown = CancellationToken::new();
    let hour = Duration::from_secs(3600);
    let second = Duration::from_secs(1);
    let mut tick = tokio::time::interval(hour);
    let scaled_up = tokio::sync::Notify::new();
    // The interval's first tick is immediate.
    assert!(next_tick(&mut tick, Some(&scaled_up), &shutdown).await);
    // Notified while no one waits (during a tick): the next wait returns at once, not in an
    // hour (the clock is paused: it only moves when everything waits, so a wait for the
    // interval would let the second's timeout fire first).
    scaled_up.notify_one();
    let woken = timeout(second, next_tick(&mut tick, Some(&scaled_up), &shutdown)).await;
    assert_eq!(woken, Ok(true));
    // Without a scale-up the wait is the interval's.
    assert!(
        timeout(second, next_tick(&mut tick, Some(&scaled_up), &shutdown))
            .await
            .is_err()
    );
    assert!(next_tick(&mut tick, Some(&scaled_up), &shutdown).await);
    // A loop without the notification waits for the interval too.
    assert!(
        timeout(second, next_tick(&mut tick, None, &shutdown))
            .await
            .is_err()
    );
    shutdown.cancel();
    assert!(!next_tick(&mut tick, Some(&scaled_up), &shutdown).await);
}
