//! Stock-outs in the middle of two gangs, with the real CA: each failed instance is charged
//! to the gang it was requested for, whose scale-up stays open and repairs; CA's next ask
//! gets exactly the missing nodes, and no gang is admitted twice. The same setup under `off`
//! (CA alone) for comparison.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gangscaler::audit::{Event, Outcome};

use super::harness::metric_value;
use super::scenario::{GangSpec, Group, Row, Scenario, Setup};

/// The group: its first two instances come up, each later one stocks out with probability
/// 0.5 (drawn from its random name).
fn flaky_group() -> Group {
    Group::new("gpu", 16).backend(
        "provisionDelay: 2s, failure: {afterInstances: 2, code: stockout, probability: 0.5}",
    )
}

/// What one run showed.
struct Run {
    s: Scenario,
    formed_s: f64,
    /// Nodes the accepted decisions applied, summed.
    applied: u32,
    /// Nodes of the group at the end.
    nodes: u32,
}

/// Gangs `a` (4 × 8 GPU) and `b` (2 × 8 GPU) under `policy`, until both run.
async fn two_gangs_through_stock_outs(policy: &str) -> Run {
    let setup = Setup::new(&format!("ca-repair-{policy}"), policy, vec![flaky_group()]);
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = Instant::now();
    s.create_gang(&GangSpec::new("a", 4)).await;
    s.create_gang(&GangSpec::new("b", 2)).await;
    // CA backs the group off after each failed round (30 s, then doubling up to 2 min).
    let limit = Duration::from_secs(900);
    s.wait_running("a", 4, limit).await;
    s.wait_running("b", 2, limit).await;
    let formed_s = created.elapsed().as_secs_f64();
    let applied = s
        .decisions("gpu")
        .iter()
        .filter(|d| d.is_accepted())
        .map(|d| d.applied_delta)
        .sum();
    let nodes = u32::try_from(s.group_nodes("gpu").await.len()).unwrap();
    Run {
        s,
        formed_s,
        applied,
        nodes,
    }
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_stock_outs_are_repaired_with_exactly_the_missing_nodes_and_no_gang_twice() {
    let run = two_gangs_through_stock_outs("strict").await;
    let s = &run.s;
    let records = s.records();
    let decisions = s.decisions("gpu");
    // Each gang admitted afresh once; every later node for it is a repair of that scale-up.
    for gang in ["a", "b"] {
        let fresh: Vec<_> = decisions
            .iter()
            .filter(|d| d.is_accepted())
            .flat_map(|d| &d.gangs)
            .filter(|g| g.gang.name == gang && g.repair_of.is_none())
            .collect();
        assert_eq!(
            fresh.len(),
            1,
            "{gang} admitted afresh {} times: {decisions:?}",
            fresh.len()
        );
    }
    let repairs: Vec<_> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Repair(e) => Some(e),
            _ => None,
        })
        .collect();
    let failed: BTreeSet<&str> = repairs.iter().map(|r| r.instance.as_str()).collect();
    assert_eq!(
        failed.len(),
        repairs.len(),
        "one repair record per failed instance: {repairs:?}"
    );
    let repair_nodes: u32 = decisions
        .iter()
        .filter(|d| d.is_accepted())
        .flat_map(|d| &d.gangs)
        .filter(|g| g.repair_of.is_some())
        .map(|g| g.nodes)
        .sum();
    let withdrawn = records
        .iter()
        .filter(|r| matches!(r.event, Event::Withdrawal(_)))
        .count();
    assert_eq!(withdrawn, 0, "nothing to withdraw");
    // Every instance applied is one of the six nodes or a failed instance: the cluster's node
    // count and the audit log's repairs agree with what was applied.
    assert_eq!(run.nodes, 6, "no node beyond the gangs'");
    let n_failed = u32::try_from(failed.len()).unwrap();
    assert_eq!(run.applied, 6 + n_failed, "applied = 6 + failed instances");
    assert_eq!(
        repair_nodes, n_failed,
        "one replacement per failed instance"
    );
    // Both lifecycles succeed, none ends early for a stock-out.
    for gang in ["a", "b"] {
        let ok = s
            .wait_outcome_in(gang, "gpu", Duration::from_secs(60))
            .await;
        assert_eq!(ok.outcome, Outcome::Succeeded, "{gang}: {ok:?}");
        assert_eq!(s.outcomes(gang).len(), 1, "{gang}: {:?}", s.outcomes(gang));
    }
    Row::new(
        s,
        "stock-outs p=0.5 after 2 instances, gangs 4 + 2 × 8 GPU: repair",
        "gpu",
        Some(run.formed_s),
    )
    .outcome(format!(
        "both formed; applied {} = 6 + {n_failed} failed; {n_failed} repair record(s); each gang admitted once",
        run.applied
    ))
    .note(format!(
        "CA asks {:?}; failed instances per gang: a {}, b {}",
        s.ca.asks_of("gpu"),
        repairs.iter().filter(|r| r.gang.name == "a").count(),
        repairs.iter().filter(|r| r.gang.name == "b").count(),
    ))
    .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_alone_through_the_same_stock_outs_for_comparison() {
    let run = two_gangs_through_stock_outs("off").await;
    let s = &run.s;
    let failed = run.applied.saturating_sub(run.nodes);
    Row::new(
        s,
        "stock-outs p=0.5 after 2 instances, gangs 4 + 2 × 8 GPU: CA alone",
        "gpu",
        Some(run.formed_s),
    )
    .outcome(format!(
        "both formed; applied {} for {} node(s) at the end",
        run.applied, run.nodes
    ))
    .note(format!(
        "CA asks {:?}; {failed} instance(s) applied beyond the nodes at the end",
        s.ca.asks_of("gpu")
    ))
    .record();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_grpc_timeout_of_1s_and_a_40_node_increase_leave_target_lifecycle_and_ledger_agreeing() {
    // Nodes due at once: before, kwok created all 40 inside the call.
    let setup = Setup::new(
        "ca-grpc-timeout",
        "strict",
        vec![Group::new("gpu", 48).backend("provisionDelay: 0s")],
    )
    .grpc_timeout("1s");
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = Instant::now();
    s.create_gang(&GangSpec::new("big", 40)).await;
    s.wait_running("big", 40, Duration::from_secs(600)).await;
    let formed_s = created.elapsed().as_secs_f64();
    let accepted: Vec<_> = s
        .decisions("gpu")
        .into_iter()
        .filter(|d| d.is_accepted())
        .collect();
    // One decision, applied once: a call CA gave up on is not asked for again by gangscaler,
    // and the gang, in flight, is not admitted a second time.
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    assert_eq!(accepted[0].applied_delta, 40);
    assert_eq!(
        s.group_nodes("gpu").await.len(),
        40,
        "target and nodes agree"
    );
    let ok = s
        .wait_outcome_in("big", "gpu", Duration::from_secs(60))
        .await;
    assert_eq!(ok.outcome, Outcome::Succeeded);
    assert_eq!(s.outcomes("big").len(), 1);
    let deadline_lines = s.ca.lines("DeadlineExceeded").len();
    // gangscaler's own time on the call (one call, so the sum is its duration).
    let m = s.gangscaler_metrics().await;
    let method = [("grpc_method", "NodeGroupIncreaseSize")];
    let calls = metric_value(&m, "grpc_server_handling_seconds_count", &method).unwrap_or(0.0);
    let seconds = metric_value(&m, "grpc_server_handling_seconds_sum", &method).unwrap_or(0.0);
    Row::new(
        &s,
        "CA grpc_timeout 1s, one 40-node increase (nodes due at once)",
        "gpu",
        Some(formed_s),
    )
    .outcome("succeeded; one decision of 40, 40 nodes")
    .note(format!(
        "{calls} NodeGroupIncreaseSize call(s) took {:.0} ms in all in gangscaler; CA log lines with DeadlineExceeded: {deadline_lines}; CA asks {:?}",
        seconds * 1000.0,
        s.ca.asks_of("gpu")
    ))
    .record();
}
