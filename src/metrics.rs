//! Prometheus metric families. Gangscaler's own are registered under the `gangscaler`
//! prefix; the gRPC server metrics use the names and labels of go-grpc-prometheus
//! (`grpc_server_*`), and the process metrics the standard `process_*` names, so that existing
//! dashboards work unchanged. Labels come only from bounded sets (rpc names, status codes,
//! backends, operations, outcomes, node groups from the configuration). Every metric is listed
//! in `docs/metrics.md`.

mod connections;
mod labels;
mod process;
mod register;
mod tls;

pub use connections::{ConnectionMetrics, RefusedLabels};
use labels::unary;
pub use labels::{
    BUILD, BuildLabels, CompositeLabels, DecisionLabels, GRPC_SERVICE, GroupLabels, GrpcCodeLabels,
    GrpcLabels, HoldLabels, OutcomeLabels, ProvisionLabels, ReleaseLabels, ScaleUpOutcomeLabels,
};
pub use process::{ProcessCollector, Sample as ProcessSample};
pub use tls::TlsMetrics;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
    /// Instances of ended lifecycles withdrawn before they were created, by node group.
    pub withdrawn_instances: Family<GroupLabels, Counter>,
    /// Failed instances charged to a gang's lifecycle, which repairs instead of failing, by
    /// node group.
    pub repairs: Family<GroupLabels, Counter>,
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
    /// Pending gangs kept out of Cluster Autoscaler's scale-up now, by hold
    /// (`admission.deferral`).
    pub gangs_deferred: Family<HoldLabels, Gauge>,
    /// Pod annotation writes of deferral (marks and releases), by outcome.
    pub deferral_patches: Family<OutcomeLabels, Counter>,
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
            withdrawn_instances: Family::default(),
            repairs: Family::default(),
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
            gangs_deferred: Family::default(),
            deferral_patches: Family::default(),
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
