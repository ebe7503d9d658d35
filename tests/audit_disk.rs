//! The audit log on storage that refuses writes, driven through the real gRPC server on
//! 127.0.0.1: `NodeGroupIncreaseSize` answers OK only for scale-ups whose decision record is
//! durable, a refused one adds no node, the log stays readable by `gangscaler audit report`,
//! nothing is lost over a restart, and writing resumes once the storage allows it.
//!
//! Two ways to refuse a write, both real:
//! - a full filesystem: a small tmpfs mounted for the test (needs root, as CI runs; a
//!   non-root run says it skipped and why);
//! - a file-size limit (`prlimit --fsize`) on a child process serving the same rig: the write
//!   past the limit raises `SIGXFSZ`, which must not end the process. The child is this test
//!   binary again, running the ignored `child_server` entry point.
//!
//! Each run prints its figures (calls answered OK and refused, records written, nodes added,
//! nodes added without a record) on stderr; `--nocapture` shows them.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use gangscaler::audit::{Config, Event, Outcome, read_files, rotated_paths};
use gangscaler::cluster::ObjectSet;
use gangscaler::engine::Engine;
use gangscaler::engine::admission::StaticObjects;
use gangscaler::grpc::service::Service;
use gangscaler::metrics::Metrics;
use gangscaler::model::{GpuSpec, NodeGroupSpec, quantity::Quantity};
use gangscaler::planner::Policy;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use gangscaler::proto::{NodeGroupIncreaseSizeRequest, NodeGroupTargetSizeRequest};
use gangscaler::provision::Provisioner;
use gangscaler::provision::memory::MemoryProvisioner;
use gangscaler::scaleup::{Recorder, Timeouts};
use gangscaler::testing;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

/// Node groups of one node each: every call goes to the next group, so each admits exactly
/// one gang (the oldest not in flight), and a refused call leaves its gang to the next one.
const GROUPS: u32 = 64;
/// Pending one-node gangs: more than any run admits.
const GANGS: u32 = 100;
/// The child process's role, read by [`child_server`].
const CHILD_ENV: &str = "GANGSCALER_AUDIT_DISK_CHILD";
/// The child's audit log path.
const CHILD_LOG_ENV: &str = "GANGSCALER_AUDIT_DISK_LOG";

fn group_id(i: u32) -> String {
    format!("h100-{i:02}")
}

/// An 8-GPU group of at most one node.
fn h100(i: u32) -> NodeGroupSpec {
    let mut g = testing::group(&group_id(i), 0, 1);
    g.capacity.as_mut().unwrap().cpu = Quantity::from_units(192);
    g.gpu = Some(GpuSpec {
        count: 8,
        product: "NVIDIA-H100-80GB-HBM3".into(),
        memory: Quantity::from_units(80 << 30),
        resource_name: "nvidia.com/gpu".into(),
    });
    g
}

/// `GANGS` pending v1alpha2 gangs of one 8-GPU member each, oldest first by name.
fn gangs() -> ObjectSet {
    let mut docs = Vec::new();
    for i in 0..GANGS {
        let (m, s) = (i / 60, i % 60);
        docs.push(format!(
            "apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\nmetadata: {{name: job-{i:03}, namespace: ml, creationTimestamp: \"2026-11-29T10:{m:02}:{s:02}Z\"}}\nspec:\n  schedulingPolicy: {{gang: {{minCount: 1}}}}\n"
        ));
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: job-{i:03}-0, namespace: ml}}\nspec:\n  schedulingGroup: {{podGroupName: job-{i:03}}}\n  containers:\n  - name: train\n    image: example.invalid/train:1\n    resources: {{limits: {{nvidia.com/gpu: \"8\"}}, requests: {{cpu: \"4\"}}}}\nstatus: {{phase: Pending}}\n"
        ));
    }
    ObjectSet::from_yaml_documents(&docs.join("---\n")).expect("gang fixtures parse")
}

fn timeouts() -> Timeouts {
    Timeouts {
        registration_ms: 600_000,
        formation_ms: 600_000,
        attach_ms: 600_000,
    }
}

