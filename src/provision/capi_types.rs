//! The few Cluster API objects the Cluster API backend reads and writes, typed for
//! `cluster.x-k8s.io/v1beta2` (Cluster API 1.11 and later). Only the fields the backend uses
//! are declared; the API server keeps every other field, since the backend never replaces
//! these objects whole (it merge-patches annotations and replicas, and writes the scale
//! subresource).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// API group of Cluster API's core types.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The API version the backend speaks.
pub const VERSION: &str = "v1beta2";
/// Label Cluster API puts on every Machine of a MachineDeployment (value: its name).
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Annotation that makes a Machine the first to go when its MachineSet scales down.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";

/// Implements `kube::Resource` for a namespaced `cluster.x-k8s.io/v1beta2` kind.
macro_rules! capi_resource {
    ($ty:ident, $kind:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A MachineDeployment: the group's replicas and the annotations CA's own provider reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineDeployment {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    #[serde(default)]
    pub spec: MachineDeploymentSpec,
}
capi_resource!(MachineDeployment, "MachineDeployment", "machinedeployments");

/// `MachineDeployment.spec`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// The Cluster the machines join.
    #[serde(default)]
    pub cluster_name: String,
    /// Desired machines; Cluster API defaults it, so `None` is only seen before defaulting.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// The template of its Machines.
    #[serde(default, skip_serializing_if = "MachineTemplate::is_empty")]
    pub template: MachineTemplate,
}

/// `MachineDeployment.spec.template`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineTemplate {
    /// The Machines' spec.
    #[serde(default)]
    pub spec: MachineTemplateSpec,
}

impl MachineTemplate {
    /// Nothing was read into it.
    pub fn is_empty(&self) -> bool {
        self.spec.taints.is_empty()
    }
}

/// `MachineDeployment.spec.template.spec`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineTemplateSpec {
    /// Taints Cluster API puts on the Machines' Nodes (needs its `MachineTaintPropagation`
    /// feature gate; its admission webhook refuses the field without it).
    #[serde(default)]
    pub taints: Vec<MachineTaint>,
}

/// One taint of a Machine (template): a Node taint and when Cluster API propagates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineTaint {
    /// The taint's key.
    #[serde(default)]
    pub key: String,
    /// The taint's value.
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default)]
    pub effect: String,
    /// `Always` (kept on the Node, put back when removed) or `OnInitialization` (put on the
    /// Node once, when Cluster API first reconciles it).
    #[serde(default)]
    pub propagation: String,
}

/// A Machine: one instance of a group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    #[serde(default)]
    pub spec: MachineSpec,
    /// Observed state.
    #[serde(default)]
    pub status: MachineStatus,
}
capi_resource!(Machine, "Machine", "machines");

/// `Machine.spec`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The infrastructure's id of the machine, equal to its Node's `spec.providerID`; set by
    /// Cluster API once the infrastructure provider reports it.
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
}

/// `Machine.status`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// `Pending`, `Provisioning`, `Provisioned`, `Running`, `Updating`, `Deleting`,
    /// `Deleted`, `Failed` or `Unknown`.
    #[serde(default)]
    pub phase: Option<String>,
    /// The Node the machine became.
    #[serde(default)]
    pub node_ref: Option<MachineNodeReference>,
    /// Conditions (v1beta2: `metav1.Condition`).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Fields v1beta2 keeps only for compatibility: the terminal failure, if any.
    #[serde(default)]
    pub deprecated: Option<MachineDeprecatedStatus>,
}

/// `Machine.status.nodeRef` in v1beta2.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineNodeReference {
    /// The Node's name.
    #[serde(default)]
    pub name: String,
}

/// `Machine.status.deprecated`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineDeprecatedStatus {
    /// The v1beta1 fields.
    #[serde(default)]
    pub v1beta1: Option<MachineV1Beta1Status>,
}

/// `Machine.status.deprecated.v1beta1`, the fields read here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineV1Beta1Status {
    /// A terminal failure's reason, e.g. `InsufficientResources` or `CreateError`.
    #[serde(default)]
    pub failure_reason: Option<String>,
    /// A terminal failure's description.
    #[serde(default)]
    pub failure_message: Option<String>,
}
