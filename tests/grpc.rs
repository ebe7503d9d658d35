//! The externalgrpc service over a real plaintext socket on 127.0.0.1, in-process, with the
//! memory backend: one table-style test per RPC family, plus concurrency, the HTTP endpoints
//! and configuration reload on Refresh. Every test starts its own server, so state never
//! leaks between tests.

// clippy.toml's allow-expect-in-tests covers #[test] functions only, not the fixture helpers
// beside them; a failed expectation is a test failure either way.
#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use common::{
    Client, TestServer, decrease, delete, expect_code, fake_node, group_for, ids, increase,
    instances, metrics, node, node_groups, node_name, nodes, ok, sample, target, target_size,
};
use gangscaler::proto;
use gangscaler::proto::instance_status::InstanceState;
use k8s_pb::api::core::v1::Node;
use tonic::Code;

const PROVIDER: &str = r#"server:
  address: "127.0.0.1:0"
  metricsAddress: "127.0.0.1:0"
  plaintext: true
gpu:
  label: nvidia.com/gpu.product
nodeGroupsDir: nodegroups
defaults:
  backend:
    type: memory
    provisionDelay: 0s
"#;

/// GPU + RDMA template, price, option overrides; instances stay `instanceCreating` for 1h.
const GPU: &str = r#"id: gpu
minSize: 0
maxSize: 4
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "192", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}
reserved: {cpu: "2", memory: 24Gi, ephemeralStorage: 100Gi}
gpu: {count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}
rdma: {resourceName: rdma/rdma_shared_device_a, devices: 8, bandwidthGbps: 3200}
labels: {gangscaler.io/pool: h100, workload-class: training}
taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
topology: {topology.gangscaler.io/block: block-a}
price: 98.32
backend:
  type: memory
  provisionDelay: 1h
autoscalingOptions:
  scaleDownUtilizationThreshold: 0.3
  scaleDownUnneededTime: 20m
"#;

/// CPU only, minSize 1, no price, no overrides; instances are running at once.
const CPU: &str = r#"id: cpu
minSize: 1
maxSize: 3
instanceType: m7i.8xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "32", memory: 128Gi, ephemeralStorage: 200Gi, pods: 110}
"#;

/// Second GPU product; every instance after the first fails with a stock-out.
const STOCK: &str = r#"id: stock
minSize: 0
maxSize: 4
instanceType: g6.12xlarge
region: us-east-1
zone: us-east-1b
capacity: {cpu: "48", memory: 192Gi, ephemeralStorage: 3800Gi, pods: 110}
gpu: {count: 4, product: NVIDIA-L4, memory: 23034Mi}
price: 4.6
backend:
  type: memory
  failure: {afterInstances: 1, code: stockout}
"#;

/// minSize 1 with a failure after the first (pre-existing) instance.
const STOCKMIN: &str = r#"id: stockmin
minSize: 1
maxSize: 2
instanceType: m7i.large
region: us-east-1
zone: us-east-1a
backend:
  type: memory
  failure: {afterInstances: 1, code: stockout}
"#;

/// Requested capacity is not created for an hour, so it can be cancelled.
const LAZY: &str = r#"id: lazy
minSize: 0
maxSize: 5
instanceType: m7i.2xlarge
region: us-east-1
zone: us-east-1a
backend:
  type: memory
  createDelay: 1h
"#;

/// No capacity: no template node, no price, no overrides.
const NOTEMPLATE: &str = r#"id: notemplate
minSize: 0
maxSize: 2
instanceType: m7i.large
region: us-east-1
zone: us-east-1a
"#;

/// For concurrent IncreaseSize.
const BIG: &str = r#"id: big
minSize: 0
maxSize: 40
instanceType: m7i.large
region: us-east-1
zone: us-east-1a
"#;

/// For concurrent DeleteNodes: starts with 10 running instances.
const WIDE: &str = r#"id: wide
minSize: 10
maxSize: 40
instanceType: m7i.large
region: us-east-1
zone: us-east-1a
"#;

const GPU_H100: &str = "NVIDIA-H100-80GB-HBM3";
const GPU_L4: &str = "NVIDIA-L4";
const UNKNOWN: &str = "no-such-group";

async fn start() -> TestServer {
    TestServer::start(&[
        ("provider.yaml", PROVIDER),
        ("nodegroups/gpu.yaml", GPU),
        ("nodegroups/cpu.yaml", CPU),
        ("nodegroups/stock.yaml", STOCK),
        ("nodegroups/stockmin.yaml", STOCKMIN),
        ("nodegroups/lazy.yaml", LAZY),
        ("nodegroups/notemplate.yaml", NOTEMPLATE),
        ("nodegroups/big.yaml", BIG),
        ("nodegroups/wide.yaml", WIDE),
    ])
    .await
}

fn expected_groups() -> HashMap<String, (i32, i32)> {
    [
        ("gpu", (0, 4)),
        ("cpu", (1, 3)),
        ("stock", (0, 4)),
        ("stockmin", (1, 2)),
        ("lazy", (0, 5)),
        ("notemplate", (0, 2)),
        ("big", (0, 40)),
        ("wide", (10, 40)),
    ]
    .into_iter()
    .map(|(id, b)| (id.to_owned(), b))
    .collect()
}

fn state(i: &proto::Instance) -> InstanceState {
    i.status
        .as_ref()
        .map_or(InstanceState::Unspecified, |s| s.instance_state())
}

fn error_info(i: &proto::Instance) -> Option<&proto::InstanceErrorInfo> {
    i.status.as_ref().and_then(|s| s.error_info.as_ref())
}

fn has_error(i: &proto::Instance) -> bool {
    error_info(i).is_some_and(|e| !e.error_code.is_empty())
}

/// The integer tokens of a message, so "3" matches "size 3" but not "300".
fn numbers(message: &str) -> Vec<&str> {
    message
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}

