//! The pure part of the webhook: read an `admission.k8s.io/v1` AdmissionReview for a Pod,
//! decide what link the pod needs in the served gang API version and, with reservation
//! tolerations on, the toleration of its gang's [reservation taint](crate::model::reservation),
//! and write the response (a JSON Patch, or a refusal naming the annotation and value).

use serde::Deserialize;
use serde_json::{Value, json};

use crate::migrate::api::{
    ANNOTATION_REPLICA_KEY, ANNOTATION_TEMPLATE, ANNOTATION_WORKLOAD, GangApi, GroupLink,
};
use crate::model::reservation::{tolerated, toleration_json, value_for_name};
use crate::model::{GangRef, Toleration};

/// The request part of an AdmissionReview that the webhook reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Echoed in the response.
    pub uid: String,
    /// The object's kind.
    #[serde(default)]
    pub kind: Option<GroupVersionKind>,
    /// `CREATE`, `UPDATE`, ...
    #[serde(default)]
    pub operation: String,
    /// The request's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The object being admitted.
    #[serde(default)]
    pub object: Option<Value>,
    /// A dry run: the webhook must not change anything else (no PodGroup is created).
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// `request.kind`.
#[derive(Debug, Clone, Deserialize)]
pub struct GroupVersionKind {
    /// API group (`""` for core).
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// Why an AdmissionReview could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body is not an AdmissionReview v1.
    #[error("the request body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    Body(String),
}

/// Reads an AdmissionReview body and returns its request.
///
/// # Errors
/// [`Error::Body`] when the body is not JSON, not `admission.k8s.io/v1`, or has no request.
pub fn read(body: &[u8]) -> Result<Request, Error> {
    let review: Value = serde_json::from_slice(body).map_err(|e| Error::Body(e.to_string()))?;
    let api_version = review.get("apiVersion").and_then(Value::as_str);
    if api_version != Some("admission.k8s.io/v1") {
        return Err(Error::Body(format!(
            "apiVersion {api_version:?}; only admission.k8s.io/v1 is served (set admissionReviewVersions: [v1])"
        )));
    }
    let request = review
        .get("request")
        .cloned()
        .ok_or_else(|| Error::Body("no request".into()))?;
    serde_json::from_value(request).map_err(|e| Error::Body(format!("request: {e}")))
}

/// What the webhook does with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Admit unchanged, for the reason given (no gang annotations, link already set, not a
    /// pod creation).
    Unchanged(&'static str),
    /// Add `field` with `value` under `spec`; from 1.36 on, PodGroup `pod_group` must exist.
    Link {
        /// The gang.
        link: GroupLink,
        /// `workloadRef` or `schedulingGroup`.
        field: &'static str,
        /// The field's value.
        value: Value,
        /// The PodGroup the link names (1.36+).
        pod_group: Option<String>,
        /// The toleration to add too (reservation tolerations on, not tolerated yet).
        toleration: Option<Value>,
    },
    /// A pod already linked to its gang: add the toleration of the gang's reservation taint.
    Tolerate {
        /// [`GangRef::name`] of the gang.
        gang: String,
        /// The toleration.
        toleration: Value,
    },
    /// Refuse the pod, with the message the API server shows its creator.
    Deny(String),
}

/// Decides the link for the pod in `request` on a cluster serving `served` (`None`: no gang
/// API is served). With `tolerate`, a member of a gang (linked already, or linked now) also
/// gets the toleration of its gang's reservation taint unless some toleration of the pod
/// already covers it.
#[must_use]
pub fn decide(request: &Request, served: Option<GangApi>, tolerate: bool) -> Decision {
    let is_pod = request
        .kind
        .as_ref()
        .is_some_and(|k| k.group.is_empty() && k.kind == "Pod");
    if !is_pod || request.operation != "CREATE" {
        return Decision::Unchanged("not a pod creation");
    }
    let Some(pod) = &request.object else {
        return Decision::Unchanged("no object");
    };
    let annotations = pod.pointer("/metadata/annotations");
    let annotation = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::trim)
    };
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let missing = |gang: &str| {
        if tolerate {
            missing_toleration(pod, namespace, gang)
        } else {
            None
        }
    };
    // A pod the native API links already: at most its toleration is missing.
    let linked = |why: &'static str| match linked_gang(pod) {
        Some(gang) => match missing(&gang) {
            Some(toleration) => Decision::Tolerate { gang, toleration },
            None => Decision::Unchanged(why),
        },
        None => Decision::Unchanged(why),
    };
    let (workload, template) = match (
        annotation(ANNOTATION_WORKLOAD),
        annotation(ANNOTATION_TEMPLATE),
    ) {
        (None, None) => return linked("no gang annotations"),
        (Some(w), Some(t)) if !w.is_empty() && !t.is_empty() => (w.to_owned(), t.to_owned()),
        (w, t) => {
            return Decision::Deny(format!(
                "annotations {ANNOTATION_WORKLOAD}={:?} and {ANNOTATION_TEMPLATE}={:?}: both are needed, non-empty",
                w.unwrap_or_default(),
                t.unwrap_or_default()
            ));
        }
    };
    let replica_key = annotation(ANNOTATION_REPLICA_KEY)
        .filter(|k| !k.is_empty())
        .map(str::to_owned);
    let spec = pod.get("spec");
    let has = |field: &str| {
        spec.and_then(|s| s.get(field))
            .is_some_and(|v| !v.is_null())
    };
    if has("workloadRef") || has("schedulingGroup") {
        return linked("the pod already names its gang");
    }
    let Some(api) = served else {
        return Decision::Deny(format!(
            "pod is annotated {ANNOTATION_WORKLOAD}={workload:?} but the cluster serves no scheduling.k8s.io gang API (v1alpha1, v1alpha2, v1beta1): turn on the GenericWorkload feature gate and the API version (gangscaler doctor prints the flags)"
        ));
    };
    let link = GroupLink {
        workload,
        template,
        replica_key,
    };
    let pod_group = if api.has_pod_groups() {
        match link.pod_group_name() {
            Ok(name) => Some(name),
            Err(e) => return Decision::Deny(format!("gang annotations: {e}")),
        }
    } else {
        None
    };
    let gang = pod_group.clone().unwrap_or_else(|| {
        GangRef::workload_gang_name(&link.workload, &link.template, link.replica_key.as_deref())
    });
    match link.pod_link(api) {
        Ok((field, value)) => Decision::Link {
            toleration: missing(&gang),
            link,
            field,
            value: value.to_json(),
            pod_group,
        },
        Err(e) => Decision::Deny(format!("gang annotations: {e}")),
    }
}

