//! The `CloudProvider` implementation: about ten lines per RPC, each wrapped in one span, one
//! latency observation and one status-code count.

use std::future::Future;
use std::sync::Arc;

use tonic::{Code, Request, Response, Status};
use tracing::{Instrument, debug, error, info, info_span};

use super::{convert, status};
use crate::engine::{self, Engine};
use crate::metrics::Metrics;
use crate::model::echo;
use crate::proto;
use crate::proto::cloud_provider_server::CloudProvider;
use crate::telemetry::Chain;

/// The externalgrpc service.
#[derive(Debug, Clone)]
pub struct Service {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
}

impl Service {
    /// A service over `engine`, recording into `metrics`.
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>) -> Self {
        Self { engine, metrics }
    }

    /// The tonic server for this service.
    pub fn into_server(self) -> proto::cloud_provider_server::CloudProviderServer<Self> {
        proto::cloud_provider_server::CloudProviderServer::new(self)
    }

    async fn call<T, F>(
        &self,
        rpc: &'static str,
        group: &str,
        fut: F,
    ) -> Result<Response<T>, Status>
    where
        F: Future<Output = engine::Result<T>>,
    {
        let span = info_span!(
            "rpc",
            rpc,
            node_group.id = %echo(group),
            outcome = tracing::field::Empty,
            duration_us = tracing::field::Empty
        );
        self.metrics.rpc_started(rpc);
        let start = crate::clock::mono_std();
        let result = fut.instrument(span.clone()).await;
        let elapsed = start.elapsed();
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(e) => status::code(e),
        };
        let code_name = status::code_name(code);
        self.metrics.rpc(rpc, code_name, elapsed.as_secs_f64());
        let duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        span.record("outcome", code_name);
        span.record("duration_us", duration_us);
        match &result {
            Ok(_) => debug!(parent: &span, outcome = code_name, duration_us, "rpc served"),
            Err(e) => match code {
                Code::Unimplemented => {
                    debug!(parent: &span, outcome = code_name, duration_us, error = %Chain(&e), "rpc refused")
                }
                Code::Internal | Code::Unavailable => {
                    error!(parent: &span, outcome = code_name, duration_us, error = %Chain(&e), "rpc failed");
                }
                _ => {
                    info!(parent: &span, outcome = code_name, duration_us, error = %Chain(&e), "rpc refused")
                }
            },
        }
        result
            .map(Response::new)
            .map_err(|e| status::from_engine(&e))
    }
}

#[tonic::async_trait]
impl CloudProvider for Service {
    async fn node_groups(
        &self,
        _request: Request<proto::NodeGroupsRequest>,
    ) -> Result<Response<proto::NodeGroupsResponse>, Status> {
        self.call("NodeGroups", "", async {
            let cfg = self.engine.config();
            Ok(proto::NodeGroupsResponse {
                node_groups: cfg.groups.iter().map(convert::node_group).collect(),
            })
        })
        .await
    }

    async fn node_group_for_node(
        &self,
        request: Request<proto::NodeGroupForNodeRequest>,
    ) -> Result<Response<proto::NodeGroupForNodeResponse>, Status> {
        let node = convert::node_ref(request.get_ref().node.as_ref());
        self.call("NodeGroupForNode", "", async {
            let group = self.engine.node_group_for_node(&node).await?;
            // An empty id tells CA the node is not managed.
            Ok(proto::NodeGroupForNodeResponse {
                node_group: Some(group.as_ref().map(convert::node_group).unwrap_or_default()),
            })
        })
        .await
    }

    async fn pricing_node_price(
        &self,
        request: Request<proto::PricingNodePriceRequest>,
    ) -> Result<Response<proto::PricingNodePriceResponse>, Status> {
        let r = request.into_inner();
        self.call("PricingNodePrice", "", async {
            let period = convert::pricing_period(
                r.start_timestamp.as_ref(),
                r.start_time.as_ref(),
                r.end_timestamp.as_ref(),
                r.end_time.as_ref(),
            )?;
            let node = convert::node_ref(r.node.as_ref());
            let price = self.engine.node_price(&node, period).await?;
            Ok(proto::PricingNodePriceResponse { price })
        })
        .await
    }

    async fn pricing_pod_price(
        &self,
        _request: Request<proto::PricingPodPriceRequest>,
    ) -> Result<Response<proto::PricingPodPriceResponse>, Status> {
        self.call("PricingPodPrice", "", async {
            Err(engine::Error::Unsupported("PricingPodPrice"))
        })
        .await
    }

    async fn gpu_label(
        &self,
        _request: Request<proto::GpuLabelRequest>,
    ) -> Result<Response<proto::GpuLabelResponse>, Status> {
        self.call("GPULabel", "", async {
            Ok(proto::GpuLabelResponse {
                label: self.engine.gpu_label(),
            })
        })
        .await
    }

    async fn get_available_gpu_types(
        &self,
        _request: Request<proto::GetAvailableGpuTypesRequest>,
    ) -> Result<Response<proto::GetAvailableGpuTypesResponse>, Status> {
        self.call("GetAvailableGPUTypes", "", async {
            Ok(proto::GetAvailableGpuTypesResponse {
                gpu_types: self
                    .engine
                    .gpu_types()
                    .into_iter()
                    .map(|t| (t, prost_types::Any::default()))
                    .collect(),
            })
        })
        .await
    }

