//! Configuration tests: the shipped examples validate, every class of mistake is reported with
//! its file, field path and value, all mistakes are reported at once, environment overrides
//! apply, and the `validate` and `template` commands behave.
//!
//! Every configuration directory is written into a temporary directory from the strings in the
//! test, and loaded through `Source::with_env`, so nothing here reads the process environment.
//! Field errors render string values quoted (`"lots"`) and other values as JSON (`4`, `1.5`).
#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use gangscaler::config::{Error, FieldError, LifecycleSettings, Loaded, Source, Transport};
use gangscaler::model::quantity::Quantity;
use gangscaler::model::{BackendSpec, NodeGroupSpec, TaintEffect, TemplateNode};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A valid provider file: plaintext on loopback.
const PROVIDER: &str = r#"
server:
  address: "127.0.0.1:8086"
  plaintext: true
"#;

/// A valid node group for `gpu-a.yaml`; tests edit it with `str::replace` or append to it.
const GPU_A: &str = r#"
id: gpu-a
minSize: 0
maxSize: 4
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
capacity:
  cpu: "192"
  memory: 2048Gi
  ephemeralStorage: 7600Gi
  pods: 110
"#;

/// `GPU_A` with `from` replaced by `to`, failing loudly if `from` is not there (so a stale
/// edit cannot silently turn a negative test into a positive one).
fn gpu_a_with(from: &str, to: &str) -> String {
    assert!(GPU_A.contains(from), "GPU_A does not contain {from:?}");
    GPU_A.replace(from, to)
}

/// `GPU_A` with extra top-level YAML appended.
fn gpu_a_plus(extra: &str) -> String {
    format!("{GPU_A}{extra}")
}

/// A configuration directory in a temporary directory: `provider.yaml` + `nodegroups/*.yaml`.
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

    /// Adds (or replaces) `nodegroups/<file>`.
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

    fn path_str(&self) -> &str {
        self.path().to_str().expect("temporary paths are UTF-8")
    }

    fn load(&self) -> Result<Loaded, Error> {
        Source::with_env(self.path(), HashMap::new()).load()
    }

    fn load_with_env(&self, env: &[(&str, &str)]) -> Result<Loaded, Error> {
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Source::with_env(self.path(), env).load()
    }

    fn errors(&self) -> Vec<FieldError> {
        invalid(self.load())
    }
}

/// The field errors of an `Error::Invalid`; panics on success or any other error.
fn invalid(result: Result<Loaded, Error>) -> Vec<FieldError> {
    match result {
        Err(Error::Invalid(list)) => list,
        other => panic!("expected Error::Invalid, got {other:#?}"),
    }
}

/// The error for `field` in the file named `file` whose rendered value is `value`; panics with
/// the whole list when there is none.
fn expect_error<'a>(
    errs: &'a [FieldError],
    file: &str,
    field: &str,
    value: Option<&str>,
) -> &'a FieldError {
    let at_field: Vec<&FieldError> = errs
        .iter()
        .filter(|e| e.file.ends_with(file) && e.field == field)
        .collect();
    assert!(
        !at_field.is_empty(),
        "no error for field {field:?} in {file}; errors: {errs:#?}"
    );
    at_field
        .iter()
        .copied()
        .find(|e| e.value.as_deref() == value)
        .unwrap_or_else(|| {
            panic!("error for {field:?} in {file} has no value {value:?}: {at_field:#?}")
        })
}

/// Asserts the list has exactly `n` errors, printing them otherwise.
fn assert_count(errs: &[FieldError], n: usize) {
    assert_eq!(errs.len(), n, "expected {n} error(s), got: {errs:#?}");
}

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("provider-configs")
}

fn load_shipped() -> Loaded {
    Source::with_env(shipped_dir(), HashMap::new())
        .load()
        .unwrap_or_else(|e| panic!("shipped examples must validate: {e}"))
}

fn group<'a>(loaded: &'a Loaded, id: &str) -> &'a NodeGroupSpec {
    loaded
        .groups
        .iter()
        .find(|g| g.id.as_str() == id)
        .unwrap_or_else(|| panic!("no group {id}"))
}

fn quantity(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?} is not a quantity: {e}"))
}

/// Runs the built binary with `args`, without any `GANGSCALER*` or `RUST_LOG` variable of the
/// test process leaking into it (the child's environment is edited, never ours).
fn gangscaler(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gangscaler"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GANGSCALER") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("RUST_LOG")
        .args(args)
        .output()
        .expect("running the gangscaler binary")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---------------------------------------------------------------------------------------------
// 1. The shipped examples
// ---------------------------------------------------------------------------------------------

#[test]
fn shipped_examples_validate_with_the_documented_values() {
    let loaded = load_shipped();
    let ids: Vec<&str> = loaded.groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["cpu-general", "h100-8x", "l4-4x"]);

    let server = &loaded.provider.server;
    assert_eq!(server.address, "127.0.0.1:8086".parse().unwrap());
    assert_eq!(server.metrics_address, "127.0.0.1:9464".parse().unwrap());
    assert_eq!(
        server.transport,
        Transport::Plaintext {
            non_loopback: false
        }
    );
    assert_eq!(loaded.provider.gpu_label, "nvidia.com/gpu.product");
    assert_eq!(
        loaded.provider.node_groups_dir,
        shipped_dir().join("nodegroups")
    );
    assert_eq!(loaded.gpu_types(), ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"]);

    let h100 = group(&loaded, "h100-8x");
    assert_eq!((h100.min_size, h100.max_size), (0, 16));
    let gpu = h100.gpu.as_ref().expect("h100-8x has GPUs");
    assert_eq!(gpu.count, 8);
    assert_eq!(gpu.product, "NVIDIA-H100-80GB-HBM3");
    assert_eq!(gpu.resource_name, "nvidia.com/gpu");
    assert_eq!(gpu.memory, quantity("81559Mi"));
    let rdma = h100.rdma.as_ref().expect("h100-8x has RDMA");
    assert_eq!(rdma.resource_name, "rdma/rdma_shared_device_a");
    assert_eq!(rdma.devices, 8);
    assert_eq!(rdma.bandwidth_gbps, 3200);
    assert_eq!(rdma.bandwidth_resource_name, "gangscaler.io/rdma-gbps");
    assert_eq!(h100.csi.get("ebs.csi.aws.com"), Some(&24));
    assert_eq!(h100.taints.len(), 1);
    assert_eq!(h100.taints[0].key, "nvidia.com/gpu");
    assert_eq!(h100.taints[0].value, "present");
    assert_eq!(h100.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(
        h100.topology
            .get("topology.gangscaler.io/rack")
            .map(String::as_str),
        Some("rack-a01")
    );
    assert_eq!(h100.price_per_hour, Some(98.32));
    let cap = h100.capacity.expect("h100-8x has capacity");
    assert_eq!(cap.cpu, quantity("192"));
    assert_eq!(cap.memory, quantity("2048Gi"));
    assert_eq!(h100.reserved.memory, quantity("24Gi"));
    assert!(h100.source.ends_with("nodegroups/h100-8x.yaml"));

    let cpu = group(&loaded, "cpu-general");
    assert_eq!((cpu.min_size, cpu.max_size), (1, 20));
    assert!(cpu.gpu.is_none());
    assert_eq!(cpu.csi.get("ebs.csi.aws.com"), Some(&28));
    assert_eq!(
        cpu.labels.get("gangscaler.io/pool").map(String::as_str),
        Some("cpu")
    );

    let l4 = group(&loaded, "l4-4x");
    assert_eq!(l4.gpu.as_ref().map(|g| g.count), Some(4));
    assert!(l4.rdma.is_none());
}

#[test]
fn groups_without_a_backend_inherit_the_provider_default_backend() {
    let loaded = load_shipped();
    // cpu-general sets its own backend; l4-4x inherits `defaults.backend` (provisionDelay: 20s).
    let BackendSpec::Memory(own) = &group(&loaded, "cpu-general").backend else {
        panic!("cpu-general should use the memory backend")
    };
    assert_eq!(own.provision_delay, std::time::Duration::from_secs(5));
    let BackendSpec::Memory(inherited) = &group(&loaded, "l4-4x").backend else {
        panic!("l4-4x should inherit the memory backend")
    };
    assert_eq!(
        inherited.provision_delay,
        std::time::Duration::from_secs(20)
    );
    assert!(inherited.failure.is_none());
}

#[test]
fn shipped_h100_template_has_gpu_rdma_and_reserved_resources() {
    let loaded = load_shipped();
    let h100 = group(&loaded, "h100-8x");
    let t = TemplateNode::for_group(h100, &loaded.provider.gpu_label).expect("h100 has capacity");
    let cap = &t.status.capacity;
    let alloc = &t.status.allocatable;
    for (name, want_cap, want_alloc) in [
        ("pods", "110", "110"),
        ("nvidia.com/gpu", "8", "8"),
        ("rdma/rdma_shared_device_a", "8", "8"),
        ("gangscaler.io/rdma-gbps", "3200", "3200"),
        ("cpu", "192", "190"),
        ("memory", "2Ti", "2024Gi"),
        ("ephemeral-storage", "7600Gi", "7500Gi"),
    ] {
        assert_eq!(
            cap.get(name).map(String::as_str),
            Some(want_cap),
            "capacity {name}"
        );
        assert_eq!(
            alloc.get(name).map(String::as_str),
            Some(want_alloc),
            "allocatable {name}"
        );
    }
    let labels = &t.metadata.labels;
    assert_eq!(
        labels.get("nvidia.com/gpu.product").map(String::as_str),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(
        labels.get("nvidia.com/gpu.count").map(String::as_str),
        Some("8")
    );
    assert_eq!(
        labels.get("nvidia.com/gpu.memory").map(String::as_str),
        Some("81559")
    );
    assert_eq!(
        labels.get("gangscaler.io/node-group").map(String::as_str),
        Some("h100-8x")
    );
    assert_eq!(
        labels
            .get("topology.gangscaler.io/block")
            .map(String::as_str),
        Some("block-a")
    );
    assert_eq!(
        t.metadata
            .annotations
            .get("gangscaler.io/csi-attach-limits")
            .map(String::as_str),
        Some("ebs.csi.aws.com=24")
    );
    assert_eq!(
        t.metadata
            .annotations
            .get("gangscaler.io/rdma-bandwidth-gbps")
            .map(String::as_str),
        Some("3200")
    );
    assert_eq!(t.spec.taints.len(), 1);
    assert_eq!(t.spec.taints[0].effect, "NoSchedule");
}

#[test]
fn every_shipped_template_has_allocatable_equal_to_capacity_minus_reserved() {
    let loaded = load_shipped();
    for g in &loaded.groups {
        let t = TemplateNode::for_group(g, &loaded.provider.gpu_label)
            .unwrap_or_else(|| panic!("{} has a template", g.id));
        for (name, reserved) in [("cpu", g.reserved.cpu), ("memory", g.reserved.memory)] {
            let cap = quantity(&t.status.capacity[name]);
            let alloc = quantity(&t.status.allocatable[name]);
            assert_eq!(
                cap.checked_sub(reserved),
                Some(alloc),
                "{}: {name} allocatable = capacity - reserved",
                g.id
            );
        }
        assert!(t.status.capacity.contains_key("pods"), "{}: pods", g.id);
        let has_gpu = t.status.capacity.contains_key("nvidia.com/gpu");
        assert_eq!(has_gpu, g.gpu.is_some(), "{}: nvidia.com/gpu", g.id);
        let has_rdma = t.status.capacity.contains_key("gangscaler.io/rdma-gbps");
        assert_eq!(has_rdma, g.rdma.is_some(), "{}: rdma bandwidth", g.id);
    }
}

#[test]
fn a_minimal_valid_directory_loads_and_applies_server_defaults() {
    let dir = ConfigDir::new("server:\n  plaintext: true\n").group("gpu-a.yaml", GPU_A);
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.server.address,
        "127.0.0.1:8086".parse().unwrap()
    );
    assert_eq!(
        loaded.provider.server.metrics_address,
        "127.0.0.1:9464".parse().unwrap()
    );
    let g = group(&loaded, "gpu-a");
    assert_eq!(g.os, "linux");
    assert_eq!(g.arch, "amd64");
    assert!(g.gpu.is_none() && g.rdma.is_none() && g.taints.is_empty());
}

// ---------------------------------------------------------------------------------------------
// 2. One class of mistake at a time
// ---------------------------------------------------------------------------------------------

#[test]
fn a_top_level_typo_is_an_unknown_field_and_the_real_field_is_missing() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("maxSize: 4", "maxSze: 4"));
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(&errs, "gpu-a.yaml", "maxSze", Some("4"));
    assert!(e.message.contains("unknown field"), "{e}");
    assert!(e.message.contains("maxSize"), "lists the known keys: {e}");
    expect_error(&errs, "gpu-a.yaml", "maxSize", None);
}

