//! Prometheus metric families. Gangscaler's own are registered under the `gangscaler`
//! prefix; the gRPC server metrics use the names and labels of go-grpc-prometheus
//! (`grpc_server_*`), and the process metrics the standard `process_*` names, so that existing
//! dashboards work unchanged. Labels come only from bounded sets (rpc names, status codes,
//! backends, operations, outcomes, node groups from the configuration). Every metric is listed
//! in `docs/metrics.md`.

mod connections;
mod process;

pub use connections::{ConnectionMetrics, RefusedLabels};
pub use process::{ProcessCollector, Sample as ProcessSample};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
    /// gRPC requests started, by method (`grpc_server_started_total`).
    pub grpc_started: Family<GrpcLabels, Counter>,
    /// gRPC requests answered, by method and status code (`grpc_server_handled_total`).
    pub grpc_handled: Family<GrpcCodeLabels, Counter>,
    /// gRPC server-side handling time by method (`grpc_server_handling_seconds`).
    pub grpc_handling_seconds: Family<GrpcLabels, Histogram>,
    /// Provisioning backend calls.
    pub provision_calls: Family<ProvisionLabels, Counter>,
    /// Configuration reloads by outcome.
    pub config_reloads: Family<OutcomeLabels, Counter>,
    /// 1 while the running configuration matches the files on disk, 0 after a rejected edit.
    pub config_valid: Gauge,
    /// Gang admission decisions by verdict and rule.
    pub admission_decisions: Family<DecisionLabels, Counter>,
    /// Composites (CompositePodGroups) considered in admission decisions, by outcome.
    pub admission_composites: Family<CompositeLabels, Counter>,
    /// Audit records that could not be written.
    pub audit_write_failures: Counter,
    /// 1 while the audit log's last append reached the disk (or there is no audit log), 0 while
    /// it cannot be written and scale-ups are refused.
    pub audit_writable: Gauge,
    /// Lines of the audit log that could not be read back when it was last opened (their
    /// records, open scale-ups included, are not tracked).
    pub audit_unreadable_lines: Gauge,
    /// Connections the listeners refused.
    pub connections: ConnectionMetrics,
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
    /// Nodes reserved now (carrying the reservation taint, held for a gang or not yet
    /// assigned).
    pub reserved_nodes: Gauge,
    /// Node reservations ended, by reason.
    pub reservations_released: Family<ReleaseLabels, Counter>,
    /// Reservation tolerations added to pending gang members.
    pub reservation_tolerations_added: Counter,
    /// Per group whose configuration reserves: the DaemonSets that run on its nodes without
    /// tolerating the reservation taint (reservation is off for the group while above 0).
    pub reservation_blocking_daemon_sets: Family<GroupLabels, Gauge>,
    /// Per group whose configuration reserves: 1 while its backend would not register new
    /// nodes under the reservation taint (Cluster API: the MachineDeployment's template lacks
    /// it), so reservation is off for the group.
    pub reservation_backend_blocked: Family<GroupLabels, Gauge>,
    /// Gangs pending now (fewer than minCount members placed, not reported scheduled).
    pub gangs_pending: Gauge,
    /// Sum over time of pending gangs: gang-seconds spent pending.
    pub gangs_pending_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Pending gangs Cluster Autoscaler cannot see now: no member carries a scheduler verdict
    /// after `lifecycle.noVerdictAfter`.
    pub gangs_without_verdict: Gauge,
    /// Per configured node group: 1 while its target size is above its `maxSize` (a reload
    /// lowered `maxSize` below it; the nodes are kept), else 0.
    pub node_group_target_above_max: Family<GroupLabels, Gauge>,
    /// 1 while the cluster view may be behind the cluster (a watch failed and has not listed
    /// again, e.g. during an API-server outage), else 0.
    pub cluster_view_stale: Gauge,
    /// 1 while this replica holds the leader-election Lease, else 0 (always 0 without
    /// leader election).
    pub leader: Gauge,
    /// Changes of the Lease holder this replica saw (another replica or itself taking it).
    pub leader_transitions: Counter,
    /// The TLS reload metrics, registered only when the gRPC server uses TLS
    /// ([`Metrics::with_tls`]).
    pub tls: Option<TlsMetrics>,
}

/// Metrics of the served TLS material and its reloads (`gangscaler_tls_*`).
#[derive(Debug, Clone, Default)]
pub struct TlsMetrics {
    /// Reloads after a change of the TLS files, by outcome (`success`, `failure`).
    pub reloads: Family<OutcomeLabels, Counter>,
    /// Unix time at which the served material was last loaded (at start, then at each
    /// successful reload).
    pub last_reload_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The notAfter of the served certificate (the leaf), as Unix time.
    pub certificate_expiration: Gauge,
    /// 1 while the served material is what the files hold, 0 while they hold a change that
    /// was rejected.
    pub valid: Gauge,
}

