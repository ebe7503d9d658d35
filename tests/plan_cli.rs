//! `gangscaler plan` over the shipped example objects: the JSON a platform team would script
//! against, checked field by field.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::process::Command;

fn plan(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--objects", "examples/objects/training-gangs.yaml"])
        .args(args)
        .env_remove("GANGSCALER_CONFIG")
        .output()
        .expect("running gangscaler plan");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn gang<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["plan"]["gangs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gang"]["name"] == name)
        .unwrap_or_else(|| panic!("no gang {name} in {json:#}"))
}

fn option<'a>(gang: &'a serde_json::Value, group: &str) -> &'a serde_json::Value {
    gang["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["group"] == group)
        .unwrap()
}

#[test]
fn plan_json_names_the_best_group_and_the_numbers_for_every_pending_gang() {
    let (ok, stdout, stderr) = plan(&["--target", "h100-8x=2", "-o", "json"]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // Highest priority first.
    let names: Vec<&str> = json["plan"]["gangs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gang"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pretrain", "finetune", "eval"]);

    // 16 whole H100 nodes needed, only 14 left with 2 already there: no group hosts it whole.
    let pretrain = gang(&json, "pretrain");
    assert!(pretrain["best"].is_null());
    let h100 = option(pretrain, "h100-8x");
    assert_eq!(
        (h100["nodesAll"].as_u64(), h100["headroom"].as_u64()),
        (Some(16), Some(14))
    );
    assert_eq!(h100["fitsHeadroom"], false);
    assert_eq!(
        option(pretrain, "l4-4x")["reason"]["kind"],
        "selector_mismatch"
    );

    // 8 members x 1 GPU x 3 volumes fit one 8-GPU node with 24 attachments.
    let finetune = gang(&json, "finetune");
    assert_eq!(finetune["best"], "h100-8x");
    assert_eq!(option(finetune, "h100-8x")["nodesAll"].as_u64(), Some(1));
    assert_eq!(
        option(finetune, "cpu-general")["reason"]["kind"],
        "pod_too_large"
    );

    let eval = gang(&json, "eval");
    assert_eq!(eval["best"], "l4-4x");
    assert_eq!(option(eval, "l4-4x")["nodesAll"].as_u64(), Some(4));

    assert_eq!(json["ungroupedPending"].as_u64(), Some(1));
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].as_str().unwrap().contains("not-yet-created"));
}

#[test]
fn plan_rejects_a_target_for_an_unknown_group_and_unreadable_objects() {
    let (ok, _, stderr) = plan(&["--target", "a100=3"]);
    assert!(!ok);
    assert!(stderr.contains("a100"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--objects", "no/such/file.yaml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/file.yaml"));
}

/// `gangscaler plan` with the shipped h100-8x group cut to 4 EBS attachments per node, over a
/// gang of 8 one-GPU members with 3 claims each of StorageClass `class`.
fn plan_ckpt_gang(class: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("provider-configs");
    std::fs::copy(root.join("provider.yaml"), dir.path().join("provider.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("nodegroups")).unwrap();
    let h100 = std::fs::read_to_string(root.join("nodegroups/h100-8x.yaml")).unwrap();
    assert!(h100.contains("ebs.csi.aws.com: 24"));
    std::fs::write(
        dir.path().join("nodegroups/h100-8x.yaml"),
        h100.replace("ebs.csi.aws.com: 24", "ebs.csi.aws.com: 4"),
    )
    .unwrap();
    let mut docs = vec![
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\nprovisioner: ebs.csi.aws.com\n".to_owned(),
        "apiVersion: scheduling.k8s.io/v1alpha2\nkind: PodGroup\nmetadata: {name: ckpt, namespace: ml}\nspec: {schedulingPolicy: {gang: {minCount: 8}}}\n".to_owned(),
    ];
    for i in 0..8 {
        let mut volumes = String::new();
        for v in 0..3 {
            docs.push(format!(
                "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: ckpt-{i}-{v}, namespace: ml}}\nspec: {{storageClassName: {class}, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 10Gi}}}}}}\n"
            ));
            volumes.push_str(&format!(
                "  - {{name: v{v}, persistentVolumeClaim: {{claimName: ckpt-{i}-{v}}}}}\n"
            ));
        }
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: ckpt-{i}, namespace: ml}}\nspec:\n  schedulingGroup: {{podGroupName: ckpt}}\n  tolerations: [{{key: nvidia.com/gpu, operator: Exists}}]\n  containers:\n  - {{name: c, image: app, resources: {{limits: {{nvidia.com/gpu: \"1\"}}}}}}\n  volumes:\n{volumes}status: {{phase: Pending}}\n"
        ));
    }
    let objects = dir.path().join("objects.yaml");
    std::fs::write(&objects, docs.join("---\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .args(["plan", "-o", "json", "--config"])
        .arg(dir.path())
        .arg("--objects")
        .arg(&objects)
        .env_remove("GANGSCALER_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn plan_reports_a_missing_storage_class_instead_of_under_counting_attach_limits() {
    // With the class: one member per node (3 of 4 attachments), 8 nodes.
    let json = plan_ckpt_gang("gp3");
    let ckpt = gang(&json, "ckpt");
    assert_eq!(option(ckpt, "h100-8x")["nodesAll"].as_u64(), Some(8));
    assert_eq!(json["problems"].as_array().unwrap().len(), 0);

    // With a class that does not exist, the volumes' driver is unknown: the gang is not
    // planned on 1 node as if it had no volumes, and every claim is a named problem.
    let json = plan_ckpt_gang("gp3-typo");
    let ckpt = gang(&json, "ckpt");
    assert!(ckpt["best"].is_null(), "{ckpt:#}");
    let h100 = option(ckpt, "h100-8x");
    assert_eq!(h100["status"], "unfittable", "{h100:#}");
    assert_eq!(h100["reason"]["kind"], "unresolved_claim");
    assert_eq!(h100["reason"]["claim"], "ckpt-0-0");
    let problems: Vec<&str> = json["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(problems.len(), 24, "{problems:#?}");
    assert!(
        problems[0].starts_with(
            "Pod ml/ckpt-0 (v1): persistentvolumeclaim \"ckpt-0-0\" storageclass \"gp3-typo\" not found"
        ),
        "{problems:#?}"
    );
}

/// Regression (issue 10): an object file with a YAML alias bomb is refused by the parser's
/// budget, naming the file and the document, instead of expanding to gigabytes.
#[test]
fn an_alias_bomb_object_file_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bomb.yaml");
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\n---\na: &a [x,x,x,x,x,x,x,x,x]\n");
    for i in 1u8..12 {
        let (prev, name) = (char::from(b'a' + i - 1), char::from(b'a' + i));
        let items = vec![format!("*{prev}"); 9].join(",");
        text.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    std::fs::write(&path, text).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--objects", path.to_str().unwrap(), "-o", "json"])
        .env_remove("GANGSCALER_CONFIG")
        .output()
        .expect("running gangscaler plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("bomb.yaml"), "{stderr}");
    assert!(stderr.contains("document 2"), "{stderr}");
}
