//! Turns parsed YAML documents into validated settings and node-group specs, collecting every
//! problem instead of stopping at the first. Owns the schema of `provider.yaml` and of the
//! node-group files; reads them through the walker of `super::walk`, builds `crate::model`
//! specs, and depends otherwise only on `crate::planner` (the admission policy) and
//! `crate::audit` (the `{identity}` placeholder).

mod backend;
mod leader;
mod names;
mod node_group;
mod provider;
mod reservation;
mod server;
mod template;

use std::path::PathBuf;

use serde_json::Value;

pub use backend::TYPES as BACKEND_TYPES;
pub use node_group::node_group;
pub use provider::provider;

/// Defaults from the provider file that node groups inherit.
#[derive(Debug, Clone)]
pub struct GroupDefaults {
    pub node_groups_dir: PathBuf,
    pub gpu_label: String,
    pub os: String,
    pub arch: String,
    pub gpu_resource: String,
    pub rdma_bandwidth_resource: String,
    pub backend: Option<Value>,
    pub reservation: crate::model::ReservationSpec,
}