impl TlsMetrics {
    /// Records a successful (re)load at `now_ms` of a certificate expiring at `not_after`
    /// (Unix seconds, if it could be read); `reload` is false for the load at start.
    pub fn loaded(&self, now_ms: i64, not_after: Option<i64>, reload: bool) {
        if reload {
            self.reloads
                .get_or_create(&OutcomeLabels { outcome: "success" })
                .inc();
        }
        self.last_reload_success.set(now_ms as f64 / 1000.0);
        if let Some(t) = not_after {
            self.certificate_expiration.set(t);
        }
        self.valid.set(1);
    }

    /// Records a change of the files that could not be loaded.
    pub fn rejected(&self) {
        self.reloads
            .get_or_create(&OutcomeLabels { outcome: "failure" })
            .inc();
        self.valid.set(0);
    }
}

fn unary(method: &'static str) -> GrpcLabels {
    GrpcLabels {
        grpc_type: "unary",
        grpc_service: GRPC_SERVICE,
        grpc_method: method,
    }
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
        let lifecycle_histogram = || {
            Family::<GroupLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(lifecycle_buckets())
            })
        };
        let mut metrics = Self {
            registry: Registry::default(),
            grpc_started: Family::default(),
            grpc_handled: Family::default(),
            grpc_handling_seconds: Family::new_with_constructor(|| Histogram::new(rpc_buckets())),
            provision_calls: Family::default(),
            config_reloads: Family::default(),
            config_valid: Gauge::default(),
            admission_decisions: Family::default(),
            admission_composites: Family::default(),
            audit_write_failures: Counter::default(),
            audit_writable: Gauge::default(),
            audit_unreadable_lines: Gauge::default(),
            connections: ConnectionMetrics::default(),
            formation_seconds: lifecycle_histogram(),
            success_seconds: lifecycle_histogram(),
            job_start_delay_seconds: lifecycle_histogram(),
            scale_up_outcomes: Family::default(),
            attach_failures: Family::default(),
            preemptions: Family::default(),
            scale_ups_open: Gauge::default(),
            scale_up_protected_nodes: Gauge::default(),
            reserved_nodes: Gauge::default(),
            reservations_released: Family::default(),
            reservation_tolerations_added: Counter::default(),
            reservation_blocking_daemon_sets: Family::default(),
            reservation_backend_blocked: Family::default(),
            gangs_pending: Gauge::default(),
            gangs_pending_seconds: Counter::default(),
            gangs_without_verdict: Gauge::default(),
            cluster_view_stale: Gauge::default(),
            node_group_target_above_max: Family::default(),
            leader: Gauge::default(),
            leader_transitions: Counter::default(),
            tls: None,
        };
        metrics.audit_writable.set(1);
        let mut root = Registry::default();
        metrics.register_grpc(&mut root);
        root.register_collector(Box::new(ProcessCollector));
        let own = root.sub_registry_with_prefix("gangscaler");
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info.get_or_create(&BUILD).set(1);
        own.register(
            "build_info",
            "1, labelled with the version, git commit and compiler this binary was built from",
            build_info,
        );
        metrics.register_state(own);
        metrics.register_scaleup(own);
        metrics.register_decisions(own);
        metrics.connections.register(own);
        metrics.registry = root;
        metrics
    }

    /// The gRPC server families under go-grpc-prometheus' names, unprefixed, so that gRPC
    /// dashboards work as they are.
    fn register_grpc(&self, root: &mut Registry) {
        let grpc = root.sub_registry_with_prefix("grpc_server");
        grpc.register(
            "started",
            "externalgrpc calls started on the server, by method",
            self.grpc_started.clone(),
        );
        grpc.register(
            "handled",
            "externalgrpc calls completed on the server, by method and status code",
            self.grpc_handled.clone(),
        );
        grpc.register_with_unit(
            "handling",
            "externalgrpc server-side handling time (decoded request to response), by method",
            prometheus_client::registry::Unit::Seconds,
            self.grpc_handling_seconds.clone(),
        );
    }

    /// The state gauges: leadership, node groups above their maxSize, the cluster view.
    fn register_state(&self, registry: &mut Registry) {
        registry.register(
            "leader",
            "1 while this replica holds the leader-election Lease and so acts, else 0",
            self.leader.clone(),
        );
        registry.sub_registry_with_prefix("leader").register(
            "transitions",
            "changes of the leader-election Lease holder this replica saw",
            self.leader_transitions.clone(),
        );
        registry.sub_registry_with_prefix("node_group").register(
            "target_above_max",
            "1 while the node group's target size is above its maxSize (a configuration reload lowered maxSize below it; no node is removed for it, and increases are refused), else 0",
            self.node_group_target_above_max.clone(),
        );
        registry.sub_registry_with_prefix("cluster").register(
            "view_stale",
            "1 while the cluster view may be behind the cluster: a watch failed (e.g. the API server is unreachable) and has not listed again",
            self.cluster_view_stale.clone(),
        );
    }

    /// The scale-up lifecycle families (`gangscaler_scaleup_*`) and the pending gangs
    /// (`gangscaler_gangs_*`).
    fn register_scaleup(&self, registry: &mut Registry) {
        use prometheus_client::registry::Unit;
        let s = registry.sub_registry_with_prefix("scaleup");
        s.register_with_unit(
            "formation",
            "time from an accepted scale-up to its gang forming, by node group",
            Unit::Seconds,
            self.formation_seconds.clone(),
        );
        s.register_with_unit(
            "success",
            "time from an accepted scale-up to success (gang formed, volumes attached, minCount members running), by node group",
            Unit::Seconds,
            self.success_seconds.clone(),
        );
        s.register_with_unit(
            "job_start_delay",
            "time from a gang's creation to minCount members running, for gangs whose scale-up succeeded, by node group",
            Unit::Seconds,
            self.job_start_delay_seconds.clone(),
        );
        s.register(
            "outcomes",
            "scale-up lifecycles ended, by node group and outcome",
            self.scale_up_outcomes.clone(),
        );
        s.register(
            "attach_failures",
            "volume attach errors on gangs after a scale-out, by node group",
            self.attach_failures.clone(),
        );
        s.register(
            "preemptions",
            "scale-ups whose gang was preempted before it started, by node group",
            self.preemptions.clone(),
        );
        s.register(
            "open",
            "scale-up lifecycles not ended yet",
            self.scale_ups_open.clone(),
        );
        s.register(
            "protected_nodes",
            "nodes kept out of CA's scale-down (scale-down-disabled) while their gang forms",
            self.scale_up_protected_nodes.clone(),
        );
        let r = registry.sub_registry_with_prefix("reservation");
        r.register(
            "nodes",
            "nodes carrying the reservation taint now (held for a gang, or not assigned yet)",
            self.reserved_nodes.clone(),
        );
        r.register(
            "released",
            "node reservations ended, by reason (formed, bookingDeadline, ended, unclaimed)",
            self.reservations_released.clone(),
        );
        r.register(
            "tolerations_added",
            "reservation tolerations added to pending gang members by the lifecycle loop",
            self.reservation_tolerations_added.clone(),
        );
        r.register(
            "blocking_daemon_sets",
            "per group configured to reserve: DaemonSets that run on its nodes without tolerating the reservation taint; reservation is off for the group while above 0",
            self.reservation_blocking_daemon_sets.clone(),
        );
        r.register(
            "backend_blocked",
            "per group configured to reserve: 1 while its backend would not register new nodes under the reservation taint (Cluster API: the MachineDeployment template lacks it); reservation is off for the group meanwhile",
            self.reservation_backend_blocked.clone(),
        );
        let g = registry.sub_registry_with_prefix("gangs");
        g.register(
            "pending",
            "gangs pending now (fewer than minCount members placed)",
            self.gangs_pending.clone(),
        );
        g.register_with_unit(
            "pending",
            "gang-seconds spent pending, summed over gangs",
            Unit::Seconds,
            self.gangs_pending_seconds.clone(),
        );
        g.register(
            "without_verdict",
            "pending gangs whose members have had no scheduler verdict (PodScheduled condition) for lifecycle.noVerdictAfter, so Cluster Autoscaler cannot see them",
            self.gangs_without_verdict.clone(),
        );
    }

    /// The decision path's families: audit, admission, provisioning and configuration.
    fn register_decisions(&self, registry: &mut Registry) {
        let audit = registry.sub_registry_with_prefix("audit");
        audit.register(
            "write_failures",
            "audit records that could not be written",
            self.audit_write_failures.clone(),
        );
        audit.register(
            "writable",
            "1 while the audit log accepts records, 0 while it cannot be written and every scale-up is refused",
            self.audit_writable.clone(),
        );
        audit.register(
            "unreadable_lines",
            "lines of the audit log that could not be read back when it was last opened (unknown schema, bad JSON, truncated); the scale-ups they record are not tracked",
            self.audit_unreadable_lines.clone(),
        );
        let admission = registry.sub_registry_with_prefix("admission");
        admission.register(
            "decisions",
            "gang admission decisions in NodeGroupIncreaseSize, by verdict and rule",
            self.admission_decisions.clone(),
        );
        admission.register(
            "composites",
            "composites (CompositePodGroups) considered in NodeGroupIncreaseSize: admitted whole across node groups, or deferred with no node on any group",
            self.admission_composites.clone(),
        );
        registry.sub_registry_with_prefix("provision").register(
            "calls",
            "provisioning backend calls, by backend, operation and outcome",
            self.provision_calls.clone(),
        );
        let config = registry.sub_registry_with_prefix("config");
        config.register(
            "reloads",
            "node-group configuration reloads, by outcome",
            self.config_reloads.clone(),
        );
        config.register(
            "valid",
            "1 while the running configuration matches the files on disk, 0 after a rejected edit",
            self.config_valid.clone(),
        );
    }

    /// Registers the TLS metrics (`gangscaler_tls_*`), for a server that uses TLS; without
    /// TLS they are left out rather than exposed as zeros.
    #[must_use]
    pub fn with_tls(mut self) -> Self {
        let tls = TlsMetrics::default();
        // Both outcomes exist from the start, so `increase()` over them works from the first
        // failure on.
        for outcome in ["success", "failure"] {
            let _ = tls.reloads.get_or_create(&OutcomeLabels { outcome });
        }
        let r = self
            .registry
            .sub_registry_with_prefix("gangscaler")
            .sub_registry_with_prefix("tls");
        r.register(
            "reloads",
            "reloads of the gRPC server's TLS certificate, key and client CA after their files changed, by outcome",
            tls.reloads.clone(),
        );
        r.register_with_unit(
            "last_reload_success_timestamp",
            "Unix time the served TLS material was last loaded (at start, then at each successful reload)",
            prometheus_client::registry::Unit::Seconds,
            tls.last_reload_success.clone(),
        );
        r.register_with_unit(
            "certificate_expiration_timestamp",
            "notAfter of the served certificate, as Unix time",
            prometheus_client::registry::Unit::Seconds,
            tls.certificate_expiration.clone(),
        );
        r.register(
            "valid",
            "1 while the served TLS material is what the files hold, 0 while they hold a rejected change",
            tls.valid.clone(),
        );
        self.tls = Some(tls);
        self
    }

    /// Records one admission decision.
    pub fn admission(&self, verdict: &'static str, rule: &'static str) {
        self.admission_decisions
            .get_or_create(&DecisionLabels { verdict, rule })
            .inc();
    }

    /// Records the composites one admission decision admitted and deferred.
    pub fn composites(&self, admitted: usize, deferred: usize) {
        for (outcome, n) in [("admitted", admitted), ("deferred", deferred)] {
            if n > 0 {
                self.admission_composites
                    .get_or_create(&CompositeLabels { outcome })
                    .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
            }
        }
    }

    /// Records the start of a unary RPC.
    pub fn rpc_started(&self, method: &'static str) {
        self.grpc_started.get_or_create(&unary(method)).inc();
    }

    /// Records one finished unary RPC: its status code (as grpc-go spells it) and handling time.
    pub fn rpc(&self, method: &'static str, code: &'static str, seconds: f64) {
        self.grpc_handled
            .get_or_create(&GrpcCodeLabels {
                grpc_type: "unary",
                grpc_service: GRPC_SERVICE,
                grpc_method: method,
                grpc_code: code,
            })
            .inc();
        self.grpc_handling_seconds
            .get_or_create(&unary(method))
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

    /// Records whether an audit append reached the disk: a failure is counted and the log shown
    /// unwritable, a success shows it writable again.
    pub fn audit_append(&self, written: bool) {
        if !written {
            self.audit_write_failures.inc();
        }
        self.audit_writable.set(i64::from(written));
    }

    /// Records a configuration reload.
    pub fn config_reload(&self, success: bool) {
        let outcome = if success { "success" } else { "failure" };
        self.config_reloads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.config_valid.set(i64::from(success));
    }

    /// Records whether `group`'s target size is above its `maxSize`; returns whether it was
    /// before this call.
    pub fn target_above_max(&self, group: &str, above: bool) -> bool {
        let labels = GroupLabels {
            node_group: group.to_owned(),
        };
        self.node_group_target_above_max
            .get_or_create(&labels)
            .set(i64::from(above))
            == 1
    }

    /// Keeps the per-group gauges in step with the configured groups: a series (0 until a
    /// target is seen above `maxSize`) for each of `current`, none for the `removed` groups.
    pub fn node_groups<'a>(
        &self,
        current: impl IntoIterator<Item = &'a str>,
        removed: impl IntoIterator<Item = &'a str>,
    ) {
        for group in removed {
            self.node_group_target_above_max.remove(&GroupLabels {
                node_group: group.to_owned(),
            });
        }
        for group in current {
            // Created at 0 if absent; an existing value is kept.
            let _ = self
                .node_group_target_above_max
                .get_or_create(&GroupLabels {
                    node_group: group.to_owned(),
                });
        }
    }

    /// The text exposition of every family.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
