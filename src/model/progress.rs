//! What the cluster shows of a scale-up's progress: the nodes a node group has, and how far
//! each gang has come (bound, formed, volumes attached, running, disrupted). Built from
//! Kubernetes objects by `cluster::progress`; read by the pure lifecycle observer in `audit`.

use serde::Serialize;

/// One node of a node group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeProgress {
    /// Node name.
    pub name: String,
    /// `metadata.creationTimestamp`, unix seconds (when the node registered).
    pub created_unix: i64,
    /// The `Ready` condition is True.
    pub ready: bool,
}

/// How far one gang has come.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangProgress {
    /// Members that must run together.
    pub min_count: u32,
    /// When the gang came into being, unix seconds.
    pub created_unix: i64,
    /// The scheduler reports the gang scheduled (`PodGroupScheduled` /
    /// `PodGroupInitiallyScheduled` True), or at least `min_count` members are bound.
    pub formed: bool,
    /// Members bound to a node.
    pub bound: u32,
    /// Members in phase `Running`.
    pub running: u32,
    /// Member pods with `DisruptionTarget` True (being preempted or evicted), sorted.
    pub disrupted: Vec<String>,
    /// Volumes (claims and generic ephemeral volumes) of bound members whose CSI driver needs
    /// attaching. Inline in-tree disks are not counted: their migrated VolumeAttachments carry
    /// an inline spec, not a PersistentVolume name.
    pub volumes_needed: u32,
    /// Of those, volumes with a VolumeAttachment on the member's node with `attached: true`.
    pub volumes_attached: u32,
    /// Attach errors on those VolumeAttachments, as `<pod>/<claim>: <message>`, sorted.
    pub attach_errors: Vec<String>,
}

impl GangProgress {
    /// Every volume that needs attaching is attached (vacuously true without volumes).
    pub fn volumes_ready(&self) -> bool {
        self.volumes_attached >= self.volumes_needed
    }

    /// At least `min_count` members run.
    pub fn started(&self) -> bool {
        self.running >= self.min_count
    }
}
