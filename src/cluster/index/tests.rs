//! Equivalence of the incremental [`GangIndex`] with the from-scratch join: random sequences
//! of watch events (add, change, delete, re-list) over the objects of every fixture file and
//! changed copies of them are applied to an index and to a plain model of the objects; after
//! each step the index's view must equal [`gangs`] over a set built afresh from the model, at
//! a clock that moves across the scheduled-condition grace period.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::cluster::gangs;

/// Every object of the fixture files (all served versions, demand and volumes), list items
/// flattened, kinds the index does not hold left out.
fn corpus() -> &'static [Value] {
    static CORPUS: std::sync::LazyLock<Vec<Value>> = std::sync::LazyLock::new(|| {
        const FILES: [&str; 8] = [
            include_str!("../../../tests/fixtures/gangs/v1alpha1/gangs.yaml"),
            include_str!("../../../tests/fixtures/gangs/v1alpha1/partial.yaml"),
            include_str!("../../../tests/fixtures/gangs/v1alpha2/gangs.yaml"),
            include_str!("../../../tests/fixtures/gangs/v1alpha2/partial.yaml"),
            include_str!("../../../tests/fixtures/gangs/v1alpha3/gangs.yaml"),
            include_str!("../../../tests/fixtures/gangs/v1beta1/gangs.yaml"),
            include_str!("../../../tests/fixtures/gangs/demand/resources.yaml"),
            include_str!("../../../tests/fixtures/gangs/demand/volumes.yaml"),
        ];
        let mut out = Vec::new();
        for text in FILES {
            for document in crate::yaml::documents(text, &crate::yaml::OBJECTS).unwrap() {
                flatten(document.value, &mut out);
            }
        }
        out.retain(|o| kind_of(o).is_some());
        // Gang members with volumes: linked copies of the pods that have volumes, in a
        // PodGroup per namespace, so that storage changes reach built gangs.
        let mut namespaces = std::collections::BTreeSet::new();
        let linked: Vec<Value> = out
            .iter()
            .filter(|o| kind_of(o) == Some(Kind::Pod) && o.pointer("/spec/volumes").is_some())
            .map(|o| {
                let mut o = o.clone();
                let ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned();
                let name = format!("{}-g", o["metadata"]["name"].as_str().unwrap_or_default());
                o["metadata"]["name"] = json!(name);
                o["spec"]["schedulingGroup"] = json!({"podGroupName": format!("vol-{ns}")});
                namespaces.insert(ns);
                o
            })
            .collect();
        assert!(!linked.is_empty(), "no fixture pod has volumes");
        out.extend(linked);
        for ns in namespaces {
            out.push(json!({
                "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": format!("vol-{ns}"), "namespace": ns,
                             "creationTimestamp": "2026-04-30T08:00:00Z"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            }));
        }
        assert!(out.len() > 60, "the fixtures shrank: {} objects", out.len());
        out
    });
    &CORPUS
}

fn flatten(value: Value, out: &mut Vec<Value>) {
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    match value.get("items").and_then(Value::as_array) {
        Some(items) if kind.ends_with("List") => {
            let item_kind = kind.trim_end_matches("List");
            for item in items {
                let mut item = item.clone();
                if let Some(map) = item.as_object_mut() {
                    if !item_kind.is_empty() {
                        map.entry("kind")
                            .or_insert_with(|| Value::String(item_kind.to_owned()));
                    }
                    map.entry("apiVersion")
                        .or_insert_with(|| value["apiVersion"].clone());
                }
                flatten(item, out);
            }
        }
        _ => out.push(value),
    }
}

/// How the index is fed an object of this value's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Pod,
    Storage(u8),
    Gang,
}

fn kind_of(v: &Value) -> Option<Kind> {
    match v["kind"].as_str()? {
        "Pod" => Some(Kind::Pod),
        "PersistentVolumeClaim" => Some(Kind::Storage(0)),
        "PersistentVolume" => Some(Kind::Storage(1)),
        "StorageClass" => Some(Kind::Storage(2)),
        "CSIDriver" => Some(Kind::Storage(3)),
        "Workload" | "PodGroup" | "CompositePodGroup" => Some(Kind::Gang),
        _ => None,
    }
}

