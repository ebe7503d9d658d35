//! Scale-up lifecycles on the control plane: gangscaler serves a kwok GPU group with its
//! simulated CSI attacher, watches the cluster, and writes every phase and outcome to its audit
//! log. The real kube-controller-manager's attach-detach controller creates the
//! VolumeAttachments; the kwok backend's attacher marks them attached (or failed, for one
//! driver) after a delay, standing in for a CSI driver's external-attacher, which cannot run
//! without a real storage system. As in the rest of the suite, the test itself makes the
//! IncreaseSize call CA would make (the real cluster-autoscaler cannot be built here).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gangscaler::audit::{Event, Outcome, OutcomeEvent, Phase, PhaseEvent, Record, read_files};

use super::common;
use super::*;

/// The driver the simulated attacher fails.
const BROKEN_DRIVER: &str = "broken.csi.example.com";
const GOOD_DRIVER: &str = "ebs.csi.aws.com";
/// The simulated attach delay, seconds.
const ATTACH_DELAY_S: u64 = 4;

/// gangscaler with the cluster view, the audit log and a fast lifecycle loop over one kwok GPU
/// group (max 4) with the simulated attacher. Returns (gRPC port, metrics address, log path).
fn write_lifecycle_config(
    cluster: &Cluster,
    dir: &Path,
    formation_timeout: &str,
) -> (u16, SocketAddr, PathBuf) {
    let (grpc, http) = write_config_with(
        cluster,
        dir,
        &format!(
            "audit: {{path: audit.jsonl}}\n\
             lifecycle: {{interval: 500ms, formationTimeout: {formation_timeout}, attachTimeout: 2m}}\n"
        ),
        &format!("csi: {{{GOOD_DRIVER}: 8, {BROKEN_DRIVER}: 8}}\n"),
        &format!(
            "provisionDelay: 0s, attach: {{delay: {ATTACH_DELAY_S}s, failDriver: {BROKEN_DRIVER}}}"
        ),
    );
    enable_watch(dir);
    (
        grpc,
        SocketAddr::from(([127, 0, 0, 1], http)),
        dir.join("audit.jsonl"),
    )
}

/// A PersistentVolume of `driver` and a claim pre-bound to it, both named `name`.
async fn create_volume(client: &kube::Client, name: &str, driver: &str) {
    create_dynamic(
        client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                "csi": {"driver": driver, "volumeHandle": format!("vol-{name}")}}
        }),
    )
    .await;
    create_dynamic(
        client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                "resources": {"requests": {"storage": "10Gi"}}}
        }),
    )
    .await;
}

/// The records of the audit log (every line must parse).
fn records(log: &Path) -> Vec<Record> {
    let reading = read_files(&[log.to_path_buf()]).unwrap();
    assert!(reading.bad.is_empty(), "bad lines: {:?}", reading.bad);
    reading.records
}

/// The gang object a record is about, by name (a v1alpha1 gang `<workload>/<podGroup>` by its
/// Workload's).
fn gang_of(r: &Record) -> Option<&str> {
    let gang = match &r.event {
        Event::Phase(p) => p.gang.as_ref(),
        Event::Outcome(o) => o.gang.as_ref(),
        Event::Decision(_) => None,
    }?;
    gang.name.split('/').next()
}

