use super::*;

fn request(annotations: Value, spec: Value) -> Request {
    read(
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "ml",
                "object": {"metadata": {"name": "p", "annotations": annotations}, "spec": spec},
                "dryRun": false,
            }
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap()
}

fn annotated(key: Option<&str>) -> Value {
    let mut a = json!({ANNOTATION_WORKLOAD: "train", ANNOTATION_TEMPLATE: "workers"});
    if let Some(k) = key {
        a[ANNOTATION_REPLICA_KEY] = json!(k);
    }
    a
}

#[test]
fn the_link_follows_the_served_version() {
    let r = request(annotated(Some("2")), json!({"containers": []}));
    match decide(&r, Some(GangApi::V1Alpha1), false) {
        Decision::Link {
            field,
            value,
            pod_group,
            ..
        } => {
            assert_eq!(field, "workloadRef");
            assert_eq!(
                value,
                json!({"name": "train", "podGroup": "workers", "podGroupReplicaKey": "2"})
            );
            assert_eq!(pod_group, None);
        }
        other => panic!("{other:?}"),
    }
    for api in [GangApi::V1Alpha2, GangApi::V1Beta1] {
        match decide(&r, Some(api), false) {
            Decision::Link {
                field,
                value,
                pod_group,
                ..
            } => {
                assert_eq!(field, "schedulingGroup");
                assert_eq!(value, json!({"podGroupName": "train-workers-2"}));
                assert_eq!(pod_group.as_deref(), Some("train-workers-2"));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn pods_without_annotations_or_with_a_link_pass_unchanged() {
    let plain = request(json!({"team": "x"}), json!({}));
    assert_eq!(
        decide(&plain, Some(GangApi::V1Beta1), false),
        Decision::Unchanged("no gang annotations")
    );
    let linked = request(
        annotated(None),
        json!({"schedulingGroup": {"podGroupName": "mine"}}),
    );
    assert!(matches!(
        decide(&linked, Some(GangApi::V1Beta1), false),
        Decision::Unchanged(_)
    ));
}

#[test]
fn half_annotated_pods_bad_keys_and_clusters_without_the_api_are_refused_by_name() {
    let half = request(json!({ANNOTATION_WORKLOAD: "train"}), json!({}));
    match decide(&half, Some(GangApi::V1Alpha2), false) {
        Decision::Deny(m) => assert!(
            m.contains(ANNOTATION_TEMPLATE) && m.contains("train"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    let bad = request(annotated(Some("Rank_0")), json!({}));
    match decide(&bad, Some(GangApi::V1Alpha2), false) {
        Decision::Deny(m) => assert!(m.contains("Rank_0"), "{m}"),
        other => panic!("{other:?}"),
    }
    // 1.35 carries the key as a field, so the same key is fine there.
    assert!(matches!(
        decide(&bad, Some(GangApi::V1Alpha1), false),
        Decision::Link { .. }
    ));
    let r = request(annotated(None), json!({}));
    match decide(&r, None, false) {
        Decision::Deny(m) => assert!(m.contains("GenericWorkload"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_response_patch_is_base64_json_patch_and_echoes_the_uid() {
    let resp = respond(
        "u-1",
        &ReviewOutcome::Patch {
            ops: vec![link_op("schedulingGroup", json!({"podGroupName": "a"}))],
        },
    );
    assert_eq!(resp["response"]["uid"], "u-1");
    assert_eq!(resp["response"]["patchType"], "JSONPatch");
    let patch = resp["response"]["patch"].as_str().unwrap();
    assert_eq!(
        patch,
        base64(br#"[{"op":"add","path":"/spec/schedulingGroup","value":{"podGroupName":"a"}}]"#)
    );
    let deny = respond(
        "u-2",
        &ReviewOutcome::Deny {
            code: 404,
            message: "no".into(),
        },
    );
    assert_eq!(deny["response"]["allowed"], false);
    assert_eq!(deny["response"]["status"]["code"], 404);
}

/// The reservation value of gang `name` in the test namespace `ml`.
fn value(name: &str) -> String {
    value_for_name("ml", name)
}

#[test]
fn members_get_their_gangs_toleration_in_every_version_once() {
    // Linked now from annotations: the gang is the PodGroup (1.36+) or the Workload's
    // pod group and replica (1.35), named as the cluster view names it.
    let r = request(annotated(Some("2")), json!({"containers": []}));
    for (api, gang) in [
        (GangApi::V1Alpha1, "train/workers/2"),
        (GangApi::V1Alpha2, "train-workers-2"),
        (GangApi::V1Beta1, "train-workers-2"),
    ] {
        match decide(&r, Some(api), true) {
            Decision::Link {
                toleration: Some(t),
                ..
            } => assert_eq!(t, toleration_json(&value(gang))),
            other => panic!("{api:?}: {other:?}"),
        }
        assert!(matches!(
            decide(&r, Some(api), false),
            Decision::Link {
                toleration: None,
                ..
            }
        ));
    }
    // Linked natively already: only the toleration is added.
    for (spec, gang) in [
        (json!({"schedulingGroup": {"podGroupName": "pg"}}), "pg"),
        (
            json!({"workloadRef": {"name": "w", "podGroup": "g", "podGroupReplicaKey": "1"}}),
            "w/g/1",
        ),
        (
            json!({"workloadRef": {"name": "w", "podGroup": "g"}}),
            "w/g",
        ),
    ] {
        match decide(
            &request(json!({}), spec.clone()),
            Some(GangApi::V1Beta1),
            true,
        ) {
            Decision::Tolerate {
                gang: g,
                toleration,
            } => {
                assert_eq!(g, gang);
                assert_eq!(toleration["value"], value(gang));
                assert_eq!(toleration["operator"], "Equal");
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
    // Already tolerated (its own toleration, or a wildcard on the key): unchanged.
    let own = toleration_json(&value("pg"));
    let wildcard =
        json!({"key": crate::model::reservation::RESERVATION_TAINT, "operator": "Exists"});
    for tolerations in [
        json!([own]),
        json!([{"key": "x", "operator": "Exists"}, wildcard]),
    ] {
        let pod = request(
            json!({}),
            json!({"schedulingGroup": {"podGroupName": "pg"}, "tolerations": tolerations}),
        );
        assert!(
            matches!(
                decide(&pod, Some(GangApi::V1Beta1), true),
                Decision::Unchanged(_)
            ),
            "{tolerations}"
        );
    }
    // Not a member: nothing to tolerate.
    assert_eq!(
        decide(&request(json!({}), json!({})), Some(GangApi::V1Beta1), true),
        Decision::Unchanged("no gang annotations")
    );
}

#[test]
fn the_toleration_is_appended_or_starts_the_list() {
    let t = json!({"key": "k"});
    let with = json!({"spec": {"tolerations": [{"key": "a"}]}});
    assert_eq!(
        toleration_op(Some(&with), t.clone()),
        json!({"op": "add", "path": "/spec/tolerations/-", "value": {"key": "k"}})
    );
    for without in [json!({"spec": {}}), json!({"spec": {"tolerations": null}})] {
        assert_eq!(
            toleration_op(Some(&without), t.clone()),
            json!({"op": "add", "path": "/spec/tolerations", "value": [{"key": "k"}]})
        );
    }
}

#[test]
fn base64_matches_the_rfc_4648_vectors() {
    for (input, want) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(input.as_bytes()), want);
    }
}

#[test]
fn a_review_of_another_version_is_refused_naming_it() {
    let err =
        read(br#"{"apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"x"}}"#).unwrap_err();
    assert!(err.to_string().contains("v1beta1"), "{err}");
    assert!(read(b"not json").is_err());
}
