//! The gang API versions as shapes: which link a pod carries, what a Workload's group entry
//! and a PodGroup look like, and how a PodGroup is named after its Workload template. Shared
//! by `convert` (manifests) and the compatibility webhook (live pods).
//!
//! Field names follow `k8s.io/api@v0.35.4` (`scheduling/v1alpha1`, `core/v1`
//! `WorkloadReference`), `@v0.36.2` (`scheduling/v1alpha2`, `PodSchedulingGroup`),
//! `@v0.37.2` (`scheduling/v1beta1`; `v1alpha3` has the same Workload and PodGroup, and
//! CompositePodGroup) and `@v0.38.0-beta.0` (`scheduling/v1beta1` keeps 1.37's Workload and
//! PodGroup field for field and adds CompositePodGroup with the fields of 1.37's `v1alpha3`).
//!
//! A [`GangApi`] is a shape of Workload and PodGroup; a [`Target`] is a Kubernetes minor, which
//! also decides where CompositePodGroup lives (1.37 and 1.38 share the `v1beta1` shape but
//! serve CompositePodGroup at `v1alpha3` and `v1beta1`).

use std::fmt;
use std::str::FromStr;

use super::doc::Node;

/// The `scheduling.k8s.io` API group.
pub const GROUP: &str = "scheduling.k8s.io";

/// Version-neutral pod annotation: the Workload the pod belongs to.
pub const ANNOTATION_WORKLOAD: &str = "gang.gangscaler.io/workload";
/// Version-neutral pod annotation: the pod-group template (1.35: the `podGroups[]` entry).
pub const ANNOTATION_TEMPLATE: &str = "gang.gangscaler.io/pod-group";
/// Version-neutral pod annotation: the replica key (optional).
pub const ANNOTATION_REPLICA_KEY: &str = "gang.gangscaler.io/replica-key";

/// A gang API shape gangscaler converts to and from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GangApi {
    /// Kubernetes 1.35: `scheduling.k8s.io/v1alpha1`, Workload `podGroups[]`, pod
    /// `spec.workloadRef`.
    V1Alpha1,
    /// Kubernetes 1.36: `scheduling.k8s.io/v1alpha2`, Workload `podGroupTemplates[]`,
    /// standalone PodGroup with `podGroupTemplateRef`, pod `spec.schedulingGroup`.
    V1Alpha2,
    /// Kubernetes 1.37 and 1.38: `scheduling.k8s.io/v1beta1` (and `v1alpha3`), PodGroup
    /// `workloadRef`, union `disruptionMode`, mutable `minCount`.
    V1Beta1,
}

/// Every version gangscaler writes, oldest first.
pub const ALL: [GangApi; 3] = [GangApi::V1Alpha1, GangApi::V1Alpha2, GangApi::V1Beta1];

impl GangApi {
    /// The version part (`v1alpha1`).
    #[must_use]
    pub fn version(self) -> &'static str {
        match self {
            Self::V1Alpha1 => "v1alpha1",
            Self::V1Alpha2 => "v1alpha2",
            Self::V1Beta1 => "v1beta1",
        }
    }

    /// `scheduling.k8s.io/<version>`.
    #[must_use]
    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.version())
    }

    /// The first Kubernetes 1.x minor that serves this version (35 for 1.35; `v1beta1` is 37,
    /// and 1.38 serves it too).
    #[must_use]
    pub fn minor(self) -> u32 {
        match self {
            Self::V1Alpha1 => 35,
            Self::V1Alpha2 => 36,
            Self::V1Beta1 => 37,
        }
    }

    /// The newest version Kubernetes 1.`minor` serves (1.38 keeps 1.37's `v1beta1`; later
    /// minors are assumed to keep it too); `None` before 1.35.
    #[must_use]
    pub fn of_minor(minor: u32) -> Option<Self> {
        ALL.iter().rev().copied().find(|a| a.minor() <= minor)
    }

    /// The shape of an `apiVersion`: `v1alpha3` reads as `v1beta1` (same Workload and
    /// PodGroup). `None` for anything else.
    #[must_use]
    pub fn of_api_version(api_version: &str) -> Option<Self> {
        match api_version.strip_prefix(GROUP)?.strip_prefix('/')? {
            "v1alpha1" => Some(Self::V1Alpha1),
            "v1alpha2" => Some(Self::V1Alpha2),
            "v1beta1" | "v1alpha3" => Some(Self::V1Beta1),
            _ => None,
        }
    }

    /// Whether this version has PodGroup objects (1.36 on).
    #[must_use]
    pub fn has_pod_groups(self) -> bool {
        self != Self::V1Alpha1
    }

    /// The Workload field listing its groups.
    #[must_use]
    pub fn groups_field(self) -> &'static str {
        match self {
            Self::V1Alpha1 => "podGroups",
            Self::V1Alpha2 | Self::V1Beta1 => "podGroupTemplates",
        }
    }

    /// The policy field of a Workload group entry.
    #[must_use]
    pub fn policy_field(self) -> &'static str {
        match self {
            Self::V1Alpha1 => "policy",
            Self::V1Alpha2 | Self::V1Beta1 => "schedulingPolicy",
        }
    }

    /// The pod spec field linking a pod to its gang.
    #[must_use]
    pub fn pod_link_field(self) -> &'static str {
        match self {
            Self::V1Alpha1 => "workloadRef",
            Self::V1Alpha2 | Self::V1Beta1 => "schedulingGroup",
        }
    }
}

