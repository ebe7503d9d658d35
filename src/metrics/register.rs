//! The registration of the families, by group: gRPC (under go-grpc-prometheus' names), state
//! gauges, the scale-up lifecycle, and the decision path. The order of registration is the
//! order of the exposition.

use prometheus_client::registry::Registry;

use super::{HoldLabels, Metrics, OutcomeLabels};

impl Metrics {
    /// The gRPC server families under go-grpc-prometheus' names, unprefixed, so that gRPC
    /// dashboards work as they are.
    pub(super) fn register_grpc(&self, root: &mut Registry) {
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
    pub(super) fn register_state(&self, registry: &mut Registry) {
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
    pub(super) fn register_scaleup(&self, registry: &mut Registry) {
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
            "withdrawn_instances",
            "instances of ended scale-up lifecycles withdrawn before they were created, by node group",
            self.withdrawn_instances.clone(),
        );
        s.register(
            "repairs",
            "failed instances charged to the gang they were requested for, whose scale-up repairs instead of failing, by node group",
            self.repairs.clone(),
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
        for hold in ["covered", "unhostable", "no_room", "behind"] {
            let _ = self.gangs_deferred.get_or_create(&HoldLabels { hold });
        }
        g.register(
            "deferred",
            "pending gangs kept out of Cluster Autoscaler's scale-up now (admission.deferral), by hold",
            self.gangs_deferred.clone(),
        );
        let d = registry.sub_registry_with_prefix("deferral");
        for outcome in ["success", "failure"] {
            let _ = self
                .deferral_patches
                .get_or_create(&OutcomeLabels { outcome });
        }
        d.register(
            "pod_patches",
            "pod annotation writes of deferral (marks and releases), by outcome",
            self.deferral_patches.clone(),
        );
    }

    /// The decision path's families: audit, admission, provisioning and configuration.
    pub(super) fn register_decisions(&self, registry: &mut Registry) {
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
}
