//! `gangscaler plan` over the shipped example objects: the JSON a platform team would script
//! against, checked field by field.

#![expect(
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

/// `gangscaler plan --simulate` with `args`: success, stdout, stderr.
fn simulate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--simulate"])
        .args(args)
        .env_remove("GANGSCALER_CONFIG")
        .output()
        .expect("running gangscaler plan --simulate");
    // A panic exits with 101; every refusal must be an error message instead.
    assert_ne!(out.status.code(), Some(101), "panicked");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

const TRACE: &str = "examples/traces/training.jsonl";

fn shape<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["capacity"]["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["shape"]["name"] == name)
        .unwrap_or_else(|| panic!("no shape {name} in {json:#}"))
}

#[test]
fn simulate_json_gives_thresholds_per_shape_and_group_for_the_example_trace() {
    let (ok, stdout, stderr) = simulate(&["--trace", TRACE, "--target", "h100-8x=2", "-o", "json"]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // Trace order; identical evals collapse into the first one's shape.
    let names: Vec<&str> = json["capacity"]["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["shape"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pretrain",
            "pretrain-xl",
            "finetune",
            "ckpt-heavy",
            "eval",
            "dataloader",
            "moe-16gpu"
        ]
    );
    assert_eq!(
        shape(&json, "eval")["shape"]["gangs"],
        serde_json::json!(["eval", "eval-nightly"])
    );

    // Whole-node members: 16 nodes, and maxSize 16 admits minCount 16, the headroom 14.
    let pretrain = shape(&json, "pretrain");
    let h100 = option(pretrain, "h100-8x");
    assert_eq!(
        (
            h100["perNode"].as_u64(),
            h100["nodesAll"].as_u64(),
            h100["largestMinCountAtMax"].as_u64(),
            h100["largestMinCountAtHeadroom"].as_u64(),
        ),
        (Some(1), Some(16), Some(16), Some(14))
    );
    assert_eq!(
        (
            h100["minFitsMaxSize"].as_bool(),
            h100["minFitsHeadroom"].as_bool()
        ),
        (Some(true), Some(false))
    );
    assert_eq!(
        option(pretrain, "l4-4x")["reason"]["kind"],
        "topology_missing"
    );

    // minCount 24 of whole-node members needs 24 nodes: more than maxSize.
    let xl = option(shape(&json, "pretrain-xl"), "h100-8x");
    assert_eq!(
        (xl["nodesMin"].as_u64(), xl["minFitsMaxSize"].as_bool()),
        (Some(24), Some(false))
    );

    // 4-GPU members on 8-GPU nodes: 2 per node, maxSize 16 admits minCount 32.
    let finetune = shape(&json, "finetune");
    let h100 = option(finetune, "h100-8x");
    assert_eq!(
        (
            h100["perNode"].as_u64(),
            h100["nodesAll"].as_u64(),
            h100["nodesMin"].as_u64(),
            h100["largestMinCountAtMax"].as_u64()
        ),
        (Some(2), Some(8), Some(6), Some(32))
    );
    let l4 = option(finetune, "l4-4x");
    assert_eq!(
        (l4["nodesMin"].as_u64(), l4["largestMinCountAtMax"].as_u64()),
        (Some(12), Some(8))
    );

    // 6 volumes per member against 24 attachments: 4 per node, not the 8 GPUs allow.
    let ckpt = option(shape(&json, "ckpt-heavy"), "h100-8x");
    assert_eq!(
        (
            ckpt["perNode"].as_u64(),
            ckpt["largestMinCountAtMax"].as_u64()
        ),
        (Some(4), Some(64))
    );

    for group in ["cpu-general", "h100-8x", "l4-4x"] {
        let o = option(shape(&json, "moe-16gpu"), group);
        assert_eq!(o["status"], "unfittable", "{o:#}");
        assert_eq!(o["reason"]["kind"], "pod_too_large", "{o:#}");
    }
    assert_eq!(json["skipped"].as_array().unwrap().len(), 0);
}

