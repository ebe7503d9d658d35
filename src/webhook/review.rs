//! The pure part of the webhook: read an `admission.k8s.io/v1` AdmissionReview for a Pod,
//! decide what link the pod needs in the served gang API version, and write the response
//! (a JSON Patch, or a refusal naming the annotation and value).

use serde::Deserialize;
use serde_json::{Value, json};

use crate::migrate::api::{
    ANNOTATION_REPLICA_KEY, ANNOTATION_TEMPLATE, ANNOTATION_WORKLOAD, GangApi, GroupLink,
};

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
    },
    /// Refuse the pod, with the message the API server shows its creator.
    Deny(String),
}

/// Decides the link for the pod in `request` on a cluster serving `served` (`None`: no gang
/// API is served).
#[must_use]
pub fn decide(request: &Request, served: Option<GangApi>) -> Decision {
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
    let (workload, template) = match (
        annotation(ANNOTATION_WORKLOAD),
        annotation(ANNOTATION_TEMPLATE),
    ) {
        (None, None) => return Decision::Unchanged("no gang annotations"),
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
        return Decision::Unchanged("the pod already names its gang");
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
    match link.pod_link(api) {
        Ok((field, value)) => Decision::Link {
            link,
            field,
            value: value.to_json(),
            pod_group,
        },
        Err(e) => Decision::Deny(format!("gang annotations: {e}")),
    }
}

/// The AdmissionReview response: allowed with a patch adding `spec.<field>`, allowed
/// unchanged, or refused with `message` and HTTP-like `code`.
#[must_use]
pub fn respond(uid: &str, outcome: &ReviewOutcome) -> Value {
    let response = match outcome {
        ReviewOutcome::Allow => json!({"uid": uid, "allowed": true}),
        ReviewOutcome::Patch { field, value } => {
            let patch = json!([{"op": "add", "path": format!("/spec/{field}"), "value": value}]);
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

/// What the response says.
#[derive(Debug, Clone, PartialEq)]
pub enum ReviewOutcome {
    /// Admit unchanged.
    Allow,
    /// Admit with `spec.<field>` set to `value`.
    Patch {
        /// The pod spec field.
        field: &'static str,
        /// Its value.
        value: Value,
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
        match decide(&r, Some(GangApi::V1Alpha1)) {
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
            match decide(&r, Some(api)) {
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
            decide(&plain, Some(GangApi::V1Beta1)),
            Decision::Unchanged("no gang annotations")
        );
        let linked = request(
            annotated(None),
            json!({"schedulingGroup": {"podGroupName": "mine"}}),
        );
        assert!(matches!(
            decide(&linked, Some(GangApi::V1Beta1)),
            Decision::Unchanged(_)
        ));
    }

    #[test]
    fn half_annotated_pods_bad_keys_and_clusters_without_the_api_are_refused_by_name() {
        let half = request(json!({ANNOTATION_WORKLOAD: "train"}), json!({}));
        match decide(&half, Some(GangApi::V1Alpha2)) {
            Decision::Deny(m) => assert!(
                m.contains(ANNOTATION_TEMPLATE) && m.contains("train"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let bad = request(annotated(Some("Rank_0")), json!({}));
        match decide(&bad, Some(GangApi::V1Alpha2)) {
            Decision::Deny(m) => assert!(m.contains("Rank_0"), "{m}"),
            other => panic!("{other:?}"),
        }
        // 1.35 carries the key as a field, so the same key is fine there.
        assert!(matches!(
            decide(&bad, Some(GangApi::V1Alpha1)),
            Decision::Link { .. }
        ));
        let r = request(annotated(None), json!({}));
        match decide(&r, None) {
            Decision::Deny(m) => assert!(m.contains("GenericWorkload"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_response_patch_is_base64_json_patch_and_echoes_the_uid() {
        let resp = respond(
            "u-1",
            &ReviewOutcome::Patch {
                field: "schedulingGroup",
                value: json!({"podGroupName": "a"}),
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
