//! The webhook's calls to the API server: which gang API version is served, and creating a
//! pod's PodGroup from its Workload's template when it does not exist yet.

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
    /// The PodGroup name is not valid.
    #[error(transparent)]
    Name(#[from] api::BadName),
    /// The API server could not be asked or refused the PodGroup.
    #[error("{what}: {source}")]
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
    /// bad name, 503 when the API server failed.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            Self::NoWorkload { .. } | Self::NoTemplate { .. } => 404,
            Self::Name(_) => 400,
            Self::Api { .. } => 503,
        }
    }
}

/// The newest gang API version the cluster serves (`v1beta1` over `v1alpha2` over
/// `v1alpha1`), or `None`.
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
    let templates: Vec<Value> = workload
        .data
        .pointer(&format!("/spec/{}", api.groups_field()))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let template = templates
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(link.template.as_str()))
        .ok_or_else(|| Error::NoTemplate {
            namespace: namespace.to_owned(),
            workload: link.workload.clone(),
            template: link.template.clone(),
            known: templates
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect(),
        })?;
    let Some(mut object) = api::pod_group(api, Some(namespace), link, &Node::from_json(template))?
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