#[test]
fn a_nested_typo_is_an_unknown_field_with_its_full_path() {
    let dir = ConfigDir::new(PROVIDER).group(
        "gpu-a.yaml",
        &gpu_a_with("  memory: 2048Gi", "  memroy: 2048Gi"),
    );
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(&errs, "gpu-a.yaml", "capacity.memroy", Some("\"2048Gi\""));
    assert!(e.message.contains("unknown field"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "capacity.memory", None);
    assert!(e.message.contains("required"), "{e}");
}

#[test]
fn a_typo_in_the_provider_file_is_an_unknown_field() {
    let dir = ConfigDir::new(
        "server:\n  adress: \"127.0.0.1:9000\"\n  plaintext: true\nnodeGroupDir: groups\n",
    )
    .group("gpu-a.yaml", GPU_A);
    let errs = dir.errors();
    assert_count(&errs, 2);
    expect_error(
        &errs,
        "provider.yaml",
        "server.adress",
        Some("\"127.0.0.1:9000\""),
    );
    expect_error(&errs, "provider.yaml", "nodeGroupDir", Some("\"groups\""));
}

#[test]
fn a_missing_required_field_is_reported_without_a_value() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("zone: us-east-1a\n", ""));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "zone", None);
    assert_eq!(e.message, "is required");
}

#[test]
fn an_empty_node_group_file_reports_its_required_fields() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", "# nothing yet\n");
    let errs = dir.errors();
    for field in ["id", "minSize", "maxSize", "instanceType", "region", "zone"] {
        expect_error(&errs, "gpu-a.yaml", field, None);
    }
}

#[test]
fn values_of_the_wrong_type_are_reported_with_the_value() {
    let yaml = gpu_a_with("maxSize: 4", "maxSize: four")
        .replace("region: us-east-1\n", "region: [us-east-1]\n")
        + "taints: NoSchedule\nlabels: [a, b]\n";
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 4);
    let e = expect_error(&errs, "gpu-a.yaml", "maxSize", Some("\"four\""));
    assert!(e.message.contains("integer"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "region", Some("[\"us-east-1\"]"));
    assert!(e.message.contains("string"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "taints", Some("\"NoSchedule\""));
    assert!(e.message.contains("list"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "labels", Some("[\"a\",\"b\"]"));
    assert!(e.message.contains("mapping"), "{e}");
}

#[test]
fn a_group_bigger_than_a_kubernetes_cluster_is_refused() {
    let dir =
        ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("maxSize: 4", "maxSize: 5001"));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "maxSize", Some("5001"));
    assert!(e.message.contains("0 to 5000"), "{e}");
    let ok =
        ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("maxSize: 4", "maxSize: 5000"));
    assert!(ok.load().is_ok());
}

#[test]
fn a_section_that_is_not_a_mapping_is_reported() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_plus("gpu: 8\n"));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "gpu", Some("8"));
    assert!(e.message.contains("mapping"), "{e}");
}

#[test]
fn min_size_above_max_size_is_reported_on_min_size() {
    let yaml = gpu_a_with("minSize: 0", "minSize: 5").replace("maxSize: 4", "maxSize: 2");
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "minSize", Some("5"));
    assert!(e.message.contains("maxSize (2)"), "{e}");
}

#[test]
fn bad_and_negative_quantities_are_reported() {
    let yaml = gpu_a_with("memory: 2048Gi", "memory: 16Gb").replace("cpu: \"192\"", "cpu: \"-4\"");
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(&errs, "gpu-a.yaml", "capacity.memory", Some("\"16Gb\""));
    assert!(e.message.contains("not a valid quantity"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "capacity.cpu", Some("\"-4\""));
    assert!(e.message.contains("negative"), "{e}");
}

#[test]
fn zero_and_negative_counts_are_reported() {
    let yaml = gpu_a_with("pods: 110", "pods: 0")
        + r#"gpu:
  count: 0
  product: NVIDIA-H100-80GB-HBM3
  memory: 81559Mi
rdma:
  resourceName: rdma/rdma_shared_device_a
  devices: 0
  bandwidthGbps: -100
csi:
  ebs.csi.aws.com: 0
"#;
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 5);
    expect_error(&errs, "gpu-a.yaml", "capacity.pods", Some("0"));
    let e = expect_error(&errs, "gpu-a.yaml", "gpu.count", Some("0"));
    assert!(e.message.contains("from 1 to"), "{e}");
    expect_error(&errs, "gpu-a.yaml", "rdma.devices", Some("0"));
    expect_error(&errs, "gpu-a.yaml", "rdma.bandwidthGbps", Some("-100"));
    let e = expect_error(&errs, "gpu-a.yaml", "csi.ebs.csi.aws.com", Some("0"));
    assert!(e.message.contains("at least 1"), "{e}");
}

#[test]
fn a_bad_taint_effect_and_a_missing_one_are_reported_per_index() {
    let yaml = gpu_a_plus(
        r#"taints:
  - key: nvidia.com/gpu
    value: present
    effect: NoSchedule
  - key: dedicated
    effect: NoScheduel
  - key: spot
"#,
    );
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "gpu-a.yaml",
        "taints[1].effect",
        Some("\"NoScheduel\""),
    );
    assert!(
        e.message
            .contains("NoSchedule, PreferNoSchedule or NoExecute"),
        "{e}"
    );
    expect_error(&errs, "gpu-a.yaml", "taints[2].effect", None);
}