/// The rig: strict gang admission over [`gangs`], the memory backend, and the audit log at
/// `log`, behind the real gRPC service on a loopback port picked by the kernel.
struct Rig {
    addr: SocketAddr,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

impl Rig {
    async fn start(log: &Path) -> Self {
        let metrics = Arc::new(Metrics::new());
        let provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
        let (recorder, _) = Recorder::open(log, Config::new(), timeouts()).expect("audit log");
        let engine = Engine::new(
            testing::loaded((0..GROUPS).map(h100).collect()),
            None,
            provisioners,
            metrics.clone(),
        )
        .await
        .expect("engine")
        .with_audit(Arc::new(recorder))
        .with_admission(Policy::Strict, Arc::new(StaticObjects(gangs())));
        let engine = Arc::new(engine);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let service = Service::new(engine.clone(), metrics.clone()).into_server();
        let until = stop.clone();
        let served = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    until.cancelled_owned(),
                )
                .await
                .expect("gRPC server");
        });
        Self {
            addr,
            engine,
            metrics,
            stop,
            served,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.served.await.unwrap();
    }
}

async fn client(addr: SocketAddr) -> CloudProviderClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connecting to the rig");
    CloudProviderClient::new(channel)
}

async fn target(c: &mut CloudProviderClient<Channel>, group: &str) -> u32 {
    let t = c
        .node_group_target_size(NodeGroupTargetSizeRequest { id: group.into() })
        .await
        .expect("TargetSize")
        .into_inner()
        .target_size;
    u32::try_from(t).unwrap()
}

/// Nodes in every group.
async fn nodes(c: &mut CloudProviderClient<Channel>) -> u32 {
    let mut n = 0;
    for i in 0..GROUPS {
        n += target(c, &group_id(i)).await;
    }
    n
}

/// What a series of `NodeGroupIncreaseSize` calls got.
#[derive(Debug, Default)]
struct Calls {
    /// The next group to call.
    next: u32,
    ok: u32,
    refused: u32,
    /// Nodes the OK answers added, read from TargetSize around each call.
    added: u32,
}

/// Asks groups `from`, `from + 1`, … for one node each, `n` calls; each answer must be OK with
/// one node more, or refused with `Unavailable` naming the audit log and no node more.
async fn increase(c: &mut CloudProviderClient<Channel>, from: u32, n: u32) -> Calls {
    let mut calls = Calls {
        next: from + n,
        ..Calls::default()
    };
    for i in from..from + n {
        let group = group_id(i);
        let before = target(c, &group).await;
        let answer = c
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                id: group.clone(),
                delta: 1,
            })
            .await;
        let after = target(c, &group).await;
        match answer {
            Ok(_) => {
                assert_eq!(
                    after,
                    before + 1,
                    "an OK answer adds the gang's one node ({before} -> {after})"
                );
                calls.ok += 1;
                calls.added += after - before;
            }
            Err(s) => {
                assert_eq!(s.code(), Code::Unavailable, "{s:?}");
                assert!(
                    s.message()
                        .contains("could not be recorded in the audit log")
                        && s.message().contains("nothing was provisioned"),
                    "{}",
                    s.message()
                );
                assert_eq!(after, before, "a refused scale-up adds no node");
                calls.refused += 1;
            }
        }
    }
    calls
}

/// The scale-ups the log holds: per accepted decision with an id, the nodes it added, less
/// those whose increase the backend failed.
struct Logged {
    records: usize,
    bad: u64,
    scale_ups: usize,
    nodes: u32,
    gangs: BTreeSet<String>,
}

fn logged(log: &Path) -> Logged {
    let files = rotated_paths(log).unwrap();
    let reading = read_files(&files).unwrap();
    let failed: BTreeSet<&str> = reading
        .records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Outcome(o) if o.outcome == Outcome::ProvisionFailed => {
                Some(o.scale_up_id.as_str())
            }
            _ => None,
        })
        .collect();
    let mut out = Logged {
        records: reading.records.len(),
        bad: reading.bad_total(),
        scale_ups: 0,
        nodes: 0,
        gangs: BTreeSet::new(),
    };
    for r in &reading.records {
        if let Event::Decision(d) = &r.event
            && let Some(id) = &d.scale_up_id
            && !failed.contains(id.as_str())
        {
            out.scale_ups += 1;
            out.nodes += d.applied_delta;
            for g in &d.gangs {
                assert!(
                    out.gangs.insert(g.gang.to_string()),
                    "gang {} admitted twice",
                    g.gang
                );
            }
        }
    }
    out
}

/// `gangscaler audit report -o json` over the log must read every line.
fn report_reads(log: &Path, want_records: usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["audit", "report", "--rotated", "-o", "json"])
        .arg(log)
        .output()
        .expect("running gangscaler audit report");
    assert!(
        out.status.success(),
        "audit report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["records"].as_u64(),
        Some(want_records as u64),
        "{report}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("skipped"),
        "no bad line reported: {stderr}"
    );
}

