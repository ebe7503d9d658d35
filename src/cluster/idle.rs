//! Idle nodes: Ready nodes of a node group that no pod with an extended-resource request (a
//! GPU, an RDMA device) uses and no scale-up of ours holds. Admission credits them to pending
//! gangs before it asks for fresh nodes (issue 33 item 3), since CA's own simulation packs
//! pending pods onto them and asks only for the rest. Pure.

use std::collections::{BTreeMap, HashMap};

use super::node::NodeTable;
use super::pod::CompactPod;

/// How long a node must have been Ready before it counts as idle. The scale-up lifecycle marks
/// the nodes it adds for a gang (scale-down protection) on its first tick after they register,
/// and a fresh node not marked yet must not be credited to another gang: a minute is many
/// lifecycle ticks (2–5 s each).
pub const IDLE_GRACE_SECS: i64 = 60;

/// An idle node of a node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleNode {
    /// The node's name.
    pub name: String,
    /// The keys of its `NoSchedule`/`NoExecute` taints other than ours, sorted: the caller
    /// counts the node only when its group's template has them all.
    pub hard_taints: Vec<String>,
}

/// The idle nodes of `table` by node group (their `gangscaler.io/node-group` label), each
/// group's sorted by name: Ready for at least [`IDLE_GRACE_SECS`] at `now_unix`, schedulable
/// (not cordoned, not being deleted by CA), initialized, carrying nothing of ours (no
/// protection marker of a forming gang, no reservation), and with no unfinished pod bound to
/// it that requests an extended resource. Nodes without the label are left out: they belong
/// to no group gangscaler grows.
pub fn idle_nodes<'a>(
    table: &NodeTable,
    pods: impl IntoIterator<Item = &'a CompactPod>,
    now_unix: i64,
) -> BTreeMap<String, Vec<IdleNode>> {
    let mut candidates: HashMap<&str, (&str, &[String])> = table
        .iter()
        .filter(|(_, s)| {
            s.ready
                && !s.unschedulable
                && !s.uninitialized
                && !s.ours()
                && s.ready_since_unix
                    .is_some_and(|t| now_unix - t >= IDLE_GRACE_SECS)
        })
        .filter_map(|(name, s)| {
            let group = s.node_group.as_deref()?;
            Some((name, (group, s.hard_taints.as_slice())))
        })
        .collect();
    if candidates.is_empty() {
        return BTreeMap::new();
    }
    for pod in pods {
        if pod.is_terminal() || pod.demand.extended.is_empty() {
            continue;
        }
        if let Some(node) = pod.node_name() {
            candidates.remove(node);
        }
    }
    let mut idle: BTreeMap<String, Vec<IdleNode>> = BTreeMap::new();
    for (name, (group, taints)) in candidates {
        idle.entry(group.to_owned()).or_default().push(IdleNode {
            name: name.to_owned(),
            hard_taints: taints.to_vec(),
        });
    }
    for nodes in idle.values_mut() {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
    }
    idle
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::watcher::Event;

    use super::*;

    const NOW: i64 = 1_800_000_000;

    /// A node of group `group`, Ready since `ready_for` seconds before [`NOW`], with extra
    /// `spec` fields and `annotations`.
    fn node(name: &str, group: Option<&str>, ready_for: i64, spec: serde_json::Value) -> Node {
        let labels = group.map_or(
            serde_json::json!({}),
            |g| serde_json::json!({"gangscaler.io/node-group": g}),
        );
        let since = jiff::Timestamp::from_second(NOW - ready_for).unwrap();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {"conditions": [{
                "type": "Ready", "status": "True", "lastTransitionTime": since.to_string()
            }]}
        }))
        .unwrap()
    }

    /// A pod bound to `node` requesting `resources`, in phase `phase`.
    fn pod(name: &str, node: &str, resources: serde_json::Value, phase: &str) -> CompactPod {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{
                "name": "c", "resources": {"requests": resources}
            }]},
            "status": {"phase": phase}
        }))
        .unwrap();
        CompactPod::from_pod(&pod)
    }

    fn names(idle: &BTreeMap<String, Vec<IdleNode>>, group: &str) -> Vec<String> {
        idle.get(group)
            .map(|v| v.iter().map(|n| n.name.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn only_ready_free_unheld_nodes_of_a_group_are_idle() {
        let mut table = NodeTable::new();
        let taint = |key: &str, effect: &str| serde_json::json!({"taints": [{"key": key, "effect": effect}]});
        for n in [
            node("free", Some("a"), 120, serde_json::json!({})),
            node("free-b", Some("b"), 120, serde_json::json!({})),
            node("gpu-busy", Some("a"), 120, serde_json::json!({})),
            node("cpu-only", Some("a"), 120, serde_json::json!({})),
            node("job-done", Some("a"), 120, serde_json::json!({})),
            node("fresh", Some("a"), 10, serde_json::json!({})),
            node(
                "cordoned",
                Some("a"),
                120,
                serde_json::json!({"unschedulable": true}),
            ),
            node(
                "deleting",
                Some("a"),
                120,
                taint(crate::cluster::node::TO_BE_DELETED, "NoSchedule"),
            ),
            node("tainted", Some("a"), 120, taint("gpu-broken", "NoExecute")),
            node(
                "soft",
                Some("a"),
                120,
                taint("gpu-broken", "PreferNoSchedule"),
            ),
            node("no-group", None, 120, serde_json::json!({})),
        ] {
            table.apply(&Event::Apply(n));
        }
        let mut held = node("held", Some("a"), 120, serde_json::json!({}));
        held.metadata.annotations = Some(
            [(
                crate::model::labels::SCALE_DOWN_PROTECTED_FOR.to_owned(),
                "su-1".to_owned(),
            )]
            .into(),
        );
        table.apply(&Event::Apply(held));
        let pods = [
            pod(
                "train-0",
                "gpu-busy",
                serde_json::json!({"nvidia.com/gpu": "8"}),
                "Running",
            ),
            pod(
                "agent",
                "cpu-only",
                serde_json::json!({"cpu": "1"}),
                "Running",
            ),
            pod(
                "old",
                "job-done",
                serde_json::json!({"nvidia.com/gpu": "8"}),
                "Succeeded",
            ),
        ];
        let idle = idle_nodes(&table, pods.iter(), NOW);
        assert_eq!(
            names(&idle, "a"),
            ["cpu-only", "free", "job-done", "soft", "tainted"]
        );
        assert_eq!(names(&idle, "b"), ["free-b"]);
        assert_eq!(idle.len(), 2, "no group for unlabelled nodes: {idle:?}");
        let tainted = idle["a"].iter().find(|n| n.name == "tainted").unwrap();
        assert_eq!(tainted.hard_taints, ["gpu-broken"]);
        assert!(
            idle["a"]
                .iter()
                .find(|n| n.name == "soft")
                .unwrap()
                .hard_taints
                .is_empty()
        );
        // Past the grace the fresh node counts too; with no candidate no pod is read.
        assert!(
            names(&idle_nodes(&table, pods.iter(), NOW + 60), "a").contains(&"fresh".to_owned())
        );
        assert!(idle_nodes(&NodeTable::new(), pods.iter(), NOW).is_empty());
    }
}
