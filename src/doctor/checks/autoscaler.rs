//! Cluster Autoscaler flags that hurt gangs. Every flag name and default here was read in
//! CA's `config/flags/flags.go` (and `config/const.go`, `expander/expander.go`,
//! `expander/factory`) of releases 1.34.5, 1.35.2 and 1.36.1.

use std::time::Duration;

use crate::doctor::flags::{self, Flag, flag_bool, go_duration, parse_go_duration};
use crate::doctor::{Observed, Row, Status};

/// `--initial-node-group-backoff-duration` default (5m in 1.34-1.36).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// `--max-node-group-backoff-duration` default (30m in 1.34-1.36).
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);
/// `--scale-down-unneeded-time` default (`config.DefaultScaleDownUnneededTime`, 10m).
pub const DEFAULT_UNNEEDED: Duration = Duration::from_secs(10 * 60);
/// The first backoff above which a gang waits long after a whole-gang refusal.
pub const LONG_INITIAL_BACKOFF: Duration = Duration::from_secs(60);
/// The longest backoff above which a gang waits long after repeated refusals.
pub const LONG_MAX_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// gangscaler's default `lifecycle.formationTimeout`, the formation time assumed without
/// `--config`.
pub const DEFAULT_FORMATION: Duration = Duration::from_secs(30 * 60);
/// `--ok-total-unready-count` default (3 in 1.34-1.36).
pub const DEFAULT_OK_UNREADY: u64 = 3;
/// `--max-total-unready-percentage` default (45 in 1.34-1.36).
pub const DEFAULT_MAX_UNREADY_PERCENT: f64 = 45.0;
/// Expanders CA accepts (`AvailableExpanders` and the registered `least-nodes` filter).
pub const EXPANDERS: [&str; 7] = [
    "random",
    "most-pods",
    "least-waste",
    "least-nodes",
    "price",
    "priority",
    "grpc",
];

pub(super) fn rows(o: &Observed) -> Vec<Row> {
    let Some(found) = &o.ca.flags else {
        let why = o.ca.lookup.clone().unwrap_or_else(|| {
            "no kube-system Deployment with a cluster-autoscaler image".to_owned()
        });
        return vec![Row::new(
            "ca-flags",
            Status::Unknown,
            format!("CA's flags not given; {why}"),
            "pass --ca-flags FILE (CA's command line, or one flag a line)",
        )];
    };
    let f = &found.value;
    let ca_minor = o.ca.version.as_ref().map(|v| v.value.minor);
    vec![
        Row::new(
            "ca-flags",
            Status::Ok,
            format!("{} flags from {}", f.len(), found.source),
            "",
        ),
        cloud_provider(f),
        csi_node_aware(f, ca_minor),
        backoff(f),
        expander(f),
        max_nodes_total(o, f),
        unneeded_time(o, f),
        unready_limits(o, f),
    ]
}

/// The flag `name` parsed as `T` (`None` when absent), or the `Error` row `id` naming the
/// value that is not `what` (CA refuses to start on it).
fn parsed<T: std::str::FromStr>(
    f: &[Flag],
    id: &str,
    name: &str,
    what: &str,
) -> Result<Option<T>, Row> {
    let Some(raw) = value(f, name) else {
        return Ok(None);
    };
    raw.parse().map(Some).map_err(|_| {
        Row::new(
            id,
            Status::Error,
            format!("--{name} {raw:?} is not {what} (CA refuses to start)"),
            "fix the value",
        )
    })
}

fn value<'a>(f: &'a [Flag], name: &str) -> Option<&'a str> {
    flags::last(f, name).and_then(|f| f.value.as_deref())
}

fn cloud_provider(f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/cloud-provider";
    match value(f, "cloud-provider") {
        Some("externalgrpc") => Row::new(ID, Status::Ok, "externalgrpc", ""),
        Some(other) => Row::new(
            ID,
            Status::Error,
            format!(
                "{other}: CA does not call gangscaler, so no scale-up is a whole-gang decision"
            ),
            "--cloud-provider=externalgrpc --cloud-config=<file with gangscaler's address>",
        ),
        None => Row::new(
            ID,
            Status::Warn,
            "not set: the default depends on CA's build (externalgrpc-only builds default to \
             externalgrpc, the all-providers image to gce)",
            "--cloud-provider=externalgrpc",
        ),
    }
}

