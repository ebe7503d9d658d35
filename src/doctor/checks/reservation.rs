//! Node reservation and DaemonSets: a DaemonSet whose pods must run on a reserving group's
//! nodes (device plugin, CSI node plugin, network agents) and that does not tolerate the
//! reservation taint would never get a pod onto a reserved node, so gangscaler keeps
//! reservation off for that group while it lasts (`docs/reservation.md#daemonsets`). The same
//! test as the server's ([`planner::blocking_daemon_sets`]): the DaemonSet's node selector and
//! required node affinity select the group's template node and it tolerates the group's own
//! taints.

use std::collections::BTreeMap;

use crate::doctor::{Observed, Row, Status};
use crate::model::NodeGroupId;
use crate::model::reservation::RESERVATION_TAINT;
use crate::planner::{self, Allocatable, NodeShape};

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
    // DaemonSet → the reserving groups it keeps reservation off for.
    let mut lacking: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for g in &reserving {
        let shape = NodeShape::new(
            NodeGroupId::new(g.id.as_str()),
            Allocatable::default(),
            g.labels.clone(),
            g.taints.clone(),
            BTreeMap::new(),
        );
        for name in planner::blocking_daemon_sets(&shape, daemon_sets) {
            lacking.entry(name).or_default().push(&g.id);
        }
    }
    let groups: Vec<&str> = reserving.iter().map(|g| g.id.as_str()).collect();
    if lacking.is_empty() {
        return vec![Row::new(
            ID,
            Status::Ok,
            format!(
                "every DaemonSet that runs on the nodes of reserving groups ({}) tolerates {RESERVATION_TAINT}",
                groups.join(", ")
            ),
            "",
        )];
    }
    let list: Vec<String> = lacking
        .iter()
        .map(|(name, groups)| format!("{name} (groups {})", groups.join(", ")))
        .collect();
    vec![Row::new(
        ID,
        Status::Error,
        format!(
            "{} DaemonSet(s) run on the nodes of reserving groups and do not tolerate the reservation taint, so gangscaler keeps reservation off for those groups: {}",
            lacking.len(),
            list.join("; ")
        ),
        format!(
            "add to each pod template: tolerations: [{{key: {RESERVATION_TAINT}, operator: Exists, effect: NoSchedule}}] (see docs/reservation.md#daemonsets), or turn reservation off for those groups"
        ),
    )]
}
