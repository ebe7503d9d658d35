//! `docs/metrics.md` lists exactly the metrics gangscaler serves: every family registered in
//! `gangscaler::metrics::Metrics` (with the TLS families) has a row in one of the page's tables
//! (`| `name` | type | ...`), every row names a served family, and the type column agrees.
//! A metric added without its row, or a row left behind by a removed metric, fails here.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

use std::collections::BTreeMap;
use std::path::Path;

use gangscaler::metrics::{
    CompositeLabels, DecisionLabels, GroupLabels, Metrics, ReleaseLabels, ScaleUpOutcomeLabels,
};

/// Metrics with one series in every family: a family without series is not encoded.
fn populated() -> Metrics {
    let m = Metrics::new().with_tls();
    m.rpc_started("NodeGroups");
    m.rpc("NodeGroups", "OK", 0.001);
    m.provision_call("memory", "increase", "ok");
    m.config_reload(true);
    m.admission("accept", "gangs_admitted");
    let _ = m.admission_composites.get_or_create(&CompositeLabels {
        outcome: "admitted",
    });
    let _ = m.admission_decisions.get_or_create(&DecisionLabels {
        verdict: "reject",
        rule: "at_max",
    });
    let group = GroupLabels {
        node_group: "gpu".to_owned(),
    };
    for family in [
        &m.formation_seconds,
        &m.success_seconds,
        &m.job_start_delay_seconds,
    ] {
        family.get_or_create(&group).observe(1.0);
    }
    for family in [
        &m.attach_failures,
        &m.preemptions,
        &m.withdrawn_instances,
        &m.repairs,
    ] {
        family.get_or_create(&group).inc();
    }
    for family in [
        &m.reservation_blocking_daemon_sets,
        &m.reservation_backend_blocked,
        &m.node_group_target_above_max,
    ] {
        family.get_or_create(&group).set(0);
    }
    m.scale_up_outcomes
        .get_or_create(&ScaleUpOutcomeLabels {
            node_group: "gpu".to_owned(),
            outcome: "succeeded",
        })
        .inc();
    m.reservations_released
        .get_or_create(&ReleaseLabels { reason: "formed" })
        .inc();
    m
}

/// How many metric families `src/metrics*` registers: its `register` and
/// `register_with_unit` calls (the process collector's metrics aside).
fn registrations() -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join("metrics.rs")];
    let mut dirs = vec![root.join("metrics")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("src/metrics") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let mut count = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("source");
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for call in [".register(", ".register_with_unit("] {
            // A registration names its metric with a string literal first.
            count += code
                .match_indices(call)
                .filter(|(at, _)| code[at + call.len()..].trim_start().starts_with('"'))
                .count();
        }
    }
    count
}

/// Served families as the page names them: counters with `_total`, the rest by their name;
/// each with its type.
fn served() -> BTreeMap<String, String> {
    let text = populated().encode();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            Some((name, kind.to_owned()))
        })
        .collect()
}

/// The metric rows of the page: name and type cell.
fn documented() -> BTreeMap<String, String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    page.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("| `")?;
            let (name, rest) = rest.split_once("` | ")?;
            let kind = rest.split(" |").next()?.trim();
            matches!(kind, "counter" | "gauge" | "histogram")
                .then(|| (name.to_owned(), kind.to_owned()))
        })
        .collect()
}

#[test]
fn the_metrics_page_lists_exactly_the_served_metrics() {
    let served = served();
    let documented = documented();
    let own = served.keys().filter(|n| !n.starts_with("process_")).count();
    assert_eq!(
        own,
        registrations(),
        "a registered family has no series in this test's Metrics, so the check cannot see it: give it one in populated(); served: {served:?}"
    );
    // Read from /proc at each scrape: absent where the soft limit is unlimited.
    let optional = ["process_max_fds"];
    let undocumented: Vec<_> = served
        .keys()
        .filter(|n| !documented.contains_key(*n))
        .collect();
    let unserved: Vec<_> = documented
        .keys()
        .filter(|n| !served.contains_key(*n) && !optional.contains(&n.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "served but without a row in docs/metrics.md: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "rows in docs/metrics.md that nothing serves: {unserved:?}"
    );
    for (name, kind) in &served {
        assert_eq!(
            documented.get(name),
            Some(kind),
            "{name}: docs/metrics.md gives another type"
        );
    }
}
