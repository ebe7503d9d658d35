//! Where node reservation cannot work, so gangscaler keeps it off for a group while it lasts:
//! - a DaemonSet whose pods must run on a reserving group's nodes (device plugin, CSI node
//!   plugin, network agents) and that does not tolerate the reservation taint would never
//!   get a pod onto a reserved node (`docs/reservation.md#daemonsets`). The same test as the
//!   server's ([`planner::blocking_daemon_sets`]): the DaemonSet's node selector and required
//!   node affinity select the group's template node and it tolerates the group's own taints;
//! - a reserving clusterapi group's MachineDeployment must register its Nodes under the taint
//!   (`docs/reservation.md#cluster-api`): the same test as the server's
//!   ([`blocker`](crate::provision::clusterapi::reservation::blocker)).

use std::collections::BTreeMap;

use crate::doctor::{Observed, Row, Status};
use crate::model::NodeGroupId;
use crate::model::reservation::RESERVATION_TAINT;
use crate::planner::{self, Allocatable, NodeShape};
use crate::provision::clusterapi::reservation::{blocker, wanted_taint_yaml};

const ID: &str = "reservation/daemonsets";
const CAPI_ID: &str = "reservation/clusterapi";

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

/// One row when `--config` names a reserving group on the clusterapi backend; none otherwise.
pub(super) fn cluster_api_rows(o: &Observed) -> Vec<Row> {
    let Some(p) = &o.provider else {
        return Vec::new();
    };
    let mut blocked = Vec::new();
    let mut unknown = Vec::new();
    let mut fine = Vec::new();
    for g in p.groups.iter().filter(|g| g.reservation) {
        let Some(md) = &g.machine_deployment else {
            continue;
        };
        match o.machine_deployments.get(md) {
            None => unknown.push(format!("group {}: MachineDeployment {md} not read", g.id)),
            Some(Err(e)) => unknown.push(format!(
                "group {}: cannot read MachineDeployment {md}: {e}",
                g.id
            )),
            Some(Ok(read)) => match blocker(md, read.as_deref()) {
                Some(why) => blocked.push(format!("group {}: {why}", g.id)),
                None => fine.push(format!("{} ({md})", g.id)),
            },
        }
    }
    if blocked.is_empty() && unknown.is_empty() && fine.is_empty() {
        return Vec::new();
    }
    let action = format!(
        "add to the MachineDeployment: spec.template.spec.taints: [{}] and run the Cluster API core manager with --feature-gates=MachineTaintPropagation=true (docs/reservation.md#cluster-api), or turn reservation off for the group",
        wanted_taint_yaml()
    );
    let row = if !blocked.is_empty() {
        Row::new(CAPI_ID, Status::Error, blocked.join("; "), action)
    } else if !unknown.is_empty() {
        Row::new(CAPI_ID, Status::Unknown, unknown.join("; "), action)
    } else {
        Row::new(
            CAPI_ID,
            Status::Ok,
            format!(
                "the MachineDeployments of reserving groups register their Nodes under {RESERVATION_TAINT}: {}",
                fine.join(", ")
            ),
            "",
        )
    };
    vec![row]
}
