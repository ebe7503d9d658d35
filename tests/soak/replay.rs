//! The replay: creates each gang of the trace at its arrival time (its volumes, PodGroup and
//! members, as the e2e scenarios do), sees when every member runs, deletes it `runS` after
//! that, or `giveUpS` after its arrival if it has not started by then, and samples the
//! cluster, gangscaler's process and CA's loop metric as it goes. One pod list per tick serves
//! both the formation check and the timeline.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde::Serialize;
use tokio::task::JoinHandle;

use super::harness::http_get;
use super::probe::{self, ProcSample};
use super::scenario::{GPU, GangSpec, Scenario, create_gang};
use super::trace::{GangDef, Trace};

/// The node label every group's nodes carry (`labels:` of the group) and every gang's members
/// select.
pub const POOL_LABEL: &str = "gangscaler.io/pool";

/// How often the replay looks at the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Length of the replay.
    pub duration: Duration,
    /// Pod and node lists, formation check, deletions, `/proc` sample.
    pub tick: Duration,
    /// CA `/metrics` scrape.
    pub ca_every: Duration,
}

/// What happened to one gang of the trace.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangResult {
    /// PodGroup name.
    pub name: String,
    /// Members (= minCount).
    pub members: u32,
    /// GPUs per member.
    pub gpus: u32,
    /// Volumes per member.
    pub volumes: u32,
    /// Pool its members select.
    pub pool: String,
    /// Whether the trace made it fit some group.
    pub fits: bool,
    /// Arrival, seconds into the replay.
    pub arrival_s: f64,
    /// When its last member was created, unix ms.
    pub created_ms: Option<i64>,
    /// Why creating it failed, if it did.
    pub create_error: Option<String>,
    /// When every member ran: the latest `Ready` transition among them, unix ms (kwok sets it
    /// when it runs the pod; second precision).
    pub formed_ms: Option<i64>,
    /// When the replay saw it formed, seconds into the replay.
    pub formed_seen_s: Option<f64>,
    /// When its deletion started, seconds into the replay.
    pub deleted_s: Option<f64>,
    /// `finished` (ran its run time) or `gaveUp` (never started in time); none while alive.
    pub end: Option<&'static str>,
    /// Objects its deletion failed to delete (other than already gone).
    pub delete_errors: u32,
}

/// One sample of the cluster.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tick {
    /// Seconds into the replay.
    pub t_s: f64,
    /// GPU nodes (with the node-group label).
    pub nodes: usize,
    /// Of those, Ready.
    pub ready_nodes: usize,
    /// Of those, with no unfinished GPU pod bound.
    pub idle_nodes: usize,
    /// GPU pods not bound to a node.
    pub gpu_pods_pending: usize,
    /// GPU pods bound, not finished.
    pub gpu_pods_bound: usize,
    /// Gangs created and not formed.
    pub gangs_waiting: usize,
    /// Gangs formed and not deleted.
    pub gangs_running: usize,
}

/// `_sum` and `_count` of CA's `cluster_autoscaler_function_duration_seconds{function="main"}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaLoop {
    /// Seconds into the replay.
    pub t_s: f64,
    /// Seconds of loop time so far.
    pub sum: f64,
    /// Loops so far.
    pub count: f64,
}

/// Everything the replay recorded.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// When it started, unix ms.
    pub started_ms: i64,
    /// How long it ran, seconds.
    pub duration_s: f64,
    /// Tick, seconds.
    pub tick_s: f64,
    /// One per gang of the trace that arrived.
    pub gangs: Vec<GangResult>,
    /// One per tick.
    pub timeline: Vec<Tick>,
    /// gangscaler's pid.
    pub gangscaler_pid: u32,
    /// Clock ticks per second of `cpuTicks`.
    pub clk_tck: u64,
    /// gangscaler's `/proc` samples, one per tick.
    pub gangscaler_proc: Vec<ProcSample>,
    /// CA's loop-duration histogram, every `ca_every`.
    pub ca_loop: Vec<CaLoop>,
}

/// Unix time now, milliseconds.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(now.as_millis()).expect("milliseconds fit i64")
}

struct Live {
    def: GangDef,
    result: GangResult,
    creating: Option<JoinHandle<i64>>,
    deleting: Option<JoinHandle<u32>>,
}

