//! Prometheus metric families, registered under the `gangscaler` prefix. Labels come only
//! from bounded sets (rpc names, status codes, backends, operations, outcomes).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of a gRPC request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// RPC method name.
    pub rpc: &'static str,
    /// gRPC status code name.
    pub code: &'static str,
}

/// Labels of a gRPC latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcMethod {
    /// RPC method name.
    pub rpc: &'static str,
}

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

/// Labels of a per-node-group scale-up metric (node groups come from the configuration, a
/// bounded set).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// Node group id.
    pub node_group: String,
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

/// Every metric family of the provider.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// gRPC requests by method and status code.
    pub grpc_requests: Family<RpcLabels, Counter>,
    /// gRPC server-side handling time by method.
    pub grpc_duration: Family<RpcMethod, Histogram>,
    /// Provisioning backend calls.
    pub provision_calls: Family<ProvisionLabels, Counter>,
    /// Configuration reloads by outcome.
    pub config_reloads: Family<OutcomeLabels, Counter>,
    /// 1 while the running configuration matches the files on disk, 0 after a rejected edit.
    pub config_valid: Gauge,
    /// Gang admission decisions by verdict and rule.
    pub admission_decisions: Family<DecisionLabels, Counter>,
    /// Audit records that could not be written.
    pub audit_write_failures: Counter,
    /// Scale-up request → gang formed, by node group.
    pub formation_seconds: Family<GroupLabels, Histogram>,
    /// Scale-up request → success (formed, volumes attached, minCount members running).
    pub success_seconds: Family<GroupLabels, Histogram>,
    /// Gang created → minCount members running, for gangs whose scale-up succeeded.
    pub job_start_delay_seconds: Family<GroupLabels, Histogram>,
    /// Scale-up lifecycles ended, by node group and outcome.
    pub scale_up_outcomes: Family<ScaleUpOutcomeLabels, Counter>,
    /// Volume attach errors seen on gangs after a scale-out, by node group.
    pub attach_failures: Family<GroupLabels, Counter>,
    /// Scale-ups whose gang was preempted before it started, by node group.
    pub preemptions: Family<GroupLabels, Counter>,
    /// Scale-up lifecycles open now.
    pub scale_ups_open: Gauge,
    /// Nodes gangscaler keeps out of CA's scale-down now because their gang is forming.
    pub scale_up_protected_nodes: Gauge,
    /// Gangs pending now (fewer than minCount members placed, not reported scheduled).
    pub gangs_pending: Gauge,
    /// Sum over time of pending gangs: gang-seconds spent pending.
    pub gangs_pending_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Pending gangs Cluster Autoscaler cannot see now: no member carries a scheduler verdict
    /// after `lifecycle.noVerdictAfter`.
    pub gangs_without_verdict: Gauge,
    /// 1 while the cluster view may be behind the cluster (a watch failed and has not listed
    /// again, e.g. during an API-server outage), else 0.
    pub cluster_view_stale: Gauge,
    /// 1 while this replica holds the leader-election Lease, else 0 (always 0 without
    /// leader election).
    pub leader: Gauge,
    /// Changes of the Lease holder this replica saw (another replica or itself taking it).
    pub leader_transitions: Counter,
}

/// Buckets for scale-up and formation times: 5 s to 1 h, minute-scale in the middle.
fn lifecycle_buckets() -> impl Iterator<Item = f64> {
    [
        5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
    ]
    .into_iter()
}

