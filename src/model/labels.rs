//! Label, annotation and resource-name keys used on template nodes and instances.

/// Operating-system label set by kubelet.
pub const OS: &str = "kubernetes.io/os";
/// CPU-architecture label set by kubelet.
pub const ARCH: &str = "kubernetes.io/arch";
/// Hostname label set by kubelet.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// Instance-type label set by the cloud provider.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// Zone label set by the cloud provider.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// Region label set by the cloud provider.
pub const REGION: &str = "topology.kubernetes.io/region";
/// GPU Feature Discovery: GPU product name.
pub const GPU_PRODUCT: &str = "nvidia.com/gpu.product";
/// GPU Feature Discovery: GPUs per node.
pub const GPU_COUNT: &str = "nvidia.com/gpu.count";
/// GPU Feature Discovery: memory per GPU in MiB.
pub const GPU_MEMORY: &str = "nvidia.com/gpu.memory";
/// Label carrying the gangscaler node group of a node.
pub const NODE_GROUP: &str = "gangscaler.io/node-group";
/// Annotation listing per-driver CSI attach limits, `driver=count,...` (visibility only: CA
/// cannot receive a CSINode over externalgrpc).
pub const CSI_ATTACH_LIMITS: &str = "gangscaler.io/csi-attach-limits";
/// Annotation carrying the RDMA bandwidth of a node in Gbit/s.
pub const RDMA_BANDWIDTH: &str = "gangscaler.io/rdma-bandwidth-gbps";
/// Annotation CA puts on fake nodes it builds from instances.
pub const CA_FAKE_NODE_REASON: &str = "k8s.io/cluster-autoscaler/fake-node-reason";
/// CA's node annotation that keeps a node out of scale-down when `"true"`.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Our marker next to [`SCALE_DOWN_DISABLED`]: the scale-up a node is protected for, so that
/// gangscaler only ever removes the protection it set.
pub const SCALE_DOWN_PROTECTED_FOR: &str = "gangscaler.io/scale-down-protected-for";
/// Annotation on a node a backend created for a [`Claim`](super::Claim): the claim's text
/// form, the scale-up (and gang) the node was requested for.
pub const REQUESTED_FOR: &str = "gangscaler.io/requested-for";
/// Annotation on a kwok node: when its instance was requested, in Unix milliseconds, so that
/// a node's provisioning time (its creation minus this) can be measured (the soak does).
pub const REQUESTED_AT: &str = "gangscaler.io/requested-at";

/// CA's per-pod annotation: a pod younger than this Go duration is not considered for
/// scale-up (`utils/annotations` in CA 1.34 to 1.36; never below `--new-pod-scale-up-delay`).
pub const CA_POD_SCALE_UP_DELAY: &str = "cluster-autoscaler.kubernetes.io/pod-scale-up-delay";
/// Our mark beside [`CA_POD_SCALE_UP_DELAY`]: why gangscaler keeps the pod out of CA's
/// scale-up, so that it only ever lifts a delay it set.
pub const DEFERRED: &str = "gangscaler.io/deferred";
/// The pod's own [`CA_POD_SCALE_UP_DELAY`] before gangscaler raised it, restored on release.
pub const SCALE_UP_DELAY_WAS: &str = "gangscaler.io/scale-up-delay-was";

/// Default GPU extended-resource name (NVIDIA device plugin).
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Default extended-resource name for RDMA bandwidth in Gbit/s.
pub const DEFAULT_RDMA_BANDWIDTH_RESOURCE: &str = "gangscaler.io/rdma-gbps";
/// Default GPU label reported to CA through the GPULabel RPC.
pub const DEFAULT_GPU_LABEL: &str = GPU_PRODUCT;
