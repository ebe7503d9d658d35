//! The migration toolkit against the real API server of the row (`E2E_K8S_MINOR`):
//! `gangscaler convert`'s output accepted by a server-side dry run, and the compatibility
//! webhook called by kube-apiserver over mutual TLS, deployed from the chart's objects, its pods
//! then gang-scheduled by the real scheduler on nodes the real cluster-autoscaler added through
//! gangscaler.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gangscaler::audit::ReservationAction;
use gangscaler::migrate::api::{GangApi, Target};
use gangscaler::migrate::convert::convert;
use gangscaler::migrate::parse;
use gangscaler::webhook::{ANNOTATION_REPLICA_KEY, ANNOTATION_TEMPLATE, ANNOTATION_WORKLOAD};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, GroupVersionKind};
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::{Value, json};

use super::ca_scaleup::assert_ca_made_the_calls;
use super::chart;
use super::harness::{Cluster, Proc, TestCa, Versions, eventually, free_port, write};
use super::scenario::{GPU, GPUS_PER_NODE, Group, Scenario, Setup};
use super::support::try_create;
use super::{create_dynamic, gangscaler_bin};

fn row_api() -> GangApi {
    Versions::load().gang_api.parse().unwrap()
}

/// The row's minor as a conversion target (1.37 and 1.38 share `v1beta1` but not where
/// CompositePodGroup lives).
fn row_target() -> Target {
    Versions::load().minor.parse().unwrap()
}

/// The input fixtures (`tests/fixtures/convert/input`), sorted; the composite ones apart.
fn fixture_inputs(composite: bool) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/convert/input");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.display().to_string().contains("composite") == composite)
        .collect();
    inputs.sort();
    inputs
}

/// Every pod spec's gang link in `object` (its `workloadRef` or `schedulingGroup`).
fn links(object: &Value, field: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut stack = vec![object];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(link) = map.get(field).filter(|_| map.contains_key("containers")) {
                    found.push(link.clone());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn converted_manifests_are_accepted_by_the_rows_api_server() {
    let target = row_target();
    let to = target.api();
    let cluster = Cluster::start("convert-dry-run").await;
    let client = cluster.client().await;
    for ns in ["ml", "research"] {
        create_dynamic(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    // The 1.36 input's templates and PodGroups name this class.
    create_dynamic(
        &client,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "training"}, "value": 1000}),
    )
    .await;
    // The 1.37 input's: its PodGroups' preemptionPolicy must be their class's (Priority
    // admission, 1.38 and 1.37 with PodGroupPreemptionPolicy).
    create_dynamic(
        &client,
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "batch-never"}, "value": 100,
               "preemptionPolicy": "Never"}),
    )
    .await;
    // The composite input needs composites on: see the test below.
    let inputs = fixture_inputs(false);
    let mut checked = 0;
    let mut total = 0;
    let mut skipped = Vec::new();
    for path in &inputs {
        let name = path.display().to_string();
        let docs = parse(&std::fs::read_to_string(path).unwrap(), &name).unwrap();
        let conversion = convert(&docs, target);
        assert!(
            !conversion.has_errors(),
            "{name}: {:?}",
            conversion.findings
        );
        total += conversion.documents.len();
        for doc in &conversion.documents {
            let object = doc.to_json();
            let kind = object["kind"].as_str().unwrap().to_owned();
            // A PodGroup must name an existing Workload, so Workloads are created for real;
            // everything else only in a dry run.
            let dry_run = kind != "Workload";
            let Some(created) = try_create(&client, &object, dry_run).await else {
                skipped.push(format!("{kind} {}", object["apiVersion"]));
                continue;
            };
            let created = created.unwrap_or_else(|e| {
                panic!(
                    "{name}: the {to} API server refused {kind} {}: {e}",
                    object["metadata"]["name"]
                )
            });
            // The API server drops a gang link field whose feature gate is off: it must have
            // kept every one.
            let field = to.pod_link_field();
            let sent = links(&object, field);
            let kept = links(&serde_json::to_value(&created).unwrap(), field);
            assert_eq!(
                sent, kept,
                "{name}: {kind}'s {field} links as sent and as admitted"
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked + skipped.len(),
        total,
        "every converted object was sent"
    );
    assert!(checked >= 8, "objects checked: {checked}");
    assert!(
        skipped.iter().all(|s| s.starts_with("JobSet ")),
        "only the JobSet CRD is absent from this control plane: {skipped:?}"
    );
    // The unconverted manifest of another version is not accepted here: the conversion is
    // what makes it fit.
    let other = inputs
        .iter()
        .find(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            !text.contains(&format!("scheduling.k8s.io/{}", to.version()))
        })
        .unwrap();
    let docs = parse(&std::fs::read_to_string(other).unwrap(), "other").unwrap();
    let workload = docs
        .iter()
        .map(|d| d.node.to_json())
        .find(|v| v["kind"] == "Workload")
        .unwrap();
    let refused = try_create(&client, &workload, true).await;
    assert!(
        !matches!(refused, Some(Ok(_))),
        "1.{} accepted a Workload of {}",
        target.minor(),
        workload["apiVersion"]
    );
}

