//! [`Observed`]: everything `doctor` read, as plain data. A read that failed is kept as its
//! error message, so the checks can say `unknown` and why.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::flags::{Flag, Version};

/// A value read, or the message of the failed read.
pub type Read<T> = Result<T, String>;

/// A value and where it came from (`--ca-version`, `kube-system/pod/kube-scheduler-cp1`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<T> {
    /// The value.
    pub value: T,
    /// Where it was read.
    pub source: String,
}

impl<T> Found<T> {
    /// `value` read from `source`.
    pub fn new(value: T, source: impl Into<String>) -> Self {
        Self {
            value,
            source: source.into(),
        }
    }
}

/// How many PodGroups doctor reads to find ones naming a parent CompositePodGroup.
pub const COMPOSITE_CHILDREN_LISTED: u32 = 500;

/// One served version of `scheduling.k8s.io` and the resources it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedVersion {
    /// e.g. `v1alpha2`.
    pub version: String,
    /// Top-level resources (no subresources), e.g. `workloads`, `podgroups`.
    pub resources: Vec<String>,
}

/// A PodGroup that names a parent CompositePodGroup (`spec.parentCompositePodGroupName`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositeChildSeen {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The CompositePodGroup it names.
    pub parent: String,
}

/// The outcome of the server-side dry-run create of a pod carrying the minor's link field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkProbe {
    /// Not probed, and why (no link field on this minor, no server version).
    NotProbed(String),
    /// The response carried the field: the gate is on for the pod field.
    Kept {
        /// e.g. `spec.schedulingGroup`.
        field: String,
    },
    /// The response lacked the field: the API server dropped it (gate off).
    Dropped {
        /// The field sent.
        field: String,
    },
    /// The dry run failed (forbidden, rejected by admission, unreachable).
    Failed {
        /// The field sent.
        field: String,
        /// The error.
        error: String,
    },
}

/// What is known of one component (kube-scheduler or Cluster Autoscaler).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Component {
    /// Its version, if given or found.
    pub version: Option<Found<Version>>,
    /// Its flags, if given or found.
    pub flags: Option<Found<Vec<Flag>>>,
    /// Why the cluster lookup found nothing or failed, if it did.
    pub lookup: Option<String>,
}

/// kube-scheduler's configuration file (`--config`), when its flags name one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The path in the flags.
    pub path: String,
    /// Its text, if this machine could read it.
    pub text: Read<String>,
}

/// A Node: its name and what ties it to a node group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    /// `metadata.name`.
    pub name: String,
    /// Its `gangscaler.io/node-group` label.
    pub group_label: Option<String>,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
}

/// One driver of a CSINode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriverSeen {
    /// Driver name.
    pub name: String,
    /// `allocatable.count`, when set.
    pub count: Option<i32>,
}

/// A CSINode (named after its Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNodeSeen {
    /// `metadata.name`, the Node's name.
    pub name: String,
    /// `spec.drivers`.
    pub drivers: Vec<CsiDriverSeen>,
}

/// A node group of gangscaler's configuration, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSeen {
    /// Group id.
    pub id: String,
    /// `maxSize`.
    pub max_size: u32,
    /// The template's CSI attach limits, driver to count.
    pub csi: BTreeMap<String, u32>,
    /// Node reservation is on for the group.
    pub reservation: bool,
    /// The template node's labels.
    pub labels: BTreeMap<String, String>,
    /// The group's taints.
    pub taints: Vec<crate::model::Taint>,
    /// `<namespace>/<name>` of its MachineDeployment, on the clusterapi backend.
    pub machine_deployment: Option<String>,
}

/// What the checks need of gangscaler's configuration (`--config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSeen {
    /// The directory.
    pub dir: String,
    /// Its node groups.
    pub groups: Vec<GroupSeen>,
    /// Whether forming gangs' nodes are kept out of CA's scale-down: the setting is on, the
    /// policy is not `off`, and the lifecycle loop runs (`audit.path`, `kubernetes.watch`).
    pub protection: bool,
    /// Why protection is off, when it is.
    pub protection_off_because: Option<String>,
    /// `lifecycle.formationTimeout`.
    pub formation_timeout: Duration,
    /// `lifecycle.interval`.
    pub lifecycle_interval: Duration,
}

/// Everything `doctor` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// kube-apiserver's version (`/version`).
    pub server: Read<Version>,
    /// The served versions of `scheduling.k8s.io` (empty when the group is not served).
    pub served: Read<Vec<ServedVersion>>,
    /// The pod-link dry run.
    pub pod_link: LinkProbe,
    /// PodGroups naming a parent CompositePodGroup, from the first
    /// [`COMPOSITE_CHILDREN_LISTED`] PodGroups of the newest served version that has the
    /// field (`v1beta1`, else `v1alpha3`); empty when neither serves `podgroups`.
    pub composite_children: Read<Vec<CompositeChildSeen>>,
    /// The namespace of the dry run.
    pub namespace: String,
    /// kube-scheduler.
    pub scheduler: Component,
    /// kube-scheduler's `--config` file, when its flags name one.
    pub scheduler_config: Option<SchedulerConfig>,
    /// Cluster Autoscaler.
    pub ca: Component,
    /// Nodes.
    pub nodes: Read<Vec<NodeSeen>>,
    /// CSINodes.
    pub csi_nodes: Read<Vec<CsiNodeSeen>>,
    /// DaemonSets, every namespace (read only when some node group reserves).
    pub daemon_sets: Read<Vec<crate::model::reservation::DaemonSetDemand>>,
    /// The template taints of the MachineDeployments of reserving clusterapi groups, by
    /// `<namespace>/<name>` (`None`: not found).
    pub machine_deployments:
        BTreeMap<String, Read<Option<Vec<crate::provision::capi_types::MachineTaint>>>>,
    /// gangscaler's configuration, when `--config` was given.
    pub provider: Option<ProviderSeen>,
}
