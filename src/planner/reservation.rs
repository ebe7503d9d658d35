//! Where node reservation cannot work: a DaemonSet that runs a pod on every node of a group
//! (device plugin, CSI node plugin, network agent) and does not tolerate the reservation taint
//! gets no pod onto a reserved node, so a GPU node would never advertise its GPUs and the gang
//! would wait until the booking deadline. A group with such a DaemonSet reserves nothing until
//! it tolerates the taint (`docs/reservation.md#daemonsets`). Pure.

use crate::model::reservation::{DaemonSetDemand, RESERVATION_TAINT, tolerates_every_reservation};

use super::predicates;
use super::shape::NodeShape;

/// The DaemonSets, sorted by name, that would run a pod on a node of `shape` (its node
/// selector and required node affinity select the node, and it tolerates the node's own
/// taints) but do not tolerate every reservation taint.
pub fn blocking_daemon_sets<'a>(
    shape: &NodeShape,
    daemon_sets: &'a [DaemonSetDemand],
) -> Vec<&'a str> {
    let mut out: Vec<&str> = daemon_sets
        .iter()
        .filter(|d| !tolerates_every_reservation(&d.pod.tolerations))
        .filter(|d| {
            predicates::tolerated(&d.name, &d.pod, shape).is_ok()
                && predicates::selected(&d.name, &d.pod, shape).is_ok()
        })
        .map(|d| d.name.as_str())
        .collect();
    out.sort_unstable();
    out
}

/// Why reservation is off for a group that `blocking` DaemonSets would run on: one sentence
/// naming them (at most [`SHOWN`] by name); `None` when there are none.
pub fn reservation_off_reason(blocking: &[&str]) -> Option<String> {
    let (first, rest) = (
        blocking.iter().take(SHOWN),
        blocking.len().saturating_sub(SHOWN),
    );
    let mut names = first.copied().collect::<Vec<_>>().join(", ");
    if names.is_empty() {
        return None;
    }
    if rest > 0 {
        names.push_str(&format!(" and {rest} more"));
    }
    Some(format!(
        "reservation is off: DaemonSet(s) {names} run on the group's nodes and do not tolerate {RESERVATION_TAINT} (operator: Exists), so a reserved node would get none of their pods"
    ))
}

/// DaemonSets named in a reason; the rest are counted.
pub const SHOWN: usize = 5;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{NodeGroupId, SelectorOperator, SelectorRequirement, Taint, TaintEffect};
    use crate::planner::shape::Allocatable;

    fn shape(labels: &[(&str, &str)], taints: Vec<Taint>) -> NodeShape {
        NodeShape::new(
            NodeGroupId::new("gpu"),
            Allocatable::default(),
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            taints,
            BTreeMap::new(),
        )
    }

    fn ds(name: &str, selector: &[(&str, &str)], tolerate: &[&str]) -> DaemonSetDemand {
        crate::testing::daemon_set(name, selector, tolerate)
    }

    fn gpu_taint() -> Taint {
        Taint {
            key: "nvidia.com/gpu".into(),
            value: "present".into(),
            effect: TaintEffect::NoSchedule,
        }
    }

    #[test]
    fn a_daemon_set_that_would_run_on_the_group_and_lacks_the_toleration_blocks() {
        let s = shape(&[("gpu", "h100")], vec![gpu_taint()]);
        let list = [
            ds(
                "kube-system/plugin",
                &[("gpu", "h100")],
                &["nvidia.com/gpu"],
            ),
            ds(
                "kube-system/tolerating",
                &[("gpu", "h100")],
                &["nvidia.com/gpu", RESERVATION_TAINT],
            ),
            ds(
                "kube-system/elsewhere",
                &[("gpu", "a100")],
                &["nvidia.com/gpu"],
            ),
            ds("kube-system/no-gpu-toleration", &[], &[]),
            ds("kube-system/everything", &[], &[""]),
            ds("a/agent", &[], &["nvidia.com/gpu"]),
        ];
        assert_eq!(
            blocking_daemon_sets(&s, &list),
            ["a/agent", "kube-system/plugin"]
        );
    }

    #[test]
    fn required_node_affinity_is_evaluated_against_the_groups_labels() {
        let s = shape(&[("gpu", "h100")], vec![]);
        let mut on = ds("ns/on", &[], &[]);
        on.pod.affinity_terms = vec![vec![SelectorRequirement {
            key: "gpu".into(),
            operator: SelectorOperator::In,
            values: vec!["h100".into(), "a100".into()],
        }]];
        let mut off = ds("ns/off", &[], &[]);
        off.pod.affinity_terms = vec![vec![SelectorRequirement {
            key: "gpu".into(),
            operator: SelectorOperator::DoesNotExist,
            values: vec![],
        }]];
        assert_eq!(blocking_daemon_sets(&s, &[on, off]), ["ns/on"]);
    }

    #[test]
    fn the_reason_names_the_daemon_sets_and_counts_the_rest() {
        assert_eq!(reservation_off_reason(&[]), None);
        let one = reservation_off_reason(&["kube-system/plugin"]).unwrap_or_default();
        assert!(
            one.contains("kube-system/plugin") && one.contains(RESERVATION_TAINT),
            "{one}"
        );
        let names: Vec<String> = (0..7).map(|i| format!("ns/d{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let many = reservation_off_reason(&refs).unwrap_or_default();
        assert!(
            many.contains("ns/d4 and 2 more") && !many.contains("ns/d5"),
            "{many}"
        );
    }
}
