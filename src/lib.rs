//! gangscaler: a gang-aware Cluster Autoscaler external gRPC cloud provider.
//!
//! Dependencies point inward:
//!
//! ```text
//! main / cli ─► grpc ─► engine ─► provision ─► model
//!                 │        └────► config ───► model
//!                 └─► metrics, telemetry, http (edges)
//! ```
//!
//! - [`model`]: domain types (node groups, quantities, template nodes, instances).
//! - [`config`]: YAML loading with environment overrides and all-errors-at-once validation.
//! - [`provision`]: the provisioning backend trait and the in-memory backend.
//! - [`engine`]: the use cases behind each RPC; owns the live configuration.
//! - [`grpc`]: the externalgrpc service: decode, call the engine, encode; one error table.
//! - [`server`]: wires TLS, the gRPC server, the HTTP endpoints and shutdown.

pub mod audit;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod engine;
pub mod events;
pub mod grpc;
pub mod http;
pub mod lifecycle;
pub mod metrics;
pub mod model;
pub mod planner;
pub mod provision;
pub mod server;
pub mod telemetry;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

/// Code generated from `proto/externalgrpc.proto`.
pub mod proto {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}
