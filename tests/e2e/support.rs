//! Helpers shared by every program that drives the e2e harness (the `e2e` tests and the
//! `soak` run, which includes this file by path): starting gangscaler, and creating objects
//! and gang objects through the dynamic API.

#![expect(clippy::unwrap_used, reason = "test helpers: abort loudly")]

use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};

use super::harness::{self, Cluster};

/// The gangscaler binary the e2e runs: `$GANGSCALER_BIN` when set (CI passes the static
/// release binary that goes into the image, see `scripts/image.sh`), else this build's.
pub fn gangscaler_bin() -> std::path::PathBuf {
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
pub fn start_gangscaler(
    cluster: &Cluster,
    config: &std::path::Path,
    http: u16,
    log: &str,
) -> harness::Proc {
    start_gangscaler_with_env::<&str, &str>(cluster, config, http, log, &[])
}

/// [`start_gangscaler`] with these environment variables (e.g. `POD_NAME` and `GANGSCALER__…`
/// overrides for one replica of several sharing `config`).
pub fn start_gangscaler_with_env<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
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
/// reach the API server. Panics naming the object when it is refused.
pub async fn create_dynamic(client: &kube::Client, value: serde_json::Value) {
    let kind = value["kind"].as_str().unwrap_or_default().to_owned();
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match try_create(client, &value, false).await {
        None => panic!("creating {kind} {name}: its kind is not served"),
        Some(Err(e)) => panic!("creating {kind} {name}: {e}"),
        Some(Ok(_)) => {}
    }
}

/// [`create_dynamic`] as a server-side dry run or not, returning what the API server
/// answered or its error; `None` when the kind is not served (a CRD that is not installed).
pub async fn try_create(
    client: &kube::Client,
    value: &serde_json::Value,
    dry_run: bool,
) -> Option<Result<kube::api::DynamicObject, kube::Error>> {
    let obj: kube::api::DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let tm = obj.types.clone().unwrap();
    let (group, version) = tm
        .api_version
        .split_once('/')
        .unwrap_or(("", tm.api_version.as_str()));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &tm.kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    let api: Api<kube::api::DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => {
            let ns = obj.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    Some(api.create(&params, &obj).await)
}

/// The gang object (a PodGroup, or a Workload on v1alpha1) named `name` with minCount `min`.
/// From v1beta1 (1.37) a PodGroup carries the priority of its pods, and the scheduler refuses
/// pods whose priority differs ("all pods in a single pod group should have the same priority
/// as the pod group's priority"), so `priority_class` goes on it there.
pub async fn create_gang_object(
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
