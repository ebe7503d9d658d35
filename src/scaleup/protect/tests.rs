use super::*;
use crate::audit::Phase;
use crate::scaleup::reserve::ReleaseReason;
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
        repair: crate::scaleup::Repair::default(),
    }
}

fn marks(name: &str, disabled: bool, protected_for: Option<&str>) -> Marks {
    Marks {
        name: name.into(),
        disabled,
        protected_for: protected_for.map(str::to_owned),
        ..Marks::default()
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
    let c = plan(&w, &Wanted::default(), &nodes);
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
        plan(&w, &Wanted::default(), &after),
        Changes {
            protected: 1,
            ..Changes::default()
        }
    );
}

#[test]
fn a_node_disabled_by_someone_else_is_never_touched() {
    let w = BTreeMap::from([("a".to_owned(), "s1".to_owned())]);
    let c = plan(&w, &Wanted::default(), &[marks("a", true, None)]);
    assert!(c.protect.is_empty() && c.release.is_empty(), "{c:?}");
    let c = plan(
        &BTreeMap::new(),
        &Wanted::default(),
        &[marks("a", true, None)],
    );
    assert!(c.release.is_empty(), "not ours to release: {c:?}");
}

#[test]
fn our_marker_without_the_ca_annotation_or_for_another_scale_up_is_renewed() {
    let w = BTreeMap::from([("a".to_owned(), "s2".to_owned())]);
    let c = plan(&w, &Wanted::default(), &[marks("a", true, Some("s1"))]);
    assert_eq!(c.protect, [("a".to_owned(), "s2".to_owned())]);
    let w = BTreeMap::from([("a".to_owned(), "s1".to_owned())]);
    let c = plan(&w, &Wanted::default(), &[marks("a", false, Some("s1"))]);
    assert_eq!(c.protect, [("a".to_owned(), "s1".to_owned())]);
}

#[test]
fn with_nothing_wanted_every_node_we_marked_is_released() {
    let nodes = [marks("a", true, Some("s1")), marks("b", true, Some("s2"))];
    let c = plan(&BTreeMap::new(), &Wanted::default(), &nodes);
    assert_eq!(c.release, ["a", "b"]);
    assert_eq!(c.protected, 0);
}

fn hold(gang_name: &str) -> Hold {
    let gang = crate::model::GangRef::from(&gang(gang_name));
    Hold {
        value: crate::model::reservation::value_for(&gang),
        gang,
        scale_up_id: "s1".into(),
        node_group: "h100".into(),
    }
}

fn reserved(name: &str, value: Option<&str>, gang: Option<&str>) -> Marks {
    Marks {
        name: name.into(),
        reservation: value.map(str::to_owned),
        reserved_for: gang.map(str::to_owned),
        ..Marks::default()
    }
}

#[test]
fn a_nodes_protection_and_reservation_change_in_one_patch_and_releases_say_why() {
    use crate::model::reservation::UNASSIGNED;
    let a = hold("a");
    let w = BTreeMap::from([("n1".to_owned(), "s1".to_owned())]);
    let reserve = Wanted {
        holds: BTreeMap::from([("n1".to_owned(), a.clone())]),
        formed: BTreeSet::from([hold("f").value]),
        complete: true,
        ..Wanted::default()
    };
    let nodes = [
        reserved("n1", Some(UNASSIGNED), None),
        reserved("n2", Some(UNASSIGNED), None),
        reserved("n3", Some(&hold("f").value), Some("ml/f")),
        reserved("n4", Some(&a.value), Some("ml/a")),
    ];
    let c = plan(&w, &reserve, &nodes);
    assert_eq!(c.hold, [("n1".to_owned(), a.clone())]);
    assert_eq!(
        c.unhold,
        [
            (
                "n2".to_owned(),
                UNASSIGNED.to_owned(),
                ReleaseReason::Unclaimed
            ),
            ("n3".to_owned(), hold("f").value, ReleaseReason::Formed),
            ("n4".to_owned(), a.value.clone(), ReleaseReason::Ended),
        ]
    );
    assert_eq!((c.held, c.protected), (1, 1));
    let per_node = c.per_node();
    assert_eq!(
        per_node["n1"],
        NodePatch {
            protect: Some(Some("s1")),
            hold: Some(Some(&a)),
        },
        "one patch carries both"
    );
    assert_eq!(per_node["n2"].hold, Some(None));
    assert_eq!(per_node["n2"].protect, None, "protection untouched");
    // Applied: nothing more to do for n1.
    let after = [Marks {
        disabled: true,
        protected_for: Some("s1".into()),
        ..reserved("n1", Some(&a.value), Some("ml/a"))
    }];
    let c = plan(&w, &reserve, &after);
    assert!(c.hold.is_empty() && c.protect.is_empty(), "{c:?}");
    assert_eq!(c.held, 1);
    // A reserved node whose annotation was lost is reserved again.
    let c = plan(&w, &reserve, &[reserved("n1", Some(&a.value), None)]);
    assert_eq!(c.hold.len(), 1);
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
        let expected = plan(&wanted, &Wanted::default(), &all);
        let got = plan(&wanted, &Wanted::default(), &Marks::for_plan(&wanted, &BTreeMap::new(), &table));
        proptest::prop_assert_eq!(got, expected);
    }
}
