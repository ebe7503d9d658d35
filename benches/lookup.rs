//! Server-side latency of the two hottest RPCs, `NodeGroupForNode` and `NodeGroupTargetSize`,
//! with 100 node groups and 10,000 instances. Calls go through the tonic service handler
//! (span, metrics, engine, backend), i.e. everything but HTTP/2 framing.
//!
//! Run: `cargo bench --features test-util --bench lookup`. Besides criterion's estimates it
//! prints p50/p99/p99.9 of 200,000 individually timed calls per RPC.

#![expect(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark times itself with the real clock"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use gangscaler::engine::Engine;
use gangscaler::grpc::Service;
use gangscaler::metrics::Metrics;
use gangscaler::proto::cloud_provider_server::CloudProvider;
use gangscaler::proto::{ExternalGrpcNode, NodeGroupForNodeRequest, NodeGroupTargetSizeRequest};
use gangscaler::provision::Provisioner;
use gangscaler::provision::memory::MemoryProvisioner;
use gangscaler::testing;
use tonic::Request;

const GROUPS: u32 = 100;
const PER_GROUP: u32 = 100;

struct Fixture {
    rt: tokio::runtime::Runtime,
    service: Service,
    provider_ids: Vec<String>,
    group_ids: Vec<String>,
}

fn fixture() -> Fixture {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let groups: Vec<_> = (0..GROUPS)
        .map(|i| testing::group(&format!("group-{i:03}"), PER_GROUP, PER_GROUP * 2))
        .collect();
    let metrics = Arc::new(Metrics::new());
    let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    let engine = rt
        .block_on(Engine::new(
            testing::loaded(groups),
            None,
            provisioners,
            metrics.clone(),
        ))
        .expect("engine");
    let engine = Arc::new(engine);
    let mut provider_ids = Vec::new();
    let cfg = engine.config();
    for g in &cfg.groups {
        let instances = rt.block_on(engine.nodes(g.id.as_str())).expect("instances");
        provider_ids.extend(instances.into_iter().map(|i| i.id));
    }
    assert_eq!(provider_ids.len(), (GROUPS * PER_GROUP) as usize);
    // Visit instances in a scattered order so lookups are not cache-friendly by accident.
    let n = provider_ids.len();
    let scattered = (0..n)
        .map(|i| provider_ids[(i * 7919) % n].clone())
        .collect();
    let group_ids = cfg.groups.iter().map(|g| g.id.to_string()).collect();
    Fixture {
        rt,
        service: Service::new(engine, metrics),
        provider_ids: scattered,
        group_ids,
    }
}

fn for_node(f: &Fixture, i: usize) {
    let id = &f.provider_ids[i % f.provider_ids.len()];
    let req = Request::new(NodeGroupForNodeRequest {
        node: Some(ExternalGrpcNode {
            provider_id: id.clone(),
            name: String::new(),
            ..Default::default()
        }),
    });
    let resp =
        f.rt.block_on(f.service.node_group_for_node(req))
            .expect("served");
    black_box(resp);
}

fn target_size(f: &Fixture, i: usize) {
    let id = &f.group_ids[i % f.group_ids.len()];
    let req = Request::new(NodeGroupTargetSizeRequest { id: id.clone() });
    let resp =
        f.rt.block_on(f.service.node_group_target_size(req))
            .expect("served");
    black_box(resp);
}

fn percentiles(name: &str, f: &Fixture, call: fn(&Fixture, usize)) {
    const N: usize = 200_000;
    let mut samples: Vec<Duration> = Vec::with_capacity(N);
    for i in 0..N {
        let start = Instant::now();
        call(f, i);
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((N as f64 * q) as usize).min(N - 1)];
    println!(
        "{name}: {N} calls, p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        at(0.50),
        at(0.99),
        at(0.999),
        samples[N - 1]
    );
}

fn bench(c: &mut Criterion) {
    let f = fixture();
    let mut i = 0usize;
    c.bench_function("NodeGroupForNode/100 groups/10k instances", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            for_node(&f, i);
        })
    });
    c.bench_function("NodeGroupTargetSize/100 groups/10k instances", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            target_size(&f, i);
        })
    });
    percentiles("NodeGroupForNode", &f, for_node);
    percentiles("NodeGroupTargetSize", &f, target_size);
}

criterion_group!(benches, bench);
criterion_main!(benches);
