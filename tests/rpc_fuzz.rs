//! Property-based fuzzing of every RPC handler: sequences of arbitrary requests (huge and
//! hostile strings, extreme integers and timestamps, missing fields) against the in-process
//! service over the memory backend. After every call: no panic; a refusal carries a code
//! from the expected set, a bounded message without control characters that names the
//! request's group and, for a refused delta, the delta; every group's target size stays
//! within `[minSize, maxSize]` and its instances never outnumber `maxSize` (state and answers
//! stay bounded whatever the request carried). The case count is bounded so CI runs it in
//! seconds.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

use std::collections::HashMap;
use std::sync::Arc;

use gangscaler::config::Source;
use gangscaler::engine::Engine;
use gangscaler::grpc::Service;
use gangscaler::metrics::Metrics;
use gangscaler::model::echo;
use gangscaler::proto;
use gangscaler::proto::cloud_provider_server::CloudProvider;
use gangscaler::provision::memory::MemoryProvisioner;
use proptest::prelude::*;
use tonic::{Code, Request, Status};

const PROVIDER: &str = r#"server:
  address: "127.0.0.1:0"
  metricsAddress: "127.0.0.1:0"
  plaintext: true
nodeGroupsDir: nodegroups
defaults:
  backend: {type: memory}
"#;

/// (file, min, max)
const GROUPS: [(&str, &str, u32, u32); 5] = [
    (
        "gpu",
        "id: gpu\nminSize: 0\nmaxSize: 4\ninstanceType: p5.48xlarge\nregion: r\nzone: z\ncapacity: {cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\ngpu: {count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}\nprice: 98.32\nautoscalingOptions: {scaleDownUnneededTime: 20m}\nbackend: {type: memory, provisionDelay: 1h}\n",
        0,
        4,
    ),
    (
        "cpu",
        "id: cpu\nminSize: 1\nmaxSize: 3\ninstanceType: m7i.8xlarge\nregion: r\nzone: z\ncapacity: {cpu: \"32\", memory: 128Gi, ephemeralStorage: 200Gi, pods: 110}\nprice: 1.5\n",
        1,
        3,
    ),
    (
        "lazy",
        "id: lazy\nminSize: 0\nmaxSize: 5\ninstanceType: m7i.2xlarge\nregion: r\nzone: z\nbackend: {type: memory, createDelay: 1h}\n",
        0,
        5,
    ),
    (
        "stock",
        "id: stock\nminSize: 0\nmaxSize: 4\ninstanceType: g6.12xlarge\nregion: r\nzone: z\nbackend: {type: memory, failure: {afterInstances: 1, code: stockout}}\n",
        0,
        4,
    ),
    (
        "wide",
        "id: wide\nminSize: 2\nmaxSize: 5000\ninstanceType: m7i.large\nregion: r\nzone: z\nbackend: {type: memory, createDelay: 1h}\n",
        2,
        5_000,
    ),
];

/// At most this many bytes of status message, whatever the request carried: a message echoes
/// at most two request values, each at most 128 characters (4 bytes each) plus its length.
const MESSAGE_BOUND: usize = 1536;

/// One generated RPC.
#[derive(Debug, Clone)]
enum Call {
    NodeGroups,
    ForNode(Option<proto::ExternalGrpcNode>),
    NodePrice(proto::PricingNodePriceRequest),
    PodPrice,
    GpuLabel,
    GpuTypes,
    Cleanup,
    Refresh,
    TargetSize(String),
    Increase(String, i32),
    Delete(String, Vec<proto::ExternalGrpcNode>),
    Decrease(String, i32),
    Nodes(String),
    Template(String),
    Options(String, Option<proto::NodeGroupAutoscalingOptions>),
}

impl Call {
    /// The node-group id the request names, if the RPC takes one.
    fn id(&self) -> Option<&str> {
        match self {
            Self::TargetSize(id)
            | Self::Increase(id, _)
            | Self::Delete(id, _)
            | Self::Decrease(id, _)
            | Self::Nodes(id)
            | Self::Template(id)
            | Self::Options(id, _) => Some(id),
            _ => None,
        }
    }
}