/// [`GangRef::name`] of the gang a pod's spec links it to: `schedulingGroup.podGroupName`
/// (1.36+), or `workloadRef` (1.35: `<name>/<podGroup>[/<podGroupReplicaKey>]`).
fn linked_gang(pod: &Value) -> Option<String> {
    let text = |p: &str| {
        pod.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let Some(name) = text("/spec/schedulingGroup/podGroupName") {
        return Some(name.to_owned());
    }
    let workload = text("/spec/workloadRef/name")?;
    let pod_group = text("/spec/workloadRef/podGroup")?;
    Some(GangRef::workload_gang_name(
        workload,
        pod_group,
        text("/spec/workloadRef/podGroupReplicaKey"),
    ))
}

/// The toleration of gang `gang`'s reservation taint, unless the pod's tolerations cover it
/// already (or cannot be read, when the API server's own validation will speak).
fn missing_toleration(pod: &Value, namespace: &str, gang: &str) -> Option<Value> {
    let value = value_for_name(namespace, gang);
    let current: Vec<Toleration> = match pod.pointer("/spec/tolerations") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|t| {
                let field = |f: &str| t.get(f).and_then(Value::as_str);
                Toleration::from_parts(
                    field("key"),
                    field("operator"),
                    field("value"),
                    field("effect"),
                )
            })
            .collect(),
        Some(_) => return None,
    };
    if tolerated(&current, &value) {
        return None;
    }
    Some(toleration_json(&value))
}

/// The JSON Patch operation appending `toleration` to the pod's `spec.tolerations` (creating
/// the list when the pod has none).
#[must_use]
pub fn toleration_op(pod: Option<&Value>, toleration: Value) -> Value {
    let has_list = pod
        .and_then(|p| p.pointer("/spec/tolerations"))
        .is_some_and(Value::is_array);
    if has_list {
        json!({"op": "add", "path": "/spec/tolerations/-", "value": toleration})
    } else {
        json!({"op": "add", "path": "/spec/tolerations", "value": [toleration]})
    }
}

/// The AdmissionReview response: allowed with a JSON Patch, allowed unchanged, or refused
/// with `message` and HTTP-like `code`.
#[must_use]
pub fn respond(uid: &str, outcome: &ReviewOutcome) -> Value {
    let response = match outcome {
        ReviewOutcome::Allow => json!({"uid": uid, "allowed": true}),
        ReviewOutcome::Patch { ops } => {
            let patch = Value::Array(ops.clone());
            json!({
                "uid": uid,
                "allowed": true,
                "patchType": "JSONPatch",
                "patch": base64(patch.to_string().as_bytes()),
            })
        }
        ReviewOutcome::Deny { code, message } => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": code, "message": message},
        }),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

/// The JSON Patch operation adding `spec.<field>` with `value` (the gang link).
#[must_use]
pub fn link_op(field: &str, value: Value) -> Value {
    json!({"op": "add", "path": format!("/spec/{field}"), "value": value})
}

/// What the response says.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviewOutcome {
    /// Admit unchanged.
    Allow,
    /// Admit with these JSON Patch operations (the link, a toleration, or both).
    Patch {
        /// The operations, in order.
        ops: Vec<Value>,
    },
    /// Refuse.
    Deny {
        /// An HTTP status code for the message (400 bad annotations, 404 no Workload, 503
        /// the API server could not be asked).
        code: u16,
        /// Shown to whoever created the pod.
        message: String,
    },
}

/// Standard base64 with padding (what `patch` is in an AdmissionReview).
#[must_use]
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
            base64(
                br#"[{"op":"add","path":"/spec/schedulingGroup","value":{"podGroupName":"a"}}]"#
            )
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
        let err = read(br#"{"apiVersion":"admission.k8s.io/v1beta1","request":{"uid":"x"}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("v1beta1"), "{err}");
        assert!(read(b"not json").is_err());
    }
}
