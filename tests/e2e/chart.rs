//! The Helm chart (`charts/gangscaler`) on the e2e API server: `helm template` renders it (helm
//! from `tests/e2e/build.sh`), every object is server-side applied with strict field
//! validation, and gangscaler then runs with the chart's ServiceAccount: a token from the
//! TokenRequest API in a kubeconfig of its own, instead of the admin certificate. Objects of
//! API groups the test cluster does not serve (Prometheus Operator, cert-manager) are skipped
//! and named; every other object must apply.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::Value;

use super::harness::{Cluster, Versions, write};

/// Release name and namespace the scenarios install the chart as.
pub const RELEASE: &str = "gangscaler";
/// Namespace of the release: the ServiceAccount, the Role and the kwok state ConfigMap.
pub const NAMESPACE: &str = "gangscaler";
/// The chart's kwok state ConfigMap (its `config.kubernetes.stateConfigMap` default).
pub const STATE_CONFIG_MAP: &str = "gangscaler-state";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    repo().join("charts/gangscaler")
}

/// The values the scenarios install the chart with (`tests/e2e/chart-values.yaml`).
pub fn e2e_values() -> PathBuf {
    repo().join("tests/e2e/chart-values.yaml")
}

/// `helm template <release> charts/gangscaler --namespace <namespace> -f <values>...`, parsed:
/// one JSON value per rendered object, in helm's order.
pub fn render(release: &str, namespace: &str, values: &[&Path]) -> Vec<Value> {
    render_with(release, namespace, values, &[])
}

/// [`render`] with more helm arguments (`--kube-version`, for templates that depend on it).
pub fn render_with(release: &str, namespace: &str, values: &[&Path], args: &[&str]) -> Vec<Value> {
    let helm = Versions::load().helm_bin();
    let mut cmd = Command::new(&helm);
    cmd.args(["template", release])
        .arg(chart_dir())
        .args(["--namespace", namespace]);
    for v in values {
        cmd.arg("--values").arg(v);
    }
    cmd.args(args);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("helm prints UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("helm template printed YAML that does not parse: {e}"));
    docs.into_iter()
        .filter(|d| d.is_object() && d.get("kind").is_some())
        .collect()
}

/// `Kind name`, for messages.
pub fn describe(obj: &Value) -> String {
    format!(
        "{} {}",
        obj["kind"].as_str().unwrap_or("?"),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The objects of `kind` among `objects`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Removes `verb` from every rule of every `kind` (ClusterRole or Role) that grants it on
/// `resource` of API group `group`, dropping rules left without verbs; returns how many rules
/// changed. A test that drops a permission checks this is not zero.
pub fn drop_verb(
    objects: &mut [Value],
    kind: &str,
    group: &str,
    resource: &str,
    verb: &str,
) -> usize {
    let mut changed = 0;
    for obj in objects.iter_mut().filter(|o| o["kind"] == kind) {
        let Some(rules) = obj.get_mut("rules").and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in rules.iter_mut() {
            let has = |key: &str, want: &str| {
                rule[key]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == want))
            };
            if !(has("apiGroups", group) && has("resources", resource) && has("verbs", verb)) {
                continue;
            }
            if let Some(verbs) = rule["verbs"].as_array_mut() {
                verbs.retain(|v| v != verb);
                changed += 1;
            }
        }
        rules.retain(|r| r["verbs"].as_array().is_some_and(|v| !v.is_empty()));
    }
    changed
}

/// What [`apply`] did.
#[derive(Debug, Default)]
pub struct Applied {
    /// `Kind name` of every object applied, in order.
    pub applied: Vec<String>,
    /// `Kind name (apiVersion not served)` of every object skipped.
    pub skipped: Vec<String>,
}

impl Applied {
    /// Asserts that at least one object of each of `kinds` was applied.
    pub fn assert_kinds(&self, kinds: &[&str]) {
        for kind in kinds {
            assert!(
                self.applied
                    .iter()
                    .any(|a| a.starts_with(&format!("{kind} "))),
                "{kind} applied: {:?}",
                self.applied
            );
        }
    }
}

/// The `data` of the rendered ConfigMap `name`.
pub fn config_map_data<'a>(objects: &'a [Value], name: &str) -> &'a serde_json::Map<String, Value> {
    of_kind(objects, "ConfigMap")
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
        .and_then(|o| o["data"].as_object())
        .unwrap_or_else(|| panic!("the chart renders ConfigMap {name} with data"))
}

