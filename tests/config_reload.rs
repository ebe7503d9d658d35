//! Configuration reload on Refresh against hostile or careless edits (issue 10): a group file
//! replaced by something that is not a readable regular file, an alias bomb or an oversized
//! file keeps the last good configuration and is reported, and a Kubernetes-ConfigMap-style
//! symlink swap is picked up; a node-group directory that vanishes or becomes a file is
//! reported naming `nodeGroupsDir`; and an edit that lowers `maxSize` below a group's target is
//! taken without shrinking the group, and made visible.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

mod common;

use std::os::unix::fs::symlink;
use std::sync::{Arc, Mutex};

use common::{
    Client, TestServer, delete, expect_code, ids, increase, metrics, node, node_groups, nodes,
    sample, target,
};
use gangscaler::proto;
use tonic::Code;

const PROVIDER: &str =
    "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n";

/// A group at target 0: before the fix, losing its file removed it silently.
fn idle(max: u32) -> String {
    format!(
        "id: idle\nminSize: 0\nmaxSize: {max}\ninstanceType: m7i.large\nregion: us-east-1\nzone: us-east-1a\n"
    )
}

/// The log lines written while the guard of [`Logs::capture`] lives, on this thread: a
/// `#[tokio::test]` runs the server's tasks on the test's one thread, so its events land here.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Every line written so far, then forgets them.
    fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

async fn refresh(c: &mut Client) {
    c.refresh(proto::RefreshRequest {})
        .await
        .expect("Refresh never fails");
}

