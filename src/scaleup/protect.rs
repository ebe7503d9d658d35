//! Scale-down protection of forming gangs. CA's scale-down sees a node empty as long as no pod
//! runs on it, and CA cannot see what keeps a gang from forming (CSI attach limits on a group
//! scaled from zero, nodes that come up one by one), so it may remove the first nodes of a
//! gang while the last ones are on their way, and the gang never forms. While a scale-up has a
//! gang lifecycle open, its nodes (as [`attributed_nodes`](super::observe::attributed_nodes)
//! shares them out) carry CA's `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`
//! and our marker `gangscaler.io/scale-down-protected-for: <scale-up id>`; once its outcome is
//! recorded both are removed, so CA scales down the nodes of a failed or finished gang as
//! usual.
//!
//! A node that already carries `scale-down-disabled` without our marker is someone else's
//! decision and is never touched. [`plan`] is pure; [`Marker`] applies its [`Changes`] with
//! one JSON merge patch per node.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use super::track::Open;
use crate::cluster::{NodeSummary, NodeTable};

pub use crate::model::labels::{SCALE_DOWN_DISABLED, SCALE_DOWN_PROTECTED_FOR as PROTECTED_FOR};

/// The nodes that must be protected now, each with the scale-up it is protected for: the
/// attributed nodes of every scale-up in `open` that still has a gang lifecycle open.
pub fn wanted(
    open: &[Open],
    attributed: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, String> {
    let forming: BTreeSet<&str> = open
        .iter()
        .filter(|o| o.gang.is_some())
        .map(|o| o.scale_up_id.as_str())
        .collect();
    attributed
        .iter()
        .filter(|(id, _)| forming.contains(id.as_str()))
        .flat_map(|(id, nodes)| nodes.iter().map(move |n| (n.clone(), id.clone())))
        .collect()
}

/// What a node carries of the two annotations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marks {
    /// Node name.
    pub name: String,
    /// `scale-down-disabled` is `"true"`.
    pub disabled: bool,
    /// Our marker's value, if present.
    pub protected_for: Option<String>,
}

impl Marks {
    /// The marks of the nodes `plan` needs to see for `wanted`: the wanted ones and the ones
    /// carrying our marker (the others give no change), as the node table has them, sorted by
    /// name.
    pub fn for_plan(wanted: &BTreeMap<String, String>, nodes: &NodeTable) -> Vec<Self> {
        let names: BTreeSet<&str> = wanted
            .keys()
            .map(String::as_str)
            .chain(nodes.marked())
            .collect();
        names
            .into_iter()
            .filter_map(|name| Some(Self::from_summary(name, nodes.get(name)?)))
            .collect()
    }

    /// The marks of `node` (`None` for a node without a name).
    pub fn of(node: &Node) -> Option<Self> {
        let name = node.metadata.name.as_deref()?;
        Some(Self::from_summary(name, &NodeSummary::of(node)))
    }

    fn from_summary(name: &str, summary: &NodeSummary) -> Self {
        Self {
            name: name.to_owned(),
            disabled: summary.scale_down_disabled,
            protected_for: summary.protected_for.clone(),
        }
    }
}

/// The patches that bring the nodes in line with what is wanted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    /// (node, scale-up id) to mark protected.
    pub protect: Vec<(String, String)>,
    /// Nodes whose protection (ours) to remove.
    pub release: Vec<String>,
    /// Nodes protected by us once the changes are applied.
    pub protected: usize,
}

/// Compares `nodes` with `wanted` (see [`wanted`]). A wanted node that is already disabled
/// without our marker is left alone; a node with our marker that is no longer wanted (its
/// scale-up ended, or protection is off) is released. Nodes not in `nodes` are ignored.
pub fn plan(wanted: &BTreeMap<String, String>, nodes: &[Marks]) -> Changes {
    let mut changes = Changes::default();
    for n in nodes {
        let ours = n.protected_for.is_some();
        match wanted.get(&n.name) {
            // Disabled without our marker: someone else's decision.
            Some(_) if n.disabled && !ours => {}
            Some(id) => {
                if !(n.disabled && n.protected_for.as_ref() == Some(id)) {
                    changes.protect.push((n.name.clone(), id.clone()));
                }
                changes.protected += 1;
            }
            None if ours => changes.release.push(n.name.clone()),
            None => {}
        }
    }
    changes
}

/// Applies [`Changes`] to Node objects.
#[derive(Clone)]
pub struct Marker {
    nodes: Api<Node>,
}

impl std::fmt::Debug for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Marker").finish_non_exhaustive()
    }
}

impl Marker {
    /// A marker patching nodes through `client` (needs `patch` on nodes).
    pub fn new(client: kube::Client) -> Self {
        Self {
            nodes: Api::all(client),
        }
    }

