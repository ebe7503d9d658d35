//! Validated node-group specifications: what a group's nodes look like and how they are
//! provisioned. Built only by `config::validate`, so every value here is already checked.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::humantime_serde_compat;
use super::quantity::Quantity;
pub use super::taint::{Taint, TaintEffect};

/// The stable id of a node group, as CA sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NodeGroupId(String);

impl NodeGroupId {
    /// Wraps an id string. Validation of the id's syntax happens in `config`.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for NodeGroupId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Node resources: capacity, or the part of it reserved for the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Capacity {
    /// CPU.
    pub cpu: Quantity,
    /// Memory in bytes.
    pub memory: Quantity,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: Quantity,
    /// Maximum pods.
    pub pods: u64,
}

/// GPUs on every node of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSpec {
    /// GPUs per node.
    pub count: u32,
    /// Product name as GPU Feature Discovery reports it (also the GPU type given to CA).
    pub product: String,
    /// Memory per GPU, in bytes.
    pub memory: Quantity,
    /// Extended-resource name, e.g. `nvidia.com/gpu`.
    pub resource_name: String,
}

/// RDMA devices and bandwidth on every node of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaSpec {
    /// Device extended-resource name, e.g. `rdma/rdma_shared_device_a`.
    pub resource_name: String,
    /// Devices (or shares) per node.
    pub devices: u32,
    /// Node RDMA bandwidth in Gbit/s.
    pub bandwidth_gbps: u32,
    /// Extended-resource name that advertises the bandwidth.
    pub bandwidth_resource_name: String,
}

/// Failure injected by a simulating backend (memory, kwok) after a number of good instances:
/// a stock-out or quota error, reported as CA expects. Past `after_instances`, every instance
/// fails, or (kwok) each one with a probability drawn from its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimulatedFailure {
    /// Instances that succeed before failures start (counted over the group's lifetime).
    pub after_instances: u32,
    /// The error code reported for failed instances.
    pub code: super::instance::ErrorCode,
    /// Parts per million of the instances past `after_instances` that fail; `1_000_000`
    /// fails them all. The kwok backend draws each instance's fate from its name
    /// ([`super::hash::unit_draw`]), so a restart does not change it.
    pub per_million: u32,
}

impl SimulatedFailure {
    /// Every instance fails once failures start.
    pub const ALWAYS: u32 = 1_000_000;

    /// Whether the instance `name`, past `after_instances`, fails.
    pub fn fails(&self, name: &str) -> bool {
        self.per_million >= Self::ALWAYS
            || super::hash::unit_draw(name, "failure") * f64::from(Self::ALWAYS)
                < f64::from(self.per_million)
    }
}

/// Settings of the in-memory backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryBackendSpec {
    /// How long requested capacity stays not-yet-created (no instance yet).
    #[serde(with = "humantime_serde_compat")]
    pub create_delay: Duration,
    /// How long a created instance stays `creating` before it is `running`.
    #[serde(with = "humantime_serde_compat")]
    pub provision_delay: Duration,
    /// Optional injected failure.
    pub failure: Option<SimulatedFailure>,
}

/// Simulated CSI attacher of the kwok backend: kwok clusters have no external-attacher, so
/// gangscaler marks VolumeAttachments on its nodes attached (or failed) itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachSimulation {
    /// Delay between a VolumeAttachment appearing and its `status.attached=true`.
    #[serde(with = "humantime_serde_compat")]
    pub delay: Duration,
    /// A CSI driver whose attachments fail with `status.attachError` instead.
    pub fail_driver: Option<String>,
}

