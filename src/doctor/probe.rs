//! The edge of `doctor`: reads the live cluster (version, discovery, a server-side dry run,
//! PodGroups naming a parent CompositePodGroup, kube-system components, Nodes and CSINodes)
//! and the files named on the command line into
//! an [`Observed`]. A failed cluster read is kept in `Observed` as its message, never raised.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use tracing::debug;

use super::checks::{GROUP, link_field};
use super::flags::{self, Flag, Version};
use super::{
    COMPOSITE_CHILDREN_LISTED, Component, CompositeChildSeen, CsiDriverSeen, CsiNodeSeen, Error,
    Found, LinkProbe, NodeSeen, Observed, ProviderSeen, Read, Result, SchedulerConfig,
    ServedVersion,
};
use crate::model::labels;
use crate::provision::capi_types::MachineDeployment;
use crate::provision::clusterapi::reservation::template_taints;
use crate::telemetry::Chain;

/// How long one API call may take before its check is reported as unknown.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Where kube-scheduler and Cluster Autoscaler run when they run as pods.
pub const SYSTEM_NAMESPACE: &str = "kube-system";

/// Name prefix of the dry-run pod (never stored: the create is a server-side dry run).
pub const PROBE_POD_PREFIX: &str = "gangscaler-doctor-";

/// What the command line gave, beside the cluster.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// Namespace of the dry-run pod.
    pub namespace: String,
    /// kube-scheduler's version and flags, as given.
    pub scheduler: Component,
    /// Cluster Autoscaler's version and flags, as given.
    pub ca: Component,
    /// gangscaler's configuration, if `--config` was given.
    pub provider: Option<ProviderSeen>,
}

/// Reads a flags file named by `flag` (`--ca-flags`, `--scheduler-flags`).
///
/// # Errors
/// [`Error::FlagsFile`] when the file cannot be read, [`Error::FlagsText`] when it holds no
/// flags or a word that is not one.
pub fn read_flags_file(flag: &'static str, path: &Path) -> Result<Found<Vec<Flag>>> {
    let text = crate::yaml::read_file(path, &crate::yaml::CONFIG)
        .map_err(|source| Error::FlagsFile { flag, source })?;
    let parsed = flags::parse(&text).map_err(|message| Error::FlagsText {
        flag,
        path: path.display().to_string(),
        message,
    })?;
    Ok(Found::new(parsed, path.display().to_string()))
}

/// Reads a version given as `flag`'s value.
///
/// # Errors
/// [`Error::BadVersion`] naming the flag and the value.
pub fn parse_version(flag: &'static str, value: &str) -> Result<Version> {
    Version::parse(value).ok_or_else(|| Error::BadVersion {
        flag,
        value: value.to_owned(),
    })
}

async fn call<T, F>(what: &str, fut: F) -> Read<T>
where
    F: Future<Output = std::result::Result<T, kube::Error>>,
{
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            debug!(call = what, error = %Chain(&e), "cluster read failed");
            Err(describe(&e))
        }
        Err(_) => Err(format!("timed out after {}s", CALL_TIMEOUT.as_secs())),
    }
}

