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