/// The composite input converted for the row is accepted whole by its API server, which keeps
/// every PodGroup's `parentCompositePodGroupName`: on rows that turn CompositePodGroup on (1.38,
/// at v1beta1). On other rows the API server would drop the field, so the test only checks
/// that the converter refuses (below 1.37) or that the row leaves composites off.
#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn converted_composites_keep_their_parents_on_the_rows_api_server() {
    let versions = Versions::load();
    let target = row_target();
    let inputs = fixture_inputs(true);
    assert!(!inputs.is_empty(), "a composite input fixture");
    let composites_on = versions
        .gates
        .split(',')
        .any(|g| g == "CompositePodGroup=true");
    if !target.has_composites() {
        for path in &inputs {
            let name = path.display().to_string();
            let docs = parse(&std::fs::read_to_string(path).unwrap(), &name).unwrap();
            assert!(convert(&docs, target).has_errors(), "{name} for {target}");
        }
        return;
    }
    if !composites_on {
        eprintln!(
            "the {} row leaves CompositePodGroup off: nothing to create",
            versions.minor
        );
        return;
    }
    let cluster = Cluster::start("convert-composite").await;
    let client = cluster.client().await;
    let composite_version = target.composite_version().unwrap();
    let mut namespaces = std::collections::BTreeSet::new();
    let mut checked = 0;
    for path in &inputs {
        let name = path.display().to_string();
        let docs = parse(&std::fs::read_to_string(path).unwrap(), &name).unwrap();
        let conversion = convert(&docs, target);
        assert!(
            !conversion.has_errors() && !conversion.is_lossy(),
            "{name}: {:?}",
            conversion.findings
        );
        for doc in &conversion.documents {
            let object = doc.to_json();
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            if ns != "default" && namespaces.insert(ns.clone()) {
                create_dynamic(
                    &client,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                )
                .await;
            }
            let kind = object["kind"].as_str().unwrap().to_owned();
            if kind == "CompositePodGroup" {
                assert_eq!(
                    object["apiVersion"],
                    format!("scheduling.k8s.io/{composite_version}")
                );
            }
            // The Workload and the CompositePodGroup for real (PodGroups name them); the rest
            // in a dry run.
            let dry_run = !matches!(kind.as_str(), "Workload" | "CompositePodGroup");
            let created = try_create(&client, &object, dry_run)
                .await
                .unwrap_or_else(|| {
                    panic!("{name}: the row serves no {kind} {}", object["apiVersion"])
                })
                .unwrap_or_else(|e| {
                    panic!(
                        "{name}: the {target} API server refused {kind} {}: {e}",
                        object["metadata"]["name"]
                    )
                });
            let created = serde_json::to_value(&created).unwrap();
            if kind == "PodGroup" {
                assert_eq!(
                    created["spec"]["parentCompositePodGroupName"],
                    object["spec"]["parentCompositePodGroupName"],
                    "{name}: {} as admitted",
                    object["metadata"]["name"]
                );
            }
            if kind == "Workload" {
                // The answer spells out unset pointers as null.
                assert_eq!(
                    without_nulls(&created["spec"]["compositePodGroupTemplates"]),
                    object["spec"]["compositePodGroupTemplates"],
                    "{name}: the Workload's composite templates as admitted"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "objects checked: {checked}");
}

/// `value` without its null members, at every depth.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// A serving certificate for 127.0.0.1 from a CA of its own, in `<run>/webhook/tls.crt` and
/// `tls.key`: the folder and the CA (PEM).
fn webhook_certificate(cluster: &Cluster) -> (PathBuf, String) {
    let dir = cluster.dir.join("webhook");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("gangscaler-webhook-ca");
    let (cert, key) = ca.leaf(
        "gangscaler-webhook",
        None,
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    write(&dir.join("tls.crt"), &cert);
    write(&dir.join("tls.key"), &key);
    (dir, ca.pem())
}

/// The webhook process (`gangscaler webhook`), server TLS only, as admin; returns it, its
/// port and its CA (PEM).
fn start_webhook(cluster: &Cluster) -> (Proc, u16, String) {
    let (dir, ca) = webhook_certificate(cluster);
    let port = free_port();
    let mut cmd = Command::new(gangscaler_bin());
    cmd.args([
        "webhook",
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--tls-cert={}", dir.join("tls.crt").display()),
        &format!("--tls-key={}", dir.join("tls.key").display()),
        &format!("--kubeconfig={}", cluster.kubeconfig.display()),
    ]);
    (
        Proc::spawn_logged("gangscaler-webhook", &cluster.dir, cmd),
        port,
        ca,
    )
}

/// The webhook as the chart deploys it (`webhook.enabled`, reservation tolerations, mutual TLS
/// with the control plane's CA as client CA): the chart's webhook objects are rendered for the
/// row's version and applied, the API server calls the webhook at the chart's
/// MutatingWebhookConfiguration (its `url`, as the webhook runs on the host), and the process
/// runs with the Deployment's arguments, its mounted files where the volumes say, as the
/// webhook's ServiceAccount. Returns the process.
async fn start_chart_webhook(s: &Scenario) -> Proc {
    let (dir, ca) = webhook_certificate(&s.cluster);
    let port = free_port();
    let client_ca = std::fs::read_to_string(s.cluster.dir.join("ca.crt")).unwrap();
    let values = dir.join("values.yaml");
    // JSON is YAML.
    write(
        &values,
        &json!({"webhook": {
            "enabled": true,
            "replicaCount": 0,
            "reservationTolerations": true,
            "url": format!("https://127.0.0.1:{port}/mutate"),
            "caBundle": base64(&ca),
            "clientCa": client_ca,
        }})
        .to_string(),
    );
    let kube_version = Versions::load().k8s;
    let objects: Vec<Value> = chart::render_with(
        chart::RELEASE,
        chart::NAMESPACE,
        &[&chart::e2e_values(), &values],
        &["--kube-version", &kube_version],
    )
    .into_iter()
    .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook")
    .collect();
    let applied = chart::apply(&s.client, chart::NAMESPACE, &objects).await;
    applied.assert_kinds(&[
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
    ]);
    let deployment = chart::of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let sa = pod["serviceAccountName"].as_str().unwrap();
    let kubeconfig = chart::service_account_kubeconfig(&s.cluster, chart::NAMESPACE, sa).await;
    // Each mount's files, on the host: the Secret's are the certificate above, a ConfigMap's
    // are the rendered object's, laid out as kubelet mounts them.
    let container = &pod["containers"][0];
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in container["volumeMounts"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap();
        let local = if volume.get("secret").is_some() {
            dir.clone()
        } else {
            let cm_name = volume["configMap"]["name"].as_str().unwrap();
            let local = dir.join(name);
            chart::mount_like_kubelet(&local, chart::config_map_data(&objects, cm_name));
            local
        };
        mounts.push((m["mountPath"].as_str().unwrap().to_owned(), local));
    }
    let mut cmd = Command::new(gangscaler_bin());
    for arg in container["args"].as_array().unwrap() {
        let mut arg = arg.as_str().unwrap().to_owned();
        if arg.starts_with("--listen=") {
            arg = format!("--listen=127.0.0.1:{port}");
        }
        for (path, local) in &mounts {
            arg = arg.replace(path.as_str(), &local.display().to_string());
        }
        cmd.arg(arg);
    }
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()));
    Proc::spawn_logged("gangscaler-webhook", &s.cluster.dir, cmd)
}

fn base64(pem: &str) -> String {
    gangscaler::webhook::review::base64(pem.as_bytes())
}

/// An annotated pod: `train-<i>` of Workload `train`, group `workers`, asking a whole node.
fn annotated_pod(name: &str, replica_key: Option<&str>) -> Value {
    let mut annotations = json!({ANNOTATION_WORKLOAD: "train", ANNOTATION_TEMPLATE: "workers"});
    if let Some(k) = replica_key {
        annotations[ANNOTATION_REPLICA_KEY] = json!(k);
    }
    let gpus = GPUS_PER_NODE.to_string();
    json!({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": name, "namespace": "default", "annotations": annotations},
    "spec": {
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "train", "image": "example.invalid/train:1",
            "resources": {"requests": {"cpu": "4", GPU: gpus}, "limits": {GPU: gpus}}}]
    }})
}