impl fmt::Display for GangApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.version())
    }
}

/// A version name that is not one gangscaler writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown gang API version {0:?}: expected v1alpha1, v1alpha2 or v1beta1")]
pub struct UnknownVersion(pub String);

impl FromStr for GangApi {
    type Err = UnknownVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let version = s.strip_prefix("scheduling.k8s.io/").unwrap_or(s);
        ALL.into_iter()
            .find(|api| api.version() == version)
            .ok_or_else(|| UnknownVersion(s.to_owned()))
    }
}

/// The CompositePodGroup version of Kubernetes 1.`minor`: `v1alpha3` on 1.37 (alpha),
/// `v1beta1` on 1.38 (beta; 1.38 still serves `v1alpha3` when asked, but its kube-scheduler
/// reads `v1beta1` only); `None` before 1.37. Minors after 1.38 are assumed to keep
/// `v1beta1`.
#[must_use]
pub fn composite_version(minor: u32) -> Option<&'static str> {
    match minor {
        ..=36 => None,
        37 => Some("v1alpha3"),
        _ => Some("v1beta1"),
    }
}

/// A Kubernetes minor that `convert` writes for: the [`GangApi`] shape of its Workloads and
/// PodGroups, and where its CompositePodGroups live ([`composite_version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    minor: u32,
}

/// Every minor gangscaler converts for, oldest first.
pub const TARGETS: [Target; 4] = [
    Target { minor: 35 },
    Target { minor: 36 },
    Target { minor: 37 },
    Target { minor: 38 },
];

impl Target {
    /// Kubernetes 1.`minor`, when gangscaler knows it (1.35-1.38).
    #[must_use]
    pub fn of_minor(minor: u32) -> Option<Self> {
        TARGETS.into_iter().find(|t| t.minor == minor)
    }

    /// The minor, e.g. 38 for 1.38.
    #[must_use]
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// The shape of its Workloads and PodGroups.
    #[must_use]
    pub fn api(self) -> GangApi {
        match self.minor {
            ..=35 => GangApi::V1Alpha1,
            36 => GangApi::V1Alpha2,
            _ => GangApi::V1Beta1,
        }
    }

    /// The version that serves its CompositePodGroups; `None` before 1.37.
    #[must_use]
    pub fn composite_version(self) -> Option<&'static str> {
        composite_version(self.minor)
    }

    /// Whether it has CompositePodGroups (and PodGroup `parentCompositePodGroupName`,
    /// Workload `compositePodGroupTemplates`).
    #[must_use]
    pub fn has_composites(self) -> bool {
        self.composite_version().is_some()
    }
}

impl From<GangApi> for Target {
    /// The first minor that serves `api`: `v1beta1` is 1.37.
    fn from(api: GangApi) -> Self {
        Self { minor: api.minor() }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{} ({})", self.minor, self.api())
    }
}

/// A `--to` value that is neither a known minor nor a gang API version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown conversion target {0:?}: expected a Kubernetes minor (1.35, 1.36, 1.37, 1.38) or a gang API version (v1alpha1, v1alpha2 or v1beta1, which mean 1.35, 1.36 and 1.37)"
)]
pub struct UnknownTarget(pub String);

impl FromStr for Target {
    type Err = UnknownTarget;

    /// `1.38`, `v1.38`, or a version name (`v1beta1`, `scheduling.k8s.io/v1beta1`: the first
    /// minor that serves it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || UnknownTarget(s.to_owned());
        if let Ok(api) = s.parse::<GangApi>() {
            return Ok(api.into());
        }
        let minor = s
            .strip_prefix('v')
            .unwrap_or(s)
            .strip_prefix("1.")
            .and_then(|m| m.parse::<u32>().ok())
            .ok_or_else(unknown)?;
        Self::of_minor(minor).ok_or_else(unknown)
    }
}

/// Which gang a pod belongs to, in version-neutral terms: the Workload, its group template
/// and the replica key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupLink {
    /// The Workload's name.
    pub workload: String,
    /// The group template (1.35: the `podGroups[]` entry) name.
    pub template: String,
    /// The replica key; pods sharing one form one gang.
    pub replica_key: Option<String>,
}