/// A short message for a failed call: the API status message and reason when there is one,
/// else the error with its causes.
fn describe(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return format!("{} ({})", s.message, s.reason);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Reads everything from the cluster behind `client`, beside what `given` holds; Cluster API
/// MachineDeployments from `management` when the management cluster is another one
/// (`kubernetes.managementKubeconfig`).
pub async fn observe(
    client: &kube::Client,
    management: Option<&kube::Client>,
    given: Given,
) -> Observed {
    let server = call("version", client.apiserver_version())
        .await
        .and_then(|info| {
            Version::from_info(&info.major, &info.minor, &info.git_version)
                .ok_or_else(|| format!("unreadable version {:?}", info.git_version))
        });
    debug!(
        kubernetes.version = server.as_ref().map_or("unknown", |v| v.text.as_str()),
        "read the API server's version"
    );
    let served = discover(client).await;
    let pod_link = match &server {
        Err(_) => LinkProbe::NotProbed("kube-apiserver's version is unknown".to_owned()),
        Ok(v) => match link_field(v) {
            None => LinkProbe::NotProbed(format!("{v} has no gang link field on pods")),
            Some(field) => dry_run(client, &given.namespace, field).await,
        },
    };
    let composite_children = match &served {
        Ok(s) => composite_children(client, s).await,
        Err(e) => Err(e.clone()),
    };
    let mut scheduler = given.scheduler;
    if scheduler.version.is_none() || scheduler.flags.is_none() {
        find_scheduler(client, &mut scheduler).await;
    }
    let scheduler_config = scheduler
        .flags
        .as_ref()
        .and_then(|f| flags::last(&f.value, "config"))
        .and_then(|f| f.value.clone())
        .map(|path| SchedulerConfig {
            text: crate::yaml::read_file(Path::new(&path), &crate::yaml::CONFIG)
                .map_err(|e| e.to_string()),
            path,
        });
    let mut ca = given.ca;
    if ca.version.is_none() || ca.flags.is_none() {
        find_autoscaler(client, &mut ca).await;
    }
    let nodes = call(
        "list nodes",
        Api::<Node>::all(client.clone()).list(&ListParams::default()),
    )
    .await
    .map(|l| l.items.iter().map(node_seen).collect());
    let csi_nodes = call(
        "list csinodes",
        Api::<CSINode>::all(client.clone()).list(&ListParams::default()),
    )
    .await
    .map(|l| l.items.iter().map(csi_node_seen).collect());
    let reserving = given
        .provider
        .as_ref()
        .is_some_and(|p| p.groups.iter().any(|g| g.reservation));
    let daemon_sets = if reserving {
        call(
            "list daemonsets",
            Api::<DaemonSet>::all(client.clone()).list(&ListParams::default()),
        )
        .await
        .map(|l| {
            l.items
                .iter()
                .filter_map(crate::cluster::daemon_set_demand)
                .collect()
        })
    } else {
        Ok(Vec::new())
    };
    let mut machine_deployments = BTreeMap::new();
    for g in given.provider.iter().flat_map(|p| &p.groups) {
        let Some(md) = g.machine_deployment.as_ref().filter(|_| g.reservation) else {
            continue;
        };
        let Some((namespace, name)) = md.split_once('/') else {
            continue;
        };
        let api: Api<MachineDeployment> =
            Api::namespaced(management.unwrap_or(client).clone(), namespace);
        let read = call("get machinedeployments", api.get_opt(name))
            .await
            .map(|md| md.map(|md| template_taints(&md).to_vec()));
        machine_deployments.insert(md.clone(), read);
    }
    Observed {
        server,
        served,
        pod_link,
        composite_children,
        namespace: given.namespace,
        scheduler,
        scheduler_config,
        ca,
        nodes,
        csi_nodes,
        daemon_sets,
        machine_deployments,
        provider: given.provider,
    }
}

/// The served versions of `scheduling.k8s.io` and their top-level resources.
async fn discover(client: &kube::Client) -> Read<Vec<ServedVersion>> {
    let groups = call("list api groups", client.list_api_groups()).await?;
    let Some(group) = groups.groups.iter().find(|g| g.name == GROUP) else {
        return Ok(Vec::new());
    };
    let mut served = Vec::new();
    for v in &group.versions {
        let list = call(
            "list api group resources",
            client.list_api_group_resources(&v.group_version),
        )
        .await?;
        served.push(ServedVersion {
            version: v.version.clone(),
            resources: list
                .resources
                .into_iter()
                .map(|r| r.name)
                .filter(|n| !n.contains('/'))
                .collect(),
        });
    }
    Ok(served)
}

/// The versions whose PodGroup has `spec.parentCompositePodGroupName`, newest first.
const PARENT_FIELD_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha3"];

/// The version to list PodGroups at for their parent CompositePodGroup: `v1beta1` if it
/// serves `podgroups`, else `v1alpha3` if it does (the versions whose PodGroup has
/// `spec.parentCompositePodGroupName`), else `None`.
pub fn parent_field_version(served: &[ServedVersion]) -> Option<&'static str> {
    PARENT_FIELD_VERSIONS.into_iter().find(|v| {
        served
            .iter()
            .any(|s| s.version == *v && s.resources.iter().any(|r| r == "podgroups"))
    })
}

