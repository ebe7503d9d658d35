//! Hostile and careless configuration (issue 10): YAML alias bombs, oversized and deeply
//! nested files, directory entries that are not readable regular files, TLS material that
//! `serve` would refuse, follow-on error noise, the ephemeral-storage default, and errors that
//! must name their setting (`nodeGroupsDir`, a NaN `price`). Every
//! configuration directory is written into a temporary directory and loaded through
//! `Source::with_env`, so nothing here reads the process environment.
#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use gangscaler::config::{Error, FieldError, Loaded, MAX_FILE_BYTES, Source};
use tempfile::TempDir;

/// A valid provider file: plaintext on loopback.
const PROVIDER: &str = "server:\n  address: \"127.0.0.1:8086\"\n  plaintext: true\n";

/// A valid node group for `gpu-a.yaml`.
const GPU_A: &str = "id: gpu-a\nminSize: 0\nmaxSize: 4\ninstanceType: p5.48xlarge\n\
                     region: us-east-1\nzone: us-east-1a\n\
                     capacity: {cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\n";

struct ConfigDir {
    tmp: TempDir,
}

impl ConfigDir {
    fn new(provider: &str) -> Self {
        let tmp = tempfile::tempdir().expect("creating a temporary directory");
        std::fs::create_dir(tmp.path().join("nodegroups")).expect("creating nodegroups/");
        let dir = Self { tmp };
        dir.write("provider.yaml", provider);
        dir
    }

    fn group(self, file: &str, yaml: &str) -> Self {
        self.write(&format!("nodegroups/{file}"), yaml);
        self
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.path().join(rel), text).expect("writing a config file");
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn load(&self) -> Result<Loaded, Error> {
        Source::with_env(self.path(), HashMap::new()).load()
    }
}

fn invalid(result: Result<Loaded, Error>) -> Vec<FieldError> {
    match result {
        Err(Error::Invalid(list)) => list,
        other => panic!("expected Error::Invalid, got {other:#?}"),
    }
}

/// Runs the built binary with `args` under a 4 GiB address-space limit, without any
/// `GANGSCALER*` or `RUST_LOG` variable of the test process leaking into it.
fn gangscaler_bounded(args: &[&str]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_gangscaler"))
        .args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GANGSCALER") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("RUST_LOG")
        .output()
        .expect("running the gangscaler binary")
}