fn huge() -> impl Strategy<Value = String> {
    (any::<char>(), 1_000usize..300_000).prop_map(|(c, n)| c.to_string().repeat(n))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "\\PC{0,16}",
        2 => proptest::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter),
        1 => huge(),
    ]
}

fn group_id() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(GROUPS.iter().map(|g| g.0.to_owned()).collect::<Vec<_>>()),
        1 => Just(String::new()),
        1 => Just("GPU".to_owned()),
        3 => text(),
    ]
}

fn delta() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(i32::MIN),
        Just(i32::MAX),
        Just(0),
        -3i32..=3,
        any::<i32>(),
    ]
}

/// Node names and providerIDs: those of instances the memory backend creates, or anything.
fn node_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (proptest::sample::select(vec!["gpu", "cpu", "lazy", "stock", "wide"]), 1u32..4)
            .prop_map(|(g, n)| format!("{g}-{n:05}")),
        2 => text(),
        1 => Just(String::new()),
    ]
}

fn node() -> impl Strategy<Value = proto::ExternalGrpcNode> {
    (
        node_name(),
        prop::bool::ANY,
        proptest::collection::hash_map(text(), text(), 0..3),
    )
        .prop_map(|(name, with_id, labels)| {
            let provider_id = if with_id && !name.is_empty() {
                let group = name.rsplit_once('-').map_or("x", |(g, _)| g);
                format!("gangscaler-memory://{group}/{name}")
            } else {
                String::new()
            };
            proto::ExternalGrpcNode {
                provider_id,
                name,
                labels: labels.clone(),
                annotations: labels,
            }
        })
}

fn timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    proptest::option::of(
        (
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                0i64..4_000_000_000,
                any::<i64>()
            ],
            prop_oneof![
                Just(i32::MIN),
                Just(i32::MAX),
                0i32..1_000_000_000,
                any::<i32>()
            ],
        )
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

fn legacy_time() -> impl Strategy<Value = Option<proto::LegacyTime>> {
    timestamp().prop_map(|t| {
        t.map(|t| proto::LegacyTime {
            seconds: t.seconds,
            nanos: t.nanos,
        })
    })
}

fn duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
    timestamp().prop_map(|t| {
        t.map(|t| prost_types::Duration {
            seconds: t.seconds,
            nanos: t.nanos,
        })
    })
}

fn legacy_duration() -> impl Strategy<Value = Option<proto::LegacyDuration>> {
    proptest::option::of(any::<i64>().prop_map(|duration| proto::LegacyDuration { duration }))
}

fn options() -> impl Strategy<Value = Option<proto::NodeGroupAutoscalingOptions>> {
    proptest::option::of(
        (
            (any::<f64>(), any::<f64>(), any::<bool>(), any::<bool>()),
            (legacy_duration(), legacy_duration(), legacy_duration()),
            (duration(), duration(), duration(), duration()),
        )
            .prop_map(|((u, g, z, i), (l1, l2, l3), (d1, d2, d3, d4))| {
                proto::NodeGroupAutoscalingOptions {
                    scale_down_utilization_threshold: u,
                    scale_down_gpu_utilization_threshold: g,
                    zero_or_max_node_scaling: z,
                    ignore_daemon_sets_utilization: i,
                    scale_down_unneeded_time: l1,
                    scale_down_unready_time: l2,
                    max_node_provision_time: l3,
                    scale_down_unneeded_duration: d1,
                    scale_down_unready_duration: d2,
                    max_node_provision_duration: d3,
                    max_node_startup_duration: d4,
                    ..Default::default()
                }
            }),
    )
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        1 => Just(Call::NodeGroups),
        2 => proptest::option::of(node()).prop_map(Call::ForNode),
        2 => (proptest::option::of(node()), timestamp(), timestamp(), legacy_time(), legacy_time())
            .prop_map(|(node, start_timestamp, end_timestamp, start_time, end_time)| {
                Call::NodePrice(proto::PricingNodePriceRequest {
                    node,
                    start_time,
                    end_time,
                    start_timestamp,
                    end_timestamp,
                })
            }),
        1 => Just(Call::PodPrice),
        1 => Just(Call::GpuLabel),
        1 => Just(Call::GpuTypes),
        1 => Just(Call::Cleanup),
        1 => Just(Call::Refresh),
        2 => group_id().prop_map(Call::TargetSize),
        5 => (group_id(), delta()).prop_map(|(id, d)| Call::Increase(id, d)),
        4 => (group_id(), proptest::collection::vec(node(), 0..4))
            .prop_map(|(id, nodes)| Call::Delete(id, nodes)),
        4 => (group_id(), delta()).prop_map(|(id, d)| Call::Decrease(id, d)),
        2 => group_id().prop_map(Call::Nodes),
        2 => group_id().prop_map(Call::Template),
        2 => (group_id(), options()).prop_map(|(id, o)| Call::Options(id, o)),
    ]
}