#[tokio::test]
async fn node_groups_lists_bounds_and_node_group_for_node_finds_the_owner() {
    let server = start().await;
    let mut c = server.client().await;

    let groups = node_groups(&mut c).await;
    assert_eq!(groups, expected_groups());

    let cpu_id = nodes(&mut c, "cpu").await.remove(0).id;
    ok(increase(&mut c, "gpu", 1).await, "IncreaseSize(gpu, 1)");
    let gpu_id = nodes(&mut c, "gpu").await.remove(0).id;
    assert!(cpu_id.starts_with("gangscaler-memory://cpu/"), "{cpu_id}");

    let cases: Vec<(&str, proto::ExternalGrpcNode, &str)> = vec![
        (
            "registered node: providerID and name",
            node(&cpu_id, node_name(&cpu_id)),
            "cpu",
        ),
        ("providerID only", node(&cpu_id, ""), "cpu"),
        (
            "young node: empty providerID, name only",
            node("", node_name(&cpu_id)),
            "cpu",
        ),
        (
            "CA fake node for a creating instance",
            fake_node(&gpu_id, "unregistered"),
            "gpu",
        ),
        (
            "CA fake node for a running instance",
            fake_node(&cpu_id, "unregistered"),
            "cpu",
        ),
        (
            "unmanaged node (control plane)",
            node("aws:///us-east-1a/i-0abc", "ip-10-0-0-1"),
            "",
        ),
        (
            "unmanaged node without providerID",
            node("", "ip-10-0-0-2"),
            "",
        ),
        ("empty node", node("", ""), ""),
    ];
    for (what, n, want) in cases {
        let got = group_for(&mut c, n).await;
        assert_eq!(got.id, want, "{what}");
        if !want.is_empty() {
            let (min, max) = groups[want];
            assert_eq!(
                (got.min_size, got.max_size),
                (min, max),
                "{what}: bounds differ from NodeGroups"
            );
        }
    }

    // CA may send the request without a node at all.
    let got = c
        .node_group_for_node(proto::NodeGroupForNodeRequest { node: None })
        .await
        .expect("NodeGroupForNode without node")
        .into_inner()
        .node_group
        .unwrap_or_default();
    assert_eq!(got.id, "", "absent node");
    server.stop().await;
}

#[tokio::test]
async fn target_size_starts_at_min_and_increase_size_is_visible_at_once() {
    let server = start().await;
    let mut c = server.client().await;

    for (id, (min, _)) in expected_groups() {
        assert_eq!(target(&mut c, &id).await, min, "initial target of {id}");
    }
    expect_code(
        target_size(&mut c, UNKNOWN).await,
        Code::NotFound,
        "TargetSize(unknown)",
    );

    let refusals = [
        (UNKNOWN, 1, Code::NotFound),
        ("gpu", 0, Code::InvalidArgument),
        ("gpu", -1, Code::InvalidArgument),
        ("gpu", i32::MIN, Code::InvalidArgument),
        ("gpu", 5, Code::FailedPrecondition),
        ("gpu", i32::MAX, Code::FailedPrecondition),
    ];
    for (id, delta, want) in refusals {
        expect_code(
            increase(&mut c, id, delta).await,
            want,
            &format!("IncreaseSize({id}, {delta})"),
        );
        assert_eq!(
            target(&mut c, "gpu").await,
            0,
            "target changed by refused IncreaseSize({id}, {delta})"
        );
    }

    ok(increase(&mut c, "gpu", 3).await, "IncreaseSize(gpu, 3)");
    assert_eq!(target(&mut c, "gpu").await, 3);

    let status = expect_code(
        increase(&mut c, "gpu", 2).await,
        Code::FailedPrecondition,
        "IncreaseSize(gpu, 2) at 3/4",
    );
    let msg = status.message();
    assert!(
        msg.contains("gpu"),
        "message does not name the group: {msg:?}"
    );
    let nums = numbers(msg);
    for n in ["3", "2", "4"] {
        assert!(
            nums.contains(&n),
            "message lacks {n} (target, delta, max): {msg:?}"
        );
    }
    assert_eq!(
        target(&mut c, "gpu").await,
        3,
        "refused increase changed the target"
    );

    // Up to exactly max is fine; one more is not.
    ok(
        increase(&mut c, "gpu", 1).await,
        "IncreaseSize(gpu, 1) to max",
    );
    assert_eq!(target(&mut c, "gpu").await, 4);
    expect_code(
        increase(&mut c, "gpu", 1).await,
        Code::FailedPrecondition,
        "IncreaseSize past max",
    );
    assert_eq!(target(&mut c, "gpu").await, 4);

    // Capacity that is not created yet still counts in the target right away.
    ok(increase(&mut c, "lazy", 2).await, "IncreaseSize(lazy, 2)");
    assert_eq!(target(&mut c, "lazy").await, 2);
    assert!(
        nodes(&mut c, "lazy").await.is_empty(),
        "lazy capacity was created before createDelay"
    );

    // A group with a min: target = old + delta.
    ok(increase(&mut c, "cpu", 2).await, "IncreaseSize(cpu, 2)");
    assert_eq!(target(&mut c, "cpu").await, 3);
    server.stop().await;
}