#[test]
fn invalid_label_keys_and_values_are_reported() {
    let yaml = gpu_a_plus(
        r#"labels:
  "bad key!": x
  team: "-ml-"
  ok.example.com/fine: yes-really
"#,
    );
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(&errs, "gpu-a.yaml", "labels.bad key!", Some("\"bad key!\""));
    assert!(e.message.starts_with("label key"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "labels.team", Some("\"-ml-\""));
    assert!(e.message.starts_with("label value"), "{e}");
}

#[test]
fn labels_gangscaler_derives_itself_are_rejected_in_labels_and_topology() {
    let yaml = gpu_a_plus(
        r#"labels:
  kubernetes.io/os: windows
  gangscaler.io/pool: h100
topology:
  topology.kubernetes.io/zone: us-east-1b
  topology.gangscaler.io/rack: rack-a01
"#,
    );
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "gpu-a.yaml",
        "labels.kubernetes.io/os",
        Some("\"windows\""),
    );
    assert!(e.message.contains("set by gangscaler"), "{e}");
    expect_error(
        &errs,
        "gpu-a.yaml",
        "topology.topology.kubernetes.io/zone",
        Some("\"us-east-1b\""),
    );
}

#[test]
fn duplicate_ids_across_two_files_are_reported_on_the_second_file() {
    // Same stem, two extensions: both ids equal their stems, so the only error is the duplicate.
    let dir = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", GPU_A)
        .group("gpu-a.yml", GPU_A);
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yml", "id", Some("\"gpu-a\""));
    assert!(e.message.contains("duplicates"), "{e}");
    assert!(
        e.message.contains("gpu-a.yaml"),
        "names the first file: {e}"
    );
}

#[test]
fn an_id_that_differs_from_the_file_stem_is_reported() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("id: gpu-a", "id: gpu-b"));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "id", Some("\"gpu-b\""));
    assert!(e.message.contains("\"gpu-a\""), "names the stem: {e}");
}

#[test]
fn an_id_that_is_not_a_dns_label_is_reported() {
    let dir = ConfigDir::new(PROVIDER).group("GPU_A.yaml", &gpu_a_with("id: gpu-a", "id: GPU_A"));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "GPU_A.yaml", "id", Some("\"GPU_A\""));
    assert!(e.message.contains("DNS label"), "{e}");
}

#[test]
fn an_unknown_backend_type_is_reported() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_plus("backend:\n  type: aws\n"));
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "backend.type", Some("\"aws\""));
    assert!(
        e.message.contains("supported: memory, kwok, clusterapi"),
        "{e}"
    );
}

#[test]
fn an_unknown_failure_code_lists_the_valid_codes() {
    let dir = ConfigDir::new(PROVIDER).group(
        "gpu-a.yaml",
        &gpu_a_plus(
            "backend:\n  type: memory\n  failure:\n    afterInstances: 2\n    code: outOfStock\n",
        ),
    );
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.failure.code",
        Some("\"outOfStock\""),
    );
    assert!(
        e.message
            .contains("stockout, quotaExceeded, provisioningFailed"),
        "{e}"
    );
}

#[test]
fn bad_durations_are_reported_in_groups_and_provider_defaults() {
    let dir = ConfigDir::new(&format!(
        "{PROVIDER}defaults:\n  backend:\n    type: memory\n    createDelay: 5 parsecs\n"
    ))
    .group(
        "gpu-a.yaml",
        &gpu_a_plus("backend:\n  provisionDelay: soon\n  createDelay: 30\n"),
    );
    let errs = dir.errors();
    assert_count(&errs, 3);
    let e = expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.provisionDelay",
        Some("\"soon\""),
    );
    assert!(e.message.contains("duration"), "{e}");
    expect_error(&errs, "gpu-a.yaml", "backend.createDelay", Some("30"));
    expect_error(
        &errs,
        "provider.yaml",
        "defaults.backend.createDelay",
        Some("\"5 parsecs\""),
    );
}

#[test]
fn utilization_thresholds_outside_zero_to_one_are_reported() {
    let dir = ConfigDir::new(PROVIDER).group(
        "gpu-a.yaml",
        &gpu_a_plus(
            "autoscalingOptions:\n  scaleDownUtilizationThreshold: 1.5\n  scaleDownGpuUtilizationThreshold: -0.1\n  maxNodeProvisionTime: 15m\n",
        ),
    );
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "gpu-a.yaml",
        "autoscalingOptions.scaleDownUtilizationThreshold",
        Some("1.5"),
    );
    assert!(e.message.contains("from 0 to 1"), "{e}");
    expect_error(
        &errs,
        "gpu-a.yaml",
        "autoscalingOptions.scaleDownGpuUtilizationThreshold",
        Some("-0.1"),
    );
}

#[test]
fn reserved_exceeding_capacity_is_reported() {
    let yaml = gpu_a_plus("reserved:\n  cpu: \"2\"\n  memory: 4096Gi\n");
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = errs
        .iter()
        .find(|e| e.field == "reserved.memory")
        .unwrap_or_else(|| panic!("no reserved.memory error: {errs:#?}"));
    assert!(e.file.ends_with("gpu-a.yaml"));
    assert!(
        e.message.contains("exceeds capacity.memory (4Ti > 2Ti)"),
        "{e}"
    );
}

/// Regression: reserved-exceeds-capacity errors carry the value as written, like every other
/// field error (they once had none).
#[test]
fn reserved_exceeding_capacity_reports_the_written_value() {
    let yaml = gpu_a_plus("reserved:\n  memory: 4096Gi\n");
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    expect_error(&errs, "gpu-a.yaml", "reserved.memory", Some("\"4096Gi\""));
}

/// Regression: CPU counts in the reserved-exceeds-capacity message are plain numbers, not
/// byte suffixes (once "2Ki > 192").
#[test]
fn reserved_cpu_exceeding_capacity_is_written_as_a_cpu_count() {
    let yaml = gpu_a_plus("reserved:\n  cpu: \"2048\"\n");
    let errs = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml).errors();
    let e = errs
        .iter()
        .find(|e| e.field == "reserved.cpu")
        .unwrap_or_else(|| panic!("no reserved.cpu error: {errs:#?}"));
    assert!(e.message.contains("(2048 > 192)"), "{e}");
}

#[test]
fn reserved_without_capacity_is_reported() {
    let yaml = GPU_A[..GPU_A.find("capacity:").unwrap()].to_owned() + "reserved:\n  cpu: \"2\"\n";
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &yaml);
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "reserved", None);
    assert!(e.message.contains("requires capacity"), "{e}");
}

#[test]
fn a_server_without_plaintext_or_tls_is_reported_on_server_tls() {
    let dir = ConfigDir::new("server:\n  address: \"127.0.0.1:8086\"\n").group("gpu-a.yaml", GPU_A);
    let errs = dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "provider.yaml", "server.tls", None);
    assert!(e.message.contains("server.plaintext: true"), "{e}");
}

#[test]
fn plaintext_on_a_non_loopback_address_needs_force() {
    let provider = "server:\n  address: \"0.0.0.0:8086\"\n  plaintext: true\n";
    let errs = ConfigDir::new(provider).group("gpu-a.yaml", GPU_A).errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "server.address",
        Some("\"0.0.0.0:8086\""),
    );
    assert!(e.message.contains("allowNonLoopbackPlaintext"), "{e}");

    let forced = format!("{provider}  allowNonLoopbackPlaintext: true\n");
    let loaded = ConfigDir::new(&forced)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.server.transport,
        Transport::Plaintext { non_loopback: true }
    );
}

#[test]
fn an_address_that_is_not_ip_and_port_is_reported() {
    let dir = ConfigDir::new("server:\n  address: localhost:8086\n  plaintext: true\n")
        .group("gpu-a.yaml", GPU_A);
    let errs = dir.errors();
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "server.address",
        Some("\"localhost:8086\""),
    );
}

const TLS_PROVIDER: &str = r#"
server:
  address: "0.0.0.0:8086"
  tls:
    certFile: tls/tls.crt
    keyFile: tls/tls.key
    clientCaFile: tls/ca.crt
"#;

/// A directory with `TLS_PROVIDER` and those of `tls/tls.crt`, `tls/tls.key` (a matching
/// self-signed pair) and `tls/ca.crt` named in `files`.
fn tls_dir_with(provider: &str, files: &[&str]) -> ConfigDir {
    let dir = ConfigDir::new(provider).group("gpu-a.yaml", GPU_A);
    std::fs::create_dir(dir.path().join("tls")).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem();
    for f in files {
        let text = match *f {
            "tls.key" => key.serialize_pem(),
            _ => cert.clone(),
        };
        dir.write(&format!("tls/{f}"), &text);
    }
    dir
}

fn tls_dir(files: &[&str]) -> ConfigDir {
    tls_dir_with(TLS_PROVIDER, files)
}

#[test]
fn tls_files_resolve_against_the_config_directory() {
    let dir = tls_dir(&["tls.crt", "tls.key", "ca.crt"]);
    let loaded = dir.load().unwrap_or_else(|e| panic!("{e}"));
    let Transport::Tls(files) = &loaded.provider.server.transport else {
        panic!("expected TLS, got {:?}", loaded.provider.server.transport);
    };
    assert_eq!(files.cert_file, dir.path().join("tls/tls.crt"));
    assert_eq!(files.key_file, dir.path().join("tls/tls.key"));
    assert_eq!(files.client_ca_file, Some(dir.path().join("tls/ca.crt")));
}

