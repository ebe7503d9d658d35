//! [`ObjectSet`] tests: reading mixed YAML, lists, typed and dynamic objects, and errors that
//! name the document, kind, name and field.

use super::*;
use crate::cluster::{GangView, gangs};

/// 2026-09-01T12:00:00Z.
const NOW: i64 = 1_788_264_000;

const V1ALPHA1: &str = include_str!("../../../tests/fixtures/gangs/v1alpha1/gangs.yaml");

fn member_names(view: &GangView, name: &str) -> Vec<String> {
    let gang = view.gangs.iter().find(|g| g.id.name == name).unwrap();
    gang.members.iter().map(|m| m.pod.clone()).collect()
}

#[test]
fn typed_pods_and_gang_objects_can_be_inserted_directly() {
    let mut objects = ObjectSet::new();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {
            "schedulingGroup": {"podGroupName": "g"},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        }
    }))
    .unwrap();
    objects.insert_pod(pod);
    let group = serde_json::json!({
        "metadata": {"name": "g", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}
    });
    objects.insert_gang_object(GangObject::new(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        group,
    ));
    let view = gangs(&objects, NOW);
    assert_eq!(member_names(&view, "g"), ["w-0"]);
    let g = &view.gangs[0];
    assert_eq!(g.members[0].demand.extended["nvidia.com/gpu"], 2);
    // Without a creation time the gang is as old as "now".
    assert_eq!(g.created_unix, NOW);
}

#[test]
fn dynamic_objects_keep_the_1_35_workload_ref_that_typed_pods_drop() {
    let pod: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {
            "workloadRef": {"name": "train", "podGroup": "workers"},
            "containers": [{"name": "c"}]
        }
    }))
    .unwrap();
    let workload: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}
    }))
    .unwrap();
    let mut objects = ObjectSet::new();
    assert_eq!(objects.insert_dynamic(pod).unwrap(), 1);
    assert_eq!(objects.insert_dynamic(workload).unwrap(), 1);
    let view = gangs(&objects, NOW);
    assert_eq!(member_names(&view, "train/workers"), ["w-0"]);
}

#[test]
fn kinds_the_adapters_do_not_read_are_skipped() {
    let mut objects = ObjectSet::new();
    let config_map =
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert_eq!(objects.insert_value(config_map).unwrap(), 0);
    let priority_class = serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "training"}, "value": 1000
    });
    assert_eq!(objects.insert_value(priority_class).unwrap(), 0);
    assert_eq!(objects.gang_objects().count(), 0);
}

#[test]
fn a_wrongly_typed_field_is_rejected_with_document_kind_name_and_path() {
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: w-0, namespace: ml}\n\
                spec:\n  containers: oops\n";
    let err = ObjectSet::from_yaml_documents(yaml).unwrap_err();
    let Error::Decode {
        at,
        kind,
        name,
        path,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(at.document, Some(2));
    assert_eq!((kind.as_str(), name.as_str()), ("Pod", "ml/w-0"));
    assert_eq!(path, "spec.containers");
    assert!(message.contains("invalid type"), "{message}");
    assert!(
        err.to_string()
            .starts_with("document 2: decoding Pod ml/w-0: spec.containers: ")
    );
}

#[test]
fn a_malformed_1_35_workload_ref_is_rejected_with_its_path() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: w-0}\n\
                spec:\n  workloadRef: {name: train}\n  containers: []\n";
    let err = ObjectSet::from_yaml_documents(yaml).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { path, .. } if path == "spec.workloadRef"),
        "{err:?}"
    );
    assert!(err.to_string().contains("podGroup"), "{err}");
}

#[test]
fn documents_without_type_fields_are_rejected_with_their_number() {
    let err =
        ObjectSet::from_yaml_documents("---\n# empty\n---\nmetadata: {name: x, namespace: ml}\n")
            .unwrap_err();
    assert_eq!(err.to_string(), "document 2: object ml/x has no apiVersion");
    let err = ObjectSet::from_yaml_documents("apiVersion: v1\nmetadata: {}\n").unwrap_err();
    assert_eq!(err.to_string(), "document 1: object <unnamed> has no kind");
}

#[test]
fn documents_that_are_not_objects_or_not_yaml_are_rejected() {
    let err = ObjectSet::from_yaml_documents("- a\n- b\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "document 1: expected an object, found array"
    );
    let err =
        ObjectSet::from_yaml_documents("apiVersion: v1\nkind: ConfigMap\n---\nkind: [unclosed\n")
            .unwrap_err();
    assert!(matches!(err, Error::Yaml { document: 2, .. }), "{err:?}");
}

#[test]
fn list_items_are_read_and_named_by_index_in_errors() {
    let objects = ObjectSet::from_yaml_documents(V1ALPHA1).unwrap();
    assert!(objects.pods().any(|p| p.name() == "sweep-b-0"));
    let yaml = "apiVersion: v1\nkind: PodList\nitems:\n\
                - metadata: {name: a}\n  spec: {containers: []}\n\
                - metadata: {name: b}\n  spec: {containers: 7}\n";
    let err = ObjectSet::from_yaml_documents(yaml).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("document 1 item 1: decoding Pod b: spec.containers"),
        "{err}"
    );
}

#[test]
fn an_object_with_an_empty_name_is_named_unnamed_in_errors() {
    // Found by the decoding property test: the message read "decoding Pod : ...".
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "", "namespace": false},
        "spec": {"containers": []}
    });
    let e = ObjectSet::new().insert_value(pod.clone()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "object: decoding Pod <unnamed>: metadata.namespace: invalid type: boolean `false`, expected a string"
    );
    let mut dynamic = pod;
    dynamic["metadata"]["namespace"] = serde_json::json!("ml");
    dynamic["spec"] = serde_json::json!({"containers": 3});
    let dynamic: kube::core::DynamicObject = serde_json::from_value(dynamic).unwrap();
    let e = CompactPod::from_dynamic(&dynamic).unwrap_err();
    assert!(
        e.to_string()
            .contains("decoding Pod <unnamed>: spec.containers"),
        "{e}"
    );
}
