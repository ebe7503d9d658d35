//! Node reservation and DaemonSets: a DaemonSet whose pods must run on a reserving group's
//! nodes (device plugin, CSI node plugin, network agents) and that does not tolerate the
//! reservation taint never gets a pod onto a reserved node, so a GPU node never advertises its
//! GPUs and the gang waits until the booking deadline (`docs/reservation.md#daemonsets`).

use std::collections::BTreeMap;

use crate::doctor::{Observed, Row, Status};
use crate::model::reservation::RESERVATION_TAINT;

const ID: &str = "reservation/daemonsets";

/// One row when `--config` names a group that reserves; none otherwise.
pub(super) fn rows(o: &Observed) -> Vec<Row> {
    let Some(p) = &o.provider else {
        return Vec::new();
    };
    let reserving: Vec<_> = p.groups.iter().filter(|g| g.reservation).collect();
    if reserving.is_empty() {
        return Vec::new();
    }
    let daemon_sets = match &o.daemon_sets {
        Err(e) => {
            return vec![Row::new(
                ID,
                Status::Unknown,
                format!("cannot list DaemonSets: {e}"),
                "",
            )];
        }
        Ok(d) => d,
    };
    // DaemonSet → the reserving groups whose template nodes its nodeSelector selects.
    let mut lacking: BTreeMap<&str, (Vec<&str>, bool)> = BTreeMap::new();
    for d in daemon_sets.iter().filter(|d| !d.tolerates_reservation) {
        for g in &reserving {
            let selects = d
                .node_selector
                .iter()
                .all(|(k, v)| g.labels.get(k) == Some(v));
            if selects {
                let e = lacking.entry(&d.name).or_default();
                e.0.push(&g.id);
                e.1 |= d.has_node_affinity;
            }
        }
    }
    let groups: Vec<&str> = reserving.iter().map(|g| g.id.as_str()).collect();
    if lacking.is_empty() {
        return vec![Row::new(
            ID,
            Status::Ok,
            format!(
                "every DaemonSet that selects the nodes of reserving groups ({}) tolerates {RESERVATION_TAINT}",
                groups.join(", ")
            ),
            "",
        )];
    }
    let list: Vec<String> = lacking
        .iter()
        .map(|(name, (groups, affinity))| {
            format!(
                "{name} (groups {}{})",
                groups.join(", "),
                if *affinity {
                    "; its required node affinity was not evaluated"
                } else {
                    ""
                }
            )
        })
        .collect();
    vec![Row::new(
        ID,
        Status::Error,
        format!(
            "{} DaemonSet(s) select the nodes of reserving groups and do not tolerate the reservation taint, so they get no pod there until the booking deadline: {}",
            lacking.len(),
            list.join("; ")
        ),
        format!(
            "add to each pod template: tolerations: [{{key: {RESERVATION_TAINT}, operator: Exists, effect: NoSchedule}}] (see docs/reservation.md#daemonsets), or turn reservation off for those groups"
        ),
    )]
}