/// After a restart, the scale-ups the log holds are the ones tracked: each OK answer's
/// lifecycle is open again, and nothing else.
fn restart_tracks(log: &Path, ok: u32) {
    let (recorder, resumed) = Recorder::open(log, Config::new(), timeouts()).unwrap();
    assert_eq!(resumed.repaired_bytes, 0, "no torn line left behind");
    assert_eq!(
        recorder.open_count(),
        ok as usize,
        "one lifecycle per OK answer"
    );
}

/// The log accounts for every OK answer and every node, and reads back whole.
fn accounts(log: &Path, logged: &Logged, ok: u32, nodes: u32) {
    assert_eq!(logged.bad, 0, "no partial line");
    assert_eq!(
        logged.scale_ups as u32, ok,
        "every OK answer has its record"
    );
    assert_eq!(logged.nodes, nodes, "no node added without its record");
    assert_eq!(logged.gangs.len() as u32, ok, "each gang admitted once");
    report_reads(log, logged.records);
    restart_tracks(log, ok);
}

fn figures(what: &str, phases: &[(&str, &Calls)], logged: &Logged, nodes: u32) {
    let ok: u32 = phases.iter().map(|(_, c)| c.ok).sum();
    let refused: u32 = phases.iter().map(|(_, c)| c.refused).sum();
    eprintln!("audit on {what}:");
    for (name, c) in phases {
        eprintln!(
            "  {name}: {} calls, {} answered OK, {} refused",
            c.ok + c.refused,
            c.ok,
            c.refused
        );
    }
    eprintln!(
        "  total: {ok} OK, {refused} refused; {} records in the log ({} scale-ups), {nodes} nodes added, {} without a record",
        logged.records,
        logged.scale_ups,
        nodes - logged.nodes
    );
}

