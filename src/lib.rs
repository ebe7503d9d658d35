//! gangscaler: a gang-aware Cluster Autoscaler external gRPC cloud provider.
//!
//! Dependencies point down; each line lists what a module references (`use crate::…` or a
//! `crate::…` path, test code included), and no reference points up. `tests/layering.rs`
//! reads this block and fails on an edge the code has and the block lacks, or the reverse.
//! Any module's test code may also reference `testing`, which exists only in test builds.
//!
//! ```text
//! main       ─► cli, telemetry, signals
//! cli        ─► server, webhook, scaleup, audit, planner, cluster, config,
//!               provision, migrate, doctor, telemetry, trace, model, yaml, clock
//! webhook    ─► server (TLS, connections), migrate, model, config, telemetry
//! doctor     ─► provision, migrate, planner, cluster, model, yaml, telemetry
//! server     ─► grpc, http, engine, scaleup, provision, cluster, audit, events, config,
//!               leader, metrics, readiness, telemetry, planner, model, clock, peers
//! grpc       ─► engine, provision, metrics, model, proto, clock, telemetry,
//!               cluster, leader                                  (these two in tests)
//! engine     ─► scaleup, planner, provision, cluster, audit, config, events, leader,
//!               metrics, model, clock, telemetry
//! scaleup    ─► cluster, audit, events, metrics, planner, model, telemetry,
//!               yaml                                             (in tests; never engine)
//! provision  ─► cluster, config, model, clock, telemetry
//! audit      ─► planner, model, telemetry                        (never scaleup)
//! events     ─► planner, model, clock, telemetry
//! config     ─► audit, planner, model, yaml, http                (http: a limit)
//! cluster    ─► model, yaml, clock, telemetry, planner           (planner in tests)
//! trace      ─► planner, model, yaml
//! migrate    ─► yaml
//! planner    ─► model
//! leader     ─► config, metrics, clock, telemetry
//! http       ─► metrics, readiness, clock, peers, telemetry
//! peers      ─► clock
//! metrics    ─► clock                                            (in tests)
//! testing    ─► config, model                 (test and bench builders, test builds only)
//! model, readiness, signals, telemetry, yaml, proto, clock: nothing of ours
//! ```
//!
//! - [`model`]: domain types (node groups, quantities, template nodes, instances, gangs).
//! - [`config`]: YAML loading with environment overrides and all-errors-at-once validation.
//! - [`yaml`]: bounded YAML reading and parsing (file size caps, alias, depth and node
//!   budgets) for configuration and Kubernetes object files.
//! - [`planner`]: pure whole-gang fitting and the admission decision.
//! - [`trace`]: gang traces (JSON Lines or YAML gang specs) for `plan --simulate`.
//! - [`cluster`]: Kubernetes objects to the gang model: API-version adapters, pod demand,
//!   the watchers and their snapshot, and the gangs Cluster Autoscaler cannot see.
//! - [`provision`]: the provisioning backend trait and the in-memory, kwok and Cluster API
//!   backends.
//! - [`audit`]: the durable audit log, its record types, reader and report.
//! - [`events`]: the Kubernetes Event publisher and the events of admission decisions.
//! - [`scaleup`]: what happens after a scale-up: progress, observation, the lifecycle state
//!   machine, its recorder and loop. It lists instances through
//!   [`scaleup::InstanceSource`], which the engine implements, so it never imports `engine`.
//! - [`leader`]: leader election between replicas on a Lease; only the leader acts.
//! - [`engine`]: the use cases behind each RPC; owns the live configuration.
//! - [`grpc`]: the externalgrpc service: decode, call the engine, encode; one error table.
//! - [`server`]: wires TLS, the gRPC server, the HTTP endpoints, the scale-up loop and
//!   shutdown.
//! - [`clock`]: the one place that reads the wall clock and the monotonic clock.
//! - [`peers`]: which connections a listener takes, by source address (per-peer limits and
//!   the slots reserved for certified clients).
//! - [`metrics`], [`http`], [`telemetry`]: Prometheus families, `/metrics` and health
//!   endpoints, logging.
//! - [`migrate`]: the gang API versions as shapes and the manifest converter behind
//!   `gangscaler convert`.
//! - [`webhook`]: the compatibility webhook (`gangscaler webhook`): links annotated pods the
//!   way the served gang API expects, creates their PodGroups and, on request, gives members
//!   their gang's reservation toleration.
//! - [`doctor`]: `gangscaler doctor`: reads the cluster and the components' flags into a
//!   plain record and checks it, purely, for readiness for gang admission.
//! - [`signals`]: the `SIGXFSZ` handler that turns a write past the file-size limit into an
//!   error instead of the end of the process.
//! - [`readiness`]: the named conditions behind `/readyz` (serving, synced, leader, not
//!   draining).

pub mod audit;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod doctor;
pub mod engine;
pub mod events;
pub mod grpc;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod migrate;
pub mod model;
pub mod peers;
pub mod planner;
pub mod provision;
pub mod readiness;
pub mod scaleup;
pub mod server;
pub mod signals;
pub mod telemetry;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod trace;
pub mod webhook;
pub mod yaml;

/// Code generated from `proto/externalgrpc.proto`.
pub mod proto {
    #![expect(
        missing_docs,
        reason = "generated code: not every message and field has a comment"
    )]
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}