fn csi_node_aware(f: &[Flag], ca_minor: Option<u32>) -> Row {
    const ID: &str = "ca-flag/enable-csi-node-aware-scheduling";
    let flag = flags::last(f, "enable-csi-node-aware-scheduling");
    if ca_minor.is_some_and(|m| m < 35) {
        return match flag {
            Some(_) => Row::new(
                ID,
                Status::Error,
                "set, but CA before 1.35 has no such flag (it refuses to start)",
                "remove the flag, or upgrade CA to 1.35 or later",
            ),
            None => Row::new(
                ID,
                Status::Warn,
                "not in CA before 1.35: CA counts no CSI attach limit",
                "upgrade CA to 1.36 or later to count CSINode attach limits",
            ),
        };
    }
    let on = match flag.map(flag_bool) {
        None => false,
        Some(Some(on)) => on,
        Some(None) => {
            return Row::new(
                ID,
                Status::Error,
                format!(
                    "{:?} is not a boolean (CA refuses to start)",
                    flag.and_then(|f| f.value.clone()).unwrap_or_default()
                ),
                "--enable-csi-node-aware-scheduling=true or =false",
            );
        }
    };
    let default = if flag.is_none() {
        " (default false)"
    } else {
        ""
    };
    match (on, ca_minor) {
        (true, Some(35)) => Row::new(
            ID,
            Status::Error,
            "on in CA 1.35: its simulation fails for any node without a CSINode, and \
             externalgrpc templates never have one, so every scale-from-zero breaks \
             (autoscaler#10131)",
            "turn it off on CA 1.35, or upgrade CA to 1.36",
        ),
        (true, _) => Row::new(
            ID,
            Status::Ok,
            "on: CA counts attach limits from live nodes' CSINodes (a group at zero has none \
             over externalgrpc)",
            "",
        ),
        (false, Some(35)) => Row::new(
            ID,
            Status::Warn,
            format!(
                "off{default}: CA packs volume-using gang members without attach limits; on CA \
                 1.35 keep it off (it breaks scale-from-zero there)"
            ),
            "upgrade CA to 1.36, then --enable-csi-node-aware-scheduling=true",
        ),
        (false, _) => Row::new(
            ID,
            Status::Warn,
            format!(
                "off{default}: CA packs volume-using gang members without attach limits, even on \
                 groups with live nodes"
            ),
            "--enable-csi-node-aware-scheduling=true (not on CA 1.35)",
        ),
    }
}

/// A duration flag, its default when unset; `Err` names the value that does not read.
fn duration(f: &[Flag], name: &str, default: Duration) -> Result<(Duration, bool), String> {
    match value(f, name) {
        None => Ok((default, true)),
        Some(v) => parse_go_duration(v)
            .map(|d| (d, false))
            .ok_or_else(|| format!("--{name}={v} is not a Go duration (CA refuses to start)")),
    }
}

fn shown(d: (Duration, bool)) -> String {
    if d.1 {
        format!("{} (default)", go_duration(d.0))
    } else {
        go_duration(d.0)
    }
}

fn backoff(f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/node-group-backoff";
    let initial = duration(
        f,
        "initial-node-group-backoff-duration",
        DEFAULT_INITIAL_BACKOFF,
    );
    let max = duration(f, "max-node-group-backoff-duration", DEFAULT_MAX_BACKOFF);
    let (initial, max) = match (initial, max) {
        (Ok(i), Ok(m)) => (i, m),
        (Err(e), _) | (_, Err(e)) => return Row::new(ID, Status::Error, e, "fix the value"),
    };
    let found = format!("initial {}, max {}", shown(initial), shown(max));
    if initial.0 > LONG_INITIAL_BACKOFF || max.0 > LONG_MAX_BACKOFF {
        Row::new(
            ID,
            Status::Warn,
            format!(
                "{found}: after gangscaler refuses a partial ask, CA leaves the group alone this \
                 long, so a gang that fits later waits it out"
            ),
            "--initial-node-group-backoff-duration=1m --max-node-group-backoff-duration=5m",
        )
    } else {
        Row::new(ID, Status::Ok, found, "")
    }
}

