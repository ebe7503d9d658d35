//! The label sets of the metric families, and the gRPC service they name.

use prometheus_client::encoding::EncodeLabelSet;

/// The fully qualified gRPC service name, the `grpc_service` label of the gRPC metrics.
pub const GRPC_SERVICE: &str = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider";

/// Labels of the gRPC started counter and latency histogram (go-grpc-prometheus' names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// `unary`: every externalgrpc method is unary.
    pub grpc_type: &'static str,
    /// Always [`GRPC_SERVICE`].
    pub grpc_service: &'static str,
    /// The method name, e.g. `NodeGroupIncreaseSize`.
    pub grpc_method: &'static str,
}

/// Labels of the gRPC handled counter: [`GrpcLabels`] plus the status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcCodeLabels {
    /// `unary`.
    pub grpc_type: &'static str,
    /// Always [`GRPC_SERVICE`].
    pub grpc_service: &'static str,
    /// The method name.
    pub grpc_method: &'static str,
    /// The status code as grpc-go spells it: `OK`, `InvalidArgument`, `FailedPrecondition`, ...
    pub grpc_code: &'static str,
}

/// Labels of `gangscaler_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: &'static str,
    /// The git commit built, or `unknown` when built outside a git checkout.
    pub git_commit: &'static str,
    /// The compiler version, e.g. `1.89.0`.
    pub rustc: &'static str,
}

/// What this binary was built from, as `gangscaler_build_info` and `--version` show it.
pub const BUILD: BuildLabels = BuildLabels {
    version: env!("CARGO_PKG_VERSION"),
    git_commit: env!("BUILD_GIT_COMMIT"),
    rustc: env!("BUILD_RUSTC_VERSION"),
};

/// Labels of a provisioning call counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    /// Backend kind.
    pub backend: &'static str,
    /// Operation.
    pub operation: &'static str,
    /// `ok` or an error kind.
    pub outcome: &'static str,
}

/// Labels of a configuration reload counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `success` or `failure`.
    pub outcome: &'static str,
}

/// Labels of an admission decision counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `accept` or `reject`.
    pub verdict: &'static str,
    /// The planner rule that decided.
    pub rule: &'static str,
}

/// Labels of the composite admission counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompositeLabels {
    /// `admitted` (every group's share applied in one call) or `deferred` (no node on any
    /// group).
    pub outcome: &'static str,
}

/// Labels of a per-node-group scale-up metric (node groups come from the configuration, a
/// bounded set).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// Node group id.
    pub node_group: String,
}

/// Labels of the reservation release counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// `formed`, `bookingDeadline`, `ended` or `unclaimed`.
    pub reason: &'static str,
}

/// Labels of the deferred-gangs gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldLabels {
    /// `covered`, `unhostable`, `no_room` or `behind`.
    pub hold: &'static str,
}

/// Labels of a scale-up outcome counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScaleUpOutcomeLabels {
    /// Node group id.
    pub node_group: String,
    /// `succeeded`, `provisionFailed`, `registrationTimeout`, `formationTimeout`,
    /// `attachFailed`, `cancelled` or `preempted`.
    pub outcome: &'static str,
}

pub(super) fn unary(method: &'static str) -> GrpcLabels {
    GrpcLabels {
        grpc_type: "unary",
        grpc_service: GRPC_SERVICE,
        grpc_method: method,
    }
}
