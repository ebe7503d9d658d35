//! Property tests of decoding Kubernetes objects into the gang model: objects of every kind
//! and served gang-API version, taken from the fixtures and then mutated (fields removed,
//! replaced by arbitrary JSON, labels, annotations and quantities made arbitrary, the
//! `apiVersion` of gang objects switched), are read into an [`ObjectSet`], joined into gangs
//! and planned. Nothing may panic; every error names the object (kind and name) and the field;
//! every problem names its object and, for a field-level issue, the field. Case counts are
//! bounded so the suite stays fast in CI.

use proptest::prelude::*;
use serde_json::{Map, Value};

use crate::cluster::*;

/// The objects of each fixture file of every served version, list items flattened (read
/// once): a file's pods name its gang objects, so mutated copies still join into gangs.
fn files() -> &'static [Vec<Value>] {
    static FILES: std::sync::LazyLock<Vec<Vec<Value>>> = std::sync::LazyLock::new(read_files);
    &FILES
}

/// Every object of every fixture file.
fn corpus() -> Vec<&'static Value> {
    files().iter().flatten().collect()
}

fn read_files() -> Vec<Vec<Value>> {
    const FILES: [&str; 6] = [
        include_str!("../../../tests/fixtures/gangs/v1alpha1/gangs.yaml"),
        include_str!("../../../tests/fixtures/gangs/v1alpha2/gangs.yaml"),
        include_str!("../../../tests/fixtures/gangs/v1alpha3/gangs.yaml"),
        include_str!("../../../tests/fixtures/gangs/v1beta1/gangs.yaml"),
        include_str!("../../../tests/fixtures/gangs/demand/resources.yaml"),
        include_str!("../../../tests/fixtures/gangs/demand/volumes.yaml"),
    ];
    FILES
        .iter()
        .map(|text| {
            let mut out = Vec::new();
            for document in crate::yaml::documents(text, &crate::yaml::OBJECTS).unwrap() {
                flatten(document.value, &mut out);
            }
            assert!(!out.is_empty(), "a fixture holds no object");
            out
        })
        .collect()
}

fn flatten(value: Value, out: &mut Vec<Value>) {
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    match value.get("items").and_then(Value::as_array) {
        Some(items) if kind.ends_with("List") => {
            let item_kind = kind.trim_end_matches("List");
            for item in items {
                let mut item = item.clone();
                if let (Some(map), false) = (item.as_object_mut(), item_kind.is_empty()) {
                    map.entry("apiVersion")
                        .or_insert_with(|| value["apiVersion"].clone());
                    map.entry("kind")
                        .or_insert_with(|| Value::String(item_kind.to_owned()));
                }
                out.push(item);
            }
        }
        _ if !value.is_null() => out.push(value),
        _ => {}
    }
}

/// Strings that stress quantity, label and name parsing.
fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("1.5Gi".to_owned()),
        Just("100m".to_owned()),
        Just("0.0001m".to_owned()),
        Just("1e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("99999999999999999999999Ei".to_owned()),
        Just("9223372036854775807k".to_owned()),
        Just("NaN".to_owned()),
        Just("Exists".to_owned()),
        Just("Always".to_owned()),
        Just("True".to_owned()),
        Just("line\nbreak".to_owned()),
        Just("\u{0}".to_owned()),
        "[a-z0-9./-]{1,20}",
        "\\PC{0,12}",
    ]
}

/// Arbitrary JSON, small and shallow (memory stays bounded).
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            Just(i64::MIN),
            Just(-1i64),
            Just(0),
            Just(1),
            Just(i64::from(i32::MAX) + 1),
            Just(i64::MAX),
            any::<i64>()
        ]
        .prop_map(Value::from),
        prop_oneof![Just(0.5f64), Just(-1e300), Just(1e300)].prop_map(Value::from),
        odd_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One change to an object.
