//! Scale-ups driven by the real cluster-autoscaler: CA sees the gang's unschedulable members,
//! plans a scale-up from gangscaler's template nodes and calls `NodeGroupIncreaseSize`;
//! gangscaler decides it whole-gang (or not, under `off`). Each test asserts on the cluster, on
//! CA's own signals (log, metrics, status ConfigMap) and on gangscaler's audit log, and
//! records a row of `docs/e2e-results.md`.

use std::time::{Duration, Instant};

use gangscaler::audit::{DecisionEvent, Verdict};

use super::harness::{CaScaleUp, metric_value};
use super::scenario::{GangSpec, Group, PROVISION_DELAY, Row, Scenario, Setup};

/// CA planned every IncreaseSize gangscaler decided, with the same size and delta: CA made the
/// calls. Returns CA's plans and gangscaler's decisions for `group`.
pub fn assert_ca_made_the_calls(s: &Scenario, group: &str) -> (Vec<CaScaleUp>, Vec<DecisionEvent>) {
    let asks = s.ca.scale_ups_of(group);
    let decisions = s.decisions(group);
    assert!(
        !asks.is_empty(),
        "CA planned no scale-up of {group}; its log: {}",
        s.ca.log.display()
    );
    assert_eq!(
        asks.len(),
        decisions.len(),
        "every scale-up CA planned reached gangscaler once: {asks:?} vs {decisions:?}"
    );
    for (a, d) in asks.iter().zip(&decisions) {
        assert_eq!(
            a.delta(),
            d.ca_delta,
            "CA's ask {a:?} is the delta gangscaler saw: {d:?}"
        );
        assert_eq!(
            a.from, d.target,
            "CA's size {a:?} is gangscaler's target: {d:?}"
        );
    }
    (asks, decisions)
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scales_a_whole_gang_from_zero_over_mtls() {
    let setup = Setup::new("ca-gang-from-zero", "strict", vec![Group::new("gpu", 4)]).mtls();
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("train", 4)).await;
    let nodes = s.wait_running("train", 4, Duration::from_secs(120)).await;
    let formed = secs(created);
    assert_eq!(nodes.len(), 4, "one member per node: {nodes:?}");
    let (asks, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert_eq!(
        asks[0].from, 0,
        "scaled from zero, from the template: {asks:?}"
    );
    assert_eq!(decisions[0].verdict, Verdict::Accept);
    assert_eq!(decisions.iter().map(|d| d.applied_delta).sum::<u32>(), 4);
    assert_eq!(
        s.group_nodes("gpu").await.len(),
        4,
        "exactly the gang's nodes"
    );
    // CA's own signals: its metric counts the nodes it asked for, and the pods carry its
    // TriggeredScaleUp event.
    let ca_metrics = s.ca.metrics_text().await;
    let asked: u32 = asks.iter().map(CaScaleUp::delta).sum();
    assert_eq!(
        metric_value(&ca_metrics, "cluster_autoscaler_scaled_up_nodes_total", &[]),
        Some(f64::from(asked))
    );
    assert!(
        super::pod_events(&s.client, "train-0")
            .await
            .iter()
            .any(|(reason, note)| reason == "TriggeredScaleUp" && note.contains("gpu")),
        "CA's TriggeredScaleUp event on train-0"
    );
    let outcome = s.wait_outcome("train", Duration::from_secs(30)).await;
    assert_eq!(outcome.outcome.as_str(), "succeeded");
    Row::new(
        &s,
        "whole gang from zero (4 × 8 GPU, mTLS)",
        "gpu",
        Some(formed),
    )
    .outcome(outcome.outcome.as_str())
    .note("CA's template ask covers a gang of whole-node members; gangscaler applies it as asked")
    .record();
}

/// 4 members × 2 GPUs × 3 attachable volumes; nodes take 4 volumes each, so each member needs
/// its own node. CA cannot see CSI limits on a template node (externalgrpc has no CSINode),
/// so it packs all four onto one; it does see the limits of the real nodes once they exist.
async fn csi_undercount(policy: &str) {
    let setup = Setup::new(
        "ca-csi-undercount",
        policy,
        vec![Group::new("gpu", 8).csi(4).backend(&format!(
            "provisionDelay: {PROVISION_DELAY}, attach: {{delay: 1s}}"
        ))],
    );
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s
        .create_gang(&GangSpec::new("ckpt", 4).gpus(2).volumes(3))
        .await;
    let nodes = s.wait_running("ckpt", 4, Duration::from_secs(300)).await;
    let formed = secs(created);
    assert_eq!(nodes.len(), 4, "one member per node: {nodes:?}");
    let (asks, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert_eq!(
        (asks[0].from, asks[0].to),
        (0, 1),
        "CA packs the four members onto one template node: {asks:?}"
    );
    let outcome;
    if policy == "off" {
        assert!(
            decisions.iter().all(|d| d.applied_delta == d.ca_delta),
            "off applies CA's delta: {decisions:?}"
        );
        // Each real node's CSINode shows CA one more member that does not fit; it asks again.
        assert!(asks.len() >= 2, "CA needed more than one round: {asks:?}");
        outcome = format!("formed after {} CA scale-ups", asks.len());
    } else {
        assert_eq!(asks.len(), 1, "one round: {asks:?}");
        assert_eq!(
            decisions[0].applied_delta, 4,
            "strict rounds CA's 1 up to the gang's 4"
        );
        assert!(
            decisions[0].reason.contains("default/ckpt"),
            "{}",
            decisions[0].reason
        );
        let o = s.wait_outcome("ckpt", Duration::from_secs(60)).await;
        assert_eq!(o.outcome.as_str(), "succeeded", "{o:?}");
        outcome = o.outcome.as_str().to_owned();
    }
    eprintln!(
        "{policy}: formed in {formed:.1}s after {} CA scale-up(s)",
        asks.len()
    );
    Row::new(
        &s,
        "CSI under-count (4 × 2 GPU, 3 volumes each, limit 4/node)",
        "gpu",
        Some(formed),
    )
    .outcome(outcome)
    .note(format!("{} CA round(s) of provisioning", asks.len()))
    .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_csi_undercount_strict_rounds_up_to_the_whole_gang() {
    csi_undercount("strict").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_csi_undercount_off_ramps_one_node_per_round_until_the_gang_forms() {
    csi_undercount("off").await;
}

/// The group allows 4 nodes; the gang needs 6 whole nodes. Observed over a fixed window.
async fn max_too_small(policy: &str) {
    let window = Duration::from_secs(90);
    let setup = Setup::new("ca-max-too-small", policy, vec![Group::new("gpu", 4)]);
    let mut s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("big", 6)).await;
    while created.elapsed() < window {
        s.assert_running();
        assert!(s.running("big").await.is_empty(), "the gang cannot form");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let sample = s.sampler.sample();
    let (asks, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert_eq!(asks[0].to, 4, "CA asks for what max allows: {asks:?}");
    let ca_metrics = s.ca.metrics_text().await;
    let note;
    if policy == "strict" {
        assert!(
            decisions
                .iter()
                .all(|d| d.verdict == Verdict::Reject && d.applied_delta == 0)
        );
        assert!(sample.seen.is_empty(), "no GPU node was added: {sample:?}");
        assert!(
            !s.ca
                .lines("Error on gRPC call NodeGroupIncreaseSize")
                .is_empty(),
            "CA logged the refusal"
        );
        assert!(
            !s.ca.lines("is not ready for scaleup - backoff").is_empty(),
            "CA backed the group off"
        );
        let failed = metric_value(
            &ca_metrics,
            "cluster_autoscaler_failed_scale_ups_total",
            &[("reason", "cloudProviderError")],
        );
        assert!(
            failed.is_some_and(|v| v >= 1.0),
            "CA counted a failed scale-up: {failed:?} in {:?}",
            ca_metrics
                .lines()
                .filter(|l| l.contains("failed_scale_ups"))
                .collect::<Vec<_>>()
        );
        // CA's retries are spaced by its backoff (30 s initial in this harness).
        for pair in asks.windows(2) {
            assert!(
                pair[1].at_day_s - pair[0].at_day_s >= 25.0,
                "CA retried within its backoff: {asks:?}"
            );
        }
        let status = s.ca.status(&s.client).await.unwrap_or_default();
        assert!(
            status.contains("name: gpu") && status.contains("Backoff"),
            "CA's status ConfigMap shows the group backed off:\n{status}"
        );
        note = format!(
            "{} rejected asks over the window, spaced by CA's backoff; no node added",
            asks.len()
        );
    } else {
        assert_eq!(decisions[0].applied_delta, 4, "off applies CA's delta");
        assert_eq!(sample.max_nodes, 4, "{sample:?}");
        note = format!(
            "4 nodes added that no member can use; CA scaled down {} of them while the gang stayed pending",
            sample.removed.len()
        );
    }
    Row::new(&s, "max too small (6 × 8 GPU, max 4)", "gpu", None)
        .outcome(format!("never formed in {:.0}s", window.as_secs_f64()))
        .note(note)
        .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_max_too_small_strict_adds_nothing_and_ca_backs_the_group_off() {
    max_too_small("strict").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_max_too_small_off_adds_nodes_no_member_can_use() {
    max_too_small("off").await;
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_retries_after_its_backoff_once_a_hot_reload_makes_room_and_the_gang_runs() {
    let setup = Setup::new("ca-backoff-recovery", "strict", vec![Group::new("gpu", 4)]);
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = s.create_gang(&GangSpec::new("big", 6)).await;
    let rejected =
        super::harness::eventually("a strict rejection", Duration::from_secs(60), || {
            let d = s.decisions("gpu");
            async move { d.into_iter().find(|d| d.verdict == Verdict::Reject) }
        })
        .await;
    assert!(
        rejected.reason.contains("default/big"),
        "{}",
        rejected.reason
    );
    let rejected_at = super::harness::now_day_seconds();
    // Room appears: the operator raises maxSize; gangscaler reloads it on CA's next Refresh.
    s.rewrite_group(&Group::new("gpu", 8));
    let raised_at = super::harness::now_day_seconds();
    let raised = Instant::now();
    let nodes = s.wait_running("big", 6, Duration::from_secs(180)).await;
    let formed = secs(created);
    let ran = secs(raised);
    assert_eq!(nodes.len(), 6);
    let (asks, decisions) = assert_ca_made_the_calls(&s, "gpu");
    let retry = asks
        .iter()
        .find(|a| a.at_day_s > raised_at)
        .unwrap_or_else(|| panic!("CA retried after the raise: {asks:?}"));
    let last = decisions.last().unwrap();
    assert_eq!(last.verdict, Verdict::Accept);
    assert_eq!(last.applied_delta, 6);
    let retry_after = retry.at_day_s - raised_at;
    let since_reject = retry.at_day_s - rejected_at;
    assert!(
        since_reject >= 25.0,
        "CA honoured its backoff after the rejection ({since_reject:.1}s)"
    );
    Row::new(&s, "backoff and recovery (max 4 → 8 by hot reload)", "gpu", Some(formed))
        .outcome("succeeded")
        .note(format!(
            "CA retried {retry_after:.0}s after the raise ({since_reject:.0}s after the rejection; initial backoff 30s); gang Running {ran:.0}s after the raise"
        ))
        .record();
}