/// A "billion laughs" document of `levels` (at most 26) anchors `a`, `b`, ..., each a list of
/// nine aliases of the one before; fully expanded it has 9^levels scalars.
fn alias_bomb(levels: u8) -> String {
    let mut text = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
    for i in 1..levels {
        let (prev, name) = (char::from(b'a' + i - 1), char::from(b'a' + i));
        let items = vec![format!("*{prev}"); 9].join(",");
        text.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    text
}

// ---------------------------------------------------------------------------------------------
// 1. Bounded YAML
// ---------------------------------------------------------------------------------------------

#[test]
fn an_alias_bomb_in_a_node_group_file_is_a_parse_error_naming_the_file() {
    // 9^6 scalars when expanded: small enough not to hurt if the budget ever regressed.
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}{}", alias_bomb(6)));
    match dir.load() {
        Err(Error::Parse { path, message }) => {
            assert_eq!(path, dir.path().join("nodegroups/gpu-a.yaml"));
            assert!(message.contains("line"), "{message}");
        }
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
}

#[test]
fn an_alias_bomb_in_the_provider_file_is_a_parse_error_naming_it() {
    let dir = ConfigDir::new(&format!("{PROVIDER}{}", alias_bomb(6).replace("a:", "x:")))
        .group("gpu-a.yaml", GPU_A);
    match dir.load() {
        Err(Error::Parse { path, .. }) => assert_eq!(path, dir.path().join("provider.yaml")),
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
}

#[test]
fn validate_refuses_a_400_byte_alias_bomb_in_bounded_memory() {
    let bomb = alias_bomb(9);
    assert!(bomb.len() < 400, "{} bytes", bomb.len());
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &bomb);
    let out = gangscaler_bounded(&["validate", "--config", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    // An allocation failure would abort without naming the file.
    assert!(stderr.contains("gpu-a.yaml"), "{stderr}");
    assert!(
        stderr.contains("alias") || stderr.contains("budget"),
        "{stderr}"
    );
}

#[test]
fn a_config_file_over_the_limit_is_refused_naming_the_file_and_the_limit() {
    let filler = "#".repeat(usize::try_from(MAX_FILE_BYTES).unwrap());
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}{filler}\n"));
    let err = dir.load().expect_err("too large");
    match &err {
        Error::TooLarge { path, limit } => {
            assert_eq!(path, &dir.path().join("nodegroups/gpu-a.yaml"));
            assert_eq!(*limit, 1 << 20);
        }
        other => panic!("expected Error::TooLarge, got {other:#?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("gpu-a.yaml") && text.contains("1 MiB"),
        "{text}"
    );
    // Just under the limit is fine.
    let filler = "#".repeat(usize::try_from(MAX_FILE_BYTES).unwrap() - GPU_A.len() - 1);
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}{filler}\n"));
    dir.load().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn deeply_nested_yaml_is_a_parse_error_not_a_stack_overflow() {
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}labels: {deep}\n"));
    match dir.load() {
        Err(Error::Parse { path, .. }) => {
            assert_eq!(path, dir.path().join("nodegroups/gpu-a.yaml"));
        }
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
}

#[test]
fn label_values_keep_yaml_1_2_scalars_as_written() {
    let dir = ConfigDir::new(PROVIDER).group(
        "gpu-a.yaml",
        &format!("{GPU_A}labels: {{gangscaler.io/a: yes, gangscaler.io/b: \"on\", gangscaler.io/rack: 007}}\n"),
    );
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    let labels = &loaded.groups[0].labels;
    assert_eq!(labels["gangscaler.io/a"], "yes");
    assert_eq!(labels["gangscaler.io/b"], "on");
    assert_eq!(labels["gangscaler.io/rack"], "007");
}

#[test]
fn duplicate_keys_are_a_parse_error() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}maxSize: 9\n"));
    match dir.load() {
        Err(Error::Parse { path, message }) => {
            assert_eq!(path, dir.path().join("nodegroups/gpu-a.yaml"));
            assert!(
                message.contains("the key `maxSize` is set twice") && message.contains("line "),
                "names the key and where: {message}"
            );
        }
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
}

#[test]
fn template_yaml_output_reads_back_as_the_json_output() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("provider-configs");
    let shipped = shipped.to_str().unwrap();
    let yaml = gangscaler_bounded(&["template", "h100-8x", "--config", shipped, "-o", "yaml"]);
    assert!(
        yaml.status.success(),
        "{}",
        String::from_utf8_lossy(&yaml.stderr)
    );
    let json = gangscaler_bounded(&["template", "h100-8x", "--config", shipped, "-o", "json"]);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let from_yaml = gangscaler::yaml::config_value(
        &String::from_utf8(yaml.stdout).unwrap(),
        &gangscaler::yaml::OBJECTS,
    )
    .unwrap();
    let from_json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
}

// ---------------------------------------------------------------------------------------------
// 2. Directory entries that are not readable regular files
// ---------------------------------------------------------------------------------------------

#[test]
fn yaml_entries_that_are_not_regular_files_are_each_named() {
    use std::os::unix::fs::symlink;
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let groups = dir.path().join("nodegroups");
    std::fs::create_dir(groups.join("a-dir.yaml")).unwrap();
    symlink("missing.yaml", groups.join("dangling.yaml")).unwrap();
    symlink("loop.yml", groups.join("loop.yml")).unwrap();
    let fifo = Command::new("mkfifo")
        .arg(groups.join("pipe.yaml"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let err = dir.load().expect_err("unusable entries");
    let Error::Unusable(list) = &err else {
        panic!("expected Error::Unusable, got {err:#?}")
    };
    let reasons: Vec<(String, &str)> = list
        .iter()
        .map(|u| {
            (
                u.path.file_name().unwrap().to_string_lossy().into_owned(),
                u.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:#?}");
    assert_eq!(reasons[0].0, "a-dir.yaml");
    assert!(reasons[0].1.contains("directory"), "{reasons:?}");
    assert_eq!(reasons[1].0, "dangling.yaml");
    assert!(
        reasons[1].1.contains("dangling") && reasons[1].1.contains("missing.yaml"),
        "{reasons:?}"
    );
    assert_eq!(reasons[2].0, "loop.yml");
    assert!(reasons[2].1.contains("cannot be followed"), "{reasons:?}");
    assert_eq!(reasons[3].0, "pipe.yaml");
    assert!(reasons[3].1.contains("FIFO"), "{reasons:?}");
    // `validate` names every one and fails.
    let out = gangscaler_bounded(&["validate", "--config", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for name in ["a-dir.yaml", "dangling.yaml", "loop.yml", "pipe.yaml"] {
        assert!(stderr.contains(name), "{name}: {stderr}");
    }
}

#[test]
fn a_provider_file_that_is_a_directory_or_a_fifo_is_named() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    std::fs::remove_file(dir.path().join("provider.yaml")).unwrap();
    std::fs::create_dir(dir.path().join("provider.yaml")).unwrap();
    match dir.load() {
        Err(Error::NotAFile { path, kind }) => {
            assert_eq!(path, dir.path().join("provider.yaml"));
            assert_eq!(kind, "directory");
        }
        other => panic!("expected Error::NotAFile, got {other:#?}"),
    }
    std::fs::remove_dir(dir.path().join("provider.yaml")).unwrap();
    let fifo = Command::new("mkfifo")
        .arg(dir.path().join("provider.yaml"))
        .status()
        .unwrap();
    assert!(fifo.success());
    // Refused without opening it (opening a FIFO would block until a writer appears).
    assert!(matches!(
        dir.load(),
        Err(Error::NotAFile { kind: "FIFO", .. })
    ));
}

#[test]
fn symlinked_group_files_are_followed_and_hidden_entries_skipped() {
    use std::os::unix::fs::symlink;
    let dir = ConfigDir::new(PROVIDER);
    let groups = dir.path().join("nodegroups");
    let data = groups.join("..2026_05_01_10_00_00.000000001");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("gpu-a.yaml"), GPU_A).unwrap();
    symlink(data.file_name().unwrap(), groups.join("..data")).unwrap();
    symlink("..data/gpu-a.yaml", groups.join("gpu-a.yaml")).unwrap();
    // A hidden file is not configuration (editors and the kubelet write them).
    std::fs::write(groups.join(".gpu-b.yaml"), "junk: [").unwrap();
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = loaded.groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["gpu-a"]);
}

#[test]
fn node_groups_in_the_provider_directory_do_not_read_the_provider_file_as_a_group() {
    let dir = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: .\n"));
    dir.write("gpu-a.yaml", GPU_A);
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = loaded.groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["gpu-a"]);
}

// ---------------------------------------------------------------------------------------------
// 3. TLS files and listener addresses that `serve` would refuse
// ---------------------------------------------------------------------------------------------

/// A self-signed certificate and its key, in PEM.
fn self_signed(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

const TLS_PROVIDER: &str = "server:\n  address: \"127.0.0.1:8086\"\n  tls:\n    certFile: tls/server.crt\n    keyFile: tls/server.key\n    clientCaFile: tls/ca.crt\n";

/// A TLS configuration directory whose files are `cert`, `key` and `ca`.
fn tls_dir(cert: &str, key: &str, ca: &str) -> ConfigDir {
    let dir = ConfigDir::new(TLS_PROVIDER).group("gpu-a.yaml", GPU_A);
    std::fs::create_dir(dir.path().join("tls")).unwrap();
    dir.write("tls/server.crt", cert);
    dir.write("tls/server.key", key);
    dir.write("tls/ca.crt", ca);
    dir
}

fn field_error<'a>(errs: &'a [FieldError], field: &str) -> &'a FieldError {
    errs.iter()
        .find(|e| e.field == field)
        .unwrap_or_else(|| panic!("no error for {field}: {errs:#?}"))
}

#[test]
fn matching_pem_files_are_accepted() {
    let (cert, key) = self_signed("gangscaler");
    let (ca, _) = self_signed("ca");
    tls_dir(&cert, &key, &ca)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_certificate_file_without_a_pem_certificate_is_refused_by_validate() {
    let (_, key) = self_signed("gangscaler");
    let (ca, _) = self_signed("ca");
    // A DER file, a key where the certificate should be, and plain junk.
    for junk in [
        "\u{30}\u{82}binary-ish",
        key.as_str(),
        "not a certificate\n",
    ] {
        let errs = invalid(tls_dir(junk, &key, &ca).load());
        assert_eq!(errs.len(), 1, "{errs:#?}");
        let e = field_error(&errs, "server.tls.certFile");
        assert!(e.message.contains("no PEM certificate"), "{e}");
        assert!(e.file.ends_with("provider.yaml"), "{e}");
        assert!(e.value.as_deref().unwrap().contains("server.crt"), "{e}");
    }
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_refused_by_validate() {
    let (cert, _) = self_signed("gangscaler");
    let (_, other_key) = self_signed("someone-else");
    let (ca, _) = self_signed("ca");
    let errs = invalid(tls_dir(&cert, &other_key, &ca).load());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let e = field_error(&errs, "server.tls.keyFile");
    assert!(e.message.contains("does not match the certificate"), "{e}");
    assert!(e.message.contains("server.crt"), "{e}");
}

#[test]
fn an_unusable_key_or_client_ca_is_refused_by_validate() {
    let (cert, _) = self_signed("gangscaler");
    let errs = invalid(tls_dir(&cert, &cert, "junk\n").load());
    assert_eq!(errs.len(), 2, "{errs:#?}");
    let e = field_error(&errs, "server.tls.keyFile");
    assert!(e.message.contains("no PEM private key"), "{e}");
    let e = field_error(&errs, "server.tls.clientCaFile");
    assert!(e.message.contains("no PEM certificate"), "{e}");
    let broken = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let (ca, _) = self_signed("ca");
    let errs = invalid(tls_dir(&cert, broken, &ca).load());
    let e = field_error(&errs, "server.tls.keyFile");
    assert!(e.message.contains("cannot be used"), "{e}");
}

#[tokio::test]
async fn serve_names_a_certificate_file_without_a_pem_certificate() {
    let (cert, key) = self_signed("gangscaler");
    let (ca, _) = self_signed("ca");
    let dir = tls_dir(&cert, &key, &ca);
    let mut loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    loaded.provider.server.address = "127.0.0.1:0".parse().unwrap();
    loaded.provider.server.metrics_address = "127.0.0.1:0".parse().unwrap();
    // Edited after validation: serve must still name it, not fail a handshake later.
    dir.write("tls/server.crt", "not a certificate\n");
    let err = gangscaler::server::Server::bind(loaded, None)
        .await
        .expect_err("unusable certificate");
    let chain = gangscaler::telemetry::chain(&err);
    assert!(chain.contains("server.tls.certFile"), "{chain}");
    assert!(chain.contains("server.crt"), "{chain}");
    assert!(chain.contains("no PEM certificate"), "{chain}");
    assert!(!chain.contains("peer sent no certificates"), "{chain}");
}

#[test]
fn a_metrics_address_on_the_grpc_address_is_refused() {
    for (grpc, metrics) in [
        ("127.0.0.1:8086", "127.0.0.1:8086"),
        ("127.0.0.1:8086", "0.0.0.0:8086"),
        ("0.0.0.0:8086", "127.0.0.1:8086"),
    ] {
        let provider = format!(
            "server:\n  address: \"{grpc}\"\n  metricsAddress: \"{metrics}\"\n  plaintext: true\n  allowNonLoopbackPlaintext: true\n"
        );
        let errs = invalid(ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A).load());
        assert_eq!(errs.len(), 1, "{grpc} {metrics}: {errs:#?}");
        let e = field_error(&errs, "server.metricsAddress");
        assert_eq!(e.value.as_deref(), Some(format!("\"{metrics}\"").as_str()));
        assert!(e.message.contains(grpc), "{e}");
    }
    // Port 0 picks a free port for each listener: no conflict.
    let provider = "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n";
    ConfigDir::new(provider)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_non_loopback_metrics_address_is_a_warning_not_an_error() {
    let provider = format!("{PROVIDER}  metricsAddress: \"0.0.0.0:9464\"\n");
    let dir = ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A);
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    let warnings = loaded.provider.server.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].field, "server.metricsAddress");
    assert!(
        warnings[0].message.contains("unauthenticated"),
        "{}",
        warnings[0]
    );
    let out = gangscaler_bounded(&["validate", "--config", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("server.metricsAddress"),
        "{stderr}"
    );
    // On loopback there is nothing to warn about.
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.provider.server.warnings().is_empty());
}

// ---------------------------------------------------------------------------------------------
// 4. One root cause, one error; a bounded list per file
// ---------------------------------------------------------------------------------------------

#[test]
fn an_invalid_capacity_is_not_also_reported_as_missing_for_reserved() {
    for capacity in [
        "capacity: {cpu: lots, memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\n",
        "capacity: \"192\"\n",
    ] {
        let group = GPU_A.replace(
            "capacity: {cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\n",
            capacity,
        );
        assert_ne!(group, GPU_A);
        let errs = invalid(
            ConfigDir::new(PROVIDER)
                .group("gpu-a.yaml", &format!("{group}reserved: {{cpu: \"2\"}}\n"))
                .load(),
        );
        assert_eq!(errs.len(), 1, "{capacity}: {errs:#?}");
        assert!(errs[0].field.starts_with("capacity"), "{errs:#?}");
    }
    // Without any capacity, reserved is still reported.
    let group = GPU_A.replace(
        "capacity: {cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\n",
        "",
    );
    let errs = invalid(
        ConfigDir::new(PROVIDER)
            .group("gpu-a.yaml", &format!("{group}reserved: {{cpu: \"2\"}}\n"))
            .load(),
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "reserved");
    assert!(errs[0].message.contains("requires capacity"), "{errs:#?}");
}

#[test]
fn an_unknown_backend_type_is_reported_once_not_with_its_fields() {
    let group = format!("{GPU_A}backend: {{type: aws, region: us-east-1, instanceProfile: gpu}}\n");
    let errs = invalid(ConfigDir::new(PROVIDER).group("gpu-a.yaml", &group).load());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "backend.type");
    assert_eq!(errs[0].value.as_deref(), Some("\"aws\""));
    // The same in the provider's defaults.
    let provider = format!("{PROVIDER}defaults:\n  backend: {{type: aws, region: us-east-1}}\n");
    let errs = invalid(ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A).load());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "defaults.backend.type");
}