fn phases_of<'a>(all: &'a [Record], gang: &str) -> Vec<&'a PhaseEvent> {
    all.iter()
        .filter(|r| gang_of(r) == Some(gang))
        .filter_map(|r| match &r.event {
            Event::Phase(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn outcomes_of<'a>(all: &'a [Record], gang: &str) -> Vec<&'a OutcomeEvent> {
    all.iter()
        .filter(|r| gang_of(r) == Some(gang))
        .filter_map(|r| match &r.event {
            Event::Outcome(o) => Some(o),
            _ => None,
        })
        .collect()
}

/// Waits until the log holds an outcome for every gang in `gangs`.
async fn wait_for_outcomes(log: &Path, gangs: &[&str], timeout: Duration) -> Vec<Record> {
    let what = format!("outcomes for {gangs:?} in {}", log.display());
    eventually(&what, timeout, || {
        let all = if log.exists() {
            records(log)
        } else {
            Vec::new()
        };
        let done = gangs.iter().all(|g| !outcomes_of(&all, g).is_empty());
        async move { done.then_some(all) }
    })
    .await
}

/// The name of a metric series for node group `gpu`, as exposed.
fn series(name: &str, extra: &str) -> String {
    format!("gangscaler_{name}{{node_group=\"gpu\"{extra}}}")
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn success_is_recorded_only_after_the_volumes_attach_and_an_attach_error_fails_the_scale_up()
{
    let cluster = Cluster::start("lifecycle-volumes").await;
    let client = cluster.client().await;
    let api = harness::Versions::load().gang_api;
    let config = cluster.dir.join("gangscaler");
    let (grpc, http, log) = write_lifecycle_config(&cluster, &config, "5m");

    // ckpt: both members mount a checkpoint volume that attaches after a delay.
    // bad: member 1's volume is on the driver whose attach fails.
    create_gang_object(&client, &api, "ckpt", 2).await;
    create_gang_object(&client, &api, "bad", 2).await;
    for (gang, i, driver) in [
        ("ckpt", 0, GOOD_DRIVER),
        ("ckpt", 1, GOOD_DRIVER),
        ("bad", 0, GOOD_DRIVER),
        ("bad", 1, BROKEN_DRIVER),
    ] {
        let claim = format!("{gang}-{i}-ckpt");
        create_volume(&client, &claim, driver).await;
        create_member(&client, &api, gang, i, Some(&claim), serde_json::json!({})).await;
    }
    let mut server = start_gangscaler(&cluster, &config, http.port(), "gangscaler-1");
    let mut c = CloudProviderClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    let asked = Instant::now();
    // Stand-in for CA asking for the four nodes both gangs need.
    increase_when_synced(&mut c, "gpu", 4).await.unwrap();
    assert_eq!(target_of(&mut c, "gpu").await, 4);

    // Crash while the lifecycle is open: after ckpt formed, before its volumes attach.
    let what = format!("ckpt formed in {}", log.display());
    eventually(&what, Duration::from_secs(60), || {
        let formed = log.exists()
            && phases_of(&records(&log), "ckpt")
                .iter()
                .any(|p| p.phase >= Phase::GangFormed);
        async move { formed.then_some(()) }
    })
    .await;
    // Events are best effort (like every component's): let this one land before the crash.
    let note = gang_event(&client, "ckpt", "ScaleUpGangFormed").await;
    assert!(note.contains("gang formed"), "{note}");
    server.kill9();
    let _server = start_gangscaler(&cluster, &config, http.port(), "gangscaler-2");

    let all = wait_for_outcomes(&log, &["ckpt", "bad"], Duration::from_secs(90)).await;
    let observed_within_ms = u64::try_from(asked.elapsed().as_millis()).unwrap();
    // Let a few more loop ticks pass: nothing may be written twice.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all_later = records(&log);
    assert_eq!(
        all.len(),
        all_later.len(),
        "records after the outcomes: {:?}",
        &all_later[all.len()..]
    );

    // ckpt: succeeded, formed first and attached later, each phase and the outcome exactly once.
    let phases = phases_of(&all, "ckpt");
    let kinds: Vec<Phase> = phases.iter().map(|p| p.phase).collect();
    let mut unique = kinds.clone();
    unique.dedup();
    assert_eq!(kinds, unique, "a phase recorded twice: {kinds:?}");
    assert!(kinds.windows(2).all(|w| w[0] < w[1]), "{kinds:?}");
    let outcomes = outcomes_of(&all, "ckpt");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let ok = outcomes[0];
    assert_eq!(ok.outcome, Outcome::Succeeded, "{ok:?}");
    let formed = ok.formed_at_ms.expect("formed time");
    let attached = ok.attached_at_ms.expect("attached time");
    let gap = attached - formed;
    eprintln!(
        "ckpt: formed {} ms after the request, volumes attached {gap} ms later, succeeded after {} ms",
        formed - ok.requested_at_ms,
        ok.duration_ms
    );
    assert!(
        gap >= 2_000,
        "the attach delay shows between formed and attached: {gap} ms"
    );
    assert!(
        phases
            .iter()
            .any(|p| p.phase == Phase::GangFormed && p.at_ms == formed),
        "{phases:?}"
    );
    assert!(
        phases
            .iter()
            .any(|p| p.phase == Phase::VolumesAttached && p.at_ms == attached),
        "{phases:?}"
    );

    // The VolumeAttachments came from the attach-detach controller (it names them `csi-<hash>`).
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let vas = vas.list(&ListParams::default()).await.unwrap().items;
    for pv in ["ckpt-0-ckpt", "ckpt-1-ckpt", "bad-1-ckpt"] {
        let va = vas
            .iter()
            .find(|va| va.spec.source.persistent_volume_name.as_deref() == Some(pv))
            .unwrap_or_else(|| panic!("no VolumeAttachment for {pv}: {vas:?}"));
        assert!(
            va.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("csi-")),
            "{va:?}"
        );
    }

    // bad: attach failed on member 1's volume.
    let outcomes = outcomes_of(&all, "bad");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let failed = outcomes[0];
    assert_eq!(failed.outcome, Outcome::AttachFailed, "{failed:?}");
    assert!(failed.attach_failures >= 1);
    assert!(
        failed.reason.contains("bad-1/bad-1-ckpt") && failed.reason.contains(BROKEN_DRIVER),
        "{}",
        failed.reason
    );

    // Metrics (of the restarted process, which recorded both outcomes).
    let m = common::metrics(http).await;
    let value = |s: &str| common::sample(&m, s).unwrap_or_else(|| panic!("{s} missing:\n{m}"));
    assert_eq!(
        value(&series("scaleup_outcomes_total", ",outcome=\"succeeded\"")),
        1.0
    );
    assert_eq!(
        value(&series(
            "scaleup_outcomes_total",
            ",outcome=\"attachFailed\""
        )),
        1.0
    );
    assert!(value(&series("scaleup_attach_failures_total", "")) >= 1.0);
    assert_eq!(value(&series("scaleup_success_seconds_count", "")), 1.0);
    assert_eq!(
        value(&series("scaleup_job_start_delay_seconds_count", "")),
        1.0
    );
    assert_eq!(value("gangscaler_scaleup_open"), 0.0);

    // Events on the gang objects (the Workload on v1alpha1, named like the gang).
    let note = gang_event(&client, "ckpt", "ScaleUpVolumesAttached").await;
    assert!(note.contains("every volume attached"), "{note}");
    let note = gang_event(&client, "ckpt", "ScaleUpSucceeded").await;
    assert!(note.contains("succeeded"), "{note}");
    let note = gang_event(&client, "bad", "ScaleUpFailed").await;
    assert!(note.contains("attachFailed"), "{note}");

    // `gangscaler audit report` over the run's log gives the numbers the records show.
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["audit", "report", "--output", "json"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let overall = &report["overall"];
    assert_eq!(overall["outcomes"]["succeeded"], 1, "{report:#}");
    assert_eq!(overall["outcomes"]["attachFailed"], 1, "{report:#}");
    assert_eq!(overall["startSuccessRate"], 0.5, "{report:#}");
    assert_eq!(overall["attachFailureRate"], 0.5, "{report:#}");
    let formations: BTreeMap<&str, u64> = [("ckpt", ok), ("bad", failed)]
        .into_iter()
        .map(|(g, o)| {
            let ms = o.formed_at_ms.expect("both gangs formed") - o.requested_at_ms;
            (g, u64::try_from(ms).unwrap())
        })
        .collect();
    let slowest = *formations.values().max().unwrap();
    let fastest = *formations.values().min().unwrap();
    let formation = &overall["formation"];
    assert_eq!(formation["count"], 2, "{report:#}");
    assert_eq!(formation["p50Ms"], fastest, "{report:#}");
    assert_eq!(formation["p95Ms"], slowest, "{report:#}");
    assert!(
        slowest <= observed_within_ms,
        "formation {slowest} ms cannot exceed the {observed_within_ms} ms the test waited"
    );
    assert_eq!(report["nodeGroups"]["gpu"]["formation"], *formation);
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn a_gang_that_never_forms_ends_in_a_formation_timeout() {
    let cluster = Cluster::start("lifecycle-timeout").await;
    let client = cluster.client().await;
    let api = harness::Versions::load().gang_api;
    let config = cluster.dir.join("gangscaler");
    let (grpc, http, log) = write_lifecycle_config(&cluster, &config, "8s");
    // Member 1 also needs a pod that never exists (required pod affinity): admission, which
    // models node constraints, admits the gang; the scheduler can never place member 1.
    create_gang_object(&client, &api, "stuck", 2).await;
    create_member(&client, &api, "stuck", 0, None, serde_json::json!({})).await;
    create_member(
        &client,
        &api,
        "stuck",
        1,
        None,
        serde_json::json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "parameter-server"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}}}),
    )
    .await;
    let _server = start_gangscaler(&cluster, &config, http.port(), "gangscaler");
    let mut c = CloudProviderClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    increase_when_synced(&mut c, "gpu", 2).await.unwrap();
    assert_eq!(target_of(&mut c, "gpu").await, 2);

    let all = wait_for_outcomes(&log, &["stuck"], Duration::from_secs(60)).await;
    let outcomes = outcomes_of(&all, "stuck");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let o = outcomes[0];
    assert_eq!(o.outcome, Outcome::FormationTimeout, "{o:?}");
    assert_eq!(o.formed_at_ms, None);
    assert!(
        (8_000..20_000).contains(&o.duration_ms),
        "ended {} ms after the request",
        o.duration_ms
    );
    let phases: Vec<Phase> = phases_of(&all, "stuck").iter().map(|p| p.phase).collect();
    assert_eq!(
        phases.last(),
        Some(&Phase::NodesReady),
        "the nodes came, the gang did not form: {phases:?}"
    );
    eprintln!(
        "stuck: {} after {} ms: {}",
        o.outcome.as_str(),
        o.duration_ms,
        o.reason
    );
    let m = common::metrics(http).await;
    assert_eq!(
        common::sample(
            &m,
            &series("scaleup_outcomes_total", ",outcome=\"formationTimeout\"")
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        common::sample(&m, &series("scaleup_formation_seconds_count", "")),
        None,
        "no formation time for a gang that never formed"
    );
    let note = gang_event(&client, "stuck", "ScaleUpFailed").await;
    assert!(note.contains("formationTimeout"), "{note}");
}
