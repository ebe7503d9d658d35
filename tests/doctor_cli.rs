//! `gangscaler doctor` without a cluster: bad arguments and files are refused with the flag,
//! file and value named, before any cluster is contacted; an unreachable API server still
//! gives a full report, with exit code 1.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests abort loudly"
)]

use std::path::Path;
use std::process::Command;

fn doctor(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gangscaler"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("doctor")
        .args(args)
        .env_remove("GANGSCALER_CONFIG")
        .env_remove("KUBECONFIG")
        .output()
        .expect("running gangscaler doctor");
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_bad_output_format_names_the_flag_and_value() {
    let (code, _, stderr) = doctor(&["-o", "xml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("'xml'"), "{stderr}");
    assert!(stderr.contains("--output"), "{stderr}");
}

#[test]
fn unreadable_or_empty_flags_files_name_the_flag_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.flags");
    let (code, stdout, stderr) = doctor(&["--ca-flags", s(&missing)]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.is_empty(), "no report on bad input: {stdout}");
    assert!(stderr.contains("--ca-flags: reading "), "{stderr}");
    assert!(stderr.contains("missing.flags"), "{stderr}");

    let empty = dir.path().join("empty.flags");
    std::fs::write(&empty, "# nothing here\n").unwrap();
    let (code, _, stderr) = doctor(&["--scheduler-flags", s(&empty)]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--scheduler-flags ") && stderr.contains("empty.flags: no flags found"),
        "{stderr}"
    );

    let stray = dir.path().join("stray.flags");
    std::fs::write(&stray, "--expander=random\n--v=4 oops\n").unwrap();
    let (code, _, stderr) = doctor(&["--ca-flags", s(&stray)]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("line 2: \"oops\" is not a flag"),
        "{stderr}"
    );

    let (code, _, stderr) = doctor(&["--ca-flags", s(dir.path())]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");
}

#[test]
fn bad_versions_config_dirs_and_kubeconfigs_are_named() {
    let (code, _, stderr) = doctor(&["--ca-version", "latest"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--ca-version \"latest\": expected a version"),
        "{stderr}"
    );
    let (code, _, stderr) = doctor(&["--scheduler-version", "1.x"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--scheduler-version \"1.x\""), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no-config");
    let (code, _, stderr) = doctor(&["--config", s(&nowhere)]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--config ") && stderr.contains("no-config"),
        "{stderr}"
    );

    let kubeconfig = dir.path().join("no-kubeconfig");
    let (code, _, stderr) = doctor(&["--kubeconfig", s(&kubeconfig)]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--kubeconfig ") && stderr.contains("no-kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_api_server_gives_a_report_with_an_error_row_and_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
         users:\n- name: x\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: x, user: x}\ncurrent-context: x\n",
    )
    .unwrap();
    let ca_flags = dir.path().join("ca.flags");
    std::fs::write(
        &ca_flags,
        "/cluster-autoscaler --cloud-provider=externalgrpc --expander=random \\\n  --scale-down-unneeded-time=20s\n",
    )
    .unwrap();
    let (code, stdout, stderr) = doctor(&[
        "--kubeconfig",
        s(&kubeconfig),
        "--ca-flags",
        s(&ca_flags),
        "--ca-version",
        "1.36.1",
        "--config",
        "provider-configs",
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("check(s) failed: apiserver-version"),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["schema"], "gangscaler.io/doctor/v1");
    assert_eq!(json["status"], "error");
    let row = |id: &str| {
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {json:#}"))
            .clone()
    };
    assert_eq!(row("apiserver-version")["status"], "error");
    assert_eq!(row("gang-api")["status"], "unknown");
    assert_eq!(row("pod-link-field")["status"], "unknown");
    assert_eq!(row("ca-flag/cloud-provider")["status"], "ok");
    assert_eq!(row("ca-flag/expander")["status"], "warn");
    // The shipped configuration has no audit log, so no lifecycle loop protects gangs.
    let unneeded = row("ca-flag/scale-down-unneeded-time");
    assert_eq!(unneeded["status"], "warn");
    assert!(
        unneeded["found"]
            .as_str()
            .unwrap()
            .contains("no audit.path"),
        "{unneeded}"
    );
    assert_eq!(row("csi-template/h100-8x")["status"], "unknown");
    assert!(json["lines"].is_null());

    // The table says the same.
    let (code, stdout, _) = doctor(&["--kubeconfig", s(&kubeconfig)]);
    assert_eq!(code, Some(1));
    assert!(stdout.starts_with("CHECK"), "{stdout}");
    assert!(stdout.contains("apiserver-version"), "{stdout}");
    assert!(stdout.contains("error: "), "{stdout}");
}
