//! What we read off a Node: its readiness, for the kwok backend and the scale-up observer, and
//! [`NodeTable`], the few fields the scale-up lifecycle reads of every Node (registration,
//! readiness, the scale-down annotations), kept as node watch events arrive so that a
//! lifecycle tick reads a small record for the nodes it needs instead of every Node object.
//! Pure; depends on `k8s-openapi`, kube's watch event type and `model`'s annotation keys.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher::Event;

use crate::model::labels::{NODE_GROUP, SCALE_DOWN_DISABLED, SCALE_DOWN_PROTECTED_FOR};
use crate::model::reservation::{CLUSTER_API_UNINITIALIZED, RESERVATION_TAINT, RESERVED_FOR};

/// The node's `Ready` condition is True.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What the scale-up lifecycle reads of one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// `metadata.creationTimestamp`, unix seconds (when the node registered); `None` when it
    /// has none (never so on a real API server).
    pub created_unix: Option<i64>,
    /// The `Ready` condition is True.
    pub ready: bool,
    /// CA's scale-down-disabled annotation is `"true"`.
    pub scale_down_disabled: bool,
    /// Our scale-down protection marker's value (the scale-up id), if present.
    pub protected_for: Option<String>,
    /// The value of our reservation taint ([`RESERVATION_TAINT`]), if the node carries it.
    pub reservation: Option<String>,
    /// Our [`RESERVED_FOR`] annotation (the gang's `<namespace>/<name>`), if present.
    pub reserved_for: Option<String>,
    /// When the `Ready` condition last turned True, unix seconds, while it is True.
    pub ready_since_unix: Option<i64>,
    /// The node's `gangscaler.io/node-group` label, if present.
    pub node_group: Option<String>,
    /// Cluster API has not initialized the node yet (it carries
    /// [`CLUSTER_API_UNINITIALIZED`]): its own taints are still to come.
    pub uninitialized: bool,
    /// No new pod may land on it: `spec.unschedulable` (cordoned), or CA is deleting it (its
    /// `ToBeDeletedByClusterAutoscaler` taint).
    pub unschedulable: bool,
    /// The keys of its `NoSchedule` and `NoExecute` taints other than ours (the reservation
    /// taint, Cluster API's uninitialized taint), sorted: a node whose taints are not all in
    /// its group's template may repel the pods the template admits.
    pub hard_taints: Vec<String>,
}

/// The taint CA puts on a node it is deleting.
pub const TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

impl NodeSummary {
    /// The summary of `node`.
    pub fn of(node: &Node) -> Self {
        let annotations = node.metadata.annotations.as_ref();
        let get = |k: &str| annotations.and_then(|a| a.get(k));
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        Self {
            created_unix: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            ready: is_node_ready(node),
            scale_down_disabled: get(SCALE_DOWN_DISABLED).is_some_and(|v| v == "true"),
            protected_for: get(SCALE_DOWN_PROTECTED_FOR).cloned(),
            reservation: taints
                .iter()
                .find(|t| t.key == RESERVATION_TAINT)
                .map(|t| t.value.clone().unwrap_or_default()),
            reserved_for: get(RESERVED_FOR).cloned(),
            ready_since_unix: ready_since_unix(node),
            node_group: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(NODE_GROUP))
                .cloned(),
            uninitialized: taints.iter().any(|t| t.key == CLUSTER_API_UNINITIALIZED),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
                || taints.iter().any(|t| t.key == TO_BE_DELETED),
            hard_taints: {
                let mut keys: Vec<String> = taints
                    .iter()
                    .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
                    .filter(|t| {
                        ![RESERVATION_TAINT, CLUSTER_API_UNINITIALIZED, TO_BE_DELETED]
                            .contains(&t.key.as_str())
                    })
                    .map(|t| t.key.clone())
                    .collect();
                keys.sort();
                keys.dedup();
                keys
            },
        }
    }

    /// The node carries something of ours: the protection marker, the reservation taint or
    /// its annotation.
    pub fn ours(&self) -> bool {
        self.protected_for.is_some() || self.reservation.is_some() || self.reserved_for.is_some()
    }
}

/// When the node's `Ready` condition turned True (its `lastTransitionTime`), while True.
fn ready_since_unix(node: &Node) -> Option<i64> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.as_second())
}

/// A [`NodeSummary`] per Node name, as the node watch events left them. A re-list (`Init`,
/// `InitApply`..., `InitDone`) is buffered and swapped in whole at `InitDone`, as kube's
/// reflector store does, so nodes deleted while the watch was down disappear and the table is
/// never half-listed.
#[derive(Debug, Default)]
pub struct NodeTable {
    nodes: HashMap<String, NodeSummary>,
    /// The nodes carrying something of ours ([`NodeSummary::ours`]).
    marked: BTreeSet<String>,
    /// The re-list being received (kube's store keeps one always: events between `InitDone`
    /// and the next `Init` that are not list events never reach it).
    relist: HashMap<String, NodeSummary>,
}

