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
mod tests;