fn reloads(m: &str, outcome: &str) -> f64 {
    sample(
        m,
        &format!("gangscaler_config_reloads_total{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn a_group_file_replaced_by_an_unusable_entry_keeps_the_group_and_is_reported() {
    let server = TestServer::start(&[
        ("provider.yaml", PROVIDER),
        ("nodegroups/idle.yaml", &idle(2)),
    ])
    .await;
    let mut c = server.client().await;
    let groups = server.dir.path().join("nodegroups");
    let file = groups.join("idle.yaml");
    assert_eq!(node_groups(&mut c).await.get("idle"), Some(&(0, 2)));

    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    // 9^6 scalars expanded: refused by the budget, harmless if the budget ever regressed.
    for i in 1u8..6 {
        let (prev, name) = (char::from(b'a' + i - 1), char::from(b'a' + i));
        let items = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    type Replace = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(&str, Replace)> = vec![
        ("a directory", Box::new(|f| std::fs::create_dir(f).unwrap())),
        (
            "a dangling symlink",
            Box::new(|f| symlink("gone.yaml", f).unwrap()),
        ),
        (
            "a symlink loop",
            Box::new(|f| symlink("idle.yaml", f).unwrap()),
        ),
        (
            "an alias bomb",
            Box::new(move |f| std::fs::write(f, &bomb).unwrap()),
        ),
        (
            "a file over 1 MiB",
            Box::new(|f| {
                std::fs::write(f, format!("{}\n{}", idle(2), "#".repeat(1 << 20))).unwrap()
            }),
        ),
    ];
    let mut failures = 0.0;
    for (what, replace) in cases {
        std::fs::remove_file(&file).unwrap();
        replace(&file);
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await.get("idle"),
            Some(&(0, 2)),
            "{what}: the group must stay"
        );
        let m = metrics(server.http).await;
        failures += 1.0;
        assert_eq!(
            reloads(&m, "failure"),
            failures,
            "{what}: reported once: {m}"
        );
        assert_eq!(
            sample(&m, "gangscaler_config_valid"),
            Some(0.0),
            "{what}: {m}"
        );
        refresh(&mut c).await;
        assert_eq!(
            reloads(&metrics(server.http).await, "failure"),
            failures,
            "{what}: not re-counted on every loop"
        );
        // Restore a valid file (a directory needs removing as such).
        if file.is_dir() {
            std::fs::remove_dir(&file).unwrap();
        } else {
            std::fs::remove_file(&file).unwrap();
        }
        std::fs::write(&file, idle(3)).unwrap();
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await.get("idle"),
            Some(&(0, 3)),
            "{what}"
        );
        std::fs::write(&file, idle(2)).unwrap();
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await.get("idle"),
            Some(&(0, 2)),
            "{what}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_configmap_style_symlink_swap_is_picked_up_and_hidden_directories_are_not_read() {
    // What the kubelet writes for a ConfigMap volume: a timestamped directory, a `..data`
    // symlink to it, and one symlink per key through `..data`.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let v1 = root.join("..2026_05_01_10_00_00.000000001");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(
        v1.join("provider.yaml"),
        format!("{PROVIDER}nodeGroupsDir: .\n"),
    )
    .unwrap();
    std::fs::write(v1.join("idle.yaml"), idle(2)).unwrap();
    symlink(v1.file_name().unwrap(), root.join("..data")).unwrap();
    symlink("..data/provider.yaml", root.join("provider.yaml")).unwrap();
    symlink("..data/idle.yaml", root.join("idle.yaml")).unwrap();
    let server = TestServer::start_in(tmp).await;
    let mut c = server.client().await;
    let root = server.dir.path();
    let groups = node_groups(&mut c).await;
    assert_eq!(groups.len(), 1, "provider.yaml is not a group: {groups:?}");
    assert_eq!(groups.get("idle"), Some(&(0, 2)));

    // The kubelet's atomic update: a new directory, then `..data` swapped to it.
    let v2 = root.join("..2026_05_01_10_05_00.000000002");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(
        v2.join("provider.yaml"),
        format!("{PROVIDER}nodeGroupsDir: .\n"),
    )
    .unwrap();
    std::fs::write(v2.join("idle.yaml"), idle(5)).unwrap();
    symlink(v2.file_name().unwrap(), root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    refresh(&mut c).await;
    let groups = node_groups(&mut c).await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups.get("idle"), Some(&(0, 5)));
    let m = metrics(server.http).await;
    assert_eq!(reloads(&m, "failure"), 0.0, "{m}");
    server.stop().await;
}

#[tokio::test]
async fn a_node_groups_dir_that_vanishes_or_becomes_a_file_is_reported_naming_the_setting() {
    let (logs, _guard) = Logs::capture();
    let server = TestServer::start(&[
        ("provider.yaml", PROVIDER),
        ("nodegroups/idle.yaml", &idle(2)),
    ])
    .await;
    let mut c = server.client().await;
    let dir = server.dir.path();
    let groups = dir.join("nodegroups");
    let provider = dir.join("provider.yaml");
    let mut failures = 0.0;
    type Replace = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(&str, &str, Replace)> = vec![
        ("vanished", "nothing exists", Box::new(|_| {})),
        (
            "a regular file",
            "regular file",
            Box::new(|g| std::fs::write(g, idle(2)).unwrap()),
        ),
    ];
    for (what, expected, replace) in cases {
        std::fs::rename(&groups, dir.join("moved")).unwrap();
        replace(&groups);
        logs.take();
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await.get("idle"),
            Some(&(0, 2)),
            "{what}: the last good configuration stays"
        );
        let m = metrics(server.http).await;
        failures += 1.0;
        assert_eq!(reloads(&m, "failure"), failures, "{what}: {m}");
        assert_eq!(sample(&m, "gangscaler_config_valid"), Some(0.0), "{what}");
        let lines = logs.take();
        let line = lines
            .iter()
            .find(|l| l.contains("ERROR"))
            .unwrap_or_else(|| panic!("{what}: no error logged: {lines:#?}"));
        let error = lines.join("\n");
        for part in [
            provider.to_str().unwrap(),
            "nodeGroupsDir",
            groups.to_str().unwrap(),
            expected,
        ] {
            assert!(
                error.contains(part),
                "{what}: {part} missing from {line}: {error}"
            );
        }
        // Logged once, not on every loop.
        refresh(&mut c).await;
        assert!(
            !logs.take().iter().any(|l| l.contains("ERROR")),
            "{what}: logged again"
        );
        if groups.is_file() {
            std::fs::remove_file(&groups).unwrap();
        }
        std::fs::rename(dir.join("moved"), &groups).unwrap();
        std::fs::write(groups.join("idle.yaml"), idle(3)).unwrap();
        refresh(&mut c).await;
        assert_eq!(
            node_groups(&mut c).await.get("idle"),
            Some(&(0, 3)),
            "{what}"
        );
        std::fs::write(groups.join("idle.yaml"), idle(2)).unwrap();
        refresh(&mut c).await;
    }
    server.stop().await;
}

/// A rejected edit is logged with its whole cause, as `validate` prints it: before, the log
/// kept only the outer message (`reading …/idle.yaml`), not why.
#[tokio::test]
async fn a_rejected_edit_is_logged_with_its_whole_cause() {
    let (logs, _guard) = Logs::capture();
    let server = TestServer::start(&[
        ("provider.yaml", PROVIDER),
        ("nodegroups/idle.yaml", &idle(2)),
    ])
    .await;
    let mut c = server.client().await;
    let mut bytes = idle(3).into_bytes();
    let offset = bytes.len();
    bytes.extend_from_slice(b"# \xff\xfe\n");
    std::fs::write(server.dir.path().join("nodegroups/idle.yaml"), &bytes).unwrap();
    refresh(&mut c).await;
    assert_eq!(
        node_groups(&mut c).await.get("idle"),
        Some(&(0, 2)),
        "the last good configuration is kept"
    );
    let lines = logs.take();
    let rejected: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("configuration edit rejected"))
        .collect();
    assert_eq!(rejected.len(), 1, "{lines:#?}");
    assert!(
        rejected[0].contains("idle.yaml: not UTF-8 text (invalid byte at offset ")
            && rejected[0].contains(&format!("offset {}", offset + 2)),
        "the cause is logged: {}",
        rejected[0]
    );
    server.stop().await;
}

