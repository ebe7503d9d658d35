//! The Helm chart against the real API server (`--authorization-mode=RBAC`): every object of
//! every value set applies server-side with strict validation; gangscaler serves the chart's
//! own rendered configuration under the chart's ServiceAccount; and with one permission taken
//! out of the chart's ClusterRole, a CA-driven scale-up fails with Forbidden in gangscaler's
//! log, which shows that the scenarios really run on the chart's RBAC and nothing more.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use gangscaler::audit::Verdict;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::Value;

use super::chart::{self, chart_dir};
use super::harness::{self, Cluster, TestCa, eventually, free_port, write};
use super::scenario::{GangSpec, Group, Scenario, Setup};
use super::{gangscaler_bin, start_gangscaler_with_env};

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn every_chart_object_applies_and_gangscaler_serves_the_rendered_config_under_its_service_account()
 {
    let cluster = Cluster::start("chart-apply").await;
    let client = cluster.client().await;

    // Default values: core kinds only, all of them applied.
    let defaults = chart::render("gangscaler", "gangscaler-defaults", &[]);
    let applied = chart::apply(&client, "gangscaler-defaults", &defaults).await;
    assert!(
        applied.skipped.is_empty(),
        "default values render only kinds every cluster serves: {:?}",
        applied.skipped
    );
    let kinds: BTreeSet<&str> = defaults.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Secret",
            "Service",
            "ServiceAccount"
        ]),
        "default values: no kwok or leader-election Role"
    );

    // HA + cert-manager values (CI's second value set): everything applies except the kinds
    // whose CRDs this cluster lacks, and those are named.
    let ha_values = chart_dir().join("ci/ha-cert-manager-values.yaml");
    let ha = chart::render("gangscaler-ha", "gangscaler-ha", &[&ha_values]);
    let applied = chart::apply(&client, "gangscaler-ha", &ha).await;
    eprintln!(
        "chart (HA + cert-manager values): applied {:?}",
        applied.applied
    );
    let skipped: BTreeSet<&str> = applied
        .skipped
        .iter()
        .filter_map(|s| s.split(' ').next())
        .collect();
    assert_eq!(
        skipped,
        BTreeSet::from(["Certificate", "Issuer", "PrometheusRule", "ServiceMonitor"]),
        "only kinds without CRDs here are skipped: {:?}",
        applied.skipped
    );
    assert_eq!(applied.applied.len() + applied.skipped.len(), ha.len());
    applied.assert_kinds(&[
        "Role",
        "RoleBinding",
        "ClusterRole",
        "Deployment",
        "PodDisruptionBudget",
        // The webhook (webhook.enabled in the CI value set), its CA injected by cert-manager.
        "MutatingWebhookConfiguration",
    ]);
    // The Deployment as the API server stored it.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "gangscaler-ha");
    let d = deployments.get("gangscaler-ha").await.unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        pod.security_context.as_ref().unwrap().run_as_user,
        Some(65532)
    );
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.path.clone().unwrap_or_default())
    };
    assert_eq!(probe_path(&c.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(probe_path(&c.readiness_probe).as_deref(), Some("/readyz"));
    let env: BTreeSet<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(
        env.contains("POD_NAME") && env.contains("POD_NAMESPACE"),
        "{env:?}"
    );
    assert_eq!(
        pod.topology_spread_constraints.map(|t| t.len()),
        Some(2),
        "zone and host spread"
    );

    // gangscaler on the chart's own provider.yaml and node-group files, mounted as kubelet
    // would, under the chart's ServiceAccount. Only what a pod gets from elsewhere is
    // overridden: loopback listeners, the TLS files, the kubeconfig and the audit directory.
    let root = cluster.dir.join("chart-pod");
    let (config, nodegroups, tls) = (
        root.join("config"),
        root.join("nodegroups"),
        root.join("tls"),
    );
    for d in [&config, &nodegroups, &tls, &root.join("audit")] {
        std::fs::create_dir_all(d).unwrap();
    }
    chart::mount_like_kubelet(&config, chart::config_map_data(&ha, "gangscaler-ha"));
    chart::mount_like_kubelet(
        &nodegroups,
        chart::config_map_data(&ha, "gangscaler-ha-nodegroups"),
    );
    let provider = std::fs::read_to_string(config.join("provider.yaml")).unwrap();
    assert!(
        provider.contains("address: 0.0.0.0:8086")
            && provider.contains("stateNamespace: gangscaler-ha"),
        "pod-reachable listeners and the release namespace: {provider}"
    );
    let pki = TestCa::new("chart-test-ca");
    let (cert, key) = pki.leaf(
        "gangscaler-ha.gangscaler-ha.svc",
        None,
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    write(&tls.join("tls.crt"), &cert);
    write(&tls.join("tls.key"), &key);
    write(&tls.join("ca.crt"), &pki.pem());
    let kubeconfig =
        chart::service_account_kubeconfig(&cluster, "gangscaler-ha", "gangscaler-ha").await;
    let (grpc, http) = (free_port(), free_port());
    let path = |p: &Path| p.display().to_string();
    let env: Vec<(String, String)> = [
        ("GANGSCALER__SERVER__ADDRESS", format!("127.0.0.1:{grpc}")),
        (
            "GANGSCALER__SERVER__METRICS_ADDRESS",
            format!("127.0.0.1:{http}"),
        ),
        (
            "GANGSCALER__SERVER__TLS__CERT_FILE",
            path(&tls.join("tls.crt")),
        ),
        (
            "GANGSCALER__SERVER__TLS__KEY_FILE",
            path(&tls.join("tls.key")),
        ),
        (
            "GANGSCALER__SERVER__TLS__CLIENT_CA_FILE",
            path(&tls.join("ca.crt")),
        ),
        ("GANGSCALER__NODE_GROUPS_DIR", path(&nodegroups)),
        ("GANGSCALER__KUBERNETES__KUBECONFIG", path(&kubeconfig)),
        // The HA values turn leader election on: one audit file per replica identity.
        (
            "GANGSCALER__AUDIT__PATH",
            path(&root.join("audit/{identity}.jsonl")),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let out = std::process::Command::new(gangscaler_bin())
        .arg("validate")
        .arg(&config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "validate on the chart's configuration: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut server = start_gangscaler_with_env(&cluster, &config, http, "gangscaler-chart", &env);
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], http));
    eventually(
        "gangscaler ready under the chart's ServiceAccount",
        Duration::from_secs(60),
        || async move {
            harness::http_get(metrics, "/readyz")
                .await
                .is_some_and(|(s, _)| s == 200)
                .then_some(())
        },
    )
    .await;
    server.assert_running();
    // The kwok backend made its state ConfigMap where the chart's Role allows it, and keeps
    // the group's record in it (it creates the ConfigMap empty, then writes the record).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "gangscaler-ha");
    eventually(
        "the group's record in the kwok state ConfigMap",
        Duration::from_secs(20),
        || {
            let cms = cms.clone();
            async move {
                let cm = cms.get_opt(chart::STATE_CONFIG_MAP).await.ok().flatten()?;
                cm.data?.contains_key("h100-8x").then_some(())
            }
        },
    )
    .await;
    server.stop();
    let log = std::fs::read_to_string(cluster.dir.join("gangscaler-chart.log")).unwrap();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "no permission missing: {log}"
    );
}

/// Takes `create` on nodes out of the chart's ClusterRole (the kwok backend's Node creation).
fn without_node_create(objects: &mut [Value]) {
    let changed = chart::drop_verb(objects, "ClusterRole", "", "nodes", "create");
    assert_eq!(changed, 1, "the chart grants create on nodes in one rule");
}

#[tokio::test]
#[ignore = "needs e2e binaries: tests/e2e/build.sh"]
async fn without_create_on_nodes_in_the_chart_a_ca_scale_up_fails_with_forbidden() {
    let setup = Setup::new("chart-rbac-forbidden", "strict", vec![Group::new("gpu", 4)])
        .chart_edit(without_node_create);
    let s = Scenario::start(setup).await;
    let skipped: BTreeSet<&str> = s
        .chart
        .applied
        .skipped
        .iter()
        .filter_map(|k| k.split(' ').next())
        .collect();
    assert_eq!(
        skipped,
        BTreeSet::from(["Certificate", "Issuer", "PrometheusRule", "ServiceMonitor"]),
        "every other object of the e2e values applied"
    );
    let created = s.create_gang(&GangSpec::new("train", 4)).await;
    // CA asks and gangscaler admits: every other permission is there...
    let decision = eventually(
        "gangscaler's decision on CA's ask",
        Duration::from_secs(120),
        || {
            let d = s.decisions("gpu").into_iter().next();
            async move { d }
        },
    )
    .await;
    assert_eq!(decision.verdict, Verdict::Accept, "{decision:?}");
    // ...but the kwok backend may not create the nodes, and says so.
    let line = eventually(
        "Forbidden in gangscaler's log",
        Duration::from_secs(60),
        || {
            let line = s.forbidden_lines().into_iter().find(|l| {
                // The error is a quoted log field: its own quotes are escaped there.
                l.contains("Forbidden")
                    && (l.contains("cannot create resource \"nodes\"")
                        || l.contains("cannot create resource \\\"nodes\\\""))
            });
            async move { line }
        },
    )
    .await;
    eprintln!("gangscaler logged: {line}");
    assert!(
        line.contains("system:serviceaccount:gangscaler:gangscaler"),
        "the chart's ServiceAccount was refused: {line}"
    );
    // Where the gang forms in about 50 s with the permission (CA's 30 s GPU wait, 15 s
    // provisioning), nothing happens without it.
    let window = Duration::from_secs(90);
    if let Some(rest) = window.checked_sub(created.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    assert!(s.group_nodes("gpu").await.is_empty(), "no node was created");
    assert!(s.running("train").await.is_empty(), "no member runs");
}
