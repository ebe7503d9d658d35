//! Domain types shared by every layer: node-group specs, quantities, template nodes and
//! instances. Depends only on std and serde: no async, no Kubernetes client, no protobuf.

pub mod echo;
pub mod gang;
pub mod hash;
mod humantime_serde_compat;
pub mod instance;
pub mod labels;
pub mod node_group;
pub mod quantity;
pub mod reservation;
pub mod taint;
pub mod template;

pub use echo::{ECHO_CHARS, Echo, echo};
pub use gang::{
    Composite, Gang, GangRef, Member, PodDemand, SelectorOperator, SelectorRequirement, Toleration,
    TolerationOperator,
};
pub use instance::{Claim, ErrorClass, ErrorCode, Instance, InstanceError, InstanceState};
pub use node_group::{
    AttachSimulation, AutoscalingOptionOverrides, AutoscalingOptions, BackendSpec, Capacity,
    ClusterApiBackendSpec, GpuSpec, KwokBackendSpec, MemoryBackendSpec, NodeGroupId, NodeGroupSpec,
    RdmaSpec, SimulatedFailure, millis,
};
pub use reservation::ReservationSpec;
pub use taint::{Taint, TaintEffect};
pub use template::TemplateNode;
