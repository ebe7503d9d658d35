//! The chart's alerts and dashboard (`charts/gangscaler`) name metrics gangscaler exposes: every
//! `gangscaler_*` series they query is one `/metrics` serves (sample names derived from the
//! families' TYPE lines), and every scale-up outcome they match is one the audit log records.
//! Reads the chart's files as text, so it needs no helm.

use std::collections::BTreeSet;
use std::path::PathBuf;

use gangscaler::audit::Outcome;
use gangscaler::metrics::{GroupLabels, Metrics, ScaleUpOutcomeLabels};

fn chart_file(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("charts/gangscaler")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every `gangscaler_...` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("gangscaler_") {
        let before = rest[..i].chars().last();
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not part of a longer identifier (e.g. a label or a file name).
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') {
            out.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    out
}

/// The sample names `/metrics` can carry: each family's name with the suffixes of its type.
/// Labelled families are listed only once they have a series, so each gets one first.
fn exposed() -> BTreeSet<String> {
    let m = Metrics::new();
    m.rpc("NodeGroupIncreaseSize", "Ok", 0.01);
    m.provision_call("kwok", "increase", "ok");
    m.admission("accept", "fits");
    m.config_reload(true);
    let group = GroupLabels {
        node_group: "gpu".to_owned(),
    };
    for h in [
        &m.formation_seconds,
        &m.success_seconds,
        &m.job_start_delay_seconds,
    ] {
        h.get_or_create(&group).observe(30.0);
    }
    m.scale_up_outcomes
        .get_or_create(&ScaleUpOutcomeLabels {
            node_group: "gpu".to_owned(),
            outcome: "succeeded",
        })
        .inc();
    m.attach_failures.get_or_create(&group).inc();
    m.preemptions.get_or_create(&group).inc();
    let text = m.encode();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for s in suffixes {
            out.insert(format!("{name}{s}"));
        }
    }
    out
}

#[test]
fn the_alerts_and_the_dashboard_query_only_metrics_gangscaler_exposes() {
    let exposed = exposed();
    assert!(
        exposed.contains("gangscaler_config_valid"),
        "the families are listed: {exposed:?}"
    );
    for file in [
        "templates/prometheusrule.yaml",
        "dashboards/gangscaler.json",
    ] {
        let used = metric_names(&chart_file(file));
        assert!(
            used.len() >= 8,
            "{file} queries gangscaler's metrics: {used:?}"
        );
        let unknown: Vec<&String> = used.difference(&exposed).collect();
        assert!(
            unknown.is_empty(),
            "{file} queries series /metrics does not serve: {unknown:?}; served: {exposed:?}"
        );
    }
}

#[test]
fn the_alert_rules_cover_each_slo_the_chart_documents() {
    let rules = chart_file("templates/prometheusrule.yaml");
    for (alert, metric) in [
        (
            "GangscalerGangFormationSlow",
            "gangscaler_scaleup_formation_seconds_bucket",
        ),
        (
            "GangscalerStartSuccessLow",
            "gangscaler_scaleup_outcomes_total",
        ),
        (
            "GangscalerAttachFailuresHigh",
            "gangscaler_scaleup_outcomes_total",
        ),
        ("GangscalerConfigInvalid", "gangscaler_config_valid"),
        (
            "GangscalerRejectionRateHigh",
            "gangscaler_admission_decisions_total",
        ),
        (
            "GangscalerBackendErrors",
            "gangscaler_provision_calls_total",
        ),
        ("GangscalerGrpcErrors", "grpc_server_handled_total"),
        (
            "GangscalerAuditUnreadable",
            "gangscaler_audit_unreadable_lines",
        ),
        (
            "GangscalerConnectionsRefused",
            "gangscaler_connections_refused_total",
        ),
    ] {
        let at = rules
            .find(&format!("alert: {alert}"))
            .unwrap_or_else(|| panic!("no alert {alert}"));
        let next = rules[at + 1..]
            .find("- alert:")
            .map_or(rules.len(), |n| at + 1 + n);
        assert!(
            rules[at..next].contains(metric),
            "{alert} is computed from {metric}"
        );
    }
}

#[test]
fn the_outcomes_the_alerts_match_are_outcomes_the_audit_log_records() {
    let rules = chart_file("templates/prometheusrule.yaml");
    let known: BTreeSet<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    let ended = rules
        .lines()
        .find_map(|l| l.trim().strip_prefix("{{- $ended := \""))
        .and_then(|l| l.split('"').next())
        .expect("the rules name the ended outcomes once");
    for o in ended.split('|') {
        assert!(known.contains(o), "{o} is not an outcome: {known:?}");
    }
    // Every outcome but the two that are nobody's failure counts as ended.
    let counted: BTreeSet<&str> = ended.split('|').collect();
    let left: BTreeSet<&str> = known.difference(&counted).copied().collect();
    assert_eq!(left, BTreeSet::from(["cancelled", "preempted"]));
}