    /// Marks `node` protected for scale-up `id`, or (with `None`) removes both annotations.
    ///
    /// # Errors
    /// The API server's error; the caller retries at its next tick.
    pub async fn set(&self, node: &str, id: Option<&str>) -> Result<(), kube::Error> {
        let value = |v: &str| id.map(|_| v.to_owned());
        let patch = serde_json::json!({"metadata": {"annotations": {
            SCALE_DOWN_DISABLED: value("true"),
            PROTECTED_FOR: id,
        }}});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Phase;
    use crate::scaleup::test_support::gang;

    fn open(id: &str, gang_name: Option<&str>) -> Open {
        Open {
            scale_up_id: id.into(),
            node_group: "h100".into(),
            gang: gang_name.map(gang),
            nodes: 2,
            gang_nodes: 0,
            phase: Phase::NodesReady,
            requested_at_ms: 0,
            formed_at_ms: None,
            attached_at_ms: None,
        }
    }

    fn marks(name: &str, disabled: bool, protected_for: Option<&str>) -> Marks {
        Marks {
            name: name.into(),
            disabled,
            protected_for: protected_for.map(str::to_owned),
        }
    }

    fn attributed(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(id, nodes)| {
                (
                    (*id).to_owned(),
                    nodes.iter().map(|n| (*n).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn only_the_nodes_of_scale_ups_with_an_open_gang_lifecycle_are_wanted() {
        let a = attributed(&[("s1", &["a", "b"]), ("s2", &["c"]), ("s3", &["d"])]);
        // s1 is for a gang; s2 for ungrouped pods; s3 ended (not open).
        let w = wanted(&[open("s1", Some("g")), open("s2", None)], &a);
        assert_eq!(
            w,
            BTreeMap::from([("a".into(), "s1".into()), ("b".into(), "s1".into())])
        );
    }

    #[test]
    fn new_nodes_are_marked_and_nodes_whose_scale_up_ended_are_released() {
        let w = BTreeMap::from([("a".to_owned(), "s1".to_owned())]);
        let nodes = [
            marks("a", false, None),
            marks("b", true, Some("s0")),
            marks("c", false, None),
        ];
        let c = plan(&w, &nodes);
        assert_eq!(c.protect, [("a".to_owned(), "s1".to_owned())]);
        assert_eq!(c.release, ["b"]);
        assert_eq!(c.protected, 1);
        // Applied: nothing more to do.
        let after = [
            marks("a", true, Some("s1")),
            marks("b", false, None),
            marks("c", false, None),
        ];
        assert_eq!(
            plan(&w, &after),
            Changes {
                protected: 1,
                ..Changes::default()
            }
        );
    }

    #[test]
    fn a_node_disabled_by_someone_else_is_never_touched() {
        let w = BTreeMap::from([("a".to_owned(), "s1".to_owned())]);
        let c = plan(&w, &[marks("a", true, None)]);
        assert!(c.protect.is_empty() && c.release.is_empty(), "{c:?}");
        let c = plan(&BTreeMap::new(), &[marks("a", true, None)]);
        assert!(c.release.is_empty(), "not ours to release: {c:?}");
    }

    #[test]
    fn our_marker_without_the_ca_annotation_or_for_another_scale_up_is_renewed() {
        let w = BTreeMap::from([("a".to_owned(), "s2".to_owned())]);
        let c = plan(&w, &[marks("a", true, Some("s1"))]);
        assert_eq!(c.protect, [("a".to_owned(), "s2".to_owned())]);
        let w = BTreeMap::from([("a".to_owned(), "s1".to_owned())]);
        let c = plan(&w, &[marks("a", false, Some("s1"))]);
        assert_eq!(c.protect, [("a".to_owned(), "s1".to_owned())]);
    }

    #[test]
    fn with_nothing_wanted_every_node_we_marked_is_released() {
        let nodes = [marks("a", true, Some("s1")), marks("b", true, Some("s2"))];
        let c = plan(&BTreeMap::new(), &nodes);
        assert_eq!(c.release, ["a", "b"]);
        assert_eq!(c.protected, 0);
    }

    proptest::proptest! {
        /// Planning from the node table's wanted and marked nodes gives the changes planning
        /// over every Node gives (in name order).
        #[test]
        fn the_node_tables_marks_plan_as_every_nodes_marks_do(
            nodes in proptest::collection::vec((0u8..3, 0u8..4), 0..12),
            wanted in proptest::collection::btree_map(0u8..16, 0u8..3, 0..8),
        ) {
            use kube::runtime::watcher::Event;
            let mut table = NodeTable::new();
            let mut all = Vec::new();
            table.apply(&Event::Init);
            for (i, (disabled, marker)) in nodes.iter().enumerate() {
                let mut annotations = serde_json::Map::new();
                if *disabled > 0 {
                    let v = if *disabled == 1 { "true" } else { "false" };
                    annotations.insert(SCALE_DOWN_DISABLED.into(), v.into());
                }
                if *marker > 0 {
                    annotations.insert(PROTECTED_FOR.into(), format!("su-{marker}").into());
                }
                let node: Node = serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": format!("n-{i}"), "annotations": annotations}
                }))
                .unwrap();
                all.extend(Marks::of(&node));
                table.apply(&Event::InitApply(node));
            }
            table.apply(&Event::InitDone);
            let wanted: BTreeMap<String, String> = wanted
                .into_iter()
                .map(|(n, id)| (format!("n-{n}"), format!("su-{id}")))
                .collect();
            all.sort_by(|a, b| a.name.cmp(&b.name));
            let expected = plan(&wanted, &all);
            let got = plan(&wanted, &Marks::for_plan(&wanted, &table));
            proptest::prop_assert_eq!(got, expected);
        }
    }
}
