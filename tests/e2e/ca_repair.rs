//! Accounting through stock-outs, CA's deadlines and restarts, with the real CA:
//! - stock-outs in the middle of two gangs: each failed instance is charged to the gang it was
//!   requested for, whose scale-up stays open and repairs; CA's next ask gets exactly the
//!   missing nodes, and no gang is admitted twice (and the same setup under `off`, CA alone,
//!   for comparison);
//! - CA's `grpc_timeout` shorter than a large increase;
//! - a kill -9 between a decision's record and its backend write.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gangscaler::audit::{Event, Outcome};

use super::harness::{eventually, metric_value};
use super::scenario::{GangSpec, Group, Row, Scenario, Setup};

/// The group: its first two instances come up, each later one stocks out with probability
/// 0.5 (drawn from its random name). Under gang admission the nodes are reserved for the gang
/// they were requested for: without that kube-scheduler may run one gang on a node added for
/// the other (CA alone has no reservation).
fn flaky_group(policy: &str) -> Group {
    let g = Group::new("gpu", 16).backend(
        "provisionDelay: 2s, failure: {afterInstances: 2, code: stockout, probability: 0.5}",
    );
    if policy == "off" {
        g
    } else {
        g.extra("reservation: {enabled: true, bookingDeadline: 10m}\n")
    }
}

/// What one run showed.
struct Run {
    s: Scenario,
    /// Seconds from the first gang's creation until both ran, if they did in time.
    formed_s: Option<f64>,
    /// Nodes the accepted decisions applied, summed.
    applied: u32,
    /// Nodes of the group at the end.
    nodes: u32,
}