/// The PodGroups (in every namespace, the first [`COMPOSITE_CHILDREN_LISTED`]) that name a
/// parent CompositePodGroup.
async fn composite_children(
    client: &kube::Client,
    served: &[ServedVersion],
) -> Read<Vec<CompositeChildSeen>> {
    let Some(version) = parent_field_version(served) else {
        return Ok(Vec::new());
    };
    let ar = ApiResource {
        group: GROUP.to_owned(),
        version: version.to_owned(),
        api_version: format!("{GROUP}/{version}"),
        kind: "PodGroup".to_owned(),
        plural: "podgroups".to_owned(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let list = call(
        "list podgroups",
        api.list(&ListParams::default().limit(COMPOSITE_CHILDREN_LISTED)),
    )
    .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|pg| {
            let parent = pg
                .data
                .pointer("/spec/parentCompositePodGroupName")?
                .as_str()?;
            Some(CompositeChildSeen {
                namespace: pg.metadata.namespace.clone().unwrap_or_default(),
                name: pg.metadata.name.clone().unwrap_or_default(),
                parent: parent.to_owned(),
            })
        })
        .collect())
}

/// The pod the dry run creates: a pause container and `spec.<field>` naming a gang.
pub fn probe_pod(namespace: &str, field: &str) -> Value {
    let link = if field == "workloadRef" {
        json!({"name": "gangscaler-doctor-probe", "podGroup": "probe"})
    } else {
        json!({"podGroupName": "gangscaler-doctor-probe"})
    };
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": PROBE_POD_PREFIX,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gangscaler-doctor"},
        },
        "spec": {
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
        },
    });
    pod["spec"][field] = link;
    pod
}

/// Whether the API server's answer to [`probe_pod`] still carries `spec.<field>`.
pub fn link_kept(field: &str, answer: &Value) -> bool {
    answer
        .get("spec")
        .and_then(|s| s.get(field))
        .is_some_and(|v| v.is_object())
}

async fn dry_run(client: &kube::Client, namespace: &str, field: &str) -> LinkProbe {
    let failed = |error: String| LinkProbe::Failed {
        field: field.to_owned(),
        error,
    };
    let obj: DynamicObject = match serde_json::from_value(probe_pod(namespace, field)) {
        Ok(o) => o,
        Err(e) => return failed(e.to_string()),
    };
    let ar = ApiResource::erase::<Pod>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("gangscaler-doctor".to_owned()),
    };
    match call("dry-run create pod", api.create(&params, &obj)).await {
        Err(e) => failed(e),
        Ok(answer) => {
            let kept = link_kept(field, &answer.data);
            debug!(pod.field = field, kept, namespace, "dry-run pod create");
            if kept {
                LinkProbe::Kept {
                    field: field.to_owned(),
                }
            } else {
                LinkProbe::Dropped {
                    field: field.to_owned(),
                }
            }
        }
    }
}

/// A container's command and args as flags, skipping what does not read.
fn container_flags(c: &Container) -> Option<Vec<Flag>> {
    let argv = c.command.iter().flatten().chain(c.args.iter().flatten());
    flags::from_argv(argv.map(String::as_str)).ok()
}