#[test]
fn a_junk_file_lists_at_most_fifty_errors_and_counts_the_rest() {
    let junk: String = (0..1000).map(|i| format!("junk{i}: {i}\n")).collect();
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}{junk}"));
    let errs = invalid(dir.load());
    assert_eq!(errs.len(), 51, "{:#?}", &errs[45..]);
    assert!(
        errs[..50]
            .iter()
            .all(|e| e.message.contains("unknown field"))
    );
    let last = &errs[50];
    assert!(last.file.ends_with("gpu-a.yaml"), "{last}");
    assert!(
        last.message.contains("950 more error(s) not shown"),
        "{last}"
    );
    // Another file's errors are capped on their own.
    let dir = dir.group(
        "gpu-b.yaml",
        &format!("{}{junk}", GPU_A.replace("gpu-a", "gpu-b")),
    );
    assert_eq!(invalid(dir.load()).len(), 102);
    let out = gangscaler_bounded(&["validate", "--config", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.lines().count() < 120,
        "{} lines",
        stderr.lines().count()
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Ephemeral storage
// ---------------------------------------------------------------------------------------------

/// The scheduler (and so Cluster Autoscaler's simulation) reads a resource missing from a
/// template's allocatable as zero: a capacity without `ephemeralStorage` made every pod that
/// requests ephemeral storage unplaceable. It is now required with `capacity`.
#[test]
fn a_capacity_without_ephemeral_storage_is_refused_naming_the_field() {
    let group = GPU_A.replace(" ephemeralStorage: 7600Gi,", "");
    assert_ne!(group, GPU_A);
    let errs = invalid(ConfigDir::new(PROVIDER).group("gpu-a.yaml", &group).load());
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].field, "capacity.ephemeralStorage");
    assert!(errs[0].message.contains("is required"), "{}", errs[0]);
    // `reserved` may still omit it.
    let loaded = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", &format!("{GPU_A}reserved: {{cpu: \"2\"}}\n"))
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    let template =
        gangscaler::model::TemplateNode::for_group(&loaded.groups[0], &loaded.provider.gpu_label)
            .unwrap();
    assert_eq!(template.status.allocatable["ephemeral-storage"], "7600Gi");
}