/// Replays `trace` against scenario `s` for `opts.duration`.
pub async fn run(s: &Scenario, trace: &Trace, opts: Options) -> Replay {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let nodes: Api<Node> = Api::all(s.client.clone());
    let gang_objects = gang_object_api(&s.client, &s.api).await;
    let pid = s.gangscaler.pid();
    let start = Instant::now();
    let started_ms = now_ms();
    let mut live: Vec<Live> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut next = 0;
    let mut timeline = Vec::new();
    let mut proc_samples = Vec::new();
    let mut ca_loop = Vec::new();
    let mut last_ca: Option<Instant> = None;
    loop {
        let tick_start = Instant::now();
        let t = start.elapsed().as_secs_f64();
        if start.elapsed() >= opts.duration {
            break;
        }
        while let Some(def) = trace.gangs.get(next).filter(|g| g.at_s <= t) {
            next += 1;
            index.insert(def.name.clone(), live.len());
            live.push(arrive(s, def.clone()));
        }
        for g in &mut live {
            if g.creating.as_ref().is_some_and(JoinHandle::is_finished)
                && let Some(h) = g.creating.take()
            {
                match h.await {
                    Ok(ms) => g.result.created_ms = Some(ms),
                    Err(e) => g.result.create_error = Some(e.to_string()),
                }
            }
            if g.deleting.as_ref().is_some_and(JoinHandle::is_finished)
                && let Some(h) = g.deleting.take()
            {
                g.result.delete_errors += h.await.unwrap_or(1);
            }
        }
        let (all, gpu_nodes) = (
            ListParams::default(),
            ListParams::default().labels("gangscaler.io/node-group"),
        );
        let (pod_list, node_list) = tokio::join!(pods.list(&all), nodes.list(&gpu_nodes));
        let now = now_ms();
        if let (Ok(pod_list), Ok(node_list)) = (pod_list, node_list) {
            let seen = look(&pod_list.items, &index);
            for g in &mut live {
                let r = &mut g.result;
                if r.created_ms.is_none() || r.formed_ms.is_some() || r.end.is_some() {
                    continue;
                }
                if let Some(m) = seen.gangs.get(&r.name)
                    && m.running >= g.def.members
                {
                    r.formed_ms = Some(m.last_ready_ms.unwrap_or(now));
                    r.formed_seen_s = Some(t);
                }
            }
            timeline.push(tick(t, &node_list.items, &seen, &live));
        }
        for g in &mut live {
            let r = &g.result;
            if r.end.is_some() {
                continue;
            }
            let due_ms = |secs: f64| (secs * 1000.0) as i64;
            let end = match r.formed_ms {
                Some(f) if now >= f + due_ms(g.def.run_s) => Some("finished"),
                None if now >= started_ms + due_ms(g.def.at_s + g.def.give_up_s) => Some("gaveUp"),
                _ => None,
            };
            if let Some(end) = end {
                g.result.end = Some(end);
                g.result.deleted_s = Some(t);
                if let Some(h) = g.creating.take() {
                    h.abort();
                }
                let (client, objects, def) =
                    (s.client.clone(), gang_objects.clone(), g.def.clone());
                g.deleting = Some(tokio::spawn(async move {
                    delete_gang(&client, &objects, &def).await
                }));
            }
        }
        if let Some(p) = probe::sample(pid, t) {
            proc_samples.push(p);
        }
        if last_ca.is_none_or(|l| l.elapsed() >= opts.ca_every) {
            last_ca = Some(Instant::now());
            if let Some(c) = scrape_ca_loop(s, t).await {
                ca_loop.push(c);
            }
        }
        tokio::time::sleep(opts.tick.saturating_sub(tick_start.elapsed())).await;
    }
    let t = start.elapsed().as_secs_f64();
    if let Some(p) = probe::sample(pid, t) {
        proc_samples.push(p);
    }
    if let Some(c) = scrape_ca_loop(s, t).await {
        ca_loop.push(c);
    }
    let mut gangs = Vec::new();
    for mut g in live {
        for h in [g.creating.take()].into_iter().flatten() {
            h.abort();
        }
        for h in [g.deleting.take()].into_iter().flatten() {
            h.abort();
        }
        gangs.push(g.result);
    }
    Replay {
        started_ms,
        duration_s: t,
        tick_s: opts.tick.as_secs_f64(),
        gangs,
        timeline,
        gangscaler_pid: pid,
        clk_tck: probe::clock_ticks(),
        gangscaler_proc: proc_samples,
        ca_loop,
    }
}

/// Starts creating gang `def` (in a task of its own, so that a 64-member gang does not hold
/// up the ticks).
fn arrive(s: &Scenario, def: GangDef) -> Live {
    let spec = GangSpec::new(&def.name, def.members)
        .gpus(def.gpus)
        .volumes(def.volumes)
        .extra(serde_json::json!({"nodeSelector": {POOL_LABEL: def.pool}}));
    let (client, api) = (s.client.clone(), s.api.clone());
    let creating = tokio::spawn(async move {
        create_gang(&client, &api, &spec).await;
        now_ms()
    });
    Live {
        result: GangResult {
            name: def.name.clone(),
            members: def.members,
            gpus: def.gpus,
            volumes: def.volumes,
            pool: def.pool.clone(),
            fits: def.fits,
            arrival_s: def.at_s,
            created_ms: None,
            create_error: None,
            formed_ms: None,
            formed_seen_s: None,
            deleted_s: None,
            end: None,
            delete_errors: 0,
        },
        def,
        creating: Some(creating),
        deleting: None,
    }
}