/// Writes `data` into `dir` the way kubelet mounts a ConfigMap: the files in a timestamped
/// directory, a `..data` symlink to it, and one symlink per key through `..data`.
pub fn mount_like_kubelet(dir: &Path, data: &serde_json::Map<String, Value>) {
    let stamp = dir.join("..2026_12_01_00_00_00.000000001");
    std::fs::create_dir_all(&stamp).unwrap();
    for (key, value) in data {
        write(
            &stamp.join(key),
            value.as_str().expect("ConfigMap data is text"),
        );
        symlink(Path::new("..data").join(key), dir.join(key)).unwrap();
    }
    symlink(stamp.file_name().unwrap(), dir.join("..data")).unwrap();
}

/// Apply order: the namespace's ServiceAccount and RBAC first (gangscaler needs them before it
/// starts), then everything else in helm's order.
fn rank(obj: &Value) -> u8 {
    match obj["kind"].as_str() {
        Some("ServiceAccount") => 0,
        Some("ClusterRole" | "Role") => 1,
        Some("ClusterRoleBinding" | "RoleBinding") => 2,
        _ => 3,
    }
}

/// The group/versions the API server serves (`v1` for the core group).
async fn served(client: &kube::Client) -> Vec<String> {
    let mut out = vec!["v1".to_owned()];
    let groups = client.list_api_groups().await.expect("listing API groups");
    out.extend(
        groups
            .groups
            .iter()
            .flat_map(|g| g.versions.iter().map(|v| v.group_version.clone())),
    );
    out
}

/// Creates `namespace` (server-side apply) and applies every object of `objects` to it with
/// strict field validation, ServiceAccount and RBAC first. Objects whose apiVersion the API
/// server does not serve are skipped and listed (printed too); any other failure fails the test.
pub async fn apply(client: &kube::Client, namespace: &str, objects: &[Value]) -> Applied {
    let served = served(client).await;
    let params = PatchParams::apply("gangscaler-e2e")
        .force()
        .validation_strict();
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(namespace, &params, &Patch::Apply(&ns))
        .await
        .unwrap_or_else(|e| panic!("applying namespace {namespace}: {e}"));
    let mut ordered: Vec<&Value> = objects.iter().collect();
    ordered.sort_by_key(|o| rank(o));
    let mut out = Applied::default();
    for obj in ordered {
        let what = describe(obj);
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        if !served.iter().any(|s| s == api_version) {
            let line = format!("{what} ({api_version} not served)");
            eprintln!("chart: skipped {line}");
            out.skipped.push(line);
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = obj["kind"].as_str().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{what}: {api_version} is served but {kind} is not: {e}"));
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => {
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or(namespace);
                Api::namespaced_with(client.clone(), ns, &ar)
            }
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        api.patch(name, &params, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("server-side apply of {what} failed: {e}"));
        out.applied.push(what);
    }
    out
}

/// A kubeconfig for ServiceAccount `name` in `namespace`: a one-hour token from the
/// TokenRequest API, the API server's address and CA. Written to `<run>/<name>-sa.kubeconfig`.
pub async fn service_account_kubeconfig(cluster: &Cluster, namespace: &str, name: &str) -> PathBuf {
    let client = cluster.client().await;
    let sas: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a TokenRequest answer carries a token");
    let admin = std::fs::read_to_string(&cluster.kubeconfig).expect("admin kubeconfig");
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in the admin kubeconfig")
        .to_owned();
    let path = cluster.dir.join(format!("{name}-sa.kubeconfig"));
    write(
        &path,
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: {name}, namespace: {namespace}}}\ncurrent-context: e2e\n",
            ca = cluster.dir.join("ca.crt").display(),
        ),
    );
    path
}

/// The chart installed for a scenario: what was applied and the ServiceAccount's kubeconfig.
#[derive(Debug)]
pub struct Installed {
    /// What was applied and skipped.
    pub applied: Applied,
    /// Kubeconfig of the chart's ServiceAccount.
    pub kubeconfig: PathBuf,
}

/// Renders the chart with `tests/e2e/chart-values.yaml`, lets `edit` change the rendered
/// objects (a test that drops a permission), applies them to `cluster` in [`NAMESPACE`] and
/// returns the ServiceAccount's kubeconfig.
pub async fn install(cluster: &Cluster, edit: impl FnOnce(&mut [Value])) -> Installed {
    let mut objects = render(RELEASE, NAMESPACE, &[&e2e_values()]);
    edit(&mut objects);
    let client = cluster.client().await;
    let applied = apply(&client, NAMESPACE, &objects).await;
    let sa = of_kind(&objects, "ServiceAccount")
        .first()
        .and_then(|o| o["metadata"]["name"].as_str())
        .expect("the chart renders a ServiceAccount")
        .to_owned();
    let kubeconfig = service_account_kubeconfig(cluster, NAMESPACE, &sa).await;
    Installed {
        applied,
        kubeconfig,
    }
}