#[derive(Debug, Clone)]
enum Mutation {
    /// Remove the field (or array element) at the chosen position.
    Remove(usize),
    /// Replace the value at the chosen position.
    Replace(usize, Value),
    /// Replace the value at the chosen position by an odd string (a bad quantity, etc.).
    OddString(usize, String),
    /// Set `metadata.labels` / `metadata.annotations` to arbitrary keys and values.
    Labels(Vec<(String, String)>, bool),
    /// Switch the `apiVersion` of a gang object to another (or an unknown) version.
    Version(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => any::<usize>().prop_map(Mutation::Remove),
        3 => (any::<usize>(), arbitrary_json()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        3 => (any::<usize>(), odd_string()).prop_map(|(i, s)| Mutation::OddString(i, s)),
        1 => (prop::collection::vec((odd_string(), odd_string()), 0..4), any::<bool>())
            .prop_map(|(l, a)| Mutation::Labels(l, a)),
        1 => any::<usize>().prop_map(Mutation::Version),
    ]
}

const GANG_VERSIONS: [&str; 5] = [
    "scheduling.k8s.io/v1alpha1",
    "scheduling.k8s.io/v1alpha2",
    "scheduling.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1beta1",
    "scheduling.k8s.io/v9",
];

/// JSON pointers of every value below the root, except `apiVersion` and `kind` themselves
/// (objects without them are tested separately).
fn pointers(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if prefix.is_empty() && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                let p = format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(v, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let p = format!("{prefix}/{i}");
                out.push(p.clone());
                pointers(v, &p, out);
            }
        }
        _ => {}
    }
}

fn apply(object: &mut Value, m: &Mutation) {
    let mut all = Vec::new();
    pointers(object, "", &mut all);
    let pick = |i: usize| all.get(i % all.len().max(1)).cloned();
    match m {
        Mutation::Remove(i) => {
            let Some(p) = pick(*i) else { return };
            let (parent, last) = p.rsplit_once('/').unwrap_or(("", &p));
            let last = last.replace("~1", "/").replace("~0", "~");
            match object.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&last);
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = last.parse::<usize>()
                        && i < items.len()
                    {
                        items.remove(i);
                    }
                }
                _ => {}
            }
        }
        Mutation::Replace(i, v) => {
            if let Some(slot) = pick(*i).and_then(|p| object.pointer_mut(&p)) {
                *slot = v.clone();
            }
        }
        Mutation::OddString(i, s) => {
            if let Some(slot) = pick(*i).and_then(|p| object.pointer_mut(&p)) {
                *slot = Value::String(s.clone());
            }
        }
        Mutation::Labels(pairs, annotations) => {
            let field = if *annotations {
                "annotations"
            } else {
                "labels"
            };
            let map: Map<String, Value> = pairs
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            if let Some(Value::Object(meta)) = object.get_mut("metadata") {
                meta.insert(field.to_owned(), Value::Object(map));
            }
        }
        Mutation::Version(i) => {
            let is_gang = object["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("scheduling.k8s.io/"));
            if is_gang {
                object["apiVersion"] = Value::from(GANG_VERSIONS[i % GANG_VERSIONS.len()]);
            }
        }
    }
}

/// `namespace/name`, `name` or `<unnamed>`, as errors name objects.
fn display_name(value: &Value) -> String {
    let s = |p| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (s("/metadata/namespace"), s("/metadata/name")) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_owned(),
        _ => "<unnamed>".to_owned(),
    }
}

/// Checks one insertion error: it names the object and, for a decoding error, the field.
fn check_error(e: &Error, object: &Value) -> Result<(), TestCaseError> {
    let text = e.to_string();
    prop_assert!(text.contains(&display_name(object)), "{text}");
    match e {
        Error::Decode {
            kind, path, name, ..
        } => {
            prop_assert!(!kind.is_empty() && !name.is_empty(), "{text}");
            prop_assert!(!path.is_empty(), "decode error without a field: {text}");
            prop_assert!(text.contains(kind.as_str()), "{text}");
        }
        Error::MissingTypeMeta { field, .. } => prop_assert!(text.contains(field), "{text}"),
        Error::Yaml { .. } | Error::NotAnObject { .. } => {
            prop_assert!(false, "an object read as JSON: {text}");
        }
    }
    Ok(())
}

