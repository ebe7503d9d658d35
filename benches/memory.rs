//! Memory of the watched cluster at scale: 10,000 nodes in the [`NodeTable`] the node watcher
//! feeds (gangscaler keeps no other copy of them), 100,000 pods in the [`PodStore`] and the gang index (6,000
//! PodGroups, 6,000 PVCs), all filled through the watchers' entry points (see `common`); then
//! serving: 1,000 admission views and 1,000 lifecycle-tick reads with pod events between them;
//! then a re-list of every pod (what follows a broken watch).
//!
//! Reports resident set size from /proc/self/status: `VmRSS` (now) and `VmHWM`, the kernel's
//! high-water mark of the resident set since the process started, which is the peak while
//! building and serving, not a sample of it. Not a timed benchmark.
//!
//! Run: `cargo bench --features test-util --bench memory`.

#![expect(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark times itself with the real clock"
)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{Cluster, GANGS, NODES, PODS, T0, status_mib};
use gangscaler::audit::{GangId, Phase};
use gangscaler::scaleup::{Open, ProgressCache, open_gang_progress};
use k8s_openapi::api::storage::v1::VolumeAttachment;

fn main() {
    let base = status_mib("VmRSS");
    println!("baseline RSS {base:.0} MiB");
    let started = Instant::now();
    let mut cluster = Cluster::build();
    let built = status_mib("VmRSS");
    println!(
        "{NODES} nodes, {PODS} pods, {GANGS} gangs listed in {:.1?}: RSS {built:.0} MiB, peak while building (VmHWM) {:.0} MiB (target < 300 MB = 286 MiB)",
        started.elapsed(),
        status_mib("VmHWM")
    );
    let view = cluster.index.lock().expect("index").view(T0);
    let members: usize = view.gangs.iter().map(|g| g.members.len()).sum();
    println!(
        "first view: {} gangs, {members} members, {} distinct member demands: RSS {:.0} MiB",
        view.gangs.len(),
        cluster.index.lock().expect("index").distinct_demands(),
        status_mib("VmRSS")
    );
    let open: Vec<Open> = view
        .gangs
        .iter()
        .take(1_000)
        .enumerate()
        .map(|(i, g)| Open {
            scale_up_id: format!("su-{i}"),
            node_group: format!("group-{:03}", i % 100),
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
    drop(view);

    // Serving: an admission view and a lifecycle-tick read per round, 20 pod events between.
    let attachments: Vec<Arc<VolumeAttachment>> = Vec::new();
    let mut cache = ProgressCache::new();
    let mut k = 0;
    for round in 0..1_000 {
        for _ in 0..20 {
            cluster.churn(k);
            k += 1;
        }
        let now = T0 + 60 + round;
        let admission_view = cluster.index.lock().expect("index").view(now);
        let (tick_view, progress) = open_gang_progress(
            &mut cluster.index.lock().expect("index"),
            &mut cache,
            &open,
            &attachments,
            now,
        );
        std::hint::black_box((admission_view, tick_view, progress));
    }
    println!(
        "after 1,000 admission views and 1,000 tick reads (20,000 pod events): RSS {:.0} MiB, peak (VmHWM) {:.0} MiB",
        status_mib("VmRSS"),
        status_mib("VmHWM")
    );

    // A re-list (the watch broke): the new list is buffered, then swapped in, and the index
    // reconciled against it.
    let started = Instant::now();
    common::list_pods(&mut cluster.writer);
    println!(
        "after a re-list of every pod ({} pods, {:.1?}): RSS {:.0} MiB, peak (VmHWM) {:.0} MiB",
        cluster.pods.len(),
        started.elapsed(),
        status_mib("VmRSS"),
        status_mib("VmHWM")
    );
}
