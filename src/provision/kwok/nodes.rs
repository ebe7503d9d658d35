//! The kwok backend's Node and CSINode objects: building a group's Node, creating it
//! (idempotent by name), lifting its CSI startup taint once its CSINode exists, deleting it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint as K8sTaint};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tracing::{debug, info};

use super::state::PendingNode;
use super::{
    CONTROLLER_ATTACH_ANNOTATION, CSI_STARTUP_TAINT, KWOK_NODE_ANNOTATION, KwokProvisioner,
    MANAGED_BY, MANAGED_BY_LABEL, MAX_CONFLICT_RETRIES, provider_id, spec,
};
use crate::model::reservation::{RESERVATION_EFFECT, RESERVATION_TAINT, UNASSIGNED};
use crate::model::{NodeGroupId, NodeGroupSpec, TemplateNode, labels};
use crate::provision::{Error, Result};

/// The resources a `deviceDelay` holds back from new nodes: the group's RDMA device and
/// bandwidth resources (none without a delay or without RDMA).
pub(super) fn late_resources(group: &NodeGroupSpec) -> BTreeSet<String> {
    match &group.rdma {
        Some(r) if !spec(group).device_delay.is_zero() => {
            BTreeSet::from([r.resource_name.clone(), r.bandwidth_resource_name.clone()])
        }
        _ => BTreeSet::new(),
    }
}

