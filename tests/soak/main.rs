//! A trace-driven soak with the real cluster-autoscaler: the e2e harness (a real control plane,
//! kwok nodes, CA 1.36.1 built from `../shared/cluster-autoscaler`, gangscaler on the kwok
//! backend) replays a gang trace written by `tests/soak/trace.py`, under one admission policy,
//! and writes raw results for `tests/soak/report.py`.
//!
//! Not part of `cargo test` or CI: its one test is `#[ignore]`d. Run it with
//! `scripts/soak.sh` (see `tests/soak/README.md`), or by hand:
//! `SOAK_TRACE=trace.jsonl SOAK_POLICY=strict SOAK_RESULTS=dir cargo test --all-features
//! --test soak -- --ignored --nocapture`.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a test run: abort loudly"
)]
#![expect(
    clippy::disallowed_methods,
    reason = "the soak times a real run against a real cluster with the real clocks"
)]

#[expect(
    dead_code,
    reason = "shared with the e2e tests; the soak uses part of it"
)]
#[path = "../e2e/capi.rs"]
mod capi;
#[expect(
    dead_code,
    reason = "shared with the e2e tests; the soak uses part of it"
)]
#[path = "../e2e/chart.rs"]
mod chart;
#[path = "../common/mod.rs"]
mod common;
#[expect(
    dead_code,
    reason = "shared with the e2e tests; the soak uses part of it"
)]
#[path = "../e2e/harness.rs"]
mod harness;
#[path = "../e2e/idle.rs"]
mod idle;
mod probe;
mod replay;
#[expect(
    dead_code,
    reason = "shared with the e2e tests; the soak uses part of it"
)]
#[path = "../e2e/scenario.rs"]
mod scenario;
#[path = "../e2e/support.rs"]
mod support;
mod trace;

use std::path::{Path, PathBuf};
use std::time::Duration;

use scenario::{Group, Scenario, Setup};
use support::{create_dynamic, create_gang_object, start_gangscaler, start_gangscaler_with_env};

/// gangscaler's lifecycle settings for the soak: a 2 s loop, and timeouts that end a stuck
/// scale-up within the run.
const LIFECYCLE: &str = "{interval: 2s, formationTimeout: 10m, attachTimeout: 5m}";

/// The `defer` arm's `admission.deferral`: the default horizon, CA's default
/// `--new-pod-scale-up-delay` (0 s).
const DEFERRAL: &str = "{enabled: true, horizon: 2m}";

/// What the run reads from its environment.
struct Config {
    trace: PathBuf,
    policy: String,
    results: PathBuf,
    minutes: Option<f64>,
    tick: Duration,
    /// `SOAK_RESERVE=1`: the groups reserve the nodes added for a gang (the third arm).
    reserve: bool,
    /// `SOAK_DEFER=1`: `admission.deferral` is on (the `defer` arm, docs/deferral.md).
    defer: bool,
    /// `SOAK_ORDER`: `admission.order` (`age` unless set; `fewestMissing` is the `fewest` arm).
    order: String,
}

impl Config {
    fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let policy = var("SOAK_POLICY").unwrap_or_else(|| "strict".to_owned());
        assert!(
            ["strict", "roundUp", "off"].contains(&policy.as_str()),
            "SOAK_POLICY is strict, roundUp or off, not {policy:?}"
        );
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        Self {
            trace: PathBuf::from(var("SOAK_TRACE").expect("SOAK_TRACE names the trace file")),
            results: var("SOAK_RESULTS").map_or_else(
                || repo.join("target/soak-results").join(&policy),
                PathBuf::from,
            ),
            minutes: var("SOAK_MINUTES").map(|m| m.parse().expect("SOAK_MINUTES is a number")),
            tick: Duration::from_secs_f64(
                var("SOAK_TICK_SECONDS")
                    .map_or(5.0, |s| s.parse().expect("SOAK_TICK_SECONDS is a number")),
            ),
            reserve: flag(var("SOAK_RESERVE"), "SOAK_RESERVE"),
            defer: flag(var("SOAK_DEFER"), "SOAK_DEFER"),
            order: order(var("SOAK_ORDER")),
            policy,
        }
    }
}

/// `admission.order` from the environment (unset is `age`).
fn order(value: Option<String>) -> String {
    let order = value.unwrap_or_else(|| "age".to_owned());
    assert!(
        ["age", "fewestMissing"].contains(&order.as_str()),
        "SOAK_ORDER is age or fewestMissing, not {order:?}"
    );
    order
}

/// A `0`/`1` switch from the environment (unset is `0`).
fn flag(value: Option<String>, name: &str) -> bool {
    match value.as_deref() {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => panic!("{name} is 0 or 1, not {other:?}"),
    }
}