impl NodeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one node watch event. A node without a name is ignored.
    pub fn apply(&mut self, event: &Event<Node>) {
        let name = |node: &Node| node.metadata.name.clone();
        match event {
            Event::Apply(node) => {
                if let Some(n) = name(node) {
                    let summary = NodeSummary::of(node);
                    if summary.ours() {
                        self.marked.insert(n.clone());
                    } else {
                        self.marked.remove(&n);
                    }
                    self.nodes.insert(n, summary);
                }
            }
            Event::Delete(node) => {
                if let Some(n) = node.metadata.name.as_deref() {
                    self.nodes.remove(n);
                    self.marked.remove(n);
                }
            }
            Event::Init => self.relist = HashMap::new(),
            Event::InitApply(node) => {
                if let Some(n) = name(node) {
                    self.relist.insert(n, NodeSummary::of(node));
                }
            }
            Event::InitDone => {
                let relist = std::mem::take(&mut self.relist);
                self.marked = relist
                    .iter()
                    .filter(|(_, s)| s.ours())
                    .map(|(n, _)| n.clone())
                    .collect();
                self.nodes = relist;
            }
        }
    }

    /// The summary of the node named `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<&NodeSummary> {
        self.nodes.get(name)
    }

    /// The names of the nodes carrying something of ours ([`NodeSummary::ours`]), sorted.
    pub fn marked(&self) -> impl Iterator<Item = &str> {
        self.marked.iter().map(String::as_str)
    }

    /// Every node in the table with its summary, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &NodeSummary)> {
        self.nodes.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// Nodes in the table.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The table has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::{self, ObjectRef};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn node(i: u8, ready: bool, created: Option<&str>) -> Node {
        let mut metadata = json!({"name": format!("gpu-{}", i % 6)});
        if let Some(t) = created {
            metadata["creationTimestamp"] = json!(t);
        }
        // Some carry our marker (and CA's annotation), some CA's annotation alone.
        match i / 6 % 3 {
            0 => {
                metadata["annotations"] = json!({
                    SCALE_DOWN_DISABLED: "true", SCALE_DOWN_PROTECTED_FOR: format!("su-{i}")
                });
            }
            1 => metadata["annotations"] = json!({SCALE_DOWN_DISABLED: "true"}),
            _ => {}
        }
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": metadata,
            "status": {"conditions": [{"type": "Ready", "status": status}]}
        }))
        .unwrap()
    }

    fn event() -> impl Strategy<Value = Event<Node>> {
        let some = (
            any::<u8>(),
            any::<bool>(),
            prop_oneof![
                Just(None),
                Just(Some("2026-12-01T00:00:00Z")),
                Just(Some("2026-12-01T00:05:00Z")),
            ],
        )
            .prop_map(|(i, r, c)| node(i, r, c));
        prop_oneof![
            4 => some.clone().prop_map(Event::Apply),
            2 => some.clone().prop_map(Event::Delete),
            1 => Just(Event::Init),
            3 => some.prop_map(Event::InitApply),
            1 => Just(Event::InitDone),
        ]
    }

    proptest! {
        /// After any events, the table holds exactly the summaries of the nodes kube's own
        /// reflector store holds.
        #[test]
        fn the_table_agrees_with_the_reflector_store(
            events in proptest::collection::vec(event(), 0..60),
        ) {
            let (store, mut writer) = reflector::store::<Node>();
            let mut table = NodeTable::new();
            for e in &events {
                writer.apply_watcher_event(e);
                table.apply(e);
                for i in 0..6u8 {
                    let name = format!("gpu-{i}");
                    let expected = store.get(&ObjectRef::new(&name)).map(|n| NodeSummary::of(&n));
                    prop_assert_eq!(table.get(&name), expected.as_ref(), "{} after {:?}", name, e);
                }
                prop_assert_eq!(table.len(), store.state().len());
                let mut marked: Vec<String> = store
                    .state()
                    .iter()
                    .filter(|n| NodeSummary::of(n).protected_for.is_some())
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
                marked.sort();
                prop_assert_eq!(table.marked().collect::<Vec<_>>(), marked);
            }
        }
    }

    #[test]
    fn a_summary_reads_creation_time_and_readiness() {
        let s = NodeSummary::of(&node(1, true, Some("2026-12-01T00:00:00Z")));
        assert_eq!(s.created_unix, Some(1_796_083_200));
        assert!(s.ready);
        assert!(s.scale_down_disabled);
        assert_eq!(s.protected_for.as_deref(), Some("su-1"));
        let s = NodeSummary::of(&node(7, false, None));
        assert_eq!((s.created_unix, s.ready), (None, false));
        assert!(s.scale_down_disabled);
        assert_eq!(s.protected_for, None);
        let s = NodeSummary::of(&node(13, false, None));
        assert!(!s.scale_down_disabled);
    }
}
