//! The webhook's calls to the API server: which gang API version is served, and creating a
//! pod's PodGroup from its Workload's template when it does not exist yet. A template inside a
//! CompositePodGroup template (1.37+) is refused by name: its PodGroup needs a parent
//! CompositePodGroup, which the webhook does not create.

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use tracing::{debug, info};

use crate::migrate::api::{self, GangApi, GroupLink};
use crate::migrate::doc::Node;

/// Why a PodGroup could not be made sure of.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod names a Workload that does not exist.
    #[error("Workload {namespace}/{workload} ({api_version}) not found: create it before its pods")]
    NoWorkload {
        /// Namespace.
        namespace: String,
        /// Workload name.
        workload: String,
        /// The served version it was looked up in.
        api_version: String,
    },
    /// The Workload has no template of that name.
    #[error(
        "Workload {namespace}/{workload} has no pod-group template {template:?} (it has {known:?})"
    )]
    NoTemplate {
        /// Namespace.
        namespace: String,
        /// Workload name.
        workload: String,
        /// The template asked for.
        template: String,
        /// The templates it has.
        known: Vec<String>,
    },
    /// The template is a child of a CompositePodGroup template (1.37+): its PodGroup must name
    /// a parent CompositePodGroup, which the webhook does not create.
    #[error(
        "Workload {namespace}/{workload}'s pod-group template {template:?} is inside CompositePodGroup template {composite:?}: its PodGroup needs a parent CompositePodGroup, which the webhook does not create; create the CompositePodGroup and the PodGroup (spec.parentCompositePodGroupName) and link the pods with spec.schedulingGroup.podGroupName instead of the annotations"
    )]
    InComposite {
        /// Namespace.
        namespace: String,
        /// Workload name.
        workload: String,
        /// The template asked for.
        template: String,
        /// The composite templates it sits in, outermost first, joined by `/`.
        composite: String,
    },
    /// The PodGroup name is not valid.
    #[error(transparent)]
    Name(#[from] api::BadName),
    /// The API server could not be asked or refused the PodGroup.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The status code the refusal carries: 404 for a missing Workload or template, 400 for a
    /// bad name or a template inside a composite, 503 when the API server failed.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            Self::NoWorkload { .. } | Self::NoTemplate { .. } => 404,
            Self::InComposite { .. } | Self::Name(_) => 400,
            Self::Api { .. } => 503,
        }
    }
}

/// The newest gang API version the cluster serves (`v1beta1` over `v1alpha2` over
/// `v1alpha1`), or `None`. 1.37 and 1.38 both serve `v1beta1` (their Workload and PodGroup
/// are the same); `v1alpha3` alone does not count.
///
/// # Errors
/// When API discovery fails.
pub async fn served(client: &kube::Client) -> Result<Option<GangApi>, kube::Error> {
    let groups = client.list_api_groups().await?;
    let versions: Vec<String> = groups
        .groups
        .into_iter()
        .filter(|g| g.name == api::GROUP)
        .flat_map(|g| g.versions.into_iter().map(|v| v.version))
        .collect();
    Ok(api::ALL
        .into_iter()
        .rev()
        .find(|api| versions.iter().any(|v| v == api.version())))
}

fn resource(api: GangApi, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(api::GROUP, api.version(), kind))
}