/// Checks every problem of a view: it names its object, and a field-level issue its field.
fn check_problems(view: &GangView) -> Result<(), TestCaseError> {
    for p in &view.problems {
        let text = p.to_string();
        prop_assert!(
            !p.object.kind.is_empty() && !p.object.name.is_empty(),
            "{text}"
        );
        prop_assert!(text.contains(&p.object.name), "{text}");
        let path = match &p.issue {
            Issue::Malformed { path, .. }
            | Issue::InvalidMinCount { path, .. }
            | Issue::InvalidPolicy { path }
            | Issue::InvalidQuantity { path, .. }
            | Issue::InvalidOperator { path, .. } => Some(path),
            _ => None,
        };
        if let Some(path) = path {
            prop_assert!(!path.is_empty(), "{text}");
            prop_assert!(text.contains(path.as_str()), "{text}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_objects_of_every_version_decode_or_fail_naming_the_object_and_field(
        file in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        mutations in prop::collection::vec((any::<prop::sample::Index>(), mutation()), 1..8),
    ) {
        // One fixture file whole, plus a few objects from anywhere, then mutated.
        let corpus = corpus();
        let mut objects: Vec<Value> = file.get(files()).clone();
        objects.extend(extra.iter().map(|i| i.get(&corpus).to_owned().clone()));
        for (target, m) in &mutations {
            let i = target.index(objects.len());
            apply(&mut objects[i], m);
        }

        let mut set = ObjectSet::new();
        let mut failed = false;
        for object in &objects {
            if let Err(e) = set.insert_value(object.clone()) {
                check_error(&e, object)?;
                failed = true;
            }
            // The watch path of 1.35 pods: decoded from a DynamicObject.
            if object["kind"] == "Pod"
                && let Ok(dynamic) = serde_json::from_value::<kube::core::DynamicObject>(object.clone())
                && let Err(e) = CompactPod::from_dynamic(&dynamic)
            {
                check_error(&e, object)?;
            }
        }
        let view = gangs(&set, 1_788_264_000);
        check_problems(&view)?;
        for gang in &view.gangs {
            prop_assert!(!gang.id.name.is_empty() && !gang.id.kind.is_empty());
        }

        // The same objects as multi-document YAML: read the same way.
        let text = objects
            .iter()
            .map(|o| serde_json::to_string(o).unwrap())
            .collect::<Vec<_>>()
            .join("\n---\n");
        match ObjectSet::from_yaml_documents(&text) {
            Ok(from_yaml) => {
                prop_assert!(!failed, "YAML read what JSON refused");
                prop_assert_eq!(from_yaml.pods().count(), set.pods().count());
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.starts_with("document "), "{text}");
            }
        }

        // And planned against a GPU group: no panic whatever the demands.
        let group = crate::testing::group("gpu", 0, 16);
        let shape = crate::planner::NodeShape::from_group(&group, "nvidia.com/gpu.product");
        let plan = crate::planner::plan(&view.gangs, &[(&group, shape, 0)]);
        prop_assert!(plan.gangs.len() <= view.gangs.len());
    }

    #[test]
    fn objects_without_type_fields_or_of_the_wrong_shape_are_refused_by_name(
        index in any::<prop::sample::Index>(),
        drop_kind in any::<bool>(),
        junk in arbitrary_json(),
    ) {
        let mut object = index.get(&corpus()).to_owned().clone();
        let field = if drop_kind { "kind" } else { "apiVersion" };
        object.as_object_mut().unwrap().remove(field);
        let e = ObjectSet::new().insert_value(object.clone()).unwrap_err();
        check_error(&e, &object)?;

        // A document that is not an object at all is refused naming its position.
        if !junk.is_object() {
            let e = ObjectSet::new().insert_value(junk).unwrap_err();
            prop_assert!(matches!(e, Error::NotAnObject { .. }), "{e}");
        }
    }
}