#[test]
fn a_missing_tls_file_is_reported_on_its_field() {
    let dir = tls_dir(&["tls.key", "ca.crt"]);
    let errs = dir.errors();
    let e = expect_error(
        &errs,
        "provider.yaml",
        "server.tls.certFile",
        Some("\"tls/tls.crt\""),
    );
    assert!(e.message.contains("does not exist"), "{e}");
}

/// Regression: a `tls` section whose files are missing gets exactly the file error, not also a
/// misleading "server.tls is required".
#[test]
fn a_missing_tls_file_is_the_only_error() {
    let errs = tls_dir(&["tls.key", "ca.crt"]).errors();
    assert_count(&errs, 1);
}

#[test]
fn tls_and_plaintext_together_are_reported() {
    let provider = format!("{TLS_PROVIDER}  plaintext: true\n");
    let dir = tls_dir_with(&provider, &["tls.crt", "tls.key", "ca.crt"]);
    let errs = dir.errors();
    assert_count(&errs, 1);
    expect_error(&errs, "provider.yaml", "server.plaintext", Some("true"));
}

/// Regression: a provider file without a `server` section names what is required instead of
/// failing with an empty error list.
#[test]
fn a_provider_file_without_a_server_section_names_the_problem() {
    let dir = ConfigDir::new("nodeGroupsDir: nodegroups\n").group("gpu-a.yaml", GPU_A);
    let errs = dir.errors();
    assert!(
        errs.iter()
            .any(|e| e.file.ends_with("provider.yaml") && e.field.starts_with("server")),
        "expected an error on server in provider.yaml, got {errs:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. All errors at once
// ---------------------------------------------------------------------------------------------

/// Ten independent mistakes in one file (the typo also makes `maxSize` missing).
const MANY_MISTAKES: &str = r#"
id: gpu-a
minSize: 0
maxSze: 4                         # typo: unknown maxSze, missing maxSize
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
capacity:
  cpu: "192"
  memory: lots                    # bad quantity
  ephemeralStorage: 7600Gi
  pods: 110
gpu:
  count: 0                        # out of range
  product: NVIDIA-H100-80GB-HBM3
  memory: 81559Mi
rdma:
  resourceName: rdma/rdma_shared_device_a
  devices: 8
  bandwidthGbps: -1               # out of range
csi:
  ebs.csi.aws.com: 0              # at least 1
labels:
  kubernetes.io/os: windows       # derived label
taints:
  - key: nvidia.com/gpu
    effect: Sometimes             # bad effect
backend:
  type: memory
  provisionDelay: soon            # bad duration
autoscalingOptions:
  scaleDownUtilizationThreshold: 1.5   # out of range
"#;

/// Two more in a second file.
const TWO_MISTAKES: &str = r#"
id: gpu-c                         # not the file stem
minSize: 5                        # above maxSize
maxSize: 2
instanceType: g6.12xlarge
region: us-east-1
zone: us-east-1b
"#;

#[test]
fn every_mistake_in_every_file_is_reported_at_once() {
    let dir = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", MANY_MISTAKES)
        .group("gpu-b.yaml", TWO_MISTAKES)
        .group("ok.yaml", &GPU_A.replace("id: gpu-a", "id: ok"));
    let err = dir.load().expect_err("two bad files");
    let Error::Invalid(errs) = &err else {
        panic!("expected Error::Invalid, got {err:?}");
    };
    let expected_a = [
        ("maxSze", Some("4")),
        ("maxSize", None),
        ("capacity.memory", Some("\"lots\"")),
        ("gpu.count", Some("0")),
        ("rdma.bandwidthGbps", Some("-1")),
        ("csi.ebs.csi.aws.com", Some("0")),
        ("labels.kubernetes.io/os", Some("\"windows\"")),
        ("taints[0].effect", Some("\"Sometimes\"")),
        ("backend.provisionDelay", Some("\"soon\"")),
        (
            "autoscalingOptions.scaleDownUtilizationThreshold",
            Some("1.5"),
        ),
    ];
    let expected_b = [("id", Some("\"gpu-c\"")), ("minSize", Some("5"))];
    for (field, value) in expected_a {
        expect_error(errs, "gpu-a.yaml", field, value);
    }
    for (field, value) in expected_b {
        expect_error(errs, "gpu-b.yaml", field, value);
    }
    assert_count(errs, expected_a.len() + expected_b.len());
    assert!(
        !errs.iter().any(|e| e.file.ends_with("ok.yaml")),
        "the valid file has no errors: {errs:#?}"
    );

    let text = err.to_string();
    assert!(text.starts_with("12 invalid setting(s):"), "{text}");
    let a = dir.path().join("nodegroups/gpu-a.yaml");
    let b = dir.path().join("nodegroups/gpu-b.yaml");
    for (field, _) in expected_a {
        assert!(
            text.contains(&format!("{}: {field}: ", a.display())),
            "{field} in {text}"
        );
    }
    for (field, _) in expected_b {
        assert!(
            text.contains(&format!("{}: {field}: ", b.display())),
            "{field} in {text}"
        );
    }
    assert!(text.contains("(got \"lots\")"), "{text}");
}

/// Regression: an invalid server section does not hide node-group mistakes; one load lists
/// every invalid setting of every file.
#[test]
fn provider_and_node_group_mistakes_are_reported_together() {
    let dir = ConfigDir::new("server:\n  address: \"0.0.0.0:8086\"\n  plaintext: true\n")
        .group("gpu-a.yaml", &gpu_a_with("maxSize: 4", "maxSize: -1"));
    let errs = dir.errors();
    expect_error(
        &errs,
        "provider.yaml",
        "server.address",
        Some("\"0.0.0.0:8086\""),
    );
    expect_error(&errs, "gpu-a.yaml", "maxSize", Some("-1"));
}

// ---------------------------------------------------------------------------------------------
// 4. Environment overrides
// ---------------------------------------------------------------------------------------------

#[test]
fn environment_overrides_apply_to_the_provider_and_the_named_group_only() {
    let dir = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", GPU_A)
        .group("gpu-b.yaml", &GPU_A.replace("id: gpu-a", "id: gpu-b"));
    let loaded = dir
        .load_with_env(&[
            ("GANGSCALER__SERVER__ADDRESS", "127.0.0.1:9999"),
            ("GANGSCALER__SERVER__METRICS_ADDRESS", "127.0.0.1:9998"),
            ("GANGSCALER_NG_GPU_A__MAX_SIZE", "7"),
            ("GANGSCALER_NG_GPU_A__CAPACITY__PODS", "64"),
            ("UNRELATED__MAX_SIZE", "99"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.server.address,
        "127.0.0.1:9999".parse().unwrap()
    );
    assert_eq!(
        loaded.provider.server.metrics_address,
        "127.0.0.1:9998".parse().unwrap()
    );
    let a = group(&loaded, "gpu-a");
    assert_eq!(a.max_size, 7);
    assert_eq!(a.capacity.map(|c| c.pods), Some(64));
    let b = group(&loaded, "gpu-b");
    assert_eq!(b.max_size, 4);
    assert_eq!(b.capacity.map(|c| c.pods), Some(110));
}

#[test]
fn an_override_with_a_typo_is_an_unknown_field() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let errs = invalid(dir.load_with_env(&[("GANGSCALER_NG_GPU_A__MAXSIZE", "7")]));
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "maxsize", Some("7"));
    assert!(e.message.contains("unknown field"), "{e}");
}

#[test]
fn overridden_values_are_validated_like_written_ones() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let errs = invalid(dir.load_with_env(&[("GANGSCALER_NG_GPU_A__MIN_SIZE", "9")]));
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "minSize", Some("9"));
    assert!(e.message.contains("maxSize (4)"), "{e}");
    // A provider error alone (the groups are valid) is the only error.
    let errs = invalid(dir.load_with_env(&[("GANGSCALER__SERVER__ADDRESS", "0.0.0.0:8086")]));
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "server.address",
        Some("\"0.0.0.0:8086\""),
    );
}

#[test]
fn an_error_in_an_overridden_value_names_the_variable_its_value_and_what_it_replaced() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let errs = invalid(dir.load_with_env(&[("GANGSCALER_NG_GPU_A__MAX_SIZE", "abc")]));
    let e = expect_error(&errs, "gpu-a.yaml", "maxSize", Some("\"abc\""));
    let text = e.to_string();
    assert!(
        text.ends_with(
            "; set by environment variable GANGSCALER_NG_GPU_A__MAX_SIZE=\"abc\" in place of 4 from the file"
        ),
        "{text}"
    );
    let errs = invalid(dir.load_with_env(&[("GANGSCALER__SERVER__ADDRESS", "notanaddr")]));
    let e = expect_error(
        &errs,
        "provider.yaml",
        "server.address",
        Some("\"notanaddr\""),
    );
    let origin = e.env.as_ref().expect("names its variable");
    assert_eq!(origin.variable, "GANGSCALER__SERVER__ADDRESS");
    assert_eq!(origin.value, "notanaddr");
    assert_eq!(origin.replaced.as_deref(), Some("\"127.0.0.1:8086\""));
    // An error of a value the file wrote names no variable, even with overrides around.
    let dir =
        ConfigDir::new(PROVIDER).group("gpu-a.yaml", &GPU_A.replace("maxSize: 4", "maxSize: -1"));
    let errs = invalid(dir.load_with_env(&[
        ("GANGSCALER_NG_GPU_A__MIN_SIZE", "0"),
        ("GANGSCALER__SERVER__METRICS_ADDRESS", "127.0.0.1:9998"),
    ]));
    let e = expect_error(&errs, "gpu-a.yaml", "maxSize", Some("-1"));
    assert_eq!(e.env, None, "{e}");
    assert!(!e.to_string().contains("environment"), "{e}");
}