/// The kwok GPU groups of the trace: 8 × H100 nodes due after the trace's provisioning time
/// (15 s unless it sets one; drawn per node over its jitter), a share of them stocked out when
/// the trace says so, the trace's CSI attach limit with the simulated attacher (1 s), and the
/// pool label gangs select. With `reserve`, nodes added for a gang are reserved for it, with
/// the default booking deadline (measured from the group's provisioning times; the baseline
/// campaign, before it was measured, set 10m).
fn groups(trace: &trace::Trace, reserve: bool) -> Vec<Group> {
    trace
        .header
        .groups
        .iter()
        .map(|g| {
            let mut extra = format!("labels: {{{}: {}}}", replay::POOL_LABEL, g.pool);
            if reserve {
                extra.push_str("\nreservation: {enabled: true}");
            }
            Group::new(&g.id, g.max_size)
                .csi(g.csi_limit)
                .backend(&g.backend_yaml())
                .extra(&extra)
        })
        .collect()
}

/// Every time CA backed a node group off (its `Disabling scale-up for node group` warning,
/// `clusterstate/clusterstate.go` in 1.34–1.36): the UTC second of the day, the group and the
/// error code (`cloudProviderError` for a refused `NodeGroupIncreaseSize`, the instance's code
/// for a failed instance, such as a stock-out).
fn ca_backoffs(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let rest = line.split_once("Disabling scale-up for node group ")?.1;
            let group = rest.split_whitespace().next()?;
            let code = rest.split_once("errorCode=").map_or("", |(_, c)| c.trim());
            Some(serde_json::json!({
                "atDayS": harness::klog_day_seconds(line),
                "group": group,
                "errorCode": code,
            }))
        })
        .collect()
}

fn save(dir: &Path, name: &str, text: &str) {
    harness::write(&dir.join(name), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak of many minutes: scripts/soak.sh"]
async fn soak_replays_the_trace_with_the_real_ca() {
    let cfg = Config::from_env();
    let trace = trace::load(&cfg.trace);
    let minutes = cfg.minutes.unwrap_or(trace.header.minutes);
    std::fs::create_dir_all(&cfg.results).unwrap();
    // CA logs at --v=2 here (the e2e's --v=4 writes gigabytes at a thousand nodes).
    // CA gives a node 5 minutes to come, above the longest provisioning time a trace draws
    // (trace.py caps it at 4 minutes).
    let mut setup = Setup::new("soak", &cfg.policy, groups(&trace, cfg.reserve))
        .lifecycle(LIFECYCLE)
        .ca_flag("v", "2")
        .ca_flag("max-node-provision-time", "5m");
    if cfg.defer {
        setup = setup.deferral(DEFERRAL);
    }
    setup.order = Some(cfg.order.clone());
    let s = Scenario::start(setup).await;
    eprintln!(
        "soak: {} gangs over {minutes} min under {}; logs in {}",
        trace.gangs.len(),
        cfg.policy,
        s.cluster.dir.display()
    );
    s.sampler.begin();
    let opts = replay::Options {
        duration: Duration::from_secs_f64(minutes * 60.0),
        tick: cfg.tick,
        ca_every: Duration::from_secs(15),
    };
    let run = replay::run(&s, &trace, opts).await;
    let sample = s.sampler.sample();
    let backoffs = ca_backoffs(&s.ca.log);
    let ca_metrics = s.ca.metrics_text().await;
    let gangscaler_metrics = s.gangscaler_metrics().await;
    save(&cfg.results, "ca-metrics.txt", &ca_metrics);
    save(&cfg.results, "gangscaler-metrics.txt", &gangscaler_metrics);
    std::fs::copy(&s.audit, cfg.results.join("audit.jsonl")).expect("copying the audit log");
    let report = scenario::audit_report(&s.audit);
    save(
        &cfg.results,
        "audit-report.json",
        &serde_json::to_string_pretty(&report).unwrap(),
    );
    let results = serde_json::json!({
        "policy": cfg.policy,
        "reservation": cfg.reserve,
        "deferral": cfg.defer,
        "order": cfg.order,
        "k8s": harness::Versions::load().minor,
        "ca": s.ca.version,
        "tracePath": cfg.trace,
        "trace": trace.header_json,
        "seed": trace.header.seed,
        "minutes": minutes,
        "gangscalerBin": support::gangscaler_bin(),
        "idle": {
            "seconds": sample.seconds,
            "idleNodeSeconds": sample.idle_node_seconds,
            "idleGpuSeconds": sample.idle_gpu_seconds,
            "idleNodeMinutes": sample.idle_node_minutes(),
            "maxNodes": sample.max_nodes,
            "nodesSeen": sample.seen.len(),
            "nodesRemoved": sample.removed.len(),
            "causeNodeMinutes": sample.attribution.causes().minutes_json(),
        },
        "replay": run,
        "nodes": sample.lives.lives(),
        "caBackoffs": backoffs,
        "logs": s.cluster.dir,
    });
    save(
        &cfg.results,
        "results.json",
        &serde_json::to_string_pretty(&results).unwrap(),
    );
    eprintln!("soak: results in {}", cfg.results.display());
}