#[test]
fn simulate_table_has_a_row_per_group_under_each_shape() {
    let (ok, stdout, stderr) = simulate(&["--trace", TRACE, "--target", "h100-8x=2"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("\nshape finetune: 16 members, minCount 12; per member cpu 32, memory 160Gi, nvidia.com/gpu 4, ebs.csi.aws.com volumes 2\n"), "{stdout}");
    assert!(stdout.contains("  gangs: eval, eval-nightly\n"), "{stdout}");
    let row = |start: &str| {
        stdout
            .lines()
            .skip_while(|l| !l.starts_with(start))
            .find(|l| l.trim_start().starts_with("h100-8x"))
            .unwrap_or_else(|| panic!("no h100-8x row under {start}: {stdout}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // GROUP MAX HEADROOM PER-NODE NODES-ALL NODES-MIN MIN@MAX MIN@HEADROOM VERDICT...
    assert_eq!(
        row("shape finetune")[..8],
        ["h100-8x", "16", "14", "2", "8", "6", "32", "28"]
    );
    assert_eq!(
        row("shape pretrain-xl")[..8],
        ["h100-8x", "16", "14", "1", "32", "24", "16", "14"]
    );
    assert!(
        row("shape pretrain-xl")
            .join(" ")
            .ends_with("minCount needs 24 nodes, maxSize 16")
    );
    assert!(
        stdout.contains(
            "cannot host: pod moe-16gpu[*] requests 16 nvidia.com/gpu but a node offers 8"
        ),
        "{stdout}"
    );
}

#[test]
fn simulate_adds_the_pending_gangs_of_an_object_file_after_the_trace() {
    let (ok, stdout, stderr) = simulate(&[
        "--trace",
        TRACE,
        "--objects",
        "examples/objects/training-gangs.yaml",
        "-o",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let shapes = json["capacity"]["shapes"].as_array().unwrap();
    assert_eq!(shapes[0]["shape"]["name"], "pretrain");
    let finetune = option(shape(&json, "ml/finetune"), "h100-8x");
    assert_eq!(
        (finetune["perNode"].as_u64(), finetune["nodesAll"].as_u64()),
        (Some(8), Some(1))
    );
    assert_eq!(json["ungroupedPending"].as_u64(), Some(1));
}

#[test]
fn a_malformed_trace_is_refused_naming_the_file_line_field_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"name\": \"ok\", \"members\": 2}\n{\"name\": \"x\", \"members\": 4, \"resources\": {\"memory\": \"2048GB\"}}\n{\"members\": 4, \"minCount\": 5}\nnot json\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = simulate(&["--trace", path.to_str().unwrap()]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(&format!("3 invalid gang spec(s) in {}", path.display())),
        "{stderr}"
    );
    for line in [
        "line 2: resources.memory: is not a valid quantity: unknown quantity suffix (got \"2048GB\")",
        "line 3: minCount: must not exceed members (4) (got 5)",
        "line 4: not valid JSON: expected ident at column 2",
    ] {
        assert!(stderr.contains(line), "{line}: {stderr}");
    }

    let yaml = dir.path().join("bad.yaml");
    std::fs::write(&yaml, "members: 2\n---\nmembers: 2\ntopologyKey: 7\n").unwrap();
    let (ok, _, stderr) = simulate(&["--trace", yaml.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("document 2: topologyKey: expected a string (got 7)"),
        "{stderr}"
    );

    let (ok, _, stderr) = simulate(&["--trace", "no/such/trace.jsonl"]);
    assert!(!ok);
    assert!(stderr.contains("no/such/trace.jsonl"), "{stderr}");
    let (ok, _, stderr) = plan(&["--trace", TRACE]);
    assert!(!ok);
    assert!(stderr.contains("--simulate"), "{stderr}");
}

fn plan_of(objects: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["plan", "--objects", objects])
        .args(args)
        .env_remove("GANGSCALER_CONFIG")
        .output()
        .expect("running gangscaler plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn plan_shows_a_composite_placed_across_two_groups_and_one_that_cannot_be_placed_whole() {
    for args in [&["-o", "json"][..], &["-o", "json", "--simulate"][..]] {
        let json = plan_of("examples/objects/composite-job.yaml", args);
        let composites = json["composites"].as_array().unwrap();
        assert_eq!(composites.len(), 2, "{args:?}: {json:#}");
        let pretrain = &composites[0];
        assert_eq!(pretrain["composite"]["name"], "pretrain");
        let shares: Vec<(&str, u64)> = pretrain["admission"]["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s[0].as_str().unwrap(), s[1][0]["nodes"].as_u64().unwrap()))
            .collect();
        assert_eq!(shares, [("cpu-general", 1), ("h100-8x", 2)], "{args:?}");
        let sweep = &composites[1];
        assert_eq!(sweep["composite"]["name"], "sweep");
        assert!(sweep["admission"].is_null(), "{sweep:#}");
        assert_eq!(sweep["reason"]["kind"], "composite_short");
        let detail = sweep["reason"]["detail"].as_str().unwrap();
        assert!(
            detail.contains("sweep-workers") && detail.contains("h100-8x has headroom 16 for 20"),
            "{detail}"
        );
    }
}