/// Mounts a tmpfs of `size` at `dir`; `None` (with the reason) where this process may not.
fn mount_tmpfs(dir: &Path, size: &str) -> Result<(), String> {
    let out = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .output()
        .map_err(|e| format!("running mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Unmounts `dir` when dropped, so a failed assertion leaves no mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Writes `path` until the filesystem refuses; returns how much was written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    let mut written = 0u64;
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_filesystem_refuses_scale_ups_without_losing_one_and_writing_resumes_when_space_returns()
 {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if let Err(why) = mount_tmpfs(&mnt, "1m") {
        assert!(
            !is_root(),
            "root could not mount the test's tmpfs at {}: {why}",
            mnt.display()
        );
        eprintln!("skipped: mounting a tmpfs needs root ({why}); the file-size test still runs");
        return;
    }
    let _mounted = Mounted(mnt.clone());
    let log = mnt.join("audit.jsonl");
    let rig = Rig::start(&log).await;
    let mut c = client(rig.addr).await;

    let before = increase(&mut c, 0, 10).await;
    assert_eq!((before.ok, before.refused), (10, 0));
    assert_eq!(rig.engine.audit_unwritable(), None);

    // The disk fills up (another writer on the same volume); then 40 more scale-ups.
    let filler = mnt.join("filler");
    let filled = fill(&filler);
    assert!(filled > 8192);
    // Leave two pages: a few records still fit, then the disk is full mid-series.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(filled - 8192)
        .unwrap();
    let full = increase(&mut c, before.next, 40).await;
    assert!(
        full.ok > 0 && full.refused > 0,
        "some records fit in the last pages, then the disk refused: {full:?}"
    );
    let why = rig
        .engine
        .audit_unwritable()
        .expect("the log says it is unwritable");
    assert!(why.contains("No space left on device"), "{why}");
    assert!(why.contains(&log.display().to_string()), "{why}");
    let exposition = rig.metrics.encode();
    assert!(
        exposition.contains("gangscaler_audit_writable 0"),
        "{exposition}"
    );

    // Space returns: writing resumes by itself, with the next call.
    std::fs::remove_file(&filler).unwrap();
    let after = increase(&mut c, full.next, 10).await;
    assert_eq!((after.ok, after.refused), (10, 0));
    assert_eq!(rig.engine.audit_unwritable(), None);
    assert!(
        rig.metrics.encode().contains("gangscaler_audit_writable 1"),
        "writable again"
    );
    let nodes = nodes(&mut c).await;
    rig.stop().await;

    let ok = before.ok + full.ok + after.ok;
    let logged = logged(&log);
    figures(
        "a full tmpfs (1 MiB)",
        &[
            ("before the disk filled", &before),
            ("disk filling up", &full),
            ("space freed", &after),
        ],
        &logged,
        nodes,
    );
    assert_eq!(nodes, before.added + full.added + after.added);
    accounts(&log, &logged, ok, nodes);
}

/// Starts this test binary as the child rig under `prlimit --fsize=<limit>:unlimited`, with or
/// without the `SIGXFSZ` handler; returns it and its address.
fn spawn_child(log: &Path, limit: u64, handler: bool) -> (Child, SocketAddr) {
    let mut child = Command::new("prlimit")
        .arg(format!("--fsize={limit}:unlimited"))
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_server", "--ignored", "--nocapture"])
        .env(CHILD_ENV, if handler { "handler" } else { "no-handler" })
        .env(CHILD_LOG_ENV, log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the child rig under prlimit (util-linux)");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the child printed its address")
            .unwrap();
        if let Some(a) = line.strip_prefix("LISTENING ") {
            break a.parse().unwrap();
        }
    };
    // Keep reading, so the child's last lines do not meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

/// Raises the running child's file-size limit (its soft limit; the hard one is unlimited).
fn lift_limit(child: &Child) {
    let status = Command::new("prlimit")
        .args([
            "--pid",
            &child.id().to_string(),
            "--fsize=unlimited:unlimited",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "prlimit --pid failed");
}

/// Stops the child by its pid (closing its stdin ends it; kill if it does not go).
fn stop_child(mut child: Child) {
    drop(child.stdin.take());
    for _ in 0..50 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_size_limit_refuses_scale_ups_without_killing_the_process() {
    let dir = tempfile::tempdir().unwrap();
    // Room for a few decision records (each about 1 KB) under the limit.
    let limit = 16 * 1024;

    // Without the handler, the first write past the limit ends the process: the limit
    // really is hit, and the handler is what saves the process below.
    let control = dir.path().join("control.jsonl");
    let (mut child, addr) = spawn_child(&control, limit, false);
    let mut c = client(addr).await;
    let mut killed = None;
    for i in 0..GROUPS {
        let answer = c
            .node_group_increase_size(NodeGroupIncreaseSizeRequest {
                id: group_id(i),
                delta: 1,
            })
            .await;
        if answer.is_err() {
            for _ in 0..50 {
                if let Some(status) = child.try_wait().unwrap() {
                    killed = Some(status);
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            break;
        }
    }
    let status = killed.expect("without a handler the child dies at the limit");
    {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(libc::SIGXFSZ), "{status:?}");
    }
    drop(child);

    // With the handler: refused, alive, and writing again once the limit is lifted.
    let log = dir.path().join("audit.jsonl");
    let (child, addr) = spawn_child(&log, limit, true);
    let mut c = client(addr).await;
    let limited = increase(&mut c, 0, 30).await;
    assert!(limited.ok > 0 && limited.refused > 0, "{limited:?}");
    let lifted = {
        lift_limit(&child);
        increase(&mut c, limited.next, 10).await
    };
    assert_eq!((lifted.ok, lifted.refused), (10, 0));
    let nodes = nodes(&mut c).await;
    stop_child(child);

    let ok = limited.ok + lifted.ok;
    let logged = logged(&log);
    figures(
        "a file-size limit (16 KiB, SIGXFSZ handled)",
        &[("limited", &limited), ("limit lifted", &lifted)],
        &logged,
        nodes,
    );
    assert_eq!(nodes, limited.added + lifted.added);
    accounts(&log, &logged, ok, nodes);
}

/// Not a test: the child process of [`a_file_size_limit_refuses_scale_ups_without_killing_the_process`]
/// (run by it with the role in the environment). Serves the rig until its stdin closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_file_size_limit_refuses_scale_ups_without_killing_the_process"]
async fn child_server() {
    let role = std::env::var(CHILD_ENV).expect("run only as the child of the file-size test");
    if role == "handler" {
        gangscaler::signals::survive_write_signals().expect("installing the SIGXFSZ handler");
    }
    let log = PathBuf::from(std::env::var(CHILD_LOG_ENV).unwrap());
    let rig = Rig::start(&log).await;
    println!("LISTENING {}", rig.addr);
    std::io::stdout().flush().unwrap();
    // Serve until the parent closes stdin.
    tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        let _ = std::io::stdin().read_line(&mut sink);
    })
    .await
    .unwrap();
    rig.stop().await;
}