/// What one pod list shows of the trace's gangs and the GPU pods.
#[derive(Default)]
struct Seen {
    gangs: BTreeMap<String, Members>,
    busy_nodes: BTreeSet<String>,
    pending: usize,
    bound: usize,
}

#[derive(Default)]
struct Members {
    running: u32,
    last_ready_ms: Option<i64>,
}

fn look(pods: &[Pod], index: &BTreeMap<String, usize>) -> Seen {
    let mut seen = Seen::default();
    for p in pods {
        let phase = p.status.as_ref().and_then(|st| st.phase.as_deref());
        let finished = matches!(phase, Some("Succeeded" | "Failed"))
            || p.metadata.deletion_timestamp.is_some();
        let spec = p.spec.as_ref();
        let node = spec.and_then(|sp| sp.node_name.clone());
        let gpu = spec.is_some_and(|sp| {
            sp.containers.iter().any(|c| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .is_some_and(|r| r.contains_key(GPU))
            })
        });
        if gpu && !finished {
            match node.clone() {
                Some(n) => {
                    seen.bound += 1;
                    seen.busy_nodes.insert(n);
                }
                None => seen.pending += 1,
            }
        }
        let name = p.metadata.name.as_deref().unwrap_or("");
        let Some((gang, i)) = name.rsplit_once('-') else {
            continue;
        };
        if !index.contains_key(gang) || !i.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if phase == Some("Running") && node.is_some() && !finished {
            let m = seen.gangs.entry(gang.to_owned()).or_default();
            m.running += 1;
            let ready = p
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|time| time.0.as_millisecond());
            m.last_ready_ms = m.last_ready_ms.max(ready);
        }
    }
    seen
}

fn tick(t_s: f64, nodes: &[Node], seen: &Seen, live: &[Live]) -> Tick {
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let alive = |g: &&Live| g.result.end.is_none() && g.result.created_ms.is_some();
    Tick {
        t_s,
        nodes: nodes.len(),
        ready_nodes: nodes.iter().filter(|n| ready(n)).count(),
        idle_nodes: nodes
            .iter()
            .filter(|n| {
                n.metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| !seen.busy_nodes.contains(name))
            })
            .count(),
        gpu_pods_pending: seen.pending,
        gpu_pods_bound: seen.bound,
        gangs_waiting: live
            .iter()
            .filter(alive)
            .filter(|g| g.result.formed_ms.is_none())
            .count(),
        gangs_running: live
            .iter()
            .filter(alive)
            .filter(|g| g.result.formed_ms.is_some())
            .count(),
    }
}

async fn scrape_ca_loop(s: &Scenario, t_s: f64) -> Option<CaLoop> {
    let (_, text) = http_get(s.ca.metrics, "/metrics").await?;
    let (sum, count) = probe::histogram_sum_count(
        &text,
        "cluster_autoscaler_function_duration_seconds",
        &[("function", "main")],
    )?;
    Some(CaLoop { t_s, sum, count })
}

/// The API of the gang objects (PodGroup, or Workload on `v1alpha1`) of gang API `api`.
async fn gang_object_api(client: &kube::Client, api: &str) -> Api<DynamicObject> {
    let kind = if api.ends_with("/v1alpha1") {
        "Workload"
    } else {
        "PodGroup"
    };
    let (group, version) = api.split_once('/').expect("a group/version gang API");
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .expect("the gang API is served");
    Api::namespaced_with(client.clone(), "default", &ar)
}

/// Deletes gang `def`: its members (grace 0, as a finished job's pods go), its gang object,
/// then its claims and volumes. Returns how many deletions failed for another reason than
/// the object being gone already.
async fn delete_gang(client: &kube::Client, objects: &Api<DynamicObject>, def: &GangDef) -> u32 {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let now = DeleteParams::default().grace_period(0);
    let mut errors = 0;
    let mut count = |r: Result<(), kube::Error>| {
        if let Err(e) = r
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            errors += 1;
        }
    };
    for m in 0..def.members {
        count(
            pods.delete(&format!("{}-{m}", def.name), &now)
                .await
                .map(|_| ()),
        );
    }
    count(objects.delete(&def.name, &now).await.map(|_| ()));
    for m in 0..def.members {
        for v in 0..def.volumes {
            let name = format!("{}-{m}-v{v}", def.name);
            count(claims.delete(&name, &now).await.map(|_| ()));
            count(volumes.delete(&name, &now).await.map(|_| ()));
        }
    }
    errors
}