fn rpc_buckets() -> impl Iterator<Item = f64> {
    // 10 µs .. ~5 s: lookups answer in microseconds, backend calls may take seconds.
    prometheus_client::metrics::histogram::exponential_buckets(1e-5, 3.0, 13)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every family.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gangscaler");
        let grpc_requests = Family::<RpcLabels, Counter>::default();
        let grpc_duration =
            Family::<RpcMethod, Histogram>::new_with_constructor(|| Histogram::new(rpc_buckets()));
        let provision_calls = Family::<ProvisionLabels, Counter>::default();
        let config_reloads = Family::<OutcomeLabels, Counter>::default();
        let config_valid = Gauge::default();
        let admission_decisions = Family::<DecisionLabels, Counter>::default();
        let audit_write_failures = Counter::default();
        let lifecycle_histogram = || {
            Family::<GroupLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(lifecycle_buckets())
            })
        };
        let formation_seconds = lifecycle_histogram();
        let success_seconds = lifecycle_histogram();
        let job_start_delay_seconds = lifecycle_histogram();
        let scale_up_outcomes = Family::<ScaleUpOutcomeLabels, Counter>::default();
        let attach_failures = Family::<GroupLabels, Counter>::default();
        let preemptions = Family::<GroupLabels, Counter>::default();
        let scale_ups_open = Gauge::default();
        let scale_up_protected_nodes = Gauge::default();
        let gangs_pending = Gauge::default();
        let gangs_pending_seconds = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        let gangs_without_verdict = Gauge::default();
        let cluster_view_stale = Gauge::default();
        let leader = Gauge::default();
        let leader_transitions = Counter::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader-election Lease and so acts, else 0",
            leader.clone(),
        );
        registry.sub_registry_with_prefix("leader").register(
            "transitions",
            "changes of the leader-election Lease holder this replica saw",
            leader_transitions.clone(),
        );
        registry.sub_registry_with_prefix("cluster").register(
            "view_stale",
            "1 while the cluster view may be behind the cluster: a watch failed (e.g. the API server is unreachable) and has not listed again",
            cluster_view_stale.clone(),
        );
        {
            use prometheus_client::registry::Unit;
            let s = registry.sub_registry_with_prefix("scaleup");
            s.register_with_unit(
                "formation",
                "time from an accepted scale-up to its gang forming, by node group",
                Unit::Seconds,
                formation_seconds.clone(),
            );
            s.register_with_unit(
                "success",
                "time from an accepted scale-up to success (gang formed, volumes attached, minCount members running), by node group",
                Unit::Seconds,
                success_seconds.clone(),
            );
            s.register_with_unit(
                "job_start_delay",
                "time from a gang's creation to minCount members running, for gangs whose scale-up succeeded, by node group",
                Unit::Seconds,
                job_start_delay_seconds.clone(),
            );
            s.register(
                "outcomes",
                "scale-up lifecycles ended, by node group and outcome",
                scale_up_outcomes.clone(),
            );
            s.register(
                "attach_failures",
                "volume attach errors on gangs after a scale-out, by node group",
                attach_failures.clone(),
            );
            s.register(
                "preemptions",
                "scale-ups whose gang was preempted before it started, by node group",
                preemptions.clone(),
            );
            s.register(
                "open",
                "scale-up lifecycles not ended yet",
                scale_ups_open.clone(),
            );
            s.register(
                "protected_nodes",
                "nodes kept out of CA's scale-down (scale-down-disabled) while their gang forms",
                scale_up_protected_nodes.clone(),
            );
            let g = registry.sub_registry_with_prefix("gangs");
            g.register(
                "pending",
                "gangs pending now (fewer than minCount members placed)",
                gangs_pending.clone(),
            );
            g.register_with_unit(
                "pending",
                "gang-seconds spent pending, summed over gangs",
                Unit::Seconds,
                gangs_pending_seconds.clone(),
            );
            g.register(
                "without_verdict",
                "pending gangs whose members have had no scheduler verdict (PodScheduled condition) for lifecycle.noVerdictAfter, so Cluster Autoscaler cannot see them",
                gangs_without_verdict.clone(),
            );
        }
        registry.sub_registry_with_prefix("audit").register(
            "write_failures",
            "audit records that could not be written",
            audit_write_failures.clone(),
        );
        registry.sub_registry_with_prefix("admission").register(
            "decisions",
            "gang admission decisions in NodeGroupIncreaseSize, by verdict and rule",
            admission_decisions.clone(),
        );
        let grpc = registry.sub_registry_with_prefix("grpc");
        grpc.register(
            "requests",
            "externalgrpc requests handled, by method and status code",
            grpc_requests.clone(),
        );
        grpc.register_with_unit(
            "request_duration",
            "externalgrpc server-side handling time, by method",
            prometheus_client::registry::Unit::Seconds,
            grpc_duration.clone(),
        );
        registry.sub_registry_with_prefix("provision").register(
            "calls",
            "provisioning backend calls, by backend, operation and outcome",
            provision_calls.clone(),
        );
        let config = registry.sub_registry_with_prefix("config");
        config.register(
            "reloads",
            "node-group configuration reloads, by outcome",
            config_reloads.clone(),
        );
        config.register(
            "valid",
            "1 while the running configuration matches the files on disk, 0 after a rejected edit",
            config_valid.clone(),
        );
        Self {
            registry,
            grpc_requests,
            grpc_duration,
            provision_calls,
            config_reloads,
            config_valid,
            admission_decisions,
            audit_write_failures,
            formation_seconds,
            success_seconds,
            job_start_delay_seconds,
            scale_up_outcomes,
            attach_failures,
            preemptions,
            scale_ups_open,
            scale_up_protected_nodes,
            gangs_pending,
            gangs_pending_seconds,
            gangs_without_verdict,
            cluster_view_stale,
            leader,
            leader_transitions,
        }
    }

    /// Records one admission decision.
    pub fn admission(&self, verdict: &'static str, rule: &'static str) {
        self.admission_decisions
            .get_or_create(&DecisionLabels { verdict, rule })
            .inc();
    }

    /// Records one finished RPC.
    pub fn rpc(&self, rpc: &'static str, code: &'static str, seconds: f64) {
        self.grpc_requests
            .get_or_create(&RpcLabels { rpc, code })
            .inc();
        self.grpc_duration
            .get_or_create(&RpcMethod { rpc })
            .observe(seconds);
    }

    /// Records one provisioning call.
    pub fn provision_call(
        &self,
        backend: &'static str,
        operation: &'static str,
        outcome: &'static str,
    ) {
        self.provision_calls
            .get_or_create(&ProvisionLabels {
                backend,
                operation,
                outcome,
            })
            .inc();
    }

    /// Records a configuration reload.
    pub fn config_reload(&self, success: bool) {
        let outcome = if success { "success" } else { "failure" };
        self.config_reloads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.config_valid.set(i64::from(success));
    }

    /// The text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
