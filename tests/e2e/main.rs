//! End-to-end tests against a real control plane (etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager, kwok; see `harness.rs`) and the real cluster-autoscaler, built
//! from the upstream sources in `../shared/cluster-autoscaler`.
//!
//! - `ca_scaleup`, `ca_lifecycle`, `ca_wire`, `ca_ha`: every gang scenario, driven by CA calling
//!   gangscaler over `externalgrpc` (see `scenario.rs`); each records a row of
//!   `docs/e2e-results.md`.
//! - `alone`: gangscaler without CA (the kwok backend, the cluster view, and gangscaler's own
//!   side of the gRPC contract).
//! - `outage`: gangscaler alone while kube-apiserver is stopped and started again.
//! - `deploy`: the Helm chart (`chart.rs`) applied to the API server; gangscaler under the
//!   chart's ServiceAccount, with every permission, and without one. Every CA-driven scenario
//!   runs gangscaler under that ServiceAccount too (`Scenario::start`).
//!
//! These tests need the binaries from `tests/e2e/build.sh`; they are `#[ignore]`d so a plain
//! `cargo test` does not need them. Run: `tests/e2e/build.sh --legacy-ca && cargo test
//! --all-features --test e2e -- --ignored --test-threads=1`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

#[path = "../common/mod.rs"]
mod common;

mod alone;
mod alone_capi;
mod ca_capi;
mod ca_ha;
mod ca_lifecycle;
mod ca_scaleup;
mod ca_wire;
mod capi;
mod chart;
mod deploy;
mod harness;
mod outage;
mod scenario;

use std::process::Command;
use std::time::{Duration, Instant};

use harness::{Cluster, eventually};
use kube::api::{Api, ListParams, PostParams};

/// The gangscaler binary the e2e runs: `$GANGSCALER_BIN` when set (CI passes the static
/// release binary that goes into the image, see `scripts/image.sh`), else this build's.
fn gangscaler_bin() -> std::path::PathBuf {
    std::env::var_os("GANGSCALER_BIN")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_BIN_EXE_gangscaler")),
            std::path::PathBuf::from,
        )
}

/// Starts the gangscaler binary ([`gangscaler_bin`]) on the configuration folder `config`
/// (logging to `log` in the run's folder) and waits until its metrics port `http` accepts
/// connections.
fn start_gangscaler(
    cluster: &Cluster,
    config: &std::path::Path,
    http: u16,
    log: &str,
) -> harness::Proc {
    start_gangscaler_with_env::<&str, &str>(cluster, config, http, log, &[])
}

/// [`start_gangscaler`] with these environment variables (e.g. `POD_NAME` and `GANGSCALER__…`
/// overrides for one replica of several sharing `config`).
fn start_gangscaler_with_env<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
    cluster: &Cluster,
    config: &std::path::Path,
    http: u16,
    log: &str,
    env: &[(K, V)],
) -> harness::Proc {
    let mut cmd = Command::new(gangscaler_bin());
    cmd.args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k, v)));
    let p = harness::Proc::spawn_logged(log, &cluster.dir, cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", http)).is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gangscaler did not start; logs in {}",
            cluster.dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    p
}

/// Creates `value` (any kind, in its `metadata.namespace` or `default`) through the dynamic
/// API, so fields the typed structs of this build lack (such as `spec.workloadRef` on 1.35)
/// reach the API server.
async fn create_dynamic(client: &kube::Client, value: serde_json::Value) {
    let obj: kube::api::DynamicObject = serde_json::from_value(value).unwrap();
    let tm = obj.types.clone().unwrap();
    let (group, version) = tm
        .api_version
        .split_once('/')
        .unwrap_or(("", tm.api_version.as_str()));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &tm.kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => {
            let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    if let Err(e) = api.create(&PostParams::default(), &obj).await {
        panic!(
            "creating {} {}: {e}",
            tm.kind,
            obj.metadata.name.unwrap_or_default()
        );
    }
}

/// The gang object (a PodGroup, or a Workload on v1alpha1) named `name` with minCount `min`.
/// From v1beta1 (1.37) a PodGroup carries the priority of its pods, and the scheduler refuses
/// pods whose priority differs ("all pods in a single pod group should have the same priority
/// as the pod group's priority"), so `priority_class` goes on it there.
async fn create_gang_object(
    client: &kube::Client,
    api: &str,
    name: &str,
    min: u32,
    priority_class: Option<&str>,
) {
    if api.ends_with("/v1alpha1") {
        create_dynamic(client, serde_json::json!({
            "apiVersion": api, "kind": "Workload", "metadata": {"name": name, "namespace": "default"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min}}}]}
        }))
        .await;
    } else {
        let mut spec = serde_json::json!({"schedulingPolicy": {"gang": {"minCount": min}}});
        if let Some(class) = priority_class.filter(|_| !api.ends_with("/v1alpha2")) {
            spec["priorityClassName"] = serde_json::json!(class);
        }
        create_dynamic(client, serde_json::json!({
            "apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "spec": spec
        }))
        .await;
    }
}

/// The reasons of every events.k8s.io Event on the gang object named `name` now.
async fn gang_event_reasons(client: &kube::Client, name: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

/// The note of the event with `reason` on the gang object named `name` (waits for it).
async fn gang_event(client: &kube::Client, name: &str, reason: &str) -> String {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    let what = format!("event {reason} on {name}");
    eventually(&what, Duration::from_secs(10), || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                let on = e.regarding.as_ref()?.name.as_deref() == Some(name);
                (on && e.reason.as_deref() == Some(reason)).then(|| e.note.unwrap_or_default())
            })
        }
    })
    .await
}

/// Deletes the gang object `name` (a PodGroup, or a Workload on v1alpha1) of gang API `api`.
async fn delete_dynamic(client: &kube::Client, api: &str, name: &str) {
    let kind = if api.ends_with("/v1alpha1") {
        "Workload"
    } else {
        "PodGroup"
    };
    let (group, version) = api.split_once('/').unwrap();
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let objects: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ar);
    objects
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {kind} {name}: {e}"));
}

/// The (reason, message) of every core/v1 Event about pod `pod` (CA records its
/// `TriggeredScaleUp` / `NotTriggerScaleUp` there).
async fn pod_events(client: &kube::Client, pod: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(pod))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}