/// A PodGroup name that is not a valid object name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "PodGroup name {name:?} (workload {workload:?}, group {template:?}, replica key {replica_key:?}) is not a DNS subdomain: {why}"
)]
pub struct BadName {
    /// The name that was built.
    pub name: String,
    /// Its Workload.
    pub workload: String,
    /// Its template.
    pub template: String,
    /// Its replica key, or empty.
    pub replica_key: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl GroupLink {
    /// The PodGroup that holds this gang from 1.36 on: `<workload>-<template>`, and
    /// `-<replica key>` after it when there is one.
    ///
    /// # Errors
    /// When the result is not a DNS subdomain (253 characters of `a-z0-9-.`, starting and
    /// ending alphanumeric): a replica key with capitals or `_` cannot name an object.
    pub fn pod_group_name(&self) -> Result<String, BadName> {
        let mut name = format!("{}-{}", self.workload, self.template);
        if let Some(key) = &self.replica_key {
            name.push('-');
            name.push_str(key);
        }
        match dns_subdomain(&name) {
            Ok(()) => Ok(name),
            Err(why) => Err(BadName {
                name,
                workload: self.workload.clone(),
                template: self.template.clone(),
                replica_key: self.replica_key.clone().unwrap_or_default(),
                why,
            }),
        }
    }

    /// The link of a PodGroup named `name` that a Workload's `template` holds: the replica
    /// key is what follows `<workload>-<template>-`; a PodGroup named otherwise keeps its
    /// whole name as the key, so that distinct PodGroups stay distinct gangs.
    #[must_use]
    pub fn of_pod_group(workload: &str, template: &str, name: &str) -> Self {
        let base = format!("{workload}-{template}");
        let replica_key = if name == base {
            None
        } else {
            Some(
                name.strip_prefix(&base)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .filter(|rest| !rest.is_empty())
                    .unwrap_or(name)
                    .to_owned(),
            )
        };
        Self {
            workload: workload.to_owned(),
            template: template.to_owned(),
            replica_key,
        }
    }

    /// The pod spec field and value linking a pod to this gang in `api`.
    ///
    /// # Errors
    /// For 1.36 on, when the PodGroup name is not valid ([`GroupLink::pod_group_name`]).
    pub fn pod_link(&self, api: GangApi) -> Result<(&'static str, Node), BadName> {
        let value = match api {
            GangApi::V1Alpha1 => {
                let mut link = Node::map()
                    .with("name", Node::str(&self.workload))
                    .with("podGroup", Node::str(&self.template));
                if let Some(key) = &self.replica_key {
                    link.set("podGroupReplicaKey", Node::str(key));
                }
                link
            }
            GangApi::V1Alpha2 | GangApi::V1Beta1 => {
                Node::map().with("podGroupName", Node::str(self.pod_group_name()?))
            }
        };
        Ok((api.pod_link_field(), value))
    }
}

/// Checks a DNS subdomain (RFC 1123): what Kubernetes requires of most object names.
///
/// # Errors
/// Why it is not one.
pub fn dns_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > 253 {
        return Err("longer than 253 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("only lowercase letters, digits, '-' and '.' are allowed");
    }
    let alnum = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !alnum(name.bytes().next()) || !alnum(name.bytes().last()) {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// The `spec` of a PodGroup for `workload`'s group entry `template` (already in `api`'s
/// shape): the reference to the template first, then the template's fields but its name.
/// `None` for 1.35, which has no PodGroup.
#[must_use]
pub fn pod_group_spec(api: GangApi, workload: &str, template: &Node) -> Option<Node> {
    let template_name = template.get_str("name").unwrap_or_default();
    let mut spec = match api {
        GangApi::V1Alpha1 => return None,
        GangApi::V1Alpha2 => Node::map().with(
            "podGroupTemplateRef",
            Node::map().with(
                "workload",
                Node::map()
                    .with("workloadName", Node::str(workload))
                    .with("podGroupTemplateName", Node::str(template_name)),
            ),
        ),
        GangApi::V1Beta1 => Node::map().with(
            "workloadRef",
            Node::map()
                .with("workloadName", Node::str(workload))
                .with("templateName", Node::str(template_name)),
        ),
    };
    for (key, value) in template.entries().unwrap_or_default() {
        if key != "name" && *value != Node::Null {
            spec.set(key, value.clone());
        }
    }
    Some(spec)
}

/// A whole PodGroup object for `link`, from its Workload's group entry `template` (in
/// `api`'s shape). `None` for 1.35.
///
/// # Errors
/// When the PodGroup name is not valid.
pub fn pod_group(
    api: GangApi,
    namespace: Option<&str>,
    link: &GroupLink,
    template: &Node,
) -> Result<Option<Node>, BadName> {
    let Some(spec) = pod_group_spec(api, &link.workload, template) else {
        return Ok(None);
    };
    let mut metadata = Node::map().with("name", Node::str(link.pod_group_name()?));
    if let Some(ns) = namespace {
        metadata.set("namespace", Node::str(ns));
    }
    Ok(Some(
        Node::map()
            .with("apiVersion", Node::str(api.api_version()))
            .with("kind", Node::str("PodGroup"))
            .with("metadata", metadata)
            .with("spec", spec),
    ))
}

#[cfg(test)]
mod tests;