async fn find_scheduler(client: &kube::Client, scheduler: &mut Component) {
    let api = Api::<Pod>::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let lp = ListParams::default().labels("component=kube-scheduler");
    let pods = match call("list scheduler pods", api.list(&lp)).await {
        Ok(p) => p.items,
        Err(e) => {
            scheduler.lookup = Some(format!(
                "listing {SYSTEM_NAMESPACE} pods labelled component=kube-scheduler failed: {e}"
            ));
            return;
        }
    };
    let found = pods.iter().find_map(|p| {
        let c = p.spec.as_ref()?.containers.first()?;
        Some((p.metadata.name.clone().unwrap_or_default(), c))
    });
    let Some((name, c)) = found else {
        scheduler.lookup = Some(format!(
            "no {SYSTEM_NAMESPACE} pod labelled component=kube-scheduler"
        ));
        return;
    };
    let source = format!("{SYSTEM_NAMESPACE}/pod/{name}");
    if scheduler.version.is_none() {
        scheduler.version = c
            .image
            .as_deref()
            .and_then(Version::from_image)
            .map(|v| Found::new(v, format!("{source} image tag")));
    }
    if scheduler.flags.is_none() {
        scheduler.flags = container_flags(c).map(|f| Found::new(f, source));
    }
}

/// Whether an image reference names Cluster Autoscaler (in its name, not its tag).
pub fn is_autoscaler_image(image: &str) -> bool {
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    let last = last.split(':').next().unwrap_or(last);
    last.contains("cluster-autoscaler")
}

fn autoscaler_container(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Option<&Container> {
    spec?
        .containers
        .iter()
        .find(|c| c.image.as_deref().is_some_and(is_autoscaler_image))
}

async fn find_autoscaler(client: &kube::Client, ca: &mut Component) {
    let deployments = Api::<Deployment>::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let found = match call("list deployments", deployments.list(&ListParams::default())).await {
        Ok(list) => list.items.into_iter().find_map(|d| {
            let spec = d.spec.as_ref()?.template.spec.as_ref();
            let c = autoscaler_container(spec)?.clone();
            Some((
                format!(
                    "{SYSTEM_NAMESPACE}/deployment/{}",
                    d.metadata.name.unwrap_or_default()
                ),
                c,
            ))
        }),
        Err(e) => {
            ca.lookup = Some(format!(
                "listing {SYSTEM_NAMESPACE} Deployments failed: {e}"
            ));
            None
        }
    };
    let found = match found {
        Some(f) => Some(f),
        None => {
            let pods = Api::<Pod>::namespaced(client.clone(), SYSTEM_NAMESPACE);
            match call("list pods", pods.list(&ListParams::default())).await {
                Ok(list) => list.items.into_iter().find_map(|p| {
                    let c = autoscaler_container(p.spec.as_ref())?.clone();
                    Some((
                        format!(
                            "{SYSTEM_NAMESPACE}/pod/{}",
                            p.metadata.name.unwrap_or_default()
                        ),
                        c,
                    ))
                }),
                Err(e) => {
                    ca.lookup = Some(format!("listing {SYSTEM_NAMESPACE} pods failed: {e}"));
                    None
                }
            }
        }
    };
    let Some((source, c)) = found else {
        ca.lookup.get_or_insert_with(|| {
            format!("no {SYSTEM_NAMESPACE} Deployment or pod with a cluster-autoscaler image")
        });
        return;
    };
    ca.lookup = None;
    if ca.version.is_none() {
        ca.version = c
            .image
            .as_deref()
            .and_then(Version::from_image)
            .map(|v| Found::new(v, format!("{source} image tag")));
    }
    if ca.flags.is_none() {
        ca.flags = container_flags(&c).map(|f| Found::new(f, source));
    }
}

fn node_seen(n: &Node) -> NodeSeen {
    NodeSeen {
        name: n.metadata.name.clone().unwrap_or_default(),
        group_label: n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE_GROUP))
            .cloned(),
        provider_id: n.spec.as_ref().and_then(|s| s.provider_id.clone()),
    }
}

fn csi_node_seen(c: &CSINode) -> CsiNodeSeen {
    CsiNodeSeen {
        name: c.metadata.name.clone().unwrap_or_default(),
        drivers: c
            .spec
            .drivers
            .iter()
            .map(|d| CsiDriverSeen {
                name: d.name.clone(),
                count: d.allocatable.as_ref().and_then(|a| a.count),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