#[tokio::test]
async fn node_group_nodes_reports_running_creating_and_failed_instances() {
    let server = start().await;
    let mut c = server.client().await;

    expect_code(
        instances(&mut c, UNKNOWN).await,
        Code::NotFound,
        "NodeGroupNodes(unknown)",
    );

    // provisionDelay 0s: running at once, the pre-existing min-size instance too.
    ok(increase(&mut c, "cpu", 1).await, "IncreaseSize(cpu, 1)");
    let cpu = nodes(&mut c, "cpu").await;
    assert_eq!(cpu.len(), 2);
    for i in &cpu {
        assert_eq!(state(i), InstanceState::InstanceRunning, "{i:?}");
        assert!(error_info(i).is_none(), "{i:?}");
        assert!(i.id.starts_with("gangscaler-memory://cpu/"), "{i:?}");
    }
    assert_eq!(
        ids(&cpu).len(),
        cpu.iter().map(|i| &i.id).collect::<HashSet<_>>().len()
    );

    // provisionDelay 1h: creating, without error info.
    ok(increase(&mut c, "gpu", 2).await, "IncreaseSize(gpu, 2)");
    let gpu = nodes(&mut c, "gpu").await;
    assert_eq!(gpu.len(), 2);
    for i in &gpu {
        assert_eq!(state(i), InstanceState::InstanceCreating, "{i:?}");
        assert!(
            error_info(i).is_none(),
            "creating instance carries error info: {i:?}"
        );
    }

    // Failure after 1 instance: of two new instances exactly one failed, and is reported the
    // only way CA counts a creation error: instanceCreating + errorInfo.
    ok(increase(&mut c, "stock", 2).await, "IncreaseSize(stock, 2)");
    let stock = nodes(&mut c, "stock").await;
    assert_eq!(stock.len(), 2, "{stock:?}");
    let (failed, healthy): (Vec<_>, Vec<_>) = stock.iter().partition(|i| has_error(i));
    assert_eq!(failed.len(), 1, "{stock:?}");
    let bad = failed[0];
    assert_eq!(state(bad), InstanceState::InstanceCreating, "{bad:?}");
    let info = error_info(bad).expect("error info");
    assert_eq!(info.error_code, "stockout");
    assert_eq!(info.instance_error_class, 1, "stock-out is OutOfResources");
    assert!(!info.error_message.is_empty());
    assert_eq!(
        state(healthy[0]),
        InstanceState::InstanceRunning,
        "{:?}",
        healthy[0]
    );
    assert!(error_info(healthy[0]).is_none());
    assert_eq!(
        target(&mut c, "stock").await,
        2,
        "a failed instance still counts in the target"
    );

    // createDelay 1h: in the target, not yet an instance.
    ok(increase(&mut c, "lazy", 2).await, "IncreaseSize(lazy, 2)");
    assert!(nodes(&mut c, "lazy").await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn delete_nodes_is_all_or_nothing_and_respects_min_size() {
    let server = start().await;
    let mut c = server.client().await;

    ok(increase(&mut c, "cpu", 2).await, "IncreaseSize(cpu, 2)");
    let before = nodes(&mut c, "cpu").await;
    assert_eq!(before.len(), 3);
    let (a, b, cc) = (
        before[0].id.clone(),
        before[1].id.clone(),
        before[2].id.clone(),
    );
    let other_group = nodes(&mut c, "wide").await.remove(0).id;
    let foreign = node("aws:///us-east-1a/i-0abc", "ip-10-0-0-1");

    let refusals: Vec<(&str, &str, Vec<proto::ExternalGrpcNode>, Code)> = vec![
        (
            "unknown group",
            UNKNOWN,
            vec![node(&a, node_name(&a))],
            Code::NotFound,
        ),
        ("no nodes", "cpu", vec![], Code::InvalidArgument),
        (
            "node without name or providerID",
            "cpu",
            vec![node("", "")],
            Code::InvalidArgument,
        ),
        (
            "unmanaged node",
            "cpu",
            vec![foreign.clone()],
            Code::InvalidArgument,
        ),
        (
            "node of another group",
            "cpu",
            vec![fake_node(&other_group, "unregistered")],
            Code::InvalidArgument,
        ),
        (
            "one of two nodes is unmanaged",
            "cpu",
            vec![node(&a, node_name(&a)), foreign],
            Code::InvalidArgument,
        ),
        (
            "one of two nodes is in another group",
            "cpu",
            vec![
                node(&b, node_name(&b)),
                node(&other_group, node_name(&other_group)),
            ],
            Code::InvalidArgument,
        ),
        (
            "three of three would go below min 1",
            "cpu",
            vec![node(&a, ""), node(&b, ""), node(&cc, "")],
            Code::FailedPrecondition,
        ),
    ];
    for (what, id, list, want) in refusals {
        expect_code(delete(&mut c, id, list).await, want, what);
        assert_eq!(target(&mut c, "cpu").await, 3, "{what}: target changed");
        assert_eq!(
            ids(&nodes(&mut c, "cpu").await),
            ids(&before),
            "{what}: instances changed"
        );
        assert_eq!(
            target(&mut c, "wide").await,
            10,
            "{what}: other group changed"
        );
    }

    // By providerID.
    ok(
        delete(&mut c, "cpu", vec![node(&a, node_name(&a))]).await,
        "DeleteNodes(a)",
    );
    assert_eq!(target(&mut c, "cpu").await, 2);
    let left = ids(&nodes(&mut c, "cpu").await);
    assert!(
        !left.contains(&a),
        "deleted instance still listed: {left:?}"
    );
    assert_eq!(
        group_for(&mut c, node(&a, node_name(&a))).await.id,
        "",
        "deleted node still managed"
    );

    // By name alone (a node whose providerID is not set yet).
    ok(
        delete(&mut c, "cpu", vec![node("", node_name(&b))]).await,
        "DeleteNodes(b by name)",
    );
    assert_eq!(target(&mut c, "cpu").await, 1);
    assert_eq!(ids(&nodes(&mut c, "cpu").await), vec![cc.clone()]);

    // At min: a healthy node may not go.
    let status = expect_code(
        delete(&mut c, "cpu", vec![fake_node(&cc, "unregistered")]).await,
        Code::FailedPrecondition,
        "DeleteNodes below min",
    );
    assert!(status.message().contains("cpu"), "{:?}", status.message());
    assert_eq!(target(&mut c, "cpu").await, 1);
    assert_eq!(ids(&nodes(&mut c, "cpu").await), vec![cc]);

    // Several nodes at once.
    ok(increase(&mut c, "wide", 2).await, "IncreaseSize(wide, 2)");
    let wide = nodes(&mut c, "wide").await;
    let pair = vec![
        node(&wide[0].id, node_name(&wide[0].id)),
        fake_node(&wide[1].id, "unregistered"),
    ];
    ok(
        delete(&mut c, "wide", pair).await,
        "DeleteNodes(two wide nodes)",
    );
    assert_eq!(target(&mut c, "wide").await, 10);
    let left = ids(&nodes(&mut c, "wide").await);
    assert_eq!(left.len(), 10);
    assert!(!left.contains(&wide[0].id) && !left.contains(&wide[1].id));

    // An errored instance can always be deleted, even with the group at its min size.
    ok(
        increase(&mut c, "stockmin", 1).await,
        "IncreaseSize(stockmin, 1)",
    );
    let sm = nodes(&mut c, "stockmin").await;
    let bad = sm
        .iter()
        .find(|i| has_error(i))
        .expect("stockmin has a failed instance")
        .id
        .clone();
    let good = sm
        .iter()
        .find(|i| !has_error(i))
        .expect("stockmin has a healthy instance")
        .id
        .clone();
    ok(
        delete(&mut c, "stockmin", vec![node(&good, node_name(&good))]).await,
        "DeleteNodes(stockmin healthy)",
    );
    assert_eq!(
        target(&mut c, "stockmin").await,
        1,
        "stockmin is now at min with only the failed instance"
    );
    ok(
        delete(&mut c, "stockmin", vec![fake_node(&bad, "create-error")]).await,
        "DeleteNodes(errored instance at min)",
    );
    assert_eq!(target(&mut c, "stockmin").await, 0);
    assert!(nodes(&mut c, "stockmin").await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn decrease_target_size_cancels_only_capacity_not_yet_created() {
    let server = start().await;
    let mut c = server.client().await;

    let refusals = [
        (UNKNOWN, -1, Code::NotFound),
        ("lazy", 0, Code::InvalidArgument),
        ("lazy", 1, Code::InvalidArgument),
        // i32::MIN is a (very) negative delta, refused because nothing is pending.
        ("lazy", i32::MIN, Code::FailedPrecondition),
        // Nothing pending at all.
        ("lazy", -1, Code::FailedPrecondition),
    ];
    for (id, delta, want) in refusals {
        expect_code(
            decrease(&mut c, id, delta).await,
            want,
            &format!("DecreaseTargetSize({id}, {delta})"),
        );
        assert_eq!(target(&mut c, "lazy").await, 0);
    }

    ok(increase(&mut c, "lazy", 3).await, "IncreaseSize(lazy, 3)");
    assert_eq!(target(&mut c, "lazy").await, 3);
    // The most negative delta asks to cancel 2^31 units: refused for what it is, not as a
    // "non-negative" delta.
    let refused = expect_code(
        decrease(&mut c, "lazy", i32::MIN).await,
        Code::FailedPrecondition,
        "DecreaseTargetSize(lazy, i32::MIN) with 3 pending",
    );
    let msg = refused.message();
    assert!(
        msg.contains("by 2147483648") && msg.contains("only 3"),
        "{msg}"
    );
    assert!(!msg.contains("must be negative"), "{msg}");
    assert_eq!(target(&mut c, "lazy").await, 3);
    let zero = expect_code(
        decrease(&mut c, "lazy", 0).await,
        Code::InvalidArgument,
        "DecreaseTargetSize(lazy, 0)",
    );
    assert!(
        zero.message().contains("must be negative, got 0"),
        "{}",
        zero.message()
    );
    ok(
        decrease(&mut c, "lazy", -2).await,
        "DecreaseTargetSize(lazy, -2)",
    );
    assert_eq!(target(&mut c, "lazy").await, 1);
    expect_code(
        decrease(&mut c, "lazy", -5).await,
        Code::FailedPrecondition,
        "DecreaseTargetSize(lazy, -5) with 1 pending",
    );
    assert_eq!(target(&mut c, "lazy").await, 1);
    ok(
        decrease(&mut c, "lazy", -1).await,
        "DecreaseTargetSize(lazy, -1)",
    );
    assert_eq!(target(&mut c, "lazy").await, 0);

    // Fully created group: nothing to cancel.
    expect_code(
        decrease(&mut c, "cpu", -1).await,
        Code::FailedPrecondition,
        "DecreaseTargetSize(cpu) all created",
    );
    assert_eq!(target(&mut c, "cpu").await, 1);

    // Created but still booting is created: must go through DeleteNodes.
    ok(increase(&mut c, "gpu", 2).await, "IncreaseSize(gpu, 2)");
    expect_code(
        decrease(&mut c, "gpu", -1).await,
        Code::FailedPrecondition,
        "DecreaseTargetSize(gpu) while creating",
    );
    assert_eq!(target(&mut c, "gpu").await, 2);
    assert_eq!(nodes(&mut c, "gpu").await.len(), 2);
    server.stop().await;
}

/// Bytes of a binary-suffixed quantity such as `2Ti` or `2024Gi`.
fn bytes(q: &str) -> u128 {
    let (num, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50)]
        .iter()
        .find_map(|(s, shift)| q.strip_suffix(s).map(|n| (n, *shift)))
        .unwrap_or((q, 0));
    num.parse::<u128>()
        .unwrap_or_else(|_| panic!("not a whole binary quantity: {q:?}"))
        << shift
}

fn quantities(
    m: &BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>,
) -> BTreeMap<&str, &str> {
    m.iter()
        .map(|(k, v)| (k.as_str(), v.string.as_deref().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn template_node_info_is_a_ready_gpu_node_in_both_fields() {
    let server = start().await;
    let c = server.client().await;

    let template = |id: &str| {
        let mut c = c.clone();
        let id = id.to_owned();
        async move {
            c.node_group_template_node_info(proto::NodeGroupTemplateNodeInfoRequest { id })
                .await
                .map(tonic::Response::into_inner)
        }
    };
    expect_code(
        template("notemplate").await,
        Code::Unimplemented,
        "template of a group without capacity",
    );
    expect_code(
        template(UNKNOWN).await,
        Code::NotFound,
        "template of an unknown group",
    );

    let resp = template("gpu").await.expect("template(gpu)");
    assert!(!resp.node_bytes.is_empty());
    assert_eq!(
        resp.node_info, resp.node_bytes,
        "legacy field 1 must carry the same Node"
    );
    assert!(resp.resource_slice_bytes.is_empty());
    let node = <Node as prost::Message>::decode(resp.node_bytes.as_slice())
        .expect("nodeBytes is a v1.Node");

    let meta = node.metadata.expect("metadata");
    let labels = &meta.labels;
    for (k, v) in [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("node.kubernetes.io/instance-type", "p5.48xlarge"),
        ("topology.kubernetes.io/zone", "us-east-1a"),
        ("topology.kubernetes.io/region", "us-east-1"),
        ("nvidia.com/gpu.product", GPU_H100),
        ("nvidia.com/gpu.count", "8"),
        ("gangscaler.io/pool", "h100"),
        ("workload-class", "training"),
        ("topology.gangscaler.io/block", "block-a"),
    ] {
        assert_eq!(
            labels.get(k).map(String::as_str),
            Some(v),
            "label {k}; labels {labels:?}"
        );
    }

    let spec = node.spec.expect("spec");
    assert_eq!(spec.taints.len(), 1, "{:?}", spec.taints);
    let t = &spec.taints[0];
    assert_eq!(
        (t.key.as_deref(), t.value.as_deref(), t.effect.as_deref()),
        (Some("nvidia.com/gpu"), Some("present"), Some("NoSchedule"))
    );

    let status = node.status.expect("status");
    let capacity = quantities(&status.capacity);
    let allocatable = quantities(&status.allocatable);
    for (name, list) in [("capacity", &capacity), ("allocatable", &allocatable)] {
        assert_eq!(list.get("nvidia.com/gpu"), Some(&"8"), "{name}: {list:?}");
        assert_eq!(
            list.get("rdma/rdma_shared_device_a"),
            Some(&"8"),
            "{name}: {list:?}"
        );
        assert_eq!(
            list.get("gangscaler.io/rdma-gbps"),
            Some(&"3200"),
            "{name}: {list:?}"
        );
        assert_eq!(list.get("pods"), Some(&"110"), "{name}: {list:?}");
    }
    assert_eq!(capacity.get("cpu"), Some(&"192"));
    assert_eq!(
        allocatable.get("cpu"),
        Some(&"190"),
        "allocatable = capacity - reserved"
    );
    assert_eq!(bytes(capacity["memory"]), 2048 << 30);
    assert_eq!(bytes(allocatable["memory"]), 2024 << 30);
    assert_eq!(bytes(capacity["ephemeral-storage"]), 7600 << 30);
    assert_eq!(bytes(allocatable["ephemeral-storage"]), 7500 << 30);

    let condition = |ty: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.r#type.as_deref() == Some(ty))
            .and_then(|c| c.status.clone())
    };
    assert_eq!(condition("Ready").as_deref(), Some("True"));
    for ty in ["MemoryPressure", "DiskPressure", "NetworkUnavailable"] {
        assert_eq!(condition(ty).as_deref(), Some("False"), "{ty}");
    }

    // A CPU group's template carries no GPU.
    let resp = template("cpu").await.expect("template(cpu)");
    let cpu = <Node as prost::Message>::decode(resp.node_bytes.as_slice()).expect("v1.Node");
    let status = cpu.status.expect("status");
    assert!(
        !status.capacity.contains_key("nvidia.com/gpu"),
        "{:?}",
        status.capacity
    );
    assert_eq!(
        status
            .capacity
            .get("pods")
            .and_then(|q| q.string.as_deref()),
        Some("110")
    );
    let labels = cpu.metadata.expect("metadata").labels;
    assert!(!labels.contains_key("nvidia.com/gpu.product"), "{labels:?}");
    assert!(cpu.spec.is_none_or(|s| s.taints.is_empty()));
    server.stop().await;
}

fn pb_duration(secs: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: secs,
        nanos: 0,
    })
}

fn legacy_duration(secs: i64) -> Option<proto::LegacyDuration> {
    Some(proto::LegacyDuration {
        duration: secs * 1_000_000_000,
    })
}

#[tokio::test]
async fn get_options_answers_empty_without_overrides_and_echoes_defaults_with_them() {
    let server = start().await;
    let c = server.client().await;
    let options = |id: &str, defaults: Option<proto::NodeGroupAutoscalingOptions>| {
        let mut c = c.clone();
        let id = id.to_owned();
        async move {
            c.node_group_get_options(proto::NodeGroupAutoscalingOptionsRequest { id, defaults })
                .await
                .map(|r| r.into_inner().node_group_autoscaling_options)
        }
    };

    // What CA 1.34.2+ sends: its defaults in both the legacy and the new fields.
    let ca_defaults = proto::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.5,
        scale_down_gpu_utilization_threshold: 0.5,
        scale_down_unneeded_time: legacy_duration(600),
        scale_down_unready_time: legacy_duration(1200),
        max_node_provision_time: legacy_duration(900),
        zero_or_max_node_scaling: false,
        ignore_daemon_sets_utilization: true,
        scale_down_unneeded_duration: pb_duration(600),
        scale_down_unready_duration: pb_duration(1200),
        max_node_provision_duration: pb_duration(900),
        max_node_startup_duration: pb_duration(900),
        allow_non_atomic_scale_up_to_max: true,
    };

    expect_code(
        options(UNKNOWN, Some(ca_defaults)).await,
        Code::NotFound,
        "GetOptions(unknown)",
    );
    for id in ["cpu", "notemplate"] {
        let got = options(id, Some(ca_defaults))
            .await
            .expect("GetOptions without overrides");
        assert_eq!(
            got, None,
            "{id} has no overrides: CA must keep its own defaults"
        );
    }

    let got = options("gpu", Some(ca_defaults))
        .await
        .expect("GetOptions(gpu)")
        .expect("gpu overrides options");
    let want = proto::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.3,
        scale_down_unneeded_time: legacy_duration(1200),
        scale_down_unneeded_duration: pb_duration(1200),
        ..ca_defaults
    };
    assert_eq!(
        got, want,
        "overrides applied, every other default echoed, legacy = new durations"
    );

    // CA 1.34.1 and earlier: durations only in the legacy fields (nanoseconds).
    let legacy_only = proto::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: 0.5,
        scale_down_gpu_utilization_threshold: 0.6,
        scale_down_unneeded_time: legacy_duration(180),
        scale_down_unready_time: legacy_duration(420),
        max_node_provision_time: legacy_duration(660),
        ..Default::default()
    };
    let got = options("gpu", Some(legacy_only))
        .await
        .expect("GetOptions(gpu, legacy defaults)")
        .expect("gpu overrides options");
    assert_eq!(got.scale_down_utilization_threshold, 0.3);
    assert_eq!(got.scale_down_gpu_utilization_threshold, 0.6);
    for (what, new, legacy, secs) in [
        (
            "unneeded (overridden)",
            &got.scale_down_unneeded_duration,
            &got.scale_down_unneeded_time,
            1200,
        ),
        (
            "unready",
            &got.scale_down_unready_duration,
            &got.scale_down_unready_time,
            420,
        ),
        (
            "max provision",
            &got.max_node_provision_duration,
            &got.max_node_provision_time,
            660,
        ),
    ] {
        assert_eq!(new, &pb_duration(secs), "{what}: new field");
        assert_eq!(legacy, &legacy_duration(secs), "{what}: legacy field");
    }
    server.stop().await;
}