// ---------------------------------------------------------------------------------------------
// 6. Errors that name the setting: file, field and value
// ---------------------------------------------------------------------------------------------

/// The one error of `errs`, which must be `field` of `file`, and its text.
fn only_error<'a>(errs: &'a [FieldError], file: &Path, field: &str) -> (&'a FieldError, String) {
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let e = &errs[0];
    assert_eq!(e.file, file, "{e}");
    assert_eq!(e.field, field, "{e}");
    (e, e.to_string())
}

#[test]
fn a_missing_node_groups_dir_names_the_setting_and_the_directory() {
    let dir = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: missing-dir\n"));
    let provider = dir.path().join("provider.yaml");
    let errs = invalid(dir.load());
    let (e, text) = only_error(&errs, &provider, "nodeGroupsDir");
    let missing = dir.path().join("missing-dir");
    assert_eq!(
        e.value,
        Some(format!("{:?}", missing.display().to_string()))
    );
    assert!(e.message.contains("nothing exists"), "{text}");
    for part in [
        provider.to_str().unwrap(),
        "nodeGroupsDir",
        missing.to_str().unwrap(),
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    // Without the setting, its default `nodegroups` is named the same way.
    let dir = ConfigDir::new(PROVIDER);
    std::fs::remove_dir(dir.path().join("nodegroups")).unwrap();
    let errs = invalid(dir.load());
    let (e, text) = only_error(&errs, &dir.path().join("provider.yaml"), "nodeGroupsDir");
    assert!(e.value.as_deref().unwrap().contains("nodegroups"), "{text}");
    // The provider file's other errors are reported with it, in one pass.
    let dir = ConfigDir::new(&format!(
        "{PROVIDER}nodeGroupsDir: missing-dir\ngpu: {{label: \"bad key!\"}}\n"
    ));
    let fields: Vec<String> = invalid(dir.load()).into_iter().map(|e| e.field).collect();
    assert_eq!(fields, ["gpu.label", "nodeGroupsDir"]);
}

#[test]
fn a_node_groups_dir_that_is_a_regular_file_names_the_setting_and_the_path() {
    let dir = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: groups-file\n"));
    dir.write("groups-file", GPU_A);
    let provider = dir.path().join("provider.yaml");
    let errs = invalid(dir.load());
    let (e, text) = only_error(&errs, &provider, "nodeGroupsDir");
    assert!(e.message.contains("regular file"), "{text}");
    assert!(text.contains("groups-file"), "{text}");
}

#[test]
fn a_node_groups_dir_lost_after_loading_is_the_same_error_in_the_fingerprint() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let source = Source::with_env(dir.path(), HashMap::new());
    let loaded = source.load().unwrap_or_else(|e| panic!("{e}"));
    let groups = &loaded.provider.node_groups_dir;
    source.fingerprint(groups).unwrap_or_else(|e| panic!("{e}"));
    let provider = dir.path().join("provider.yaml");
    // Vanished, then a regular file in its place: what Refresh reads first.
    std::fs::rename(groups, dir.path().join("elsewhere")).unwrap();
    for (what, expected) in [("vanished", "nothing exists"), ("a file", "regular file")] {
        let Err(Error::Invalid(errs)) = source.fingerprint(groups) else {
            panic!("{what}: expected Error::Invalid")
        };
        let (e, text) = only_error(&errs, &provider, "nodeGroupsDir");
        assert!(e.message.contains(expected), "{what}: {text}");
        assert!(text.contains(groups.to_str().unwrap()), "{what}: {text}");
        // `load` says the same.
        assert_eq!(invalid(source.load()), errs, "{what}");
        std::fs::write(groups, "not a directory\n").unwrap();
    }
}