fn storage_kind(n: u8) -> StorageKind {
    match n {
        0 => StorageKind::Pvc,
        1 => StorageKind::Pv,
        2 => StorageKind::StorageClass,
        _ => StorageKind::CsiDriver,
    }
}

/// The identity of an object: (kind, namespace, name, apiVersion).
fn identity(v: &Value) -> (String, String, String, String) {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let namespace = match s("/kind") {
        "PersistentVolume" | "StorageClass" | "CSIDriver" => "",
        _ => v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default"),
    };
    // Pods and storage objects are one object whatever version they are written in.
    let version = if kind_of(v) == Some(Kind::Gang) {
        s("/apiVersion")
    } else {
        ""
    };
    (
        s("/kind").to_owned(),
        namespace.to_owned(),
        s("/metadata/name").to_owned(),
        version.to_owned(),
    )
}

/// A changed copy of `v`: what a watcher reports when the object is updated.
fn changed(v: &Value, how: u8) -> Value {
    let mut v = v.clone();
    let set = |v: &mut Value, pointer: &str, value: Value| {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        if v.pointer(parent).is_none() {
            let (grand, pkey) = parent.rsplit_once('/').unwrap();
            if let Some(map) = v.pointer_mut(grand).and_then(Value::as_object_mut) {
                map.insert(pkey.to_owned(), json!({}));
            }
        }
        if let Some(map) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
            map.insert(key.to_owned(), value);
        }
    };
    match (kind_of(&v), how % 8) {
        (Some(Kind::Pod), 0) => set(&mut v, "/spec/nodeName", json!("node-x")),
        (Some(Kind::Pod), 1) => {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("nodeName");
            }
        }
        (Some(Kind::Pod), 2) => set(&mut v, "/status/phase", json!("Running")),
        (Some(Kind::Pod), 3) => set(&mut v, "/status/phase", json!("Succeeded")),
        (Some(Kind::Pod), 4) => set(
            &mut v,
            "/metadata/deletionTimestamp",
            json!("2026-04-30T09:00:00Z"),
        ),
        (Some(Kind::Pod), 5) => set(
            &mut v,
            "/status/conditions",
            json!([{"type": "DisruptionTarget", "status": "True"},
                   {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
        ),
        (Some(Kind::Pod), 6) => set(
            &mut v,
            "/spec/schedulingGates",
            json!([{"name": "example.com/wait"}]),
        ),
        (Some(Kind::Pod), _) => set(&mut v, "/spec/priority", json!(how)),
        (Some(Kind::Gang), 0 | 1) => {
            set(
                &mut v,
                "/spec/schedulingPolicy",
                json!({"gang": {"minCount": 1 + u32::from(how % 5)}}),
            );
            if let Some(groups) = v
                .pointer_mut("/spec/podGroups")
                .and_then(Value::as_array_mut)
            {
                for g in groups {
                    g["policy"] = json!({"gang": {"minCount": 1 + u32::from(how % 3)}});
                }
            }
        }
        (Some(Kind::Gang), 2) => set(&mut v, "/spec/schedulingPolicy", json!({"basic": {}})),
        (Some(Kind::Gang), 3 | 4) => {
            let at = if how % 8 == 3 {
                "2026-04-30T08:00:00Z"
            } else {
                "2026-04-30T08:04:00Z"
            };
            let conditions = json!([
                {"type": "PodGroupScheduled", "status": "True", "lastTransitionTime": at},
                {"type": "PodGroupInitiallyScheduled", "status": "True", "lastTransitionTime": at}
            ]);
            set(&mut v, "/status/conditions", conditions);
        }
        (Some(Kind::Gang), 5) => {
            if let Some(meta) = v["metadata"].as_object_mut() {
                meta.remove("creationTimestamp");
            }
        }
        (Some(Kind::Gang), 6) => set(&mut v, "/spec/priority", json!(7)),
        (Some(Kind::Gang), _) => set(&mut v, "/spec/schedulingPolicy", json!("not a policy")),
        (Some(Kind::Storage(0)), 0..=3) => set(&mut v, "/spec/storageClassName", json!("none")),
        (Some(Kind::Storage(0)), _) => {
            if let Some(spec) = v["spec"].as_object_mut() {
                spec.remove("volumeName");
            }
        }
        (Some(Kind::Storage(2)), _) => set(&mut v, "/provisioner", json!("other.csi.example.com")),
        (Some(Kind::Storage(3)), _) => {
            set(&mut v, "/spec/attachRequired", json!(how.is_multiple_of(2)))
        }
        (Some(Kind::Storage(_)), _) => {
            set(&mut v, "/metadata/labels", json!({"v": how.to_string()}))
        }
        (None, _) => {}
    }
    v
}

/// One object read alone into a set: how the watchers' objects look once decoded.
fn decoded(v: &Value) -> ObjectSet {
    let mut set = ObjectSet::new();
    set.insert_value(v.clone()).unwrap();
    set
}

#[derive(Debug, Clone)]
enum Step {
    /// Apply object `i` of the corpus, changed by `how` (`None`: as written).
    Apply(usize, Option<u8>),
    /// Delete the current object with the identity of corpus object `i`, if any.
    Delete(usize),
    /// Re-list one kind; objects of it whose corpus index is odd (by `salt`) are gone.
    Relist(u8, u8),
    /// Move the clock.
    Clock(i64),
}

fn step() -> impl Strategy<Value = Step> {
    let n = corpus().len();
    prop_oneof![
        6 => (0..n, proptest::option::of(any::<u8>())).prop_map(|(i, h)| Step::Apply(i, h)),
        2 => (0..n).prop_map(Step::Delete),
        1 => (0u8..6, any::<u8>()).prop_map(|(k, s)| Step::Relist(k, s)),
        1 => prop_oneof![Just(0i64), Just(100), Just(299), Just(301), Just(1_000_000)]
            .prop_map(Step::Clock),
    ]
}

/// The model: every current object by identity, with the corpus index it came from.
type Model = BTreeMap<(String, String, String, String), (usize, Value)>;

fn apply(index: &mut GangIndex, v: &Value) {
    let set = decoded(v);
    match kind_of(v) {
        Some(Kind::Pod) => index.apply_pod(Arc::new(set.pods().next().unwrap().clone())),
        Some(Kind::Gang) => index.apply_gang_object(set.gang_objects().next().unwrap().clone()),
        Some(Kind::Storage(0)) => index.apply_pvc(serde_json::from_value(v.clone()).unwrap()),
        Some(Kind::Storage(1)) => index.apply_pv(serde_json::from_value(v.clone()).unwrap()),
        Some(Kind::Storage(2)) => {
            index.apply_storage_class(serde_json::from_value(v.clone()).unwrap());
        }
        Some(Kind::Storage(_)) => {
            index.apply_csi_driver(serde_json::from_value(v.clone()).unwrap())
        }
        None => {}
    }
}

fn delete(index: &mut GangIndex, id: &(String, String, String, String), v: &Value) {
    let (kind, namespace, name, _) = id;
    match kind_of(v) {
        Some(Kind::Pod) => index.delete_pod(&PodKey {
            namespace: namespace.as_str().into(),
            name: name.as_str().into(),
        }),
        Some(Kind::Gang) => {
            let object = decoded(v).gang_objects().next().unwrap().clone();
            index.delete_gang_object(&object.key());
        }
        Some(Kind::Storage(0)) => index.delete_pvc(namespace, name),
        Some(Kind::Storage(1)) => index.delete_pv(name),
        Some(Kind::Storage(2)) => index.delete_storage_class(name),
        Some(Kind::Storage(_)) => index.delete_csi_driver(name),
        None => {} // `kind` only names the object in failures.
    }
    let _ = kind;
}

/// Re-lists one kind: kind 0 pods, 1..=4 a storage kind, 5 the gang objects of one
/// (apiVersion, kind) pair picked by `salt`. Objects of it whose corpus index has the parity
/// of `salt` are dropped from the model first (deleted while the watch was down).
fn relist(index: &mut GangIndex, model: &mut Model, kind: u8, salt: u8) {
    let target = match kind {
        0 => Kind::Pod,
        1..=4 => Kind::Storage(kind - 1),
        _ => Kind::Gang,
    };
    let gang_types: Vec<(String, String)> = {
        let mut t: Vec<(String, String)> = corpus()
            .iter()
            .filter(|v| kind_of(v) == Some(Kind::Gang))
            .map(|v| {
                (
                    v["apiVersion"].as_str().unwrap_or_default().to_owned(),
                    v["kind"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        t.sort();
        t.dedup();
        t
    };
    let gang_type = &gang_types[usize::from(salt) % gang_types.len()];
    let matches = |v: &Value| {
        kind_of(v) == Some(target)
            && (target != Kind::Gang
                || (v["apiVersion"].as_str() == Some(gang_type.0.as_str())
                    && v["kind"].as_str() == Some(gang_type.1.as_str())))
    };
    model.retain(|_, (i, v)| !(matches(v) && *i % 2 == usize::from(salt % 2)));
    let listed: Vec<&Value> = model
        .values()
        .map(|(_, v)| v)
        .filter(|v| matches(v))
        .collect();
    match target {
        Kind::Pod => {
            let mut set = ObjectSet::new();
            for v in &listed {
                set.insert_value((*v).clone()).unwrap();
            }
            index.replace_pods(&set.pod_set());
        }
        Kind::Storage(n) => {
            let mut set = ObjectSet::new();
            for v in &listed {
                set.insert_value((*v).clone()).unwrap();
            }
            index.replace_storage(storage_kind(n), set);
        }
        Kind::Gang => {
            let objects = listed
                .iter()
                .map(|v| decoded(v).gang_objects().next().unwrap().clone())
                .collect();
            index.replace_gang_objects(&gang_type.0, &gang_type.1, objects);
        }
    }
}

fn fresh(model: &Model) -> ObjectSet {
    let mut set = ObjectSet::new();
    for (_, v) in model.values() {
        set.insert_value(v.clone()).unwrap();
    }
    set
}

/// 2026-04-30T08:00:00Z, when the fixtures' objects were created.
const T0: i64 = 1_777_536_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn the_index_equals_a_rebuild_after_any_events(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let mut index = GangIndex::new();
        let mut model = Model::new();
        let mut now = T0;
        for (n, step) in steps.iter().enumerate() {
            match step {
                Step::Apply(i, how) => {
                    let v = match how {
                        Some(h) => changed(&corpus()[*i], *h),
                        None => corpus()[*i].clone(),
                    };
                    apply(&mut index, &v);
                    model.insert(identity(&v), (*i, v));
                }
                Step::Delete(i) => {
                    let id = identity(&corpus()[*i]);
                    if let Some((_, v)) = model.remove(&id) {
                        delete(&mut index, &id, &v);
                    }
                }
                Step::Relist(kind, salt) => relist(&mut index, &mut model, *kind, *salt),
                Step::Clock(dt) => now = T0 + dt,
            }
            let expected = gangs(&fresh(&model), now);
            let got = index.view(now);
            prop_assert_eq!(&got, &expected, "after step {} ({:?})", n, step);
        }
    }
}

#[test]
fn unchanged_gangs_are_shared_between_views_and_a_change_rebuilds_only_its_gang() {
    let mut index = GangIndex::new();
    for v in corpus() {
        apply(&mut index, v);
    }
    let first = index.view(T0);
    let second = index.view(T0);
    assert!(!first.gangs.is_empty());
    for (a, b) in first.gangs.iter().zip(&second.gangs) {
        assert!(Arc::ptr_eq(a, b), "{} was rebuilt without a change", a.id);
    }
    // Bind one member of one gang: that gang alone is rebuilt.
    let pod = corpus()
        .iter()
        .find(|v| {
            kind_of(v) == Some(Kind::Pod)
                && v.pointer("/spec/nodeName").is_none()
                && first.gangs.iter().any(|g| {
                    g.members
                        .iter()
                        .any(|m| Some(m.pod.as_str()) == v["metadata"]["name"].as_str())
                })
        })
        .expect("an unbound gang member in the fixtures");
    apply(&mut index, &changed(pod, 0));
    let third = index.view(T0);
    let rebuilt: Vec<_> = second
        .gangs
        .iter()
        .zip(&third.gangs)
        .filter(|(a, b)| !Arc::ptr_eq(a, b))
        .map(|(a, _)| a.id.to_string())
        .collect();
    assert_eq!(rebuilt.len(), 1, "rebuilt: {rebuilt:?}");
    assert!(index.distinct_demands() < index.objects().pods().count());
}
