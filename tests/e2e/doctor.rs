//! `gangscaler doctor` against the real control plane of the `E2E_K8S_MINOR` row, given the
//! CA flags and scheduler flags this harness runs with: the served gang API is the row's, the
//! gates it enables are inferred on, the pod link survives a server-side dry run, the 1.37
//! scheduler trap is seen as worked around, CompositePodGroup is served with its gates where
//! the row turns it on (1.38), and the enable lines are the row's own gates.
//! Then the same without any flags file: the components are found in kube-system.

use std::path::Path;
use std::process::Command;

use super::gangscaler_bin;
use super::harness::{self, Cluster, Versions, free_port};

/// Runs `gangscaler doctor ARGS`: (exit code, stdout, stderr).
async fn doctor(args: Vec<String>) -> (Option<i32>, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(gangscaler_bin())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("doctor")
            .args(&args)
            .env("GANGSCALER_LOG", "warn")
            .output()
            .expect("running gangscaler doctor");
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

fn row<'a>(json: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row {id} in {json:#}"))
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn doctor_reads_the_rows_gang_api_gates_and_traps_from_a_live_cluster() {
    let versions = Versions::load();
    let cluster = Cluster::start("doctor").await;
    let dir = &cluster.dir;

    // CA's command line exactly as the harness starts it.
    let cloud_config = dir.join("doctor-cloud-config.yaml");
    harness::write(&cloud_config, "address: \"127.0.0.1:8086\"\n");
    let ca_flags = dir.join("ca.flags");
    let flags = harness::autoscaler_flags(&cluster.kubeconfig, &cloud_config, free_port(), &[]);
    harness::write(
        &ca_flags,
        &format!("cluster-autoscaler \\\n  {}\n", flags.join(" \\\n  ")),
    );
    // The scheduler's: its gates, and the no-dra-postfilter profile file when the row runs it.
    let scheduler_flags = dir.join("scheduler.flags");
    let mut sched = format!("--feature-gates={}\n", versions.gates);
    if versions.scheduler_profile == "no-dra-postfilter" {
        sched.push_str(&format!("--config={}\n", path(&dir.join("scheduler.yaml"))));
    }
    harness::write(&scheduler_flags, &sched);

    let mut args = vec![
        "--kubeconfig".to_owned(),
        path(&cluster.kubeconfig),
        "--ca-flags".to_owned(),
        path(&ca_flags),
        "--ca-version".to_owned(),
        versions.ca.clone(),
        "--scheduler-flags".to_owned(),
        path(&scheduler_flags),
        "--scheduler-version".to_owned(),
        versions.k8s.clone(),
        "--config".to_owned(),
        "provider-configs".to_owned(),
    ];
    let (code, table, stderr) = doctor(args.clone()).await;
    // Kept beside the run folders, for docs/doctor-<minor>.txt.
    let saved = dir
        .parent()
        .unwrap()
        .join(format!("doctor-{}.txt", versions.minor));
    harness::write(&saved, &table);
    eprintln!("doctor table for {} in {}", versions.minor, saved.display());
    assert_eq!(code, Some(0), "{table}\n{stderr}");
    assert!(table.contains(&versions.gang_api), "{table}");

    args.extend(["-o".to_owned(), "json".to_owned()]);
    let (code, stdout, stderr) = doctor(args).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let facts = &json["facts"];
    assert_eq!(facts["kubernetesVersion"], versions.k8s.as_str());
    assert_eq!(facts["expectedGangApi"], versions.gang_api.as_str());
    let gang_version = versions.gang_api.rsplit('/').next().unwrap();
    let served = facts["served"].as_array().unwrap();
    assert!(
        served.iter().any(|s| s["version"] == gang_version
            && s["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "workloads")),
        "{served:?}"
    );
    assert_eq!(row(&json, "gang-api")["status"], "ok");
    assert_eq!(facts["gates"]["GenericWorkload"], "on");
    assert_eq!(row(&json, "gate/GenericWorkload")["status"], "ok");

    // The link field survives a server-side dry run on every row.
    let field = if versions.minor == "1.35" {
        "workloadRef"
    } else {
        "schedulingGroup"
    };
    assert_eq!(facts["podLinkField"], field);
    assert_eq!(facts["podLinkKept"], true);
    assert_eq!(row(&json, "pod-link-field")["status"], "ok");

    assert_eq!(row(&json, "gate/GangScheduling")["status"], "ok");
    assert_eq!(row(&json, "scheduler-version")["status"], "ok");
    let trap = row(&json, "trap/scheduler-dra-podgroup-postfilter");
    assert_eq!(trap["status"], "ok", "{trap}");
    if versions.minor.as_str() >= "1.37" {
        assert!(
            trap["found"].as_str().unwrap().contains("worked around")
                && trap["found"].as_str().unwrap().contains("DRA stays on"),
            "{trap}"
        );
        // No CA 1.37 yet: CA 1.36.1 runs one minor (two on 1.38) behind.
        assert_eq!(row(&json, "ca-version")["status"], "warn");
        assert_eq!(facts["gates"].get("GangScheduling"), None);
    } else {
        assert_eq!(row(&json, "ca-version")["status"], "ok");
        assert_eq!(facts["gates"]["GangScheduling"], "on");
    }
    // CompositePodGroup: the rows that turn it on (1.38) serve it and the scheduler's flags
    // carry its gates; the others leave it off, which is fine while nothing uses it.
    let composite = row(&json, "gate/CompositePodGroup");
    assert_eq!(composite["status"], "ok", "{composite}");
    if versions.gates.contains("CompositePodGroup=true") {
        assert_eq!(facts["gates"]["CompositePodGroup"], "on");
        assert!(
            composite["found"]
                .as_str()
                .unwrap()
                .contains("compositepodgroups at v1beta1"),
            "{composite}"
        );
    } else if versions.minor.as_str() >= "1.37" {
        assert_eq!(facts["gates"]["CompositePodGroup"], "off");
    }
    assert_eq!(
        row(&json, "trap/api-removal")["status"],
        if versions.minor.as_str() >= "1.37" {
            "ok"
        } else {
            "warn"
        }
    );

    // The harness's CA flags: externalgrpc, least-waste, 30s/2m backoff.
    for id in [
        "ca-flags",
        "ca-flag/cloud-provider",
        "ca-flag/expander",
        "ca-flag/node-group-backoff",
        "ca-flag/max-nodes-total",
    ] {
        assert_eq!(row(&json, id)["status"], "ok", "{id}: {}", row(&json, id));
    }

    // The enable lines are exactly what this harness runs the control plane with.
    let enable = json["lines"]["enable"].as_array().unwrap();
    assert_eq!(enable[0]["component"], "kube-apiserver");
    assert_eq!(
        enable[0]["flags"],
        serde_json::json!([
            format!("--feature-gates={}", versions.gates),
            format!("--runtime-config={}=true", versions.gang_api)
        ])
    );
    let scheduler = enable
        .iter()
        .find(|c| c["component"] == "kube-scheduler")
        .unwrap();
    assert_eq!(
        scheduler["flags"][0],
        format!("--feature-gates={}", versions.gates)
    );
    let rollback = json["lines"]["rollback"].as_array().unwrap();
    let api_off = rollback
        .iter()
        .find(|c| c["component"] == "kube-apiserver")
        .unwrap();
    assert!(
        api_off["flags"][1]
            .as_str()
            .unwrap()
            .starts_with(&format!("--runtime-config={}=false", versions.gang_api)),
        "{api_off}"
    );

    // Without flags files or versions, doctor finds both components in kube-system, as a
    // kubeadm cluster runs them: a CA Deployment and a pod labelled component=kube-scheduler.
    let client = cluster.client().await;
    let mut sched_command = vec![
        "kube-scheduler".to_owned(),
        format!("--feature-gates={}", versions.gates),
    ];
    if versions.scheduler_profile == "no-dra-postfilter" {
        sched_command.push(format!("--config={}", path(&dir.join("scheduler.yaml"))));
    }
    let objects = [
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
                "template": {
                    "metadata": {"labels": {"app": "cluster-autoscaler"}},
                    "spec": {"containers": [{
                        "name": "cluster-autoscaler",
                        "image": format!("registry.k8s.io/autoscaling/cluster-autoscaler:v{}", versions.ca),
                        "command": ["./cluster-autoscaler"],
                        "args": flags,
                    }]},
                },
            },
        }),
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kube-scheduler-cp", "namespace": "kube-system",
                         "labels": {"component": "kube-scheduler", "tier": "control-plane"}},
            "spec": {"containers": [{
                "name": "kube-scheduler",
                "image": format!("registry.k8s.io/kube-scheduler:{}", versions.k8s),
                "command": sched_command,
            }]},
        }),
    ];
    for o in objects {
        super::create_dynamic(&client, o).await;
    }
    let (code, stdout, stderr) = doctor(vec![
        "--kubeconfig".to_owned(),
        path(&cluster.kubeconfig),
        "-o".to_owned(),
        "json".to_owned(),
    ])
    .await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["facts"]["caVersion"], format!("v{}", versions.ca));
    assert_eq!(json["facts"]["schedulerVersion"], versions.k8s.as_str());
    let ca_flags = row(&json, "ca-flags");
    assert!(
        ca_flags["found"]
            .as_str()
            .unwrap()
            .contains("kube-system/deployment/cluster-autoscaler"),
        "{ca_flags}"
    );
    assert_eq!(row(&json, "ca-flag/expander")["status"], "ok");
    assert_eq!(row(&json, "gate/GangScheduling")["status"], "ok");
    assert_eq!(row(&json, "gate/CompositePodGroup")["status"], "ok");
    assert_eq!(
        row(&json, "trap/scheduler-dra-podgroup-postfilter")["status"],
        "ok"
    );
    assert!(
        row(&json, "scheduler-version")["found"]
            .as_str()
            .unwrap()
            .contains("kube-system/pod/kube-scheduler-cp image tag"),
        "{json:#}"
    );
}
