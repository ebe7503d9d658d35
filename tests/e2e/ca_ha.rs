//! Two gangscaler replicas with leader election behind a forwarder that plays the Service
//! (it routes to the replica whose `/readyz` is 200): kill -9 of the leader during a
//! CA-driven scale-up; the standby takes the Lease, resumes the open scale-up from the first
//! leader's audit log, creates the nodes, and CA carries on until the gang runs whole.

use std::time::{Duration, Instant};

use gangscaler::audit::{Event, Outcome, read_files};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use super::harness::{eventually, http_get, metric_value};
use super::scenario::{GangSpec, Group, Scenario, Setup, audit_report};

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn ca_scale_up_survives_kill_9_of_the_leader_and_the_standby_finishes_it_once() {
    let setup = Setup::new("ca-ha-failover", "strict", vec![Group::new("gpu", 4)]).two_replicas();
    let mut s = Scenario::start(setup).await;
    let (a_http, b_http) = (s.replica_http[0], s.replica_http[1]);
    let (_, standby) = http_get(b_http, "/readyz").await.unwrap();
    assert!(
        standby.contains("[-]leader failed: standby (gangscaler-b): the leader is gangscaler-a"),
        "{standby}"
    );

    // A gang of two whole-node members: CA asks, gangscaler-a admits and records it; the
    // nodes are due 15 s after the request.
    s.create_gang(&GangSpec::new("train", 2)).await;
    let decision = eventually(
        "gangscaler-a's scale-up decision",
        Duration::from_secs(120),
        || {
            let d = s
                .decisions("gpu")
                .into_iter()
                .find(|d| d.scale_up_id.is_some() && d.applied_delta > 0);
            async move { d }
        },
    )
    .await;
    let id = decision.scale_up_id.clone().unwrap();
    let nodes_at_kill = s.group_nodes("gpu").await.len();
    // Crash the leader mid scale-up.
    s.kill_gangscaler();
    let killed = Instant::now();
    let killed_ms = wall_ms();

    // The standby takes over: ready (so the forwarder routes CA to it) within the lease
    // duration of the last renewal it saw, plus a retry.
    let took_over = eventually("gangscaler-b ready", Duration::from_secs(60), || async {
        http_get(b_http, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
            .map(|_| killed.elapsed())
    })
    .await;
    eprintln!(
        "failover: gangscaler-b ready {:.1}s after kill -9 of gangscaler-a ({nodes_at_kill} of 2 nodes existed then)",
        took_over.as_secs_f64()
    );
    assert!(
        took_over <= Duration::from_secs(15 + 3 + 10),
        "took over after {took_over:?}"
    );
    assert!(
        http_get(a_http, "/readyz").await.is_none(),
        "gangscaler-a is dead"
    );

    // CA carries on and the gang runs whole on exactly the nodes asked for once.
    let running = s.wait_running("train", 2, Duration::from_secs(180)).await;
    let ran = killed.elapsed();
    let outcome = s.wait_outcome("train", Duration::from_secs(120)).await;
    assert_eq!(outcome.outcome, Outcome::Succeeded, "{outcome:?}");
    assert_eq!(
        outcome.scale_up_id, id,
        "the resumed scale-up ended, no new one"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let nodes = s.group_nodes("gpu").await;
    assert_eq!(nodes.len(), 2, "no duplicate node: {nodes:?}");
    assert_eq!(running.len(), 2, "{running:?}");
    let decisions = s.decisions("gpu");
    let applied: u32 = decisions.iter().map(|d| d.applied_delta).sum();
    assert_eq!(applied, 2, "{decisions:?}");

    // The audit logs: one decision and one outcome per lifecycle, no record twice; the
    // decision in gangscaler-a's log, the outcome in gangscaler-b's.
    let all = s.records();
    let mut keys: Vec<String> = Vec::new();
    for r in &all {
        keys.push(match &r.event {
            Event::Decision(d) => format!("{:?}/decision/{}", d.scale_up_id, r.ts_ms),
            Event::Phase(p) => format!("{}/{:?}/{}", p.scale_up_id, p.gang, p.phase.as_str()),
            Event::Outcome(o) => format!("{}/{:?}/outcome", o.scale_up_id, o.gang),
            Event::Repair(r) => format!("{}/{}/repair/{}", r.scale_up_id, r.gang, r.instance),
            // Not a lifecycle record (and these groups do not reserve).
            Event::Reservation(_) | Event::Withdrawal(_) | Event::Deferral(_) => continue,
        });
    }
    let unique: std::collections::BTreeSet<&String> = keys.iter().collect();
    assert_eq!(keys.len(), unique.len(), "a record written twice: {keys:?}");
    let opened = decisions
        .iter()
        .filter(|d| d.scale_up_id.as_deref() == Some(id.as_str()))
        .count();
    assert_eq!(opened, 1, "{decisions:?}");
    assert_eq!(s.outcomes("train").len(), 1);
    let dir = s.audit.parent().unwrap().to_owned();
    let log_of = |name: &str| read_files(&[dir.join(name)]).unwrap().records;
    let a_log = log_of("gangscaler-a.jsonl");
    let b_log = log_of("gangscaler-b.jsonl");
    assert!(
        a_log
            .iter()
            .any(|r| matches!(&r.event, Event::Decision(d) if d.scale_up_id.as_deref() == Some(id.as_str()))),
        "the decision is in gangscaler-a's log"
    );
    assert!(a_log.iter().all(|r| r.ts_ms <= killed_ms));
    assert!(
        b_log
            .iter()
            .any(|r| matches!(&r.event, Event::Outcome(o) if o.scale_up_id == id)),
        "the outcome is in gangscaler-b's log"
    );
    assert!(b_log.iter().all(|r| !matches!(r.event, Event::Decision(_))));

    // `audit report` over the directory: one answer.
    let report = audit_report(&dir);
    assert_eq!(report["overall"]["outcomes"]["succeeded"], 1, "{report:#}");
    assert_eq!(report["overall"]["formation"]["count"], 1, "{report:#}");
    assert_eq!(report["overall"]["open"], 0, "{report:#}");
    assert_eq!(report["files"].as_array().unwrap().len(), 2, "{report:#}");

    // The Lease and the metrics say gangscaler-b leads.
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), super::chart::NAMESPACE);
    let spec = leases.get("gangscaler").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("gangscaler-b"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert!(spec.lease_transitions.unwrap_or(0) >= 1, "{spec:?}");
    let (_, m) = http_get(b_http, "/metrics").await.unwrap();
    assert_eq!(metric_value(&m, "gangscaler_leader", &[]), Some(1.0), "{m}");
    assert_eq!(
        metric_value(&m, "gangscaler_leader_transitions_total", &[]),
        Some(1.0),
        "{m}"
    );
    eprintln!(
        "failover summary: kill -9 -> standby ready {:.1}s, -> gang running {:.1}s; scale-up {id} recorded once, ended {:?}",
        took_over.as_secs_f64(),
        ran.as_secs_f64(),
        outcome.outcome
    );
    s.ca.assert_running();
    s.standby.as_mut().unwrap().assert_running();
    let switched = s
        .forwarder
        .as_ref()
        .unwrap()
        .switches
        .lock()
        .unwrap()
        .iter()
        .find(|(at, to)| *at > killed && *to == Some(1))
        .map(|(at, _)| at.duration_since(killed));
    eprintln!("the forwarder (the Service) routed to gangscaler-b {switched:?} after the kill");
    assert!(switched.is_some_and(|d| d <= took_over + Duration::from_secs(1)));
}

fn wall_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}