/// Settings of the kwok backend: Node objects in a real cluster, kept alive by kwok.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KwokBackendSpec {
    /// How long requested capacity stays not-yet-created before its Node object appears.
    #[serde(with = "humantime_serde_compat")]
    pub provision_delay: Duration,
    /// Spacing between the nodes of one request: node `i` (from 0) is due `provision_delay +
    /// i × provision_stagger` after the request, as a cloud bringing machines up one by one.
    #[serde(with = "humantime_serde_compat")]
    pub provision_stagger: Duration,
    /// Spread of provisioning times: each node is due up to this much later again, an amount
    /// drawn from its name (uniform over `[0, provision_jitter]`), as real machines come up
    /// in minutes that vary. Zero keeps every node on its schedule.
    #[serde(with = "humantime_serde_compat")]
    pub provision_jitter: Duration,
    /// How long after a node registers its RDMA resources (devices and bandwidth) appear in
    /// its capacity, as when the RDMA device plugin starts after the node is Ready. Zero
    /// advertises them at once.
    #[serde(with = "humantime_serde_compat")]
    pub device_delay: Duration,
    /// Optional injected failure.
    pub failure: Option<SimulatedFailure>,
    /// Optional simulated CSI attacher for this group's nodes.
    pub attach: Option<AttachSimulation>,
}

impl KwokBackendSpec {
    /// When node `name`, the `i`-th (from 0) of a request made at `now_ms` (unix
    /// milliseconds), is due: `provision_delay + i × provision_stagger` plus its share of
    /// `provision_jitter`.
    pub fn due_at(&self, now_ms: u64, i: u32, name: &str) -> u64 {
        let jitter = millis(self.provision_jitter);
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a draw in [0, 1) times a millisecond count fits back in u64"
        )]
        let extra = (super::hash::unit_draw(name, "provision") * jitter as f64) as u64;
        now_ms
            .saturating_add(millis(self.provision_delay))
            .saturating_add(millis(self.provision_stagger).saturating_mul(u64::from(i)))
            .saturating_add(extra)
    }
}

/// `d` in whole milliseconds, saturating.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Settings of the Cluster API backend: the group is one MachineDeployment of the management
/// cluster, scaled through its scale subresource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterApiBackendSpec {
    /// The MachineDeployment's namespace.
    pub namespace: String,
    /// The MachineDeployment's name.
    pub name: String,
}

/// Which provisioning backend serves a group, with its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum BackendSpec {
    /// In-memory simulation; nothing outside the process changes.
    Memory(MemoryBackendSpec),
    /// Kubernetes Node objects simulated by kwok.
    Kwok(KwokBackendSpec),
    /// A Cluster API MachineDeployment.
    #[serde(rename = "clusterapi")]
    ClusterApi(ClusterApiBackendSpec),
}

impl BackendSpec {
    /// The backend kind, e.g. `memory` (a bounded metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Kwok(_) => "kwok",
            Self::ClusterApi(_) => "clusterapi",
        }
    }
}

/// Per-group overrides of CA's autoscaling options. `None` fields echo CA's defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AutoscalingOptionOverrides {
    /// Scale-down utilization threshold.
    pub scale_down_utilization_threshold: Option<f64>,
    /// Scale-down GPU utilization threshold.
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    /// Scale the group to max or zero only.
    pub zero_or_max_node_scaling: Option<bool>,
    /// Ignore DaemonSet pods in utilization.
    pub ignore_daemon_sets_utilization: Option<bool>,
    /// How long a node must be unneeded before scale-down.
    #[serde(with = "humantime_serde_compat::option")]
    pub scale_down_unneeded_time: Option<Duration>,
    /// How long an unready node must be unneeded before scale-down.
    #[serde(with = "humantime_serde_compat::option")]
    pub scale_down_unready_time: Option<Duration>,
    /// How long CA waits for a node to register.
    #[serde(with = "humantime_serde_compat::option")]
    pub max_node_provision_time: Option<Duration>,
}