fn above_max(m: &str, group: &str) -> Option<f64> {
    sample(
        m,
        &format!("gangscaler_node_group_target_above_max{{node_group=\"{group}\"}}"),
    )
}

/// Cluster Autoscaler never shrinks a group for being above its maxSize (it only skips it for
/// scale-up, `core/scaleup/orchestrator/orchestrator.go:343` in 1.36.1), so neither does a
/// reload: the edit is taken, the nodes stay, the condition is logged and exposed, and an
/// increase is refused until nodes are deleted.
#[tokio::test]
async fn lowering_max_size_below_the_target_keeps_the_target_and_refuses_increases() {
    let (logs, _guard) = Logs::capture();
    let other = idle(2).replace("id: idle", "id: other");
    let server = TestServer::start(&[
        ("provider.yaml", PROVIDER),
        ("nodegroups/idle.yaml", &idle(5)),
        ("nodegroups/other.yaml", &other),
    ])
    .await;
    let mut c = server.client().await;
    increase(&mut c, "idle", 4).await.expect("increase to 4");
    assert_eq!(target(&mut c, "idle").await, 4);
    let before = ids(&nodes(&mut c, "idle").await);
    assert_eq!(before.len(), 4, "{before:?}");
    let m = metrics(server.http).await;
    assert_eq!(above_max(&m, "idle"), Some(0.0), "{m}");
    assert_eq!(above_max(&m, "other"), Some(0.0), "{m}");

    logs.take();
    server.write("nodegroups/idle.yaml", &idle(2));
    refresh(&mut c).await;
    // The reload was taken ...
    assert_eq!(node_groups(&mut c).await.get("idle"), Some(&(0, 2)));
    let m = metrics(server.http).await;
    assert_eq!(reloads(&m, "success"), 1.0, "{m}");
    assert_eq!(reloads(&m, "failure"), 0.0, "{m}");
    assert_eq!(sample(&m, "gangscaler_config_valid"), Some(1.0), "{m}");
    // ... the target and every node were kept ...
    assert_eq!(target(&mut c, "idle").await, 4);
    assert_eq!(ids(&nodes(&mut c, "idle").await), before);
    // ... and the condition is visible: the gauge, and one warning naming the numbers.
    let m = metrics(server.http).await;
    assert_eq!(above_max(&m, "idle"), Some(1.0), "{m}");
    assert_eq!(above_max(&m, "other"), Some(0.0), "{m}");
    let lines = logs.take();
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("above its maxSize"))
        .collect();
    assert_eq!(warnings.len(), 1, "{lines:#?}");
    for part in ["node_group.id=idle", "max_size=2", "target_size=4"] {
        assert!(warnings[0].contains(part), "{part}: {}", warnings[0]);
    }
    // CA's TargetSize calls on every loop do not repeat it.
    target(&mut c, "idle").await;
    assert!(
        !logs.take().iter().any(|l| l.contains("WARN")),
        "warned again"
    );

    // An increase is refused, naming the group, the target and the max, and changes nothing.
    let status = expect_code(
        increase(&mut c, "idle", 1).await,
        Code::FailedPrecondition,
        "increase above a lowered maxSize",
    );
    for part in [
        "idle",
        "target size 4",
        "max size 2",
        "already above max size",
    ] {
        assert!(
            status.message().contains(part),
            "{part}: {}",
            status.message()
        );
    }
    assert_eq!(target(&mut c, "idle").await, 4);

    // CA deletes nodes as they become unneeded: back at maxSize, the gauge drops to 0.
    let doomed: Vec<proto::ExternalGrpcNode> = before[..2].iter().map(|id| node(id, "")).collect();
    delete(&mut c, "idle", doomed)
        .await
        .expect("delete two nodes");
    assert_eq!(target(&mut c, "idle").await, 2);
    let m = metrics(server.http).await;
    assert_eq!(above_max(&m, "idle"), Some(0.0), "{m}");
    assert!(
        logs.take()
            .iter()
            .any(|l| l.contains("within its maxSize again") && l.contains("target_size=2")),
        "back within is logged"
    );
    // Still at maxSize: an increase stays refused, now without the note.
    let status = expect_code(
        increase(&mut c, "idle", 1).await,
        Code::FailedPrecondition,
        "increase at maxSize",
    );
    assert!(
        !status.message().contains("already above"),
        "{}",
        status.message()
    );

    // A group removed from the configuration loses its series.
    server.remove("nodegroups/other.yaml");
    refresh(&mut c).await;
    let m = metrics(server.http).await;
    assert_eq!(above_max(&m, "other"), None, "{m}");
    assert_eq!(above_max(&m, "idle"), Some(0.0), "{m}");
    server.stop().await;
}