fn ts(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos })
}

fn legacy_ts(seconds: i64, nanos: i32) -> Option<proto::LegacyTime> {
    Some(proto::LegacyTime { seconds, nanos })
}

/// At most this many bytes of status message, whatever the request carried.
const MESSAGE_BOUND: usize = 1024;

#[track_caller]
fn bounded_and_escaped(status: &tonic::Status, full_len: usize, what: &str) {
    let msg = status.message();
    assert!(
        msg.len() < MESSAGE_BOUND,
        "{what}: a {}-byte message for a {full_len}-byte value",
        msg.len()
    );
    assert!(
        msg.contains(&format!("…({full_len} bytes)")),
        "{what}: {msg}"
    );
    assert!(
        !msg.contains('\n') && !msg.contains('\r'),
        "{what}: {msg:?}"
    );
}

#[tokio::test]
async fn request_strings_are_echoed_cut_short_and_escaped() {
    let server = start().await;
    let mut c = server.client().await;
    let huge = format!("line\nINFO forged\r{}", "g".repeat(1 << 20));

    let s = expect_code(
        target_size(&mut c, &huge).await,
        Code::NotFound,
        "TargetSize(1 MiB id)",
    );
    bounded_and_escaped(&s, huge.len(), "TargetSize");
    assert!(
        s.message()
            .starts_with(r#"node group "line\nINFO forged\rggg"#),
        "{}",
        s.message()
    );
    for (what, result) in [
        ("IncreaseSize", increase(&mut c, &huge, 1).await),
        ("DecreaseTargetSize", decrease(&mut c, &huge, -1).await),
        (
            "DeleteNodes",
            delete(&mut c, &huge, vec![node("p", "n")]).await,
        ),
    ] {
        let s = expect_code(result, Code::NotFound, what);
        bounded_and_escaped(&s, huge.len(), what);
    }

    // A node name and providerID from the request, in a delete refusal.
    let s = expect_code(
        delete(&mut c, "gpu", vec![node(&huge, &huge)]).await,
        Code::InvalidArgument,
        "DeleteNodes(gpu, unknown 1 MiB node)",
    );
    bounded_and_escaped(&s, huge.len(), "DeleteNodes node");
    // ... and in an unmanaged-node refusal.
    let s = expect_code(
        c.pricing_node_price(proto::PricingNodePriceRequest {
            node: Some(node(&huge, &huge)),
            start_timestamp: ts(0, 0),
            end_timestamp: ts(3600, 0),
            ..Default::default()
        })
        .await,
        Code::NotFound,
        "PricingNodePrice(unmanaged 1 MiB node)",
    );
    bounded_and_escaped(&s, huge.len(), "PricingNodePrice");

    // Short values are echoed whole.
    let s = expect_code(
        target_size(&mut c, "no-such-group").await,
        Code::NotFound,
        "TargetSize(no-such-group)",
    );
    assert_eq!(s.message(), r#"node group "no-such-group" not found"#);
    server.stop().await;
}

/// A codec that sends raw bytes as the request message and decodes a
/// `NodeGroupTargetSizeResponse`, to put undecodable bodies on the wire.
#[derive(Clone, Default)]
struct RawRequest;

struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Codec for RawRequest {
    type Encode = Vec<u8>;
    type Decode = proto::NodeGroupTargetSizeResponse;
    type Encoder = RawEncoder;
    type Decoder = tonic_prost::ProstDecoder<proto::NodeGroupTargetSizeResponse>;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

async fn raw_target_size(server: &TestServer, body: Vec<u8>) -> Result<i32, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .expect("valid uri")
        .connect()
        .await
        .expect("connecting");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("channel ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupTargetSize",
    );
    grpc.unary(tonic::Request::new(body), path, RawRequest)
        .await
        .map(|r| r.into_inner().target_size)
}

#[tokio::test]
async fn oversized_requests_are_resource_exhausted_and_undecodable_ones_internal() {
    let server = start().await;
    let mut c = server.client().await;

    // 5 MiB, over tonic's 4 MiB request limit: RESOURCE_EXHAUSTED, as grpc-go answers it.
    let s = expect_code(
        target_size(&mut c, &"g".repeat(5 << 20)).await,
        Code::ResourceExhausted,
        "TargetSize(5 MiB id)",
    );
    assert!(
        s.message().contains("4194304"),
        "names the limit: {}",
        s.message()
    );
    // Just under the limit is decoded and answered by the service.
    expect_code(
        target_size(&mut c, &"g".repeat(3 << 20)).await,
        Code::NotFound,
        "TargetSize(3 MiB id)",
    );

    // Field 1 (id) as a string that is not UTF-8: INTERNAL, the code gRPC specifies for a
    // request that does not parse, with prost's message naming the field.
    let s = expect_code(
        raw_target_size(&server, vec![0x0a, 0x02, 0xff, 0xfe]).await,
        Code::Internal,
        "TargetSize(non-UTF-8 id)",
    );
    assert!(
        s.message().contains("NodeGroupTargetSizeRequest.id"),
        "{}",
        s.message()
    );
    // A length running past the end of the message.
    expect_code(
        raw_target_size(&server, vec![0x0a, 0x7f, b'g']).await,
        Code::Internal,
        "TargetSize(truncated)",
    );
    // The raw path itself is sound: a well-formed body is answered.
    let ok_body = proto::NodeGroupTargetSizeRequest { id: "gpu".into() };
    let target = raw_target_size(&server, prost::Message::encode_to_vec(&ok_body))
        .await
        .expect("well-formed raw request");
    assert_eq!(target, 0);
    // The server keeps serving.
    assert_eq!(common::target(&mut c, "gpu").await, 0);
    server.stop().await;
}

#[tokio::test]
async fn pricing_gpu_and_housekeeping_rpcs() {
    let server = start().await;
    let mut c = server.client().await;
    ok(increase(&mut c, "gpu", 1).await, "IncreaseSize(gpu, 1)");
    let gpu_id = nodes(&mut c, "gpu").await.remove(0).id;
    let cpu_id = nodes(&mut c, "cpu").await.remove(0).id;
    const T0: i64 = 1_767_225_600;

    let price = |n: proto::ExternalGrpcNode,
                 start: Option<prost_types::Timestamp>,
                 end: Option<prost_types::Timestamp>,
                 legacy_start: Option<proto::LegacyTime>,
                 legacy_end: Option<proto::LegacyTime>| {
        let mut c = c.clone();
        async move {
            c.pricing_node_price(proto::PricingNodePriceRequest {
                node: Some(n),
                start_time: legacy_start,
                end_time: legacy_end,
                start_timestamp: start,
                end_timestamp: end,
            })
            .await
            .map(|r| r.into_inner().price)
        }
    };

    let priced = [
        (
            "2h, new fields",
            ts(T0, 0),
            ts(T0 + 7200, 0),
            None,
            None,
            2.0,
        ),
        (
            "30m, legacy fields only",
            None,
            None,
            legacy_ts(T0, 0),
            legacy_ts(T0 + 1800, 0),
            0.5,
        ),
        (
            "new fields win over legacy",
            ts(T0, 0),
            ts(T0 + 3600, 0),
            legacy_ts(T0, 0),
            legacy_ts(T0 + 5 * 3600, 0),
            1.0,
        ),
        (
            "sub-second bounds",
            ts(T0, 500_000_000),
            ts(T0 + 3600, 500_000_000),
            None,
            None,
            1.0,
        ),
        ("empty period", ts(T0, 0), ts(T0, 0), None, None, 0.0),
    ];
    for (what, s, e, ls, le, hours) in priced {
        let got = price(fake_node(&gpu_id, "unregistered"), s, e, ls, le)
            .await
            .unwrap_or_else(|st| panic!("{what}: {st:?}"));
        let want = 98.32 * hours;
        assert!(
            (got - want).abs() < 1e-9,
            "{what}: price {got}, want {want}"
        );
    }
    // By name only, as for a node whose providerID is not set yet.
    let got = price(
        node("", node_name(&gpu_id)),
        ts(T0, 0),
        ts(T0 + 3600, 0),
        None,
        None,
    )
    .await
    .expect("price by name");
    assert!((got - 98.32).abs() < 1e-9, "{got}");

    let refused = [
        (
            "group without price",
            node(&cpu_id, node_name(&cpu_id)),
            ts(T0, 0),
            ts(T0 + 60, 0),
            Code::Unimplemented,
        ),
        (
            "unmanaged node",
            node("aws:///us-east-1a/i-0abc", "ip-10-0-0-1"),
            ts(T0, 0),
            ts(T0 + 60, 0),
            Code::NotFound,
        ),
        (
            "end before start",
            fake_node(&gpu_id, "unregistered"),
            ts(T0 + 60, 0),
            ts(T0, 0),
            Code::InvalidArgument,
        ),
        (
            "end 1ns before start",
            fake_node(&gpu_id, "unregistered"),
            ts(T0, 1),
            ts(T0, 0),
            Code::InvalidArgument,
        ),
        (
            "no end",
            fake_node(&gpu_id, "unregistered"),
            ts(T0, 0),
            None,
            Code::InvalidArgument,
        ),
        (
            "no timestamps",
            fake_node(&gpu_id, "unregistered"),
            None,
            None,
            Code::InvalidArgument,
        ),
    ];
    for (what, n, s, e, want) in refused {
        expect_code(price(n, s, e, None, None).await, want, what);
    }

    let pod = c
        .pricing_pod_price(proto::PricingPodPriceRequest {
            start_timestamp: ts(T0, 0),
            end_timestamp: ts(T0 + 60, 0),
            ..Default::default()
        })
        .await;
    expect_code(pod, Code::Unimplemented, "PricingPodPrice");

    let label = c
        .gpu_label(proto::GpuLabelRequest {})
        .await
        .expect("GPULabel")
        .into_inner()
        .label;
    assert_eq!(label, "nvidia.com/gpu.product");
    let types = c
        .get_available_gpu_types(proto::GetAvailableGpuTypesRequest {})
        .await
        .expect("GetAvailableGPUTypes")
        .into_inner()
        .gpu_types;
    let keys: HashSet<&str> = types.keys().map(String::as_str).collect();
    assert_eq!(keys, HashSet::from([GPU_H100, GPU_L4]));

    c.cleanup(proto::CleanupRequest {}).await.expect("Cleanup");
    c.refresh(proto::RefreshRequest {}).await.expect("Refresh");
    // Refresh without changes keeps everything as it was.
    assert_eq!(node_groups(&mut c).await, expected_groups());
    assert_eq!(target(&mut c, "gpu").await, 1);
    server.stop().await;
}

/// Runs `calls` concurrent requests spread over `clients` connections, all released at once;
/// returns each call's status code in input order.
async fn concurrently<F, Fut>(server: &TestServer, clients: usize, calls: usize, f: F) -> Vec<Code>
where
    F: Fn(Client, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static,
{
    let mut pool = Vec::with_capacity(clients);
    for _ in 0..clients {
        pool.push(server.client().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(calls));
    let mut tasks = Vec::with_capacity(calls);
    for i in 0..calls {
        let call = f(pool[i % clients].clone(), i);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            call.await
        }));
    }
    let mut codes = Vec::with_capacity(calls);
    for t in tasks {
        codes.push(match t.await.expect("task did not panic") {
            Ok(()) => Code::Ok,
            Err(s) => s.code(),
        });
    }
    codes
}

fn count(codes: &[Code], code: Code) -> usize {
    codes.iter().filter(|&&c| c == code).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increases_neither_lose_updates_nor_overshoot_max() {
    let server = start().await;
    let codes = concurrently(&server, 8, 64, |mut c, _| async move {
        increase(&mut c, "big", 1).await
    })
    .await;
    assert_eq!(count(&codes, Code::Ok), 40, "{codes:?}");
    assert_eq!(count(&codes, Code::FailedPrecondition), 24, "{codes:?}");
    let mut c = server.client().await;
    assert_eq!(target(&mut c, "big").await, 40);
    let all = nodes(&mut c, "big").await;
    assert_eq!(all.len(), 40);
    assert_eq!(
        all.iter().map(|i| &i.id).collect::<HashSet<_>>().len(),
        40,
        "instance ids are unique"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deletes_of_distinct_nodes_stop_exactly_at_min() {
    let server = start().await;
    let mut c = server.client().await;
    ok(increase(&mut c, "wide", 30).await, "IncreaseSize(wide, 30)");
    let all = ids(&nodes(&mut c, "wide").await);
    assert_eq!(all.len(), 40);

    let victims = Arc::new(all.clone());
    let codes = concurrently(&server, 8, all.len(), move |mut c, i| {
        let id = victims[i].clone();
        async move { delete(&mut c, "wide", vec![node(&id, node_name(&id))]).await }
    })
    .await;
    // min 10: exactly 30 of the 40 single-node deletes fit.
    assert_eq!(count(&codes, Code::Ok), 30, "{codes:?}");
    assert_eq!(count(&codes, Code::FailedPrecondition), 10, "{codes:?}");
    assert_eq!(target(&mut c, "wide").await, 10);
    let refused: Vec<String> = all
        .iter()
        .zip(&codes)
        .filter(|(_, code)| **code != Code::Ok)
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(
        ids(&nodes(&mut c, "wide").await),
        refused,
        "exactly the refused deletes' nodes remain"
    );
    server.stop().await;
}

#[tokio::test]
async fn metrics_count_requests_by_code_and_health_endpoints_answer() {
    let server = start().await;
    let mut c = server.client().await;

    assert_eq!(common::http_get(server.http, "/healthz").await.0, 200);
    assert_eq!(common::http_get(server.http, "/readyz").await.0, 200);
    assert_eq!(common::http_get(server.http, "/no-such-path").await.0, 404);

    for _ in 0..3 {
        expect_code(
            increase(&mut c, "gpu", 5).await,
            Code::FailedPrecondition,
            "past max",
        );
    }
    ok(increase(&mut c, "gpu", 1).await, "IncreaseSize(gpu, 1)");
    ok(increase(&mut c, "gpu", 1).await, "IncreaseSize(gpu, 1)");
    expect_code(
        increase(&mut c, UNKNOWN, 1).await,
        Code::NotFound,
        "unknown",
    );

    let m = metrics(server.http).await;
    let labels = "grpc_type=\"unary\",grpc_service=\"clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider\",grpc_method=\"NodeGroupIncreaseSize\"";
    let rpc = |code: &str| format!("grpc_server_handled_total{{{labels},grpc_code=\"{code}\"}}");
    assert_eq!(sample(&m, &rpc("FailedPrecondition")), Some(3.0), "{m}");
    assert_eq!(sample(&m, &rpc("OK")), Some(2.0), "{m}");
    assert_eq!(sample(&m, &rpc("NotFound")), Some(1.0), "{m}");
    assert_eq!(sample(&m, &rpc("InvalidArgument")), None, "{m}");
    assert_eq!(
        sample(&m, &format!("grpc_server_started_total{{{labels}}}")),
        Some(6.0),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            &format!("grpc_server_handling_seconds_count{{{labels}}}")
        ),
        Some(6.0),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "gangscaler_provision_calls_total{backend=\"memory\",operation=\"increase\",outcome=\"above_max\"}"
        ),
        Some(3.0),
        "{m}"
    );
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(1.0), "{m}");

    // Readiness holds while serving.
    assert_eq!(common::http_get(server.http, "/readyz").await.0, 200);
    server.stop().await;
}

fn cpu_with(max: &str, extra: &str) -> String {
    format!(
        "id: cpu\nminSize: 1\nmaxSize: {max}\ninstanceType: m7i.8xlarge\nregion: us-east-1\nzone: us-east-1a\n{extra}"
    )
}

#[tokio::test]
async fn refresh_applies_valid_edits_and_keeps_the_last_good_configuration() {
    let server = start().await;
    let mut c = server.client().await;
    let refresh = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            c.refresh(proto::RefreshRequest {})
                .await
                .expect("Refresh never fails")
        }
    };
    let reloads = |m: &str, outcome: &str| {
        sample(
            m,
            &format!("gangscaler_config_reloads_total{{outcome=\"{outcome}\"}}"),
        )
        .unwrap_or(0.0)
    };
    assert_eq!(node_groups(&mut c).await["cpu"], (1, 3));

    // A valid edit takes effect on the next Refresh, for listing and for sizing.
    server.write("nodegroups/cpu.yaml", &cpu_with("5", ""));
    refresh(&mut c).await;
    assert_eq!(node_groups(&mut c).await["cpu"], (1, 5));
    ok(
        increase(&mut c, "cpu", 4).await,
        "IncreaseSize(cpu, 4) under the new max",
    );
    assert_eq!(target(&mut c, "cpu").await, 5);
    let m = metrics(server.http).await;
    assert_eq!(
        (reloads(&m, "success"), reloads(&m, "failure")),
        (1.0, 0.0),
        "{m}"
    );
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(1.0), "{m}");

    // Invalid edits: Refresh still OK, the last good configuration stays, the gauge drops.
    let invalid = [
        (
            "negative minSize",
            cpu_with("7", "").replace("minSize: 1", "minSize: -1"),
        ),
        ("unknown field", cpu_with("7", "maxSzie: 9\n")),
    ];
    for (n, (what, text)) in invalid.iter().enumerate() {
        server.write("nodegroups/cpu.yaml", text);
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await,
            {
                let mut g = expected_groups();
                g.insert("cpu".into(), (1, 5));
                g
            },
            "{what}"
        );
        let m = metrics(server.http).await;
        assert_eq!(
            sample(&m, "gangscaler_config_valid"),
            Some(0.0),
            "{what}: {m}"
        );
        assert_eq!(reloads(&m, "failure"), (n + 1) as f64, "{what}: {m}");
        // The same bad files are not re-counted on every loop.
        refresh(&mut c).await;
        assert_eq!(
            reloads(&metrics(server.http).await, "failure"),
            (n + 1) as f64,
            "{what}: counted twice"
        );
    }
    assert_eq!(target(&mut c, "cpu").await, 5);

    // Fixing the file recovers.
    server.write("nodegroups/cpu.yaml", &cpu_with("6", ""));
    refresh(&mut c).await;
    assert_eq!(node_groups(&mut c).await["cpu"], (1, 6));
    let m = metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(1.0), "{m}");
    assert_eq!(reloads(&m, "success"), 2.0, "{m}");

    // Removing a group that still has capacity is refused the same way.
    server.remove("nodegroups/cpu.yaml");
    refresh(&mut c).await;
    assert_eq!(
        node_groups(&mut c).await["cpu"],
        (1, 6),
        "group with target 5 was dropped"
    );
    assert_eq!(target(&mut c, "cpu").await, 5);
    let m = metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(0.0), "{m}");
    assert_eq!(reloads(&m, "failure"), 3.0, "{m}");

    // Restoring it and removing an empty group (target 0) is accepted; new groups appear at min.
    server.write("nodegroups/cpu.yaml", &cpu_with("6", ""));
    server.remove("nodegroups/notemplate.yaml");
    server.write(
        "nodegroups/fresh.yaml",
        &WIDE
            .replace("id: wide", "id: fresh")
            .replace("minSize: 10", "minSize: 2"),
    );
    refresh(&mut c).await;
    let groups = node_groups(&mut c).await;
    assert!(!groups.contains_key("notemplate"), "{groups:?}");
    assert_eq!(groups.get("fresh"), Some(&(2, 40)));
    assert_eq!(groups["cpu"], (1, 6));
    expect_code(
        target_size(&mut c, "notemplate").await,
        Code::NotFound,
        "removed group",
    );
    assert_eq!(target(&mut c, "fresh").await, 2);
    assert_eq!(nodes(&mut c, "fresh").await.len(), 2);
    let m = metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(1.0), "{m}");
    assert_eq!(reloads(&m, "success"), 3.0, "{m}");
    server.stop().await;
}

/// Regression: NodeGroupForNode and NodeGroupDeleteNodes match nodes by the same rule (a
/// providerID decides alone), so a node claimed for a group can be deleted from it; CA would
/// otherwise pick such a node for scale-down and fail on every loop.
#[tokio::test]
async fn a_node_that_node_group_for_node_claims_can_be_deleted_from_that_group() {
    let server = start().await;
    let mut c = server.client().await;
    ok(increase(&mut c, "cpu", 1).await, "IncreaseSize(cpu, 1)");
    let id = nodes(&mut c, "cpu").await.remove(0).id;
    // A registered node whose name is one of our instances' but whose providerID is foreign.
    let n = node("aws:///us-east-1a/i-0abc", node_name(&id));
    let claimed = group_for(&mut c, n.clone()).await.id;
    assert_eq!(
        claimed, "",
        "a foreign providerID must not be claimed through the name"
    );
    let result = delete(&mut c, "cpu", vec![n]).await;
    assert_eq!(
        result.map_err(|s| s.code()).err(),
        Some(tonic::Code::InvalidArgument),
        "DeleteNodes must agree with NodeGroupForNode"
    );
    server.stop().await;
}
