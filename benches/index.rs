//! Scale of the incremental gang index at 10,000 nodes, 100,000 pods, 6,000 gangs and 100 node
//! groups (the cluster of `common`), fed through the watchers' entry points:
//!
//! - an admission decision (`NodeGroupIncreaseSize`) *including* its gang view, with 20 pod
//!   events applied between decisions (each binds or unbinds a member of a pending gang);
//! - the part of one lifecycle tick that reads the index (the view and the progress of 1,000
//!   open scale-ups' gangs), then observing the scale-ups against their groups' nodes, with the
//!   same churn between ticks;
//! - one pod event applied to the store and the index;
//! - for comparison, the from-scratch view over a snapshot the index replaced.
//!
//! Run: `cargo bench --features test-util --bench index`. Besides criterion's estimates it
//! prints p50/p99/max of 1,000 individually timed decisions and ticks. Memory is measured
//! separately (`--bench memory`), in its own process.

#![allow(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]

mod common;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, GANGS, GROUPS, NODES, PODS, T0};
use criterion::{Criterion, criterion_group, criterion_main};
use gangscaler::audit::{GangId, Phase};
use gangscaler::cluster::{GangView, SharedIndex, gangs};
use gangscaler::engine::admission::{Admission, GangSource, Unavailable};
use gangscaler::model::{NodeGroupSpec, labels};
use gangscaler::planner::Policy;
use gangscaler::scaleup::{Facts, Open, node_progress, observe, open_gang_progress};
use k8s_openapi::api::storage::v1::VolumeAttachment;

/// Pod events between two timed calls.
const CHURN: usize = 20;
const OPEN: usize = 1_000;

/// The index as the engine's gang source, as `ClusterView` serves it.
struct IndexSource(SharedIndex);

impl GangSource for IndexSource {
    fn view(&self, now_unix: i64) -> Result<GangView, Unavailable> {
        Ok(self.0.lock().expect("index").view(now_unix))
    }
}

struct Fixture {
    cluster: Cluster,
    admission: Admission,
    group: NodeGroupSpec,
    open: Vec<Open>,
    events: usize,
}

impl Fixture {
    fn new() -> Self {
        let started = Instant::now();
        let cluster = Cluster::build();
        println!(
            "fixture: {NODES} nodes, {PODS} pods, {GANGS} gangs, {GROUPS} groups listed in {:.1?}",
            started.elapsed()
        );
        let source = Arc::new(IndexSource(Arc::clone(&cluster.index)));
        let admission = Admission::new(Policy::Strict, source);
        let view = cluster.index.lock().expect("index").view(T0);
        assert_eq!(view.gangs.len(), GANGS);
        assert_eq!(
            view.gangs.iter().map(|g| g.members.len()).sum::<usize>(),
            PODS
        );
        assert!(view.problems.is_empty(), "{:?}", view.problems.first());
        // 1,000 open scale-ups, one gang each, spread over the groups.
        let open = view
            .gangs
            .iter()
            .take(OPEN)
            .enumerate()
            .map(|(i, g)| Open {
                scale_up_id: format!("su-{i}"),
                node_group: format!("group-{:03}", i % GROUPS),
                gang: Some(GangId::from(&g.id)),
                nodes: 16,
                gang_nodes: 16,
                phase: Phase::Requested,
                requested_at_ms: T0 * 1000,
                formed_at_ms: None,
                attached_at_ms: None,
            })
            .collect();
        Self {
            cluster,
            admission,
            group: common::group(0),
            open,
            events: 0,
        }
    }

    fn churn(&mut self) {
        for _ in 0..CHURN {
            self.cluster.churn(self.events);
            self.events += 1;
        }
    }

    fn decide(&self) -> gangscaler::planner::Decision {
        self.admission
            .decide(&self.group, labels::DEFAULT_GPU_LABEL, 8, 3, T0 + 60)
            .expect("decision")
    }

    /// The index-reading part of a lifecycle tick, then the observation of the open
    /// scale-ups against every group's nodes.
    fn tick(&self) -> usize {
        let attachments: Vec<Arc<VolumeAttachment>> = Vec::new();
        let (view, progress) = open_gang_progress(
            &mut self.cluster.index.lock().expect("index"),
            &self.open,
            &attachments,
            T0 + 60,
        );
        let mut facts = Facts {
            groups: BTreeMap::new(),
            gangs: progress
                .into_iter()
                .map(|(g, p)| ((g.namespace, g.name), p))
                .collect(),
        };
        for (i, n) in self.cluster.nodes.state().iter().enumerate() {
            let group = facts
                .groups
                .entry(format!("group-{:03}", i % GROUPS))
                .or_default();
            group.nodes.extend(node_progress(n));
        }
        black_box(&view);
        observe(&self.open, &facts).len()
    }
}

fn percentiles(what: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let n = samples.len();
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    println!(
        "{what}: {n} calls, p50 {:?}, p99 {:?}, max {:?}",
        at(0.50),
        at(0.99),
        samples[n - 1]
    );
}

fn timed(f: &mut Fixture, n: usize, call: fn(&Fixture)) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            f.churn();
            let started = Instant::now();
            call(f);
            started.elapsed()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut f = Fixture::new();
    let d = f.decide();
    println!(
        "decision on group-000: {} admitted, {} deferred, {} covered, applied {}: {}",
        d.admitted.len(),
        d.deferred.len(),
        d.covered.len(),
        d.applied_delta,
        d.reason
    );
    println!("tick: {} open scale-ups observed", f.tick());

    let mut samples = timed(&mut f, 1_000, |f| {
        black_box(f.decide());
    });
    percentiles(
        &format!("admission decision incl. view ({CHURN} pod events between calls)"),
        &mut samples,
    );
    let mut samples = timed(&mut f, 1_000, |f| {
        black_box(f.tick());
    });
    percentiles(
        &format!("lifecycle tick, {OPEN} open scale-ups ({CHURN} pod events between ticks)"),
        &mut samples,
    );

    let started = Instant::now();
    let n = 20_000;
    for _ in 0..n {
        f.cluster.churn(f.events);
        f.events += 1;
    }
    println!(
        "pod event into the store and the index: {:.1?} each ({n} events)",
        started.elapsed() / n as u32
    );

    // What every decision cost before the index: a snapshot and a view from scratch.
    let mut samples: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let set = f.cluster.index.lock().expect("index").objects().clone();
            black_box(gangs(&set, T0 + 60));
            started.elapsed()
        })
        .collect();
    percentiles(
        "from-scratch view (the path the index replaced)",
        &mut samples,
    );

    c.bench_function("admission decision incl. view/steady", |b| {
        b.iter(|| black_box(f.decide()))
    });
    c.bench_function("lifecycle tick/1000 open scale-ups/steady", |b| {
        b.iter(|| black_box(f.tick()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