fn expander(f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/expander";
    let (v, default) = match value(f, "expander") {
        Some(v) => (v, ""),
        None => ("least-waste", " (default)"),
    };
    let names: Vec<&str> = v.split(',').map(str::trim).collect();
    if let Some(bad) = names.iter().find(|n| !EXPANDERS.contains(n)) {
        return Row::new(
            ID,
            Status::Error,
            format!("{v}: CA knows no expander {bad:?} (it refuses to start)"),
            "--expander=least-waste (or priority,least-waste)",
        );
    }
    match names.first().copied() {
        Some("least-waste" | "priority") => Row::new(ID, Status::Ok, format!("{v}{default}"), ""),
        _ => Row::new(
            ID,
            Status::Warn,
            format!(
                "{v}: may pick a group that cannot host the whole gang; gangscaler then refuses \
                 and CA backs that group off"
            ),
            "--expander=least-waste, or priority with a priority ConfigMap",
        ),
    }
}

fn max_nodes_total(o: &Observed, f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/max-nodes-total";
    let total: u64 = match parsed(f, ID, "max-nodes-total", "a whole number") {
        Ok(None) => return Row::new(ID, Status::Ok, "0 (default): no cap", ""),
        Ok(Some(n)) => n,
        Err(row) => return row,
    };
    if total == 0 {
        return Row::new(ID, Status::Ok, "0: no cap", "");
    }
    let Ok(nodes) = &o.nodes else {
        return Row::new(
            ID,
            Status::Unknown,
            format!("{total}; the node count is unknown"),
            "",
        );
    };
    let live = nodes.len() as u64;
    let room = total.saturating_sub(live);
    let at = format!("{total} with {live} nodes: room for {room}");
    if room == 0 {
        return Row::new(
            ID,
            Status::Error,
            format!("{at}: CA adds no node"),
            "raise --max-nodes-total",
        );
    }
    if let Some(p) = &o.provider {
        let need: u64 = p
            .groups
            .iter()
            .map(|g| {
                let members = nodes
                    .iter()
                    .filter(|n| super::csi::group_of(n).as_deref() == Some(g.id.as_str()))
                    .count() as u64;
                u64::from(g.max_size).saturating_sub(members)
            })
            .sum();
        if room >= need {
            return Row::new(
                ID,
                Status::Ok,
                format!("{at}, at least every group's headroom ({need}): never binds"),
                "",
            );
        }
    }
    Row::new(
        ID,
        Status::Warn,
        format!(
            "{at}: CA cuts an ask to that room, a partial gang that gangscaler refuses (strict) or \
             that forms no gang"
        ),
        "keep --max-nodes-total above the node count plus the largest gang's nodes",
    )
}

fn unneeded_time(o: &Observed, f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/scale-down-unneeded-time";
    if let Some(Some(false)) = flags::last(f, "scale-down-enabled").map(flag_bool) {
        return Row::new(ID, Status::Ok, "scale-down is disabled", "");
    }
    let unneeded = match duration(f, "scale-down-unneeded-time", DEFAULT_UNNEEDED) {
        Ok(d) => d,
        Err(e) => return Row::new(ID, Status::Error, e, "fix the value"),
    };
    let (formation, whose) = o.provider.as_ref().map_or(
        (DEFAULT_FORMATION, "gangscaler's default formationTimeout"),
        |p| (p.formation_timeout, "lifecycle.formationTimeout"),
    );
    let found = format!(
        "{}; gangs may take up to {} to form ({whose})",
        shown(unneeded),
        go_duration(formation)
    );
    if unneeded.0 >= formation {
        return Row::new(ID, Status::Ok, found, "");
    }
    match &o.provider {
        Some(p) if p.protection => {
            if p.lifecycle_interval >= unneeded.0 {
                Row::new(
                    ID,
                    Status::Warn,
                    format!(
                        "{found}; gangscaler protects forming gangs' nodes, but its lifecycle.interval \
                         {} is not below it",
                        go_duration(p.lifecycle_interval)
                    ),
                    "keep lifecycle.interval well below --scale-down-unneeded-time",
                )
            } else {
                Row::new(
                    ID,
                    Status::Ok,
                    format!("{found}; gangscaler keeps forming gangs' nodes out of scale-down"),
                    "",
                )
            }
        }
        Some(p) => Row::new(
            ID,
            Status::Warn,
            format!(
                "{found}; CA may remove a forming gang's nodes that look empty, and gangscaler's \
                 protection is off ({})",
                p.protection_off_because.as_deref().unwrap_or("off")
            ),
            "turn lifecycle.scaleDownProtection on (it needs audit.path and kubernetes.watch), \
             or raise --scale-down-unneeded-time",
        ),
        None => Row::new(
            ID,
            Status::Warn,
            format!(
                "{found}; CA may remove a forming gang's nodes that look empty unless gangscaler \
                 protects them"
            ),
            "pass --config to check gangscaler's scale-down protection, or raise \
             --scale-down-unneeded-time",
        ),
    }
}