impl KwokProvisioner {
    pub(super) fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub(super) async fn list_nodes(&self, group: &NodeGroupId) -> Result<Vec<Node>> {
        let lp = ListParams::default().labels(&format!("{}={group}", labels::NODE_GROUP));
        self.nodes_api()
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| Self::backend_error(group, "listing nodes", &e))
    }

    /// The Node object for `name`, built from the group's template, without the resources a
    /// device delay holds back.
    pub(super) fn node_object(&self, group: &NodeGroupSpec, name: &str) -> Result<Node> {
        self.node_object_with(group, name, &late_resources(group))
    }

    /// The Node object for `name`, built from the group's template, leaving out the resources
    /// in `late`.
    pub(super) fn node_object_with(
        &self,
        group: &NodeGroupSpec,
        name: &str,
        late: &BTreeSet<String>,
    ) -> Result<Node> {
        let template =
            TemplateNode::for_group(group, &self.gpu_label).ok_or_else(|| Error::Backend {
                group: group.id.clone(),
                backend: "kwok",
                message: "the kwok backend needs capacity to build nodes".to_owned(),
            })?;
        let mut node_labels = template.metadata.labels.clone();
        node_labels.insert(labels::HOSTNAME.to_owned(), name.to_owned());
        node_labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
        let mut annotations = template.metadata.annotations.clone();
        annotations.insert(KWOK_NODE_ANNOTATION.to_owned(), "fake".to_owned());
        annotations.insert(CONTROLLER_ATTACH_ANNOTATION.to_owned(), "true".to_owned());
        let quantities = |m: &BTreeMap<String, String>| {
            m.iter()
                .filter(|(k, _)| !late.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                .collect::<BTreeMap<_, _>>()
        };
        Ok(Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(node_labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id(&group.id, name)),
                taints: Some(
                    template
                        .spec
                        .taints
                        .iter()
                        .map(|t| K8sTaint {
                            key: t.key.clone(),
                            value: (!t.value.is_empty()).then(|| t.value.clone()),
                            effect: t.effect.to_owned(),
                            time_added: None,
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&template.status.capacity)),
                allocatable: Some(quantities(&template.status.allocatable)),
                ..NodeStatus::default()
            }),
        })
    }

    /// Creates the Node (idempotent by name) and its CSINode; a group with reservation on gets
    /// its Node under the reservation taint, [`UNASSIGNED`]. A group with CSI limits gets its
    /// Node under [`CSI_STARTUP_TAINT`], lifted only once the CSINode exists: the scheduler
    /// sets no attach limit on a node without a CSINode, and a Node that reports no Ready
    /// condition yet is schedulable at once (the node lifecycle controller lifts the not-ready
    /// taint of a node without conditions), so a Node usable before its CSINode could take
    /// more volumes than the limit allows. The Node carries what `due` was requested for
    /// ([`labels::REQUESTED_FOR`]) and when ([`labels::REQUESTED_AT`]).
    pub(super) async fn create_node(&self, group: &NodeGroupSpec, due: &PendingNode) -> Result<()> {
        let name = due.name.as_str();
        let mut node = self.node_object(group, name)?;
        let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
        if let Some(claim) = &due.claim {
            annotations.insert(labels::REQUESTED_FOR.to_owned(), claim.clone());
        }
        if let Some(at) = due.requested_unix_ms {
            annotations.insert(labels::REQUESTED_AT.to_owned(), at.to_string());
        }
        // Reserved from registration: no pod lands before the lifecycle loop assigns the node
        // to the gang it was added for (or releases it).
        if group.reservation.enabled
            && let Some(spec) = node.spec.as_mut()
        {
            spec.taints.get_or_insert_with(Vec::new).push(K8sTaint {
                key: RESERVATION_TAINT.to_owned(),
                value: Some(UNASSIGNED.to_owned()),
                effect: RESERVATION_EFFECT.as_str().to_owned(),
                ..K8sTaint::default()
            });
        }
        if !group.csi.is_empty()
            && let Some(spec) = node.spec.as_mut()
        {
            spec.taints.get_or_insert_with(Vec::new).push(K8sTaint {
                key: CSI_STARTUP_TAINT.to_owned(),
                effect: "NoSchedule".to_owned(),
                ..K8sTaint::default()
            });
        }
        let _ = self.forget(&group.id);
        let created = match self.nodes_api().create(&PostParams::default(), &node).await {
            Ok(n) => n,
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                self.nodes_api()
                    .get(name)
                    .await
                    .map_err(|e| Self::backend_error(&group.id, "reading an existing node", &e))?
            }
            Err(e) => return Err(Self::backend_error(&group.id, "creating a node", &e)),
        };
        // The apiserver may drop status on create; make sure capacity is there for the
        // scheduler before kwok takes over the node.
        if created
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .is_none()
        {
            let patch = serde_json::json!({ "status": node.status });
            self.nodes_api()
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Self::backend_error(&group.id, "setting node capacity", &e))?;
        }
        if !group.csi.is_empty() {
            self.create_csi_node(group, &created).await?;
            self.lift_csi_startup_taint(&group.id, name).await?;
        }
        info!(node_group.id = %group.id, node.name = name, backend = "kwok", "node created");
        Ok(())
    }

    /// Removes [`CSI_STARTUP_TAINT`] from Node `name`, keeping its other taints. The patch
    /// carries the resourceVersion read, so a concurrent change to the Node's taints (the node
    /// lifecycle controller adds and lifts its own while a new Node settles) is a conflict:
    /// the Node is read again and the lift retried, up to [`MAX_CONFLICT_RETRIES`] times.
    pub(super) async fn lift_csi_startup_taint(
        &self,
        group: &NodeGroupId,
        name: &str,
    ) -> Result<()> {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let current = self
                .nodes_api()
                .get(name)
                .await
                .map_err(|e| Self::backend_error(group, "reading a new node", &e))?;
            let taints = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default();
            if !taints.iter().any(|t| t.key == CSI_STARTUP_TAINT) {
                return Ok(());
            }
            let kept: Vec<&K8sTaint> = taints
                .iter()
                .filter(|t| t.key != CSI_STARTUP_TAINT)
                .collect();
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": kept},
            });
            match self
                .nodes_api()
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    debug!(node_group.id = %group, node.name = name, taint = CSI_STARTUP_TAINT, "CSI startup taint lifted");
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    debug!(node_group.id = %group, node.name = name, "lifting the CSI startup taint conflicted; retrying");
                    crate::provision::conflict_pause().await;
                }
                Err(e) => {
                    return Err(Self::backend_error(
                        group,
                        "lifting a node's CSI startup taint",
                        &e,
                    ));
                }
            }
        }
        Err(Error::Backend {
            group: group.clone(),
            backend: "kwok",
            message: format!(
                "lifting the CSI startup taint of node {name}: still conflicting after {MAX_CONFLICT_RETRIES} attempts"
            ),
        })
    }

    pub(super) async fn create_csi_node(&self, group: &NodeGroupSpec, node: &Node) -> Result<()> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let csi = CSINode {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_owned(),
                    MANAGED_BY.to_owned(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: CSINodeSpec {
                drivers: group
                    .csi
                    .iter()
                    .map(|(driver, count)| CSINodeDriver {
                        name: driver.clone(),
                        node_id: name.clone(),
                        allocatable: Some(VolumeNodeResources {
                            count: Some(i32::try_from(*count).unwrap_or(i32::MAX)),
                        }),
                        topology_keys: None,
                    })
                    .collect(),
            },
        };
        let api: Api<CSINode> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &csi).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
            Err(e) => Err(Self::backend_error(&group.id, "creating a CSINode", &e)),
        }
    }

    pub(super) async fn delete_node(&self, group: &NodeGroupId, name: &str) -> Result<()> {
        let _ = self.forget(group);
        match self
            .nodes_api()
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(e) => Err(Self::backend_error(group, "deleting a node", &e)),
        }
    }
}