/// Registers the webhook at `https://127.0.0.1:<port>/mutate` for the creation of pods
/// carrying the workload annotation, trusting `ca` (PEM) for its certificate.
async fn register_webhook(client: &kube::Client, port: u16, ca: &str) {
    create_dynamic(
        client,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "gangscaler-gang-links"},
            "webhooks": [{
                "name": "gang-links.gangscaler.io",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": base64(ca)},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "matchConditions": [{"name": "gang-annotated",
                    "expression": format!("has(object.metadata.annotations) && '{ANNOTATION_WORKLOAD}' in object.metadata.annotations")}],
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }]
        }),
    )
    .await;
}

/// The link a dry-run create of an annotated pod comes back with, once the API server has
/// picked the webhook configuration up (within a few seconds).
async fn dry_run_link(client: &kube::Client, field: &str, replica_key: &str) -> Value {
    eventually(
        "the webhook links a dry-run pod",
        Duration::from_secs(30),
        || async {
            let created = try_create(client, &annotated_pod("train-dry", Some(replica_key)), true)
                .await
                .unwrap()
                .ok()?;
            let spec = serde_json::to_value(&created).unwrap()["spec"].clone();
            spec.get(field).cloned()
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn the_webhook_without_a_client_ca_serves_an_api_server_that_trusts_its_certificate() {
    let to = row_api();
    let cluster = Cluster::start("webhook-server-tls").await;
    let client = cluster.client().await;
    let (mut webhook, port, ca) = start_webhook(&cluster);
    register_webhook(&client, port, &ca).await;
    let workload = if to == GangApi::V1Alpha1 {
        json!({"podGroups": [{"name": "workers", "policy": {"basic": {}}}]})
    } else {
        json!({"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"basic": {}}}]})
    };
    create_dynamic(
        &client,
        json!({"apiVersion": to.api_version(), "kind": "Workload",
               "metadata": {"name": "train", "namespace": "default"}, "spec": workload}),
    )
    .await;
    let link = dry_run_link(&client, to.pod_link_field(), "k").await;
    let want = match to {
        GangApi::V1Alpha1 => {
            json!({"name": "train", "podGroup": "workers", "podGroupReplicaKey": "k"})
        }
        _ => json!({"podGroupName": "train-workers-k"}),
    };
    assert_eq!(link, want);
    webhook.assert_running();
    let log = std::fs::read_to_string(cluster.dir.join("gangscaler-webhook.log")).unwrap();
    assert!(
        log.contains("no --client-ca"),
        "the missing client CA is warned about: {log}"
    );
    webhook.stop();
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn the_webhook_links_annotated_pods_the_scheduler_gang_schedules_them_and_ca_scales_for_them()
{
    let to = row_api();
    // Reserving: the members reach their nodes through the toleration the webhook gave them
    // at creation.
    let setup = Setup::new(
        "webhook-gang",
        "strict",
        vec![Group::new("gpu", 4).extra(super::ca_lifecycle::RESERVATION)],
    );
    let s = Scenario::start(setup).await;
    let mut webhook = start_chart_webhook(&s).await;

    let workload = if to == GangApi::V1Alpha1 {
        json!({"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]})
    } else {
        json!({"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]})
    };
    create_dynamic(
        &s.client,
        json!({"apiVersion": to.api_version(), "kind": "Workload",
               "metadata": {"name": "train", "namespace": "default"}, "spec": workload}),
    )
    .await;
    let field = to.pod_link_field();

    // A dry run gets its link but leaves no PodGroup behind (sideEffects: NoneOnDryRun).
    let dry = dry_run_link(&s.client, field, "dry").await;
    let pod_groups = to.has_pod_groups().then(|| {
        let ar = kube::api::ApiResource::from_gvk(&GroupVersionKind::gvk(
            "scheduling.k8s.io",
            to.version(),
            "PodGroup",
        ));
        Api::<DynamicObject>::namespaced_with(s.client.clone(), "default", &ar)
    });
    if let Some(pgs) = &pod_groups {
        assert_eq!(dry, json!({"podGroupName": "train-workers-dry"}));
        assert!(
            pgs.get_opt("train-workers-dry").await.unwrap().is_none(),
            "a dry run created a PodGroup"
        );
    } else {
        assert_eq!(
            dry,
            json!({"name": "train", "podGroup": "workers", "podGroupReplicaKey": "dry"})
        );
    }

    // A pod that names a Workload that does not exist is refused, naming it.
    let mut stray = annotated_pod("stray-0", None);
    stray["metadata"]["annotations"][ANNOTATION_WORKLOAD] = json!("missing");
    let refused = try_create(&s.client, &stray, false).await.unwrap();
    if to.has_pod_groups() {
        let err = refused.expect_err("a pod of a missing Workload was admitted");
        assert!(
            err.to_string().contains("Workload default/missing"),
            "{err}"
        );
    }

    s.sampler.begin();
    for i in 0..4 {
        create_dynamic(&s.client, annotated_pod(&format!("train-{i}"), None)).await;
    }
    // Read untyped: the typed Pod of the k8s-openapi version this crate builds with (1.36)
    // has no `workloadRef` and would drop it.
    let pods: Api<DynamicObject> = Api::namespaced_with(
        s.client.clone(),
        "default",
        &kube::api::ApiResource::erase::<Pod>(&()),
    );
    // The gang as the cluster view names it, and its reservation toleration: there from the
    // pod's creation, before any node exists for the lifecycle loop to reserve.
    let gang = if to == GangApi::V1Alpha1 {
        "train/workers"
    } else {
        "train-workers"
    };
    let toleration = gangscaler::model::reservation::toleration_json(
        &gangscaler::model::reservation::value_for_name("default", gang),
    );
    for i in 0..4 {
        let pod = serde_json::to_value(pods.get(&format!("train-{i}")).await.unwrap()).unwrap();
        let want = match to {
            GangApi::V1Alpha1 => json!({"name": "train", "podGroup": "workers"}),
            _ => json!({"podGroupName": "train-workers"}),
        };
        assert_eq!(pod["spec"][field], want, "train-{i}'s link");
        let tolerations = pod["spec"]["tolerations"].as_array().unwrap();
        assert!(
            tolerations.contains(&toleration),
            "train-{i} carries {toleration} from its creation: {tolerations:?}"
        );
        assert!(
            tolerations.iter().any(|t| t["key"] == GPU),
            "train-{i} keeps its own tolerations: {tolerations:?}"
        );
    }
    assert!(
        s.group_nodes("gpu").await.is_empty(),
        "the tolerations were checked before any node existed"
    );
    if let Some(pgs) = &pod_groups {
        let pg = pgs.get("train-workers").await.unwrap();
        let owner = &pg.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Workload", "train")
        );
        assert_eq!(
            pg.data["spec"]["schedulingPolicy"],
            json!({"gang": {"minCount": 4}})
        );
    }

    let nodes = s.wait_running("train", 4, Duration::from_secs(180)).await;
    assert_eq!(nodes.len(), 4, "one member per node: {nodes:?}");
    let (_, decisions) = assert_ca_made_the_calls(&s, "gpu");
    assert!(
        decisions.iter().all(|d| d.target + d.applied_delta <= 4),
        "never more than the gang's four nodes: {decisions:?}"
    );
    webhook.assert_running();
    let log = std::fs::read_to_string(s.cluster.dir.join("gangscaler-webhook.log")).unwrap();
    for i in 0..4 {
        let linked = format!("pod linked namespace=\"default\" pod=\"train-{i}\"");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&linked)).collect();
        assert_eq!(lines.len(), 1, "train-{i} linked once: {log}");
        assert!(
            lines[0].contains("tolerated=true"),
            "train-{i} linked with its toleration: {}",
            lines[0]
        );
    }
    // The members ran on nodes reserved for their gang (the reservation records name them).
    let reserved = s.reservations(ReservationAction::Reserved);
    let reserved_nodes: std::collections::BTreeSet<String> =
        reserved.iter().map(|e| e.node.clone()).collect();
    assert!(
        reserved.iter().all(|e| e.gang == format!("default/{gang}")) && reserved_nodes == nodes,
        "the nodes the members ran on were reserved for their gang: {reserved:?}"
    );
    if to.has_pod_groups() {
        // Four pods, one PodGroup: the first pod created it, the others found it.
        let created = "created PodGroup namespace=\"default\" pod_group=train-workers workload";
        assert_eq!(log.matches(created).count(), 1, "{log}");
    }
    webhook.stop();
}