/// The group template `link` names in `workload` (a Workload object in `api`'s shape).
///
/// # Errors
/// [`Error::InComposite`] when the template sits only inside a CompositePodGroup template
/// (1.37+, `spec.compositePodGroupTemplates`, nested up to four deep); [`Error::NoTemplate`]
/// when the Workload has no template of that name at all.
pub fn template_of(
    workload: &Value,
    api: GangApi,
    namespace: &str,
    link: &GroupLink,
) -> Result<Value, Error> {
    let named = |t: &&Value| t.get("name").and_then(Value::as_str) == Some(link.template.as_str());
    let list = |v: &Value, field: &str| -> Vec<Value> {
        v.get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let spec = workload.get("spec").cloned().unwrap_or(Value::Null);
    let templates = list(&spec, api.groups_field());
    if let Some(t) = templates.iter().find(named) {
        return Ok(t.clone());
    }
    // Depth-first through the composite templates, keeping the path of names.
    let mut stack: Vec<(String, Value)> = list(&spec, "compositePodGroupTemplates")
        .into_iter()
        .rev()
        .map(|c| (String::new(), c))
        .collect();
    while let Some((parent, composite)) = stack.pop() {
        let name = composite.get("name").and_then(Value::as_str).unwrap_or("?");
        let path = if parent.is_empty() {
            name.to_owned()
        } else {
            format!("{parent}/{name}")
        };
        if list(&composite, "podGroupTemplates")
            .iter()
            .any(|t| named(&t))
        {
            return Err(Error::InComposite {
                namespace: namespace.to_owned(),
                workload: link.workload.clone(),
                template: link.template.clone(),
                composite: path,
            });
        }
        for child in list(&composite, "compositePodGroupTemplates")
            .into_iter()
            .rev()
        {
            stack.push((path.clone(), child));
        }
    }
    Err(Error::NoTemplate {
        namespace: namespace.to_owned(),
        workload: link.workload.clone(),
        template: link.template.clone(),
        known: templates
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect(),
    })
}

/// Makes sure PodGroup `name` exists in `namespace` for `link`: creates it from the
/// Workload's template when it is missing (with `dry_run`, only asks the API server to
/// check it). An existing PodGroup, or one created meanwhile by another replica, is fine.
///
/// # Errors
/// A missing Workload or template, an invalid name, or an API failure.
pub async fn ensure_pod_group(
    client: &kube::Client,
    api: GangApi,
    namespace: &str,
    link: &GroupLink,
    dry_run: bool,
) -> Result<bool, Error> {
    let name = link.pod_group_name()?;
    let pod_groups: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource(api, "PodGroup"));
    let what = |w: &str| format!("{w} PodGroup {namespace}/{name} ({})", api.api_version());
    if pod_groups
        .get_opt(&name)
        .await
        .map_err(|source| Error::Api {
            what: what("reading"),
            source,
        })?
        .is_some()
    {
        debug!(namespace, pod_group = %name, "PodGroup exists");
        return Ok(false);
    }
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource(api, "Workload"));
    let workload = workloads
        .get_opt(&link.workload)
        .await
        .map_err(|source| Error::Api {
            what: format!("reading Workload {namespace}/{}", link.workload),
            source,
        })?
        .ok_or_else(|| Error::NoWorkload {
            namespace: namespace.to_owned(),
            workload: link.workload.clone(),
            api_version: api.api_version(),
        })?;
    let template = template_of(&workload.data, api, namespace, link)?;
    let Some(mut object) = api::pod_group(api, Some(namespace), link, &Node::from_json(&template))?
    else {
        return Ok(false);
    };
    // Deleted with its Workload.
    if let (Some(metadata), Some(uid)) = (object.get_mut("metadata"), workload.metadata.uid) {
        metadata.set(
            "ownerReferences",
            Node::Seq(vec![
                Node::map()
                    .with("apiVersion", Node::str(api.api_version()))
                    .with("kind", Node::str("Workload"))
                    .with("name", Node::str(&link.workload))
                    .with("uid", Node::str(uid)),
            ]),
        );
    }
    let object: DynamicObject =
        serde_json::from_value(object.to_json()).map_err(|e| Error::Api {
            what: what("building"),
            source: kube::Error::SerdeError(e),
        })?;
    let params = PostParams {
        dry_run,
        field_manager: Some("gangscaler-webhook".into()),
    };
    match pod_groups.create(&params, &object).await {
        Ok(_) => {
            info!(namespace, pod_group = %name, workload = %link.workload, template = %link.template, dry_run, "created PodGroup");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            debug!(namespace, pod_group = %name, "PodGroup created meanwhile");
            Ok(false)
        }
        Err(source) => Err(Error::Api {
            what: what("creating"),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn link(template: &str) -> GroupLink {
        GroupLink {
            workload: "infer".to_owned(),
            template: template.to_owned(),
            replica_key: None,
        }
    }

    fn workload() -> Value {
        json!({"spec": {"compositePodGroupTemplates": [
            {"name": "replica",
             "schedulingPolicy": {"gang": {"minGroupCount": 2}},
             "podGroupTemplates": [{"name": "leader"}],
             "compositePodGroupTemplates": [
                 {"name": "shard", "podGroupTemplates": [{"name": "workers"}]}
             ]}
        ]}})
    }

    #[test]
    fn a_template_of_the_workload_is_found_in_its_versions_list() {
        let w = json!({"spec": {"podGroupTemplates": [{"name": "workers", "priority": 5}]}});
        let t = template_of(&w, GangApi::V1Beta1, "ml", &link("workers")).unwrap();
        assert_eq!(t["priority"], 5);
        let w = json!({"spec": {"podGroups": [{"name": "workers"}]}});
        assert!(template_of(&w, GangApi::V1Alpha1, "ml", &link("workers")).is_ok());
    }

    #[test]
    fn a_template_inside_a_composite_is_refused_naming_the_composite_path() {
        let e = template_of(&workload(), GangApi::V1Beta1, "ml", &link("leader")).unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(
            matches!(&e, Error::InComposite { composite, .. } if composite == "replica"),
            "{e}"
        );
        let e = template_of(&workload(), GangApi::V1Beta1, "ml", &link("workers")).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"replica/shard\"") && text.contains("parentCompositePodGroupName"),
            "{text}"
        );
        let e = template_of(&workload(), GangApi::V1Beta1, "ml", &link("absent")).unwrap_err();
        assert_eq!(e.code(), 404);
        assert!(matches!(e, Error::NoTemplate { .. }), "{e}");
    }
}