#[test]
fn a_non_finite_price_names_the_file_the_field_and_the_value() {
    for (written, shown) in [
        (".nan", "\".nan\""),
        (".NaN", "\".nan\""),
        (".inf", "\".inf\""),
        ("-.inf", "\"-.inf\""),
        ("1e999", "\".inf\""),
    ] {
        let dir =
            ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}price: {written}\n"));
        let file = dir.path().join("nodegroups/gpu-a.yaml");
        let errs = invalid(dir.load());
        let (e, text) = only_error(&errs, &file, "price");
        assert_eq!(e.value.as_deref(), Some(shown), "{written}: {text}");
        assert!(e.message.contains("finite"), "{written}: {text}");
    }
    // From the environment too.
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let env = HashMap::from([("GANGSCALER_NG_GPU_A__PRICE".to_owned(), "nan".to_owned())]);
    let errs = invalid(Source::with_env(dir.path(), env).load());
    let (e, _) = only_error(&errs, &dir.path().join("nodegroups/gpu-a.yaml"), "price");
    assert_eq!(e.value.as_deref(), Some("\"nan\""));
    // A finite price still loads.
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}price: 1.5\n"));
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.groups[0].price_per_hour, Some(1.5));
}

#[test]
fn validate_prints_the_file_field_and_value_of_each_of_them() {
    let missing = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: missing-dir\n"));
    let file = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: groups-file\n"));
    file.write("groups-file", GPU_A);
    let nan = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &format!("{GPU_A}price: .nan\n"));
    for (dir, parts) in [
        (&missing, ["provider.yaml", "nodeGroupsDir", "missing-dir"]),
        (&file, ["provider.yaml", "nodeGroupsDir", "groups-file"]),
        (&nan, ["nodegroups/gpu-a.yaml", "price", "\".nan\""]),
    ] {
        let out = gangscaler_bounded(&["validate", "--config", dir.path().to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains(parts[1]))
            .unwrap_or_else(|| panic!("no line names {}: {stderr}", parts[1]));
        for part in parts {
            assert!(line.contains(part), "{part}: {line}");
        }
        let path = dir.path().to_str().unwrap();
        assert!(line.contains(path), "{path}: {line}");
    }
}