/// A fresh service over the memory backend with the groups of [`GROUPS`].
async fn service(dir: &tempfile::TempDir) -> Service {
    let mut files = vec![("provider.yaml".to_owned(), PROVIDER.to_owned())];
    for (id, text, _, _) in GROUPS {
        files.push((format!("nodegroups/{id}.yaml"), text.to_owned()));
    }
    for (rel, text) in &files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let source = Source::with_env(dir.path(), HashMap::new());
    let loaded = source.load().expect("fixture configuration is valid");
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::new(
        loaded,
        Some(source),
        vec![Arc::new(MemoryProvisioner::new())],
        metrics.clone(),
    )
    .await
    .expect("engine starts");
    Service::new(Arc::new(engine), metrics)
}

/// Runs `call`; `Ok` carries a check of the answer's own invariants.
async fn run(svc: &Service, call: &Call) -> Result<(), Status> {
    let known = |id: &str| GROUPS.iter().any(|g| g.0 == id);
    match call.clone() {
        Call::NodeGroups => {
            let groups = svc
                .node_groups(Request::new(proto::NodeGroupsRequest {}))
                .await?
                .into_inner()
                .node_groups;
            assert_eq!(groups.len(), GROUPS.len());
        }
        Call::ForNode(node) => {
            let group = svc
                .node_group_for_node(Request::new(proto::NodeGroupForNodeRequest { node }))
                .await?
                .into_inner()
                .node_group
                .unwrap_or_default();
            assert!(group.id.is_empty() || known(&group.id), "{:?}", group.id);
        }
        Call::NodePrice(r) => {
            let price = svc
                .pricing_node_price(Request::new(r))
                .await?
                .into_inner()
                .price;
            assert!(price.is_finite() && price >= 0.0, "price {price}");
        }
        Call::PodPrice => {
            svc.pricing_pod_price(Request::new(proto::PricingPodPriceRequest::default()))
                .await?;
        }
        Call::GpuLabel => {
            svc.gpu_label(Request::new(proto::GpuLabelRequest {}))
                .await?;
        }
        Call::GpuTypes => {
            svc.get_available_gpu_types(Request::new(proto::GetAvailableGpuTypesRequest {}))
                .await?;
        }
        Call::Cleanup => {
            svc.cleanup(Request::new(proto::CleanupRequest {})).await?;
        }
        Call::Refresh => {
            svc.refresh(Request::new(proto::RefreshRequest {})).await?;
        }
        Call::TargetSize(id) => {
            svc.node_group_target_size(Request::new(proto::NodeGroupTargetSizeRequest { id }))
                .await?;
        }
        Call::Increase(id, delta) => {
            svc.node_group_increase_size(Request::new(proto::NodeGroupIncreaseSizeRequest {
                id,
                delta,
            }))
            .await?;
        }
        Call::Delete(id, nodes) => {
            svc.node_group_delete_nodes(Request::new(proto::NodeGroupDeleteNodesRequest {
                id,
                nodes,
            }))
            .await?;
        }
        Call::Decrease(id, delta) => {
            svc.node_group_decrease_target_size(Request::new(
                proto::NodeGroupDecreaseTargetSizeRequest { id, delta },
            ))
            .await?;
        }
        Call::Nodes(id) => {
            svc.node_group_nodes(Request::new(proto::NodeGroupNodesRequest { id }))
                .await?;
        }
        Call::Template(id) => {
            let t = svc
                .node_group_template_node_info(Request::new(
                    proto::NodeGroupTemplateNodeInfoRequest { id },
                ))
                .await?
                .into_inner();
            assert!(!t.node_bytes.is_empty());
        }
        Call::Options(id, defaults) => {
            svc.node_group_get_options(Request::new(proto::NodeGroupAutoscalingOptionsRequest {
                id,
                defaults,
            }))
            .await?;
        }
    }
    Ok(())
}