/// Gangs `a` (4 × 8 GPU) and then `b` (2 × 8 GPU, created once CA has asked for `a`) under
/// `policy`, until both run or `limit` passes.
async fn two_gangs_through_stock_outs(policy: &str, limit: Duration) -> Run {
    // Repairs wait out CA's backoff (up to 2 min a round): the formation deadline is set past
    // the wait, so only a gang that never forms ends by it.
    let setup = Setup::new(
        &format!("ca-repair-{policy}"),
        policy,
        vec![flaky_group(policy)],
    )
    .lifecycle("{interval: 500ms, formationTimeout: 30m, attachTimeout: 2m}");
    let s = Scenario::start(setup).await;
    s.sampler.begin();
    let created = Instant::now();
    s.create_gang(&GangSpec::new("a", 4)).await;
    eventually("CA's ask for a", Duration::from_secs(60), || {
        let asked = s.decisions("gpu").iter().any(|d| d.is_accepted());
        async move { asked.then_some(()) }
    })
    .await;
    s.create_gang(&GangSpec::new("b", 2)).await;
    // CA backs the group off after each failed round (30 s, then doubling up to 2 min).
    let both = async {
        s.wait_running("a", 4, limit).await;
        s.wait_running("b", 2, limit).await;
    };
    let formed_s = tokio::time::timeout(limit, both)
        .await
        .ok()
        .map(|()| created.elapsed().as_secs_f64());
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
    let run = two_gangs_through_stock_outs("strict", Duration::from_secs(1500)).await;
    let s = &run.s;
    assert!(run.formed_s.is_some(), "both gangs run");
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
        "stock-outs p=0.5 after 2 instances, gangs 4 + 2 × 8 GPU",
        "gpu",
        run.formed_s,
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
    let run = two_gangs_through_stock_outs("off", Duration::from_secs(420)).await;
    let s = &run.s;
    let failed = run.applied.saturating_sub(run.nodes);
    let formed = if run.formed_s.is_some() {
        "both formed"
    } else {
        "not both formed within 7 min"
    };
    Row::new(
        s,
        "stock-outs p=0.5 after 2 instances, gangs 4 + 2 × 8 GPU",
        "gpu",
        run.formed_s,
    )
    .outcome(format!(
        "{formed}; applied {} for {} node(s) at the end",
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

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn a_decision_recorded_before_a_kill_9_and_never_applied_is_ended_at_restart() {
    use gangscaler::audit::{DecisionEvent, Record, Verdict};
    let mut s = Scenario::start(Setup::new(
        "ca-unapplied",
        "strict",
        vec![Group::new("gpu", 8)],
    ))
    .await;
    s.sampler.begin();
    // A first gang, to read how this row's gang API names gangs in the records.
    s.create_gang(&GangSpec::new("warm", 1)).await;
    s.wait_running("warm", 1, Duration::from_secs(180)).await;
    let warm = s
        .decisions("gpu")
        .into_iter()
        .find(|d| d.is_accepted())
        .unwrap();
    // The provider dies right after writing the decision for a second gang, before the
    // backend write: its log has the decision, kwok's state never saw it.
    s.kill_gangscaler();
    s.create_gang(&GangSpec::new("late", 2)).await;
    let mut gang = warm.gangs[0].gang.clone();
    gang.name = gang.name.replace("warm", "late");
    let now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let id = format!("su-{now_ms}-99");
    let mut lost = warm.clone();
    lost.scale_up_id = Some(id.clone());
    lost.target = 1;
    lost.headroom = 7;
    lost.ca_delta = 2;
    lost.applied_delta = 2;
    lost.gang_nodes = 2;
    lost.gangs[0].gang = gang.clone();
    lost.gangs[0].nodes = 2;
    lost.reason = "written by the test: the record a killed provider left".into();
    assert_eq!(lost.verdict, Verdict::Accept);
    let line = Record::new(now_ms, DecisionEvent { ..lost })
        .to_line()
        .unwrap();
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&s.audit)
            .unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_all().unwrap();
    }
    let restarted = Instant::now();
    s.restart_gangscaler();
    // The first lifecycle tick ends the lost scale-up, and CA's next ask admits the gang
    // afresh, with a lifecycle of its own that succeeds.
    s.wait_running("late", 2, Duration::from_secs(300)).await;
    let formed_s = restarted.elapsed().as_secs_f64();
    let outcomes = s.outcomes("late");
    let lost_end = outcomes
        .iter()
        .find(|o| o.scale_up_id == id)
        .unwrap_or_else(|| panic!("no outcome for {id}: {outcomes:?}"));
    assert_eq!(lost_end.outcome, Outcome::ProvisionFailed);
    assert!(
        lost_end.reason.starts_with("recorded but never applied"),
        "{lost_end:?}"
    );
    let fresh: Vec<DecisionEvent> = s
        .decisions("gpu")
        .into_iter()
        .filter(|d| d.is_accepted() && d.scale_up_id.as_deref() != Some(id.as_str()))
        .filter(|d| d.gangs.iter().any(|g| g.gang.name == gang.name))
        .collect();
    assert_eq!(fresh.len(), 1, "late admitted afresh once: {fresh:?}");
    let fresh_id = fresh[0].scale_up_id.clone();
    let ok = eventually(
        "the fresh scale-up's outcome",
        Duration::from_secs(60),
        || {
            let o = s.outcomes("late").into_iter().find(|o| {
                o.scale_up_id.as_str() != id && Some(&o.scale_up_id) == fresh_id.as_ref()
            });
            async move { o }
        },
    )
    .await;
    assert_eq!(ok.outcome, Outcome::Succeeded);
    assert_eq!(
        s.group_nodes("gpu").await.len(),
        3,
        "warm's node and late's two, no more"
    );
    Row::new(&s, "kill -9 between a decision's record and its backend write (time from the restart)", "gpu", Some(formed_s))
        .outcome("lost scale-up ended provisionFailed (recorded but never applied); gang admitted afresh, succeeded")
        .note(format!("CA asks {:?}; 3 nodes for 3 members", s.ca.asks_of("gpu")))
        .record();
}
