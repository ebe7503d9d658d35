//! Scale of the incremental gang index at 10,000 nodes, 100,000 pods, 6,000 gangs and 100 node
//! groups (the cluster of `common`), fed through the watchers' entry points:
//!
//! - an admission decision (`NodeGroupIncreaseSize`) *including* its gang view, with 20 pod
//!   events applied between decisions (each binds or unbinds a member of a pending gang);
//! - one lifecycle tick with 1,000 open scale-ups over all 100 groups, with the same churn
//!   between ticks, and its two parts timed apart: what it reads from the index (the view and
//!   the progress of the open scale-ups' gangs, reused from the last tick for gangs that did
//!   not change), and the nodes part (every group's instance list, its nodes as progress, and
//!   observing the scale-ups against them);
//! - one pod event applied to the store and the index;
//! - for comparison, the from-scratch view over a snapshot the index replaced.
//!
//! Run: `cargo bench --features test-util --bench index`. Besides criterion's estimates it
//! prints p50/p99/max of 1,000 individually timed decisions and ticks. Memory is measured
//! separately (`--bench memory`), in its own process.

#![expect(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark times itself with the real clock"
)]

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
use gangscaler::model::GangRef;
use gangscaler::model::{Instance, InstanceState, NodeGroupSpec, labels};
use gangscaler::planner::{Order, Policy};
use gangscaler::scaleup::{
    Facts, GangProgress, Open, ProgressCache, group_facts, observe, open_gang_progress,
};
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

    fn daemon_sets(&self) -> Option<Vec<gangscaler::model::reservation::DaemonSetDemand>> {
        Some(Vec::new())
    }
}

struct Fixture {
    cluster: Cluster,
    admission: Admission,
    group: NodeGroupSpec,
    open: Vec<Open>,
    /// The lifecycle loop's progress from the last tick.
    cache: ProgressCache,
    /// Each group's instances, as its backend lists them.
    instances: BTreeMap<String, Vec<Instance>>,
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
        let admission = Admission::new(Policy::Strict, Order::Age, source);
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
                repair: gangscaler::scaleup::Repair::default(),
            })
            .collect();
        let mut instances: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for i in 0..NODES {
            let group = format!("group-{:03}", i % GROUPS);
            let name = common::node(i).metadata.name.expect("node name");
            instances.entry(group.clone()).or_default().push(Instance {
                id: format!("gangscaler-memory://{group}/{name}"),
                node_name: name,
                state: InstanceState::Running,
                error: None,
                claim: None,
            });
        }
        Self {
            cluster,
            admission,
            group: common::group(0),
            open,
            cache: ProgressCache::new(),
            instances,
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
            .decide(&self.group, labels::DEFAULT_GPU_LABEL, 8, 3, &[], T0 + 60)
            .expect("decision")
            .0
    }

    /// The index-reading part of a lifecycle tick, then the observation of the open
    /// scale-ups against every group's nodes.
    fn tick(&mut self) -> usize {
        let (view, progress) = self.tick_index();
        black_box(&view);
        self.tick_nodes(progress)
    }

    /// What a tick reads from the index: the view and the open scale-ups' gang progress.
    fn tick_index(&mut self) -> (GangView, BTreeMap<GangRef, GangProgress>) {
        let attachments: Vec<Arc<VolumeAttachment>> = Vec::new();
        open_gang_progress(
            &mut self.cluster.index.lock().expect("index"),
            &mut self.cache,
            &self.open,
            &attachments,
            T0 + 60,
        )
    }

    /// The rest of a tick, as the lifecycle loop does it: the facts, then the observation of
    /// the open scale-ups.
    fn tick_nodes(&self, progress: BTreeMap<GangRef, GangProgress>) -> usize {
        let facts = self.facts(progress);
        observe(&self.open, &facts).len()
    }

    /// Per group, the backend's instance list (a fresh copy, as a backend returns it) turned
    /// into the group's facts from the node table, as the lifecycle loop does it.
    fn facts(&self, progress: BTreeMap<GangRef, GangProgress>) -> Facts {
        let mut facts = Facts {
            groups: BTreeMap::new(),
            gangs: progress
                .into_iter()
                .map(|(g, p)| ((g.namespace, g.name), p))
                .collect(),
        };
        for (group, instances) in &self.instances {
            let g = group_facts(instances.clone(), &self.cluster.node_table, false);
            facts.groups.insert(group.clone(), g);
        }
        facts
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

fn timed(f: &mut Fixture, n: usize, call: fn(&mut Fixture)) -> Vec<Duration> {
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
    // The same, in its two parts.
    let (mut index_part, mut nodes_part) = (Vec::new(), Vec::new());
    for _ in 0..1_000 {
        f.churn();
        let started = Instant::now();
        let (view, progress) = f.tick_index();
        index_part.push(started.elapsed());
        black_box(view);
        let started = Instant::now();
        black_box(f.tick_nodes(progress));
        nodes_part.push(started.elapsed());
    }
    percentiles(
        "  of which the index part (view and open gangs' progress)",
        &mut index_part,
    );
    percentiles(
        &format!("  of which the nodes part (instance lists, {NODES} nodes' progress, observe)"),
        &mut nodes_part,
    );
    let (mut facts_part, mut observe_part) = (Vec::new(), Vec::new());
    for _ in 0..1_000 {
        f.churn();
        let (_, progress) = f.tick_index();
        let started = Instant::now();
        let facts = f.facts(progress);
        facts_part.push(started.elapsed());
        let started = Instant::now();
        black_box(observe(&f.open, &facts));
        observe_part.push(started.elapsed());
    }
    percentiles(
        "    the facts (instance lists, nodes as progress)",
        &mut facts_part,
    );
    percentiles("    observing 1,000 open scale-ups", &mut observe_part);

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