/// A fully validated node group.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupSpec {
    /// Stable id.
    pub id: NodeGroupId,
    /// Minimum size.
    pub min_size: u32,
    /// Maximum size.
    pub max_size: u32,
    /// Instance type (label `node.kubernetes.io/instance-type`).
    pub instance_type: String,
    /// Region (label `topology.kubernetes.io/region`).
    pub region: String,
    /// Zone (label `topology.kubernetes.io/zone`).
    pub zone: String,
    /// Node OS label value.
    pub os: String,
    /// Node architecture label value.
    pub arch: String,
    /// Node capacity; `None` means the group has no template node.
    pub capacity: Option<Capacity>,
    /// Reserved for the system: allocatable = capacity - reserved.
    pub reserved: Capacity,
    /// GPUs per node.
    pub gpu: Option<GpuSpec>,
    /// RDMA per node.
    pub rdma: Option<RdmaSpec>,
    /// CSI driver name → maximum attachable volumes per node.
    pub csi: BTreeMap<String, u32>,
    /// Extra node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// Topology labels (rack, block) that define the group's RDMA-fabric domain.
    pub topology: BTreeMap<String, String>,
    /// Price per node-hour, if known.
    pub price_per_hour: Option<f64>,
    /// Provisioning backend.
    pub backend: BackendSpec,
    /// CA option overrides, if any.
    pub autoscaling_options: Option<AutoscalingOptionOverrides>,
    /// Whether the nodes added for a gang are reserved for it, and for how long.
    pub reservation: super::reservation::ReservationSpec,
    /// File this group was read from.
    pub source: PathBuf,
}

impl NodeGroupSpec {
    /// One-line description for CA's `debug` field and logs.
    pub fn debug_line(&self) -> String {
        let mut s = format!(
            "{} [{}..{}] {} in {}",
            self.id, self.min_size, self.max_size, self.instance_type, self.zone
        );
        if let Some(gpu) = &self.gpu {
            s.push_str(&format!(", {}x {}", gpu.count, gpu.product));
        }
        if let Some(rdma) = &self.rdma {
            s.push_str(&format!(
                ", rdma {}x {} Gbit/s",
                rdma.devices, rdma.bandwidth_gbps
            ));
        }
        s.push_str(&format!(", backend {}", self.backend.kind()));
        s
    }
}

/// CA's per-group autoscaling options, as CA sends its defaults and receives our answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AutoscalingOptions {
    /// Scale-down utilization threshold.
    pub scale_down_utilization_threshold: f64,
    /// Scale-down GPU utilization threshold.
    pub scale_down_gpu_utilization_threshold: f64,
    /// Scale the group to max or zero only.
    pub zero_or_max_node_scaling: bool,
    /// Ignore DaemonSet pods in utilization.
    pub ignore_daemon_sets_utilization: bool,
    /// Unneeded time before scale-down.
    pub scale_down_unneeded_time: Option<Duration>,
    /// Unready time before scale-down.
    pub scale_down_unready_time: Option<Duration>,
    /// Maximum node provisioning time.
    pub max_node_provision_time: Option<Duration>,
    /// Maximum node startup time (newer CA only; echoed when CA sends it).
    pub max_node_startup_time: Option<Duration>,
    /// Allow non-atomic scale-up to max (newer CA only; echoed).
    pub allow_non_atomic_scale_up_to_max: bool,
}

impl AutoscalingOptionOverrides {
    /// CA's `defaults` with this group's overrides applied; every other field is echoed, since
    /// CA takes the whole answer as is and would read a missing field as zero.
    pub fn apply(&self, defaults: &AutoscalingOptions) -> AutoscalingOptions {
        let mut out = defaults.clone();
        if let Some(v) = self.scale_down_utilization_threshold {
            out.scale_down_utilization_threshold = v;
        }
        if let Some(v) = self.scale_down_gpu_utilization_threshold {
            out.scale_down_gpu_utilization_threshold = v;
        }
        if let Some(v) = self.zero_or_max_node_scaling {
            out.zero_or_max_node_scaling = v;
        }
        if let Some(v) = self.ignore_daemon_sets_utilization {
            out.ignore_daemon_sets_utilization = v;
        }
        if self.scale_down_unneeded_time.is_some() {
            out.scale_down_unneeded_time = self.scale_down_unneeded_time;
        }
        if self.scale_down_unready_time.is_some() {
            out.scale_down_unready_time = self.scale_down_unready_time;
        }
        if self.max_node_provision_time.is_some() {
            out.max_node_provision_time = self.max_node_provision_time;
        }
        out
    }
}