/// `call` for a failure message: its Debug form, cut short.
fn shown(call: &Call) -> String {
    echo(&format!("{call:?}")).to_string()
}

/// The invariants of a refusal of `call`.
fn check_refusal(call: &Call, status: &Status) {
    let (code, msg) = (status.code(), status.message());
    let call_text = shown(call);
    let msg_text = echo(msg);
    let allowed = [
        Code::NotFound,
        Code::InvalidArgument,
        Code::FailedPrecondition,
        Code::Unimplemented,
    ];
    assert!(
        allowed.contains(&code),
        "{call_text}: unexpected {code:?}: {msg_text}"
    );
    assert!(
        msg.len() <= MESSAGE_BOUND,
        "a {}-byte message for {call_text}: {msg_text}",
        msg.len()
    );
    assert!(
        !msg.chars().any(char::is_control),
        "control character in {msg_text:?}"
    );
    if let Some(id) = call.id() {
        let named = echo(id).to_string();
        assert!(
            msg.contains(&named),
            "{msg_text:?} does not name the group of {call_text}"
        );
    }
    match call {
        Call::Increase(_, d) | Call::Decrease(_, d) if code == Code::InvalidArgument => {
            assert!(
                msg.contains(&d.to_string()),
                "{msg_text:?} does not name delta {d}"
            );
        }
        Call::Delete(_, nodes) if code == Code::InvalidArgument => {
            let names_one = nodes.iter().any(|n| {
                msg.contains(&echo(&n.name).to_string())
                    && msg.contains(&echo(&n.provider_id).to_string())
            });
            assert!(
                names_one
                    || msg.contains("names no nodes")
                    || msg.contains("neither name nor providerID"),
                "{msg_text:?} names none of the nodes of {call_text}"
            );
        }
        _ => {}
    }
}

/// Every group's target within its bounds, and no more instances than its maximum.
async fn check_bounds(svc: &Service) {
    for (id, _, min, max) in GROUPS {
        let target = svc
            .node_group_target_size(Request::new(proto::NodeGroupTargetSizeRequest {
                id: id.to_owned(),
            }))
            .await
            .expect("known group has a target")
            .into_inner()
            .target_size;
        let target = u32::try_from(target).expect("target is not negative");
        assert!(
            (min..=max).contains(&target),
            "{id}: target {target} outside [{min}, {max}]"
        );
        let instances = svc
            .node_group_nodes(Request::new(proto::NodeGroupNodesRequest {
                id: id.to_owned(),
            }))
            .await
            .expect("known group lists its nodes")
            .into_inner()
            .instances;
        assert!(
            instances.len() <= max as usize,
            "{id}: {} instances",
            instances.len()
        );
        assert!(
            instances.len() <= target as usize,
            "{id}: more instances than target"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn every_rpc_survives_arbitrary_requests_with_bounded_named_refusals(
        calls in proptest::collection::vec(call(), 1..8)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let svc = service(&dir).await;
            for call in &calls {
                if let Err(status) = run(&svc, call).await {
                    check_refusal(call, &status);
                }
                check_bounds(&svc).await;
            }
        });
    }
}