/// CA's unready limits against the largest whole-gang round-up a group can make. CA expects a
/// group's nodes up to its target minus the increase it asked for
/// (`clusterstate.go` `updateAcceptableRanges`); the nodes gangscaler adds beyond that ask
/// count as missing until they are Ready, and more than `--ok-total-unready-count` of them
/// (when also more than `--max-total-unready-percentage` of the group's registered nodes) make
/// the group unhealthy (`IsNodeGroupHealthy`): CA does not scale it up until they are Ready.
/// Not a failure and no backoff, but the group's next gangs wait. The largest round-up is
/// `maxSize - 1` (a whole gang of `maxSize` nodes for CA's ask of one).
fn unready_limits(o: &Observed, f: &[Flag]) -> Row {
    const ID: &str = "ca-flag/unready-limits";
    let ok = match parsed(f, ID, "ok-total-unready-count", "a whole number") {
        Ok(n) => n.unwrap_or(DEFAULT_OK_UNREADY),
        Err(row) => return row,
    };
    let percent = match parsed::<f64>(f, ID, "max-total-unready-percentage", "a number") {
        Ok(None) => DEFAULT_MAX_UNREADY_PERCENT,
        Ok(Some(p)) if p.is_finite() => p,
        Ok(Some(_)) => {
            let raw = value(f, "max-total-unready-percentage").unwrap_or_default();
            return Row::new(
                ID,
                Status::Error,
                format!(
                    "--max-total-unready-percentage {raw:?} is not a number (CA refuses to start)"
                ),
                "fix the value",
            );
        }
        Err(row) => return row,
    };
    let found = format!("ok-total-unready-count {ok}, max-total-unready-percentage {percent}");
    let Some(p) = &o.provider else {
        return Row::new(
            ID,
            Status::Unknown,
            format!("{found}; the groups' maxSize is unknown"),
            "pass --config to compare them with the largest whole-gang round-up",
        );
    };
    let Some(largest) = p.groups.iter().max_by_key(|g| g.max_size) else {
        return Row::new(ID, Status::Ok, format!("{found}; no node group"), "");
    };
    let round_up = u64::from(largest.max_size.saturating_sub(1));
    if round_up <= ok {
        return Row::new(
            ID,
            Status::Ok,
            format!(
                "{found}: covers the largest round-up, {round_up} node(s) beyond CA's ask on group {}",
                largest.id
            ),
            "",
        );
    }
    Row::new(
        ID,
        Status::Warn,
        format!(
            "{found}: a whole gang on group {} (maxSize {}) can add up to {round_up} nodes beyond \
             CA's ask; while more than {ok} of them are not Ready (and more than {percent} % of \
             the group's nodes), CA counts the group unhealthy and does not scale it up (no \
             failure, no backoff), so its next gangs wait for those nodes",
            largest.id, largest.max_size
        ),
        format!(
            "--ok-total-unready-count={round_up} (it also lets CA go on with that many broken \
             nodes in a small cluster), or accept the wait"
        ),
    )
}