    async fn cleanup(
        &self,
        _request: Request<proto::CleanupRequest>,
    ) -> Result<Response<proto::CleanupResponse>, Status> {
        self.call("Cleanup", "", async {
            info!("cluster autoscaler is shutting down its provider client");
            Ok(proto::CleanupResponse {})
        })
        .await
    }

    async fn refresh(
        &self,
        _request: Request<proto::RefreshRequest>,
    ) -> Result<Response<proto::RefreshResponse>, Status> {
        self.call("Refresh", "", async {
            self.engine.refresh().await;
            Ok(proto::RefreshResponse {})
        })
        .await
    }

    async fn node_group_target_size(
        &self,
        request: Request<proto::NodeGroupTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupTargetSizeResponse>, Status> {
        let id = request.into_inner().id;
        self.call("NodeGroupTargetSize", &id, async {
            let target = self.engine.target_size(&id).await?;
            Ok(proto::NodeGroupTargetSizeResponse {
                target_size: i32::try_from(target).unwrap_or(i32::MAX),
            })
        })
        .await
    }

    async fn node_group_increase_size(
        &self,
        request: Request<proto::NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<proto::NodeGroupIncreaseSizeResponse>, Status> {
        let r = request.into_inner();
        self.call("NodeGroupIncreaseSize", &r.id, async {
            self.engine.increase_size(&r.id, r.delta).await?;
            Ok(proto::NodeGroupIncreaseSizeResponse {})
        })
        .await
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<proto::NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<proto::NodeGroupDeleteNodesResponse>, Status> {
        let r = request.into_inner();
        let nodes: Vec<_> = r.nodes.iter().map(|n| convert::node_ref(Some(n))).collect();
        self.call("NodeGroupDeleteNodes", &r.id, async {
            self.engine.delete_nodes(&r.id, &nodes).await?;
            Ok(proto::NodeGroupDeleteNodesResponse {})
        })
        .await
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<proto::NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupDecreaseTargetSizeResponse>, Status> {
        let r = request.into_inner();
        self.call("NodeGroupDecreaseTargetSize", &r.id, async {
            self.engine.decrease_target_size(&r.id, r.delta).await?;
            Ok(proto::NodeGroupDecreaseTargetSizeResponse {})
        })
        .await
    }

    async fn node_group_nodes(
        &self,
        request: Request<proto::NodeGroupNodesRequest>,
    ) -> Result<Response<proto::NodeGroupNodesResponse>, Status> {
        let id = request.into_inner().id;
        self.call("NodeGroupNodes", &id, async {
            let instances = self.engine.nodes(&id).await?;
            Ok(proto::NodeGroupNodesResponse {
                instances: instances.iter().map(convert::instance).collect(),
            })
        })
        .await
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<proto::NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<proto::NodeGroupTemplateNodeInfoResponse>, Status> {
        let id = request.into_inner().id;
        self.call("NodeGroupTemplateNodeInfo", &id, async {
            let template = self.engine.template(&id)?;
            Ok(convert::template_response(&template))
        })
        .await
    }

    async fn node_group_get_options(
        &self,
        request: Request<proto::NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<proto::NodeGroupAutoscalingOptionsResponse>, Status> {
        let r = request.into_inner();
        self.call("NodeGroupGetOptions", &r.id, async {
            let defaults = r.defaults.as_ref().map(convert::options_in);
            let options = self.engine.options(&r.id, defaults.as_ref())?;
            // No overrides: an empty answer, so CA keeps its own defaults, including the
            // MaxNodeStartupTime that the proto cannot carry on CA 1.35-1.36.
            Ok(proto::NodeGroupAutoscalingOptionsResponse {
                node_group_autoscaling_options: options.as_ref().map(convert::options_out),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::memory::MemoryProvisioner;
    use crate::telemetry::tests::{Captured, text_subscriber};
    use crate::testing;

    async fn service() -> Service {
        let metrics = Arc::new(Metrics::new());
        let engine = Engine::new(
            testing::loaded(vec![testing::group("gpu", 0, 4)]),
            None,
            vec![Arc::new(MemoryProvisioner::new())],
            metrics.clone(),
        )
        .await
        .expect("engine over one memory group");
        Service::new(Arc::new(engine), metrics)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_huge_id_with_a_newline_is_cut_and_escaped_in_the_status_and_the_log() {
        let out = Captured::default();
        let _guard = tracing::subscriber::set_default(text_subscriber(&out));
        let svc = service().await;
        let id = format!("x\nINFO gangscaler: forged{}", "y".repeat(1 << 20));
        let status = svc
            .node_group_target_size(Request::new(proto::NodeGroupTargetSizeRequest {
                id: id.clone(),
            }))
            .await
            .expect_err("unknown group");
        assert_eq!(status.code(), Code::NotFound);
        let msg = status.message();
        assert!(msg.len() < 512, "{} bytes echoed", msg.len());
        assert!(
            msg.starts_with(r#"node group "x\nINFO gangscaler: forgedyyy"#),
            "{msg}"
        );
        assert!(msg.contains(&format!("…({} bytes)", id.len())), "{msg}");
        assert!(!msg.contains('\n'), "{msg:?}");

        let log = out.text();
        assert!(log.contains("rpc refused"), "{log}");
        for line in log.lines() {
            assert!(line.len() < 2048, "a {}-byte log line", line.len());
            assert!(
                !line.starts_with("INFO gangscaler: forged"),
                "forged: {line}"
            );
        }
    }
}
