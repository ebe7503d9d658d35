//! A trivial tonic server for the same externalgrpc service, used only as the throughput
//! ceiling in load tests: `NodeGroupForNode`, `NodeGroupTargetSize` and `NodeGroupNodes` (100
//! running instances, built once and cloned per call) answer constants with no engine, no
//! locks, no metrics and no spans; every other call is Unimplemented.
//!
//! Run: `cargo run --release --example trivial_server -- 127.0.0.1:18086`.

use gangscaler::proto;
use gangscaler::proto::cloud_provider_server::{CloudProvider, CloudProviderServer};
use tonic::{Request, Response, Status};

struct Trivial {
    nodes: proto::NodeGroupNodesResponse,
}

#[tonic::async_trait]
impl CloudProvider for Trivial {
    async fn node_group_for_node(
        &self,
        _: Request<proto::NodeGroupForNodeRequest>,
    ) -> Result<Response<proto::NodeGroupForNodeResponse>, Status> {
        Ok(Response::new(proto::NodeGroupForNodeResponse {
            node_group: Some(proto::NodeGroup {
                id: "group-000".into(),
                min_size: 100,
                max_size: 200,
                debug: String::new(),
            }),
        }))
    }

    async fn node_group_target_size(
        &self,
        _: Request<proto::NodeGroupTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupTargetSizeResponse>, Status> {
        Ok(Response::new(proto::NodeGroupTargetSizeResponse {
            target_size: 100,
        }))
    }

    async fn node_groups(
        &self,
        _: Request<proto::NodeGroupsRequest>,
    ) -> Result<Response<proto::NodeGroupsResponse>, Status> {
        Err(Status::unimplemented("node_groups"))
    }

    async fn pricing_node_price(
        &self,
        _: Request<proto::PricingNodePriceRequest>,
    ) -> Result<Response<proto::PricingNodePriceResponse>, Status> {
        Err(Status::unimplemented("pricing_node_price"))
    }

    async fn pricing_pod_price(
        &self,
        _: Request<proto::PricingPodPriceRequest>,
    ) -> Result<Response<proto::PricingPodPriceResponse>, Status> {
        Err(Status::unimplemented("pricing_pod_price"))
    }

    async fn gpu_label(
        &self,
        _: Request<proto::GpuLabelRequest>,
    ) -> Result<Response<proto::GpuLabelResponse>, Status> {
        Err(Status::unimplemented("gpu_label"))
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<proto::GetAvailableGpuTypesRequest>,
    ) -> Result<Response<proto::GetAvailableGpuTypesResponse>, Status> {
        Err(Status::unimplemented("get_available_gpu_types"))
    }

    async fn cleanup(
        &self,
        _: Request<proto::CleanupRequest>,
    ) -> Result<Response<proto::CleanupResponse>, Status> {
        Err(Status::unimplemented("cleanup"))
    }

    async fn refresh(
        &self,
        _: Request<proto::RefreshRequest>,
    ) -> Result<Response<proto::RefreshResponse>, Status> {
        Err(Status::unimplemented("refresh"))
    }

    async fn node_group_increase_size(
        &self,
        _: Request<proto::NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<proto::NodeGroupIncreaseSizeResponse>, Status> {
        Err(Status::unimplemented("node_group_increase_size"))
    }

    async fn node_group_delete_nodes(
        &self,
        _: Request<proto::NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<proto::NodeGroupDeleteNodesResponse>, Status> {
        Err(Status::unimplemented("node_group_delete_nodes"))
    }

    async fn node_group_decrease_target_size(
        &self,
        _: Request<proto::NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupDecreaseTargetSizeResponse>, Status> {
        Err(Status::unimplemented("node_group_decrease_target_size"))
    }

    async fn node_group_nodes(
        &self,
        _: Request<proto::NodeGroupNodesRequest>,
    ) -> Result<Response<proto::NodeGroupNodesResponse>, Status> {
        Ok(Response::new(self.nodes.clone()))
    }

    async fn node_group_template_node_info(
        &self,
        _: Request<proto::NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<proto::NodeGroupTemplateNodeInfoResponse>, Status> {
        Err(Status::unimplemented("node_group_template_node_info"))
    }

    async fn node_group_get_options(
        &self,
        _: Request<proto::NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<proto::NodeGroupAutoscalingOptionsResponse>, Status> {
        Err(Status::unimplemented("node_group_get_options"))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18086".to_owned())
        .parse()?;
    let instances = (0..100)
        .map(|i| proto::Instance {
            id: format!("gangscaler-memory://group-042/group-042-{i:05}"),
            status: Some(proto::InstanceStatus {
                instance_state: proto::instance_status::InstanceState::InstanceRunning.into(),
                error_info: None,
            }),
        })
        .collect();
    let trivial = Trivial {
        nodes: proto::NodeGroupNodesResponse { instances },
    };
    tonic::transport::Server::builder()
        .add_service(CloudProviderServer::new(trivial))
        .serve_with_shutdown(addr, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