#[test]
fn a_setting_variable_that_addresses_no_file_is_an_error_naming_it() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let errs = invalid(dir.load_with_env(&[
        // A group that has no file (a typo, or a group since removed).
        ("GANGSCALER_NG_GPU_Z__MAX_SIZE", "7"),
        // One underscore short of GANGSCALER__SERVER__ADDRESS.
        ("GANGSCALER_SERVER__ADDRESS", "127.0.0.1:1"),
    ]));
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "nodegroups",
        "GANGSCALER_NG_GPU_Z__MAX_SIZE",
        Some("\"7\""),
    );
    assert!(
        e.message.contains("GPU_Z") && e.message.contains("GPU_A"),
        "{e}"
    );
    assert!(!e.message.contains("  "), "one line, single spaces: {e}");
    let e = expect_error(
        &errs,
        "provider.yaml",
        "GANGSCALER_SERVER__ADDRESS",
        Some("\"127.0.0.1:1\""),
    );
    assert!(e.message.contains("GANGSCALER__<KEY>"), "{e}");
    assert!(!e.message.contains("  "), "one line, single spaces: {e}");
}

#[test]
fn flag_variables_and_kubernetes_service_links_are_not_settings() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    // Without `__` a GANGSCALER_ variable is a flag's, or a service link Kubernetes injects
    // for a Service named gangscaler: none of the configuration's business.
    let loaded = dir
        .load_with_env(&[
            ("GANGSCALER_LOG", "debug"),
            ("GANGSCALER_LOG_FORMAT", "json"),
            ("GANGSCALER_CONFIG", "/etc/gangscaler"),
            ("GANGSCALER_SERVICE_HOST", "10.96.0.10"),
            ("GANGSCALER_PORT_8086_TCP", "tcp://10.96.0.10:8086"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(group(&loaded, "gpu-a").max_size, 4);
}

#[test]
fn a_group_whose_id_holds_a_double_dash_is_never_addressed_by_another_groups_variable() {
    // `gpu--a` upper-cases to GPU__A, which holds the separator: a variable starting
    // GANGSCALER_NG_GPU__A__ selects group GPU (none here), never gpu--a.
    let dir =
        ConfigDir::new(PROVIDER).group("gpu--a.yaml", &GPU_A.replace("id: gpu-a", "id: gpu--a"));
    let errs = invalid(dir.load_with_env(&[("GANGSCALER_NG_GPU__A__MAX_SIZE", "7")]));
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "nodegroups",
        "GANGSCALER_NG_GPU__A__MAX_SIZE",
        Some("\"7\""),
    );
}

#[test]
fn every_flag_variable_is_gangscaler_and_the_flag_name() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, found: &mut std::collections::BTreeSet<String>) {
        for arg in cmd.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            let env = env.to_string_lossy().into_owned();
            let long = arg
                .get_long()
                .unwrap_or_else(|| panic!("{env} belongs to no long flag"));
            assert_eq!(
                env,
                format!("GANGSCALER_{}", long.to_uppercase().replace('-', "_")),
                "flag --{long} of {}",
                cmd.get_name()
            );
            assert!(
                !env.contains("__"),
                "{env}: `__` marks a configuration setting"
            );
            found.insert(env);
        }
        for sub in cmd.get_subcommands() {
            walk(sub, found);
        }
    }
    let mut found = std::collections::BTreeSet::new();
    walk(&gangscaler::cli::Cli::command(), &mut found);
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        [
            "GANGSCALER_CONFIG",
            "GANGSCALER_LOG",
            "GANGSCALER_LOG_FORMAT"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Unreadable and malformed files
// ---------------------------------------------------------------------------------------------

#[test]
fn malformed_yaml_is_a_parse_error_naming_the_file() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", "id: gpu-a\ncapacity: [unclosed\n");
    match dir.load() {
        Err(Error::Parse { path, message }) => {
            assert_eq!(path, dir.path().join("nodegroups/gpu-a.yaml"));
            assert!(!message.is_empty());
        }
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
    let err = dir.load().expect_err("malformed");
    assert!(err.to_string().contains("gpu-a.yaml"), "{err}");
}

#[test]
fn a_malformed_provider_file_is_a_parse_error_naming_it() {
    let dir = ConfigDir::new("server: {address: \"127.0.0.1:8086\"\n");
    match dir.load() {
        Err(Error::Parse { path, .. }) => assert_eq!(path, dir.path().join("provider.yaml")),
        other => panic!("expected Error::Parse, got {other:#?}"),
    }
}

#[test]
fn a_missing_provider_file_is_a_read_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    match Source::with_env(tmp.path(), HashMap::new()).load() {
        Err(Error::Read { path, source }) => {
            assert_eq!(path, tmp.path().join("provider.yaml"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Error::Read, got {other:#?}"),
    }
    let err = Source::with_env(tmp.path(), HashMap::new())
        .load()
        .expect_err("no provider file");
    assert!(err.to_string().contains("provider.yaml"), "{err}");
}

#[test]
fn a_missing_node_groups_directory_is_an_error_of_the_setting_naming_it() {
    let dir = ConfigDir::new(&format!("{PROVIDER}nodeGroupsDir: groups\n"));
    match dir.load() {
        Err(Error::Invalid(list)) => {
            assert_eq!(list.len(), 1, "{list:#?}");
            assert_eq!(list[0].file, dir.path().join("provider.yaml"));
            assert_eq!(list[0].field, "nodeGroupsDir");
            let groups = dir.path().join("groups");
            assert_eq!(
                list[0].value,
                Some(format!("{:?}", groups.display().to_string()))
            );
        }
        other => panic!("expected Error::Invalid, got {other:#?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 6. `gangscaler validate`
// ---------------------------------------------------------------------------------------------

#[test]
fn validate_accepts_the_shipped_examples_and_lists_the_groups() {
    let shipped = shipped_dir();
    let out = gangscaler(&["validate", "--config", shipped.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("valid, 3 node group(s): cpu-general, h100-8x, l4-4x"),
        "{text}"
    );
}

#[test]
fn validate_takes_config_like_the_other_commands_and_the_positional_form_is_deprecated() {
    let shipped = shipped_dir();
    let out = gangscaler(&["validate", "--config", shipped.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).contains("valid, 3 node group(s)"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));

    let out = gangscaler(&["validate", shipped.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).contains("valid, 3 node group(s)"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("deprecated") && stderr(&out).contains("--config"),
        "{}",
        stderr(&out)
    );

    // The positional form wins, so an environment that sets GANGSCALER_CONFIG keeps working.
    let out = gangscaler(&[
        "validate",
        "--config",
        "/nonexistent",
        shipped.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).contains("valid, 3 node group(s)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validate_rejects_a_bad_directory_naming_file_field_and_value() {
    let dir =
        ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_with("memory: 2048Gi", "memory: lots"));
    let out = gangscaler(&["validate", "--config", dir.path_str()]);
    assert!(!out.status.success(), "stdout: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("gpu-a.yaml"), "{err}");
    assert!(err.contains("capacity.memory"), "{err}");
    assert!(err.contains("lots"), "{err}");
    assert!(
        stdout(&out).is_empty(),
        "nothing on stdout: {}",
        stdout(&out)
    );
}

// ---------------------------------------------------------------------------------------------
// 7. Fingerprint
// ---------------------------------------------------------------------------------------------

#[test]
fn the_fingerprint_changes_exactly_when_a_config_file_changes() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let source = Source::with_env(dir.path(), HashMap::new());
    let groups = dir.path().join("nodegroups");
    let fp = || source.fingerprint(&groups).unwrap();

    let original = fp();
    assert_eq!(fp(), original, "nothing changed");

    dir.write(
        "nodegroups/gpu-a.yaml",
        &gpu_a_with("maxSize: 4", "maxSize: 5"),
    );
    let edited = fp();
    assert_ne!(edited, original, "a group file's content changed");

    dir.write("nodegroups/gpu-a.yaml", GPU_A);
    assert_eq!(fp(), original, "content restored");

    dir.write("nodegroups/NOTES.txt", "not a config file");
    assert_eq!(fp(), original, "non-YAML files are not configuration");

    dir.write(
        "nodegroups/gpu-b.yaml",
        &GPU_A.replace("id: gpu-a", "id: gpu-b"),
    );
    assert_ne!(fp(), original, "a group file was added");
    std::fs::remove_file(groups.join("gpu-b.yaml")).unwrap();
    assert_eq!(fp(), original, "and removed again");

    dir.write("provider.yaml", &format!("{PROVIDER}# comment\n"));
    assert_ne!(fp(), original, "the provider file changed");
}

// ---------------------------------------------------------------------------------------------
// 8. `gangscaler template`
// ---------------------------------------------------------------------------------------------

#[test]
fn template_prints_the_h100_node_as_json() {
    let shipped = shipped_dir();
    let out = gangscaler(&[
        "template",
        "h100-8x",
        "--config",
        shipped.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let node: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(&out)));
    assert_eq!(node["kind"], "Node");
    assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "8");
    assert_eq!(node["status"]["allocatable"]["memory"], "2024Gi");
    assert_eq!(
        node["metadata"]["labels"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    assert_eq!(node["spec"]["taints"][0]["effect"], "NoSchedule");
}

#[test]
fn template_of_an_unknown_group_names_the_known_groups() {
    let shipped = shipped_dir();
    let out = gangscaler(&["template", "a100-8x", "--config", shipped.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("a100-8x"), "{err}");
    assert!(err.contains("cpu-general, h100-8x, l4-4x"), "{err}");
}

#[test]
fn template_of_a_group_without_capacity_explains_why() {
    let no_capacity = GPU_A[..GPU_A.find("capacity:").unwrap()].to_owned();
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", &no_capacity);
    assert!(dir.load().is_ok(), "a group without capacity is valid");
    let out = gangscaler(&["template", "gpu-a", "--config", dir.path_str()]);
    assert!(!out.status.success(), "stdout: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("capacity"), "{err}");
    assert!(err.contains("gpu-a.yaml"), "names the file to edit: {err}");
}

// ---------------------------------------------------------------------------------------------
// 9a. The clusterapi backend

#[test]
fn a_clusterapi_group_names_its_machine_deployment_and_the_management_kubeconfig_is_read() {
    let provider = format!(
        "{PROVIDER}kubernetes: {{kubeconfig: kube/workload, managementKubeconfig: kube/management}}\n"
    );
    let dir = ConfigDir::new(&provider).group(
        "gpu-a.yaml",
        &gpu_a_plus("backend: {type: clusterapi, machineDeployment: {namespace: fleet, name: h100.pool-a}}\n"),
    );
    let loaded = dir.load().expect("valid clusterapi config");
    let BackendSpec::ClusterApi(capi) = &loaded.groups[0].backend else {
        panic!(
            "gpu-a should use the clusterapi backend: {:?}",
            loaded.groups[0].backend
        );
    };
    assert_eq!(
        (capi.namespace.as_str(), capi.name.as_str()),
        ("fleet", "h100.pool-a")
    );
    assert_eq!(loaded.groups[0].backend.kind(), "clusterapi");
    assert_eq!(
        loaded.provider.kubernetes.management_kubeconfig.as_deref(),
        Some(dir.path().join("kube/management").as_path())
    );
}

#[test]
fn a_clusterapi_group_without_its_machine_deployment_or_capacity_or_with_bad_names_is_reported() {
    let without_capacity = GPU_A
        .split("capacity:")
        .next()
        .expect("GPU_A has a capacity section")
        .to_owned();
    let errs = ConfigDir::new(PROVIDER)
        .group(
            "gpu-a.yaml",
            &format!("{without_capacity}backend: {{type: clusterapi}}\n"),
        )
        .errors();
    assert_count(&errs, 2);
    let e = expect_error(&errs, "gpu-a.yaml", "backend.machineDeployment", None);
    assert!(e.message.contains("{namespace, name}"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "capacity", None);
    assert!(e.message.contains("clusterapi backend"), "{e}");

    let errs = ConfigDir::new(PROVIDER)
        .group(
            "gpu-a.yaml",
            &gpu_a_plus("backend: {type: clusterapi, machineDeployment: {namespace: Fleet_A, name: \"-bad\", replicas: 3}}\n"),
        )
        .errors();
    assert_count(&errs, 3);
    expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.machineDeployment.namespace",
        Some("\"Fleet_A\""),
    );
    expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.machineDeployment.name",
        Some("\"-bad\""),
    );
    expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.machineDeployment.replicas",
        Some("3"),
    );

    let errs = ConfigDir::new(PROVIDER)
        .group(
            "gpu-a.yaml",
            &gpu_a_plus("backend: {type: clusterapi, machineDeployment: {name: pool}}\n"),
        )
        .errors();
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.machineDeployment.namespace",
        None,
    );
}

// 9. The kwok backend and the kubernetes section
// ---------------------------------------------------------------------------------------------

#[test]
fn a_kwok_group_reads_its_delays_failure_and_attach_simulation() {
    let yaml = gpu_a_plus(
        "backend:\n  type: kwok\n  provisionDelay: 3s\n  provisionStagger: 10s\n  failure: {afterInstances: 2, code: quotaExceeded}\n  attach: {delay: 500ms, failDriver: broken.csi.example.com}\n",
    );
    let provider = format!(
        "{PROVIDER}kubernetes:\n  kubeconfig: kube/config\n  stateNamespace: gangscaler\n  stateConfigMap: gs-state\n"
    );
    let dir = ConfigDir::new(&provider).group("gpu-a.yaml", &yaml);
    let loaded = dir.load().expect("valid kwok config");
    let k8s = &loaded.provider.kubernetes;
    assert_eq!(
        k8s.kubeconfig.as_deref(),
        Some(dir.path().join("kube/config").as_path())
    );
    assert_eq!(
        (k8s.state_namespace.as_str(), k8s.state_config_map.as_str()),
        ("gangscaler", "gs-state")
    );
    let BackendSpec::Kwok(kwok) = &loaded.groups[0].backend else {
        panic!(
            "gpu-a should use the kwok backend: {:?}",
            loaded.groups[0].backend
        )
    };
    assert_eq!(kwok.provision_delay, std::time::Duration::from_secs(3));
    assert_eq!(kwok.provision_stagger, std::time::Duration::from_secs(10));
    assert_eq!(
        (0..3)
            .map(|i| kwok.due_at(1_000, i, "gpu-a-x"))
            .collect::<Vec<_>>(),
        [4_000, 14_000, 24_000],
        "node i of a request is due delay + i x stagger after it (no jitter)"
    );
    let failure = kwok.failure.as_ref().expect("failure");
    assert_eq!(failure.after_instances, 2);
    assert_eq!(failure.code.as_str(), "quotaExceeded");
    assert!(
        failure.fails("any-name"),
        "without a probability every instance past afterInstances fails"
    );
    let attach = kwok.attach.as_ref().expect("attach");
    assert_eq!(attach.delay, std::time::Duration::from_millis(500));
    assert_eq!(
        attach.fail_driver.as_deref(),
        Some("broken.csi.example.com")
    );
}

/// A config whose group `gpu-a` has `backend` (one YAML line).
fn kwok_gpu_a(backend: &str) -> ConfigDir {
    ConfigDir::new(PROVIDER).group("gpu-a.yaml", &gpu_a_plus(backend))
}

#[test]
fn a_kwok_group_spreads_provisioning_over_its_jitter_and_stocks_out_a_share() {
    let loaded = kwok_gpu_a(
        "backend: {type: kwok, provisionDelay: 60s, provisionJitter: 120s, failure: {probability: 0.25}}\n",
    )
    .load()
    .unwrap_or_else(|e| panic!("{e}"));
    let BackendSpec::Kwok(kwok) = &loaded.groups[0].backend else {
        panic!("kwok backend expected")
    };
    let delays: Vec<u64> = (0..400)
        .map(|i| kwok.due_at(0, 0, &format!("gpu-a-{i:05}")))
        .collect();
    assert!(
        delays.iter().all(|d| (60_000..=180_000).contains(d)),
        "every node within delay + jitter"
    );
    let late = delays.iter().filter(|d| **d > 120_000).count();
    assert!(
        (140..260).contains(&late),
        "{late} of 400 in the later half"
    );
    assert_eq!(
        kwok.due_at(0, 0, "gpu-a-00007"),
        delays[7],
        "a node's due time is drawn from its name"
    );
    let failure = kwok.failure.as_ref().expect("failure");
    assert_eq!(failure.code.as_str(), "stockout");
    let failed = (0..400)
        .filter(|i| failure.fails(&format!("gpu-a-{i:05}")))
        .count();
    assert!(
        (60..140).contains(&failed),
        "{failed} of 400 failed at 0.25"
    );
}

#[test]
fn a_failure_probability_outside_zero_to_one_is_reported_with_its_value() {
    for (value, shown) in [("1.5", "1.5"), ("-0.1", "-0.1"), ("often", "\"often\"")] {
        let errs = kwok_gpu_a(&format!(
            "backend: {{type: kwok, failure: {{probability: {value}}}}}\n"
        ))
        .errors();
        assert_count(&errs, 1);
        expect_error(
            &errs,
            "gpu-a.yaml",
            "backend.failure.probability",
            Some(shown),
        );
    }
}

#[test]
fn a_device_delay_without_rdma_is_reported_and_with_rdma_is_read() {
    let errs = ConfigDir::new(PROVIDER)
        .group(
            "gpu-a.yaml",
            &gpu_a_plus("backend: {type: kwok, deviceDelay: 30s}\n"),
        )
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(&errs, "gpu-a.yaml", "backend.deviceDelay", None);
    assert!(e.message.contains("rdma"), "{e}");
    let loaded = ConfigDir::new(PROVIDER)
        .group(
            "gpu-a.yaml",
            &gpu_a_plus(
                "rdma: {resourceName: rdma/ib, devices: 8, bandwidthGbps: 3200}\nbackend: {type: kwok, deviceDelay: 30s}\n",
            ),
        )
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    let BackendSpec::Kwok(kwok) = &loaded.groups[0].backend else {
        panic!("kwok backend expected")
    };
    assert_eq!(kwok.device_delay, std::time::Duration::from_secs(30));
}

#[test]
fn a_kwok_group_without_capacity_and_a_bad_state_namespace_are_reported() {
    let no_capacity = GPU_A[..GPU_A.find("capacity:").expect("capacity in GPU_A")].to_owned()
        + "backend: {type: kwok, provisionStagger: never, attach: {dely: 1s}}\n";
    let provider = format!("{PROVIDER}kubernetes: {{stateNamespace: Not_A_Namespace}}\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", &no_capacity)
        .errors();
    let e = expect_error(&errs, "gpu-a.yaml", "capacity", None);
    assert!(e.message.contains("kwok"), "{e}");
    expect_error(&errs, "gpu-a.yaml", "backend.attach.dely", Some("\"1s\""));
    expect_error(
        &errs,
        "gpu-a.yaml",
        "backend.provisionStagger",
        Some("\"never\""),
    );
    expect_error(
        &errs,
        "provider.yaml",
        "kubernetes.stateNamespace",
        Some("\"Not_A_Namespace\""),
    );
    assert_count(&errs, 4);
}

// ---------------------------------------------------------------------------------------------
// 10. The lifecycle section
// ---------------------------------------------------------------------------------------------

/// `PROVIDER` plus a `lifecycle` section with the given body (lines indented by two spaces).
fn provider_with_lifecycle(body: &str) -> String {
    format!("{PROVIDER}lifecycle:\n{body}")
}

#[test]
fn an_absent_lifecycle_section_takes_the_documented_defaults() {
    let loaded = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    let lifecycle = loaded.provider.lifecycle;
    assert_eq!(lifecycle, LifecycleSettings::default());
    assert_eq!(lifecycle.interval, Duration::from_secs(5));
    assert_eq!(lifecycle.registration_timeout, Duration::from_secs(15 * 60));
    assert_eq!(lifecycle.formation_timeout, Duration::from_secs(30 * 60));
    assert_eq!(lifecycle.attach_timeout, Duration::from_secs(10 * 60));
    assert!(lifecycle.scale_down_protection);
    assert_eq!(lifecycle.no_verdict_after, Duration::from_secs(2 * 60));
    assert_eq!(
        lifecycle.no_verdict_after,
        gangscaler::scaleup::run::DEFAULT_NO_VERDICT_AFTER,
        "the loop's default is the configuration's"
    );
}

#[test]
fn the_shipped_provider_file_sets_the_default_lifecycle() {
    assert_eq!(
        load_shipped().provider.lifecycle,
        LifecycleSettings::default()
    );
}

#[test]
fn a_full_lifecycle_section_is_read() {
    let provider = provider_with_lifecycle(
        "  interval: 250ms\n  registrationTimeout: 20m\n  formationTimeout: 1h30m\n  attachTimeout: 45s\n  scaleDownProtection: false\n  noVerdictAfter: 5m\n",
    );
    let loaded = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.lifecycle,
        LifecycleSettings {
            interval: Duration::from_millis(250),
            registration_timeout: Duration::from_secs(20 * 60),
            formation_timeout: Duration::from_secs(90 * 60),
            attach_timeout: Duration::from_secs(45),
            scale_down_protection: false,
            no_verdict_after: Duration::from_secs(5 * 60),
        }
    );
}

#[test]
fn a_partial_lifecycle_section_keeps_the_other_defaults() {
    let provider = provider_with_lifecycle("  formationTimeout: 2h\n");
    let loaded = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.lifecycle,
        LifecycleSettings {
            formation_timeout: Duration::from_secs(2 * 60 * 60),
            ..LifecycleSettings::default()
        }
    );
}

#[test]
fn a_scale_down_protection_that_is_not_a_bool_is_reported() {
    let provider = provider_with_lifecycle("  scaleDownProtection: sometimes\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.scaleDownProtection",
        Some("\"sometimes\""),
    );
}

#[test]
fn a_zero_lifecycle_timeout_is_reported() {
    let provider = provider_with_lifecycle("  registrationTimeout: 0s\n  attachTimeout: 0\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.registrationTimeout",
        Some("\"0s\""),
    );
    assert!(e.message.contains("above 0"), "{e}");
    let e = expect_error(&errs, "provider.yaml", "lifecycle.attachTimeout", Some("0"));
    assert!(e.message.contains("above 0"), "{e}");
}

#[test]
fn a_lifecycle_timeout_above_a_day_is_reported() {
    let provider = provider_with_lifecycle("  formationTimeout: 25h\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.formationTimeout",
        Some("\"25h\""),
    );
    assert!(e.message.contains("at most 24h"), "{e}");
}

#[test]
fn a_no_verdict_threshold_of_zero_or_above_a_day_is_reported() {
    for (value, message) in [("0s", "above 0"), ("25h", "at most 24h")] {
        let provider = provider_with_lifecycle(&format!("  noVerdictAfter: {value}\n"));
        let dir = ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A);
        let errs = dir.errors();
        assert_count(&errs, 1);
        let e = expect_error(
            &errs,
            "provider.yaml",
            "lifecycle.noVerdictAfter",
            Some(&format!("{value:?}")),
        );
        assert!(e.message.contains(message), "{e}");
        let text = dir.load().expect_err("threshold out of bounds").to_string();
        let file = dir.path().join("provider.yaml");
        assert!(
            text.contains(&format!("{}: lifecycle.noVerdictAfter: ", file.display())),
            "{text}"
        );
        assert!(text.contains(&format!("(got {value:?})")), "{text}");
    }
}

#[test]
fn a_lifecycle_interval_outside_100ms_to_10m_is_reported() {
    for interval in ["50ms", "11m"] {
        let provider = provider_with_lifecycle(&format!("  interval: {interval}\n"));
        let errs = ConfigDir::new(&provider)
            .group("gpu-a.yaml", GPU_A)
            .errors();
        assert_count(&errs, 1);
        let e = expect_error(
            &errs,
            "provider.yaml",
            "lifecycle.interval",
            Some(&format!("{interval:?}")),
        );
        assert!(e.message.contains("from 100ms to 10m"), "{e}");
    }
}

#[test]
fn a_lifecycle_value_that_is_not_a_duration_is_reported() {
    let provider = provider_with_lifecycle("  formationTimeout: half an hour\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.formationTimeout",
        Some("\"half an hour\""),
    );
    assert!(e.message.contains("duration"), "{e}");
}

#[test]
fn an_unknown_lifecycle_key_is_reported_with_the_known_keys() {
    let provider = provider_with_lifecycle("  formationTimout: 30m\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.formationTimout",
        Some("\"30m\""),
    );
    assert!(e.message.contains("unknown field"), "{e}");
    assert!(
        e.message.contains("formationTimeout"),
        "lists the known keys: {e}"
    );
}

#[test]
fn lifecycle_errors_name_file_field_and_value_in_the_message() {
    let provider = provider_with_lifecycle("  interval: 10ms\n");
    let dir = ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A);
    let text = dir.load().expect_err("interval too short").to_string();
    let file = dir.path().join("provider.yaml");
    assert!(
        text.contains(&format!("{}: lifecycle.interval: ", file.display())),
        "{text}"
    );
    assert!(text.contains("(got \"10ms\")"), "{text}");
}

#[test]
fn lifecycle_environment_overrides_are_validated() {
    let dir = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    let loaded = dir
        .load_with_env(&[("GANGSCALER__LIFECYCLE__ATTACH_TIMEOUT", "2m")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.lifecycle.attach_timeout,
        Duration::from_secs(120)
    );
    let loaded = dir
        .load_with_env(&[("GANGSCALER__LIFECYCLE__NO_VERDICT_AFTER", "10m")])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.lifecycle.no_verdict_after,
        Duration::from_secs(600)
    );
    let errs = invalid(dir.load_with_env(&[("GANGSCALER__LIFECYCLE__NO_VERDICT_AFTER", "0s")]));
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.noVerdictAfter",
        Some("\"0s\""),
    );
    let errs = invalid(dir.load_with_env(&[("GANGSCALER__LIFECYCLE__INTERVAL", "1ms")]));
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "lifecycle.interval",
        Some("\"1ms\""),
    );
}

// ---------------------------------------------------------------------------------------------
// Leader election
// ---------------------------------------------------------------------------------------------

/// `PROVIDER` with leader election on and a per-replica audit log.
fn ha_provider(leader_election: &str) -> String {
    format!(
        "{PROVIDER}leaderElection: {leader_election}\naudit: {{path: \"audit/{{identity}}.jsonl\"}}\n"
    )
}

#[test]
fn leader_election_defaults_come_from_the_pod_environment_and_client_go() {
    let dir = ConfigDir::new(&ha_provider("{enabled: true}"))
        .group("gpu-a.yaml", &gpu_a_plus("backend: {type: kwok}\n"));
    let loaded = dir
        .load_with_env(&[
            ("POD_NAME", "gangscaler-0"),
            ("POD_NAMESPACE", "gangscaler-system"),
            ("HOSTNAME", "ignored-host"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    let le = loaded.provider.leader_election.expect("enabled");
    assert_eq!(le.identity, "gangscaler-0");
    assert_eq!(le.namespace, "gangscaler-system");
    assert_eq!(le.lease_name, "gangscaler");
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    let le = dir
        .load_with_env(&[("HOSTNAME", "host-7")])
        .unwrap_or_else(|e| panic!("{e}"))
        .provider
        .leader_election
        .expect("enabled");
    assert_eq!(
        (le.identity.as_str(), le.namespace.as_str()),
        ("host-7", "kube-system")
    );
    // Disabled (the default): no settings, and nothing is asked of the environment.
    let off = ConfigDir::new(PROVIDER).group("gpu-a.yaml", GPU_A);
    assert_eq!(off.load().unwrap().provider.leader_election, None);
}

#[test]
fn leader_election_errors_name_the_field_and_the_value() {
    let provider = format!(
        "{PROVIDER}leaderElection: {{enabled: true, leaseName: Bad_Name, namespace: Kube, \
         leaseDuration: 10s, renewDeadline: 10s}}\naudit: {{path: audit.jsonl}}\n"
    );
    // The group keeps the default memory backend, whose state each replica would hold alone.
    let dir = ConfigDir::new(&provider).group("gpu-a.yaml", GPU_A);
    let errs = invalid(dir.load_with_env(&[("POD_NAME", "a/b")]));
    assert_count(&errs, 6);
    expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.leaseName",
        Some("\"Bad_Name\""),
    );
    expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.namespace",
        Some("\"Kube\""),
    );
    let e = expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.identity",
        Some("\"a/b\""),
    );
    assert!(e.message.contains("taken from POD_NAME"), "{e}");
    let e = expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.renewDeadline",
        Some("\"10s\""),
    );
    assert!(e.message.contains("less than leaseDuration (10s)"), "{e}");
    let e = expect_error(
        &errs,
        "provider.yaml",
        "audit.path",
        Some("\"audit.jsonl\""),
    );
    assert!(e.message.contains("{identity}"), "{e}");
    let e = expect_error(&errs, "gpu-a.yaml", "backend.type", Some("\"memory\""));
    assert!(e.message.contains("leaderElection.enabled"), "{e}");
}

#[test]
fn leader_election_timings_are_checked_even_when_disabled() {
    let dir = ConfigDir::new(&format!(
        "{PROVIDER}leaderElection: {{leaseDuration: 2500ms, retryPeriod: 9s}}\n"
    ))
    .group("gpu-a.yaml", GPU_A);
    let errs = dir.errors();
    assert_count(&errs, 2);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.leaseDuration",
        Some("\"2500ms\""),
    );
    assert!(e.message.contains("whole number of seconds"), "{e}");
    let e = expect_error(
        &errs,
        "provider.yaml",
        "leaderElection.renewDeadline",
        Some("\"10s\""),
    );
    assert!(e.message.contains("1.2 × retryPeriod (9s)"), "{e}");
}

#[test]
fn the_identity_placeholder_needs_leader_election_and_belongs_in_the_file_name() {
    let without = ConfigDir::new(&format!(
        "{PROVIDER}audit: {{path: \"{{identity}}.jsonl\"}}\n"
    ))
    .group("gpu-a.yaml", GPU_A);
    let errs = without.errors();
    assert_count(&errs, 1);
    expect_error(
        &errs,
        "provider.yaml",
        "audit.path",
        Some("\"{identity}.jsonl\""),
    );
    let in_dir = ConfigDir::new(&format!(
        "{PROVIDER}leaderElection: {{enabled: true, identity: r1}}\naudit: {{path: \"{{identity}}/audit.jsonl\"}}\n"
    ))
    .group("gpu-a.yaml", &gpu_a_plus("backend: {type: kwok}\n"));
    let errs = in_dir.errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "audit.path",
        Some("\"{identity}/audit.jsonl\""),
    );
    assert!(e.message.contains("in the file name"), "{e}");
}

#[test]
fn reservation_is_inherited_per_field_and_needs_the_lifecycle_loop() {
    let with_loop = format!(
        "{PROVIDER}kubernetes: {{watch: true}}\naudit: {{path: audit.jsonl}}\n\
         defaults: {{reservation: {{enabled: true, bookingDeadline: 5m}}}}\n"
    );
    let kwok = gpu_a_plus("backend: {type: kwok}\n");
    let dir = ConfigDir::new(&with_loop)
        .group("gpu-a.yaml", &kwok)
        .group(
            "gpu-b.yaml",
            &format!(
                "{}reservation: {{bookingDeadline: 90s}}\n",
                kwok.replace("id: gpu-a", "id: gpu-b")
            ),
        )
        .group("cpu.yaml", &GPU_A.replace("id: gpu-a", "id: cpu"));
    let loaded = dir.load().expect("valid");
    let a = group(&loaded, "gpu-a").reservation;
    assert!(a.enabled);
    assert_eq!(a.booking_deadline, Duration::from_secs(300));
    let b = group(&loaded, "gpu-b").reservation;
    assert!(b.enabled, "enabled inherited, deadline overridden");
    assert_eq!(b.booking_deadline, Duration::from_secs(90));
    assert!(
        !group(&loaded, "cpu").reservation.enabled,
        "a memory group cannot reserve: off when inherited"
    );

    // Without the lifecycle loop nothing would ever release a reserved node.
    let errs = ConfigDir::new(&format!(
        "{PROVIDER}defaults: {{reservation: {{enabled: true}}}}\n"
    ))
    .group("gpu-a.yaml", &kwok)
    .errors();
    let e = expect_error(&errs, "gpu-a.yaml", "reservation.enabled", Some("true"));
    assert!(e.message.contains("audit.path and kubernetes.watch"), "{e}");
    assert_count(&errs, 1);

    // Written on a memory group: an error naming the backend.
    let errs = ConfigDir::new(&with_loop)
        .group("gpu-a.yaml", &gpu_a_plus("reservation: {enabled: true}\n"))
        .errors();
    let e = expect_error(&errs, "gpu-a.yaml", "reservation.enabled", Some("true"));
    assert!(e.message.contains("this group's is memory"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Admission order (admission.order)
// ---------------------------------------------------------------------------------------------

#[test]
fn admission_order_is_age_by_default_and_fewest_missing_when_set() {
    use gangscaler::planner::Order;
    let loaded = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.provider.admission_order, Order::Age);
    let provider = format!("{PROVIDER}admission: {{order: fewestMissing}}\n");
    let loaded = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.provider.admission_order, Order::FewestMissing);
}

#[test]
fn an_unknown_admission_order_or_policy_is_reported_with_its_value() {
    for (key, value, message) in [
        ("order", "smallestFirst", "must be age or fewestMissing"),
        ("policy", "lenient", "must be strict, roundUp or off"),
    ] {
        let provider = format!("{PROVIDER}admission: {{{key}: {value}}}\n");
        let errs = ConfigDir::new(&provider)
            .group("gpu-a.yaml", GPU_A)
            .errors();
        assert_count(&errs, 1);
        let e = expect_error(
            &errs,
            "provider.yaml",
            &format!("admission.{key}"),
            Some(&format!("\"{value}\"")),
        );
        assert_eq!(e.message, message, "{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Deferral (admission.deferral)
// ---------------------------------------------------------------------------------------------

/// `PROVIDER` with the lifecycle loop's needs (audit and watch) and `admission` as given.
fn provider_with_admission(admission: &str) -> String {
    format!(
        "{PROVIDER}kubernetes: {{watch: true}}\naudit: {{path: /tmp/audit.jsonl}}\nadmission: {admission}\n"
    )
}

#[test]
fn deferral_is_off_by_default_and_read_when_set() {
    let loaded = ConfigDir::new(PROVIDER)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.deferral,
        gangscaler::config::DeferralSettings::default()
    );
    assert!(!loaded.provider.deferral.enabled);
    let provider = provider_with_admission(
        "{policy: strict, deferral: {enabled: true, horizon: 5m, caNewPodScaleUpDelay: 30s}}",
    );
    let loaded = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .load()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded.provider.deferral,
        gangscaler::config::DeferralSettings {
            enabled: true,
            horizon: Duration::from_secs(300),
            ca_new_pod_scale_up_delay: Duration::from_secs(30),
        }
    );
}

#[test]
fn deferral_under_another_policy_or_without_the_lifecycle_loop_is_reported() {
    let provider = provider_with_admission("{policy: roundUp, deferral: {enabled: true}}");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "admission.deferral.enabled",
        Some("true"),
    );
    assert!(e.message.contains("admission.policy strict"), "{e}");
    let provider = format!("{PROVIDER}admission: {{deferral: {{enabled: true}}}}\n");
    let errs = ConfigDir::new(&provider)
        .group("gpu-a.yaml", GPU_A)
        .errors();
    assert_count(&errs, 1);
    let e = expect_error(
        &errs,
        "provider.yaml",
        "admission.deferral.enabled",
        Some("true"),
    );
    assert!(e.message.contains("audit.path and kubernetes.watch"), "{e}");
}

#[test]
fn a_deferral_horizon_outside_30s_to_1h_is_reported() {
    for value in ["10s", "2h"] {
        let provider = provider_with_admission(&format!(
            "{{deferral: {{enabled: true, horizon: {value}}}}}"
        ));
        let errs = ConfigDir::new(&provider)
            .group("gpu-a.yaml", GPU_A)
            .errors();
        assert_count(&errs, 1);
        let e = expect_error(
            &errs,
            "provider.yaml",
            "admission.deferral.horizon",
            Some(&format!("{value:?}")),
        );
        assert!(e.message.contains("from 30s to 1h"), "{e}");
    }
}
