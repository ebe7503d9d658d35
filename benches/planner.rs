//! Planner latency: one `NodeGroupIncreaseSize` admission decision with 1,000 pending gangs of
//! 16 pods each (16,000 pods, four kinds of gang) as candidates for one of 100 node groups, and
//! the `plan` view of all 1,000 gangs against all 100 groups.
//!
//! Run: `cargo bench --features test-util --bench planner`. Besides criterion's estimates it
//! prints p50/p99/max of 1,000 individually timed admission decisions.

#![expect(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark times itself with the real clock"
)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use gangscaler::model::{
    Gang, GangRef, Member, NodeGroupSpec, PodDemand, Toleration, TolerationOperator, labels,
};
use gangscaler::planner::{self, AdmissionInput, NodeShape, Policy};

const GROUPS: usize = 100;
const GANGS: usize = 1_000;
const PODS: usize = 16;
const GI: u64 = 1 << 30;
const EBS: &str = "ebs.csi.aws.com";
const RACK: &str = "topology.gangscaler.io/rack";

/// Group `i` of the shared fixture (kinds in turn 8x H100, 8x A100, 4x L4, CPU), maxSize 64.
fn group(i: usize) -> NodeGroupSpec {
    let mut g = common::group(i);
    g.max_size = 64;
    g
}

/// Gang kinds: whole-node H100 training with RDMA and a rack constraint; 1-GPU workers with 3
/// volumes each (CSI-bound) on any GPU; CPU-only workers; L4 inference pinned by selector.
fn gang(i: usize) -> Gang {
    let kind = i % 4;
    let gpu_toleration = Toleration {
        key: "nvidia.com/gpu".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    };
    let mut d = PodDemand {
        cpu_milli: 4_000,
        memory_bytes: 16 * GI,
        ..PodDemand::default()
    };
    let gpu = labels::DEFAULT_GPU_RESOURCE.to_owned();
    match kind {
        0 => {
            d.cpu_milli = 96_000;
            d.extended.insert(gpu, 8);
            d.extended.insert("rdma/rdma_shared_device_a".into(), 8);
            d.extended
                .insert(labels::DEFAULT_RDMA_BANDWIDTH_RESOURCE.into(), 3200);
            d.volumes.insert(EBS.into(), 2);
            d.node_selector
                .insert(labels::GPU_PRODUCT.into(), "NVIDIA-H100-80GB-HBM3".into());
            d.tolerations.push(gpu_toleration);
        }
        1 => {
            d.extended.insert(gpu, 1);
            d.volumes.insert(EBS.into(), 3);
            d.tolerations.push(gpu_toleration);
        }
        2 => {}
        _ => {
            d.extended.insert(gpu, 1);
            d.node_selector
                .insert(labels::GPU_PRODUCT.into(), "NVIDIA-L4".into());
            d.tolerations.push(gpu_toleration);
        }
    }
    let name = format!("job-{i:04}");
    let d = std::sync::Arc::new(d);
    Gang {
        id: GangRef {
            namespace: format!("team-{}", i % 10),
            name: name.clone(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        },
        min_count: if i.is_multiple_of(3) { 8 } else { PODS as u32 },
        members: (0..PODS)
            .map(|p| Member {
                pod: format!("{name}-worker-{p:02}"),
                node: None,
                demand: d.clone(),
                verdict: true,
                scheduler_name: None,
            })
            .collect(),
        priority: (i % 5) as i32,
        created_unix: 1_700_000_000 + (i as i64 * 7919) % 100_000,
        topology_key: (kind == 0).then(|| RACK.to_owned()),
        composite: None,
        scheduled: false,
    }
}

struct Fixture {
    specs: Vec<NodeGroupSpec>,
    shapes: Vec<NodeShape>,
    gangs: Vec<std::sync::Arc<Gang>>,
    in_flight: BTreeMap<GangRef, u32>,
}

fn fixture() -> Fixture {
    let specs: Vec<NodeGroupSpec> = (0..GROUPS).map(group).collect();
    let shapes = specs
        .iter()
        .map(|g| NodeShape::from_group(g, labels::DEFAULT_GPU_LABEL).expect("template"))
        .collect();
    let gangs: Vec<std::sync::Arc<Gang>> =
        (0..GANGS).map(|i| std::sync::Arc::new(gang(i))).collect();
    assert_eq!(gangs.iter().map(|g| g.members.len()).sum::<usize>(), 16_000);
    // Every 50th gang already has two nodes on the way.
    let in_flight = gangs
        .iter()
        .step_by(50)
        .map(|g| (g.id.clone(), 2))
        .collect();
    Fixture {
        specs,
        shapes,
        gangs,
        in_flight,
    }
}

/// One admission decision for the first H100 group (index 0), all 1,000 gangs as candidates.
fn decide(f: &Fixture) -> planner::Decision {
    planner::admit(&AdmissionInput {
        group: &f.specs[0].id,
        shape: Some(&f.shapes[0]),
        max_size: f.specs[0].max_size,
        target: 8,
        ca_delta: 3,
        policy: Policy::Strict,
        order: planner::Order::Age,
        gangs: &f.gangs,
        in_flight: &f.in_flight,
        elsewhere: &BTreeMap::new(),
        ungrouped_nodes: 1,
        idle_nodes: 0,
        spill: &[],
        deferred_composites: &[],
        repair_where_asked: false,
    })
}

fn plan_all(f: &Fixture) -> planner::Plan {
    let groups: Vec<(&NodeGroupSpec, Option<NodeShape>, u32)> = f
        .specs
        .iter()
        .zip(&f.shapes)
        .map(|(g, s)| (g, Some(s.clone()), 8))
        .collect();
    planner::plan(&f.gangs, &groups)
}

fn percentiles(f: &Fixture) {
    const N: usize = 1_000;
    let mut samples: Vec<Duration> = Vec::with_capacity(N);
    for _ in 0..N {
        let start = Instant::now();
        black_box(decide(f));
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((N as f64 * q) as usize).min(N - 1)];
    println!(
        "admit (1,000 gangs x 16 pods, 1 of 100 groups): {N} calls, p50 {:?}, p99 {:?}, max {:?}",
        at(0.50),
        at(0.99),
        samples[N - 1]
    );
}

fn bench(c: &mut Criterion) {
    let f = fixture();
    let d = decide(&f);
    println!(
        "admit fixture: {} admitted, {} deferred, {} covered, {} unhostable, applied {}: {}",
        d.admitted.len(),
        d.deferred.len(),
        d.covered.len(),
        d.unhostable,
        d.applied_delta,
        d.reason
    );
    c.bench_function("admit/1000 gangs x 16 pods/1 group", |b| {
        b.iter(|| black_box(decide(&f)))
    });
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    group.bench_function("1000 gangs x 16 pods/100 groups", |b| {
        b.iter(|| black_box(plan_all(&f)))
    });
    group.finish();
    percentiles(&f);
}

criterion_group!(benches, bench);
criterion_main!(benches);
