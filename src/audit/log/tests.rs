use super::*;
use crate::audit::record::{Phase, PhaseEvent};

fn record(n: u64) -> Record {
    Record::new(
        1_000 + i64::try_from(n).unwrap(),
        PhaseEvent {
            scale_up_id: format!("su-{n}"),
            node_group: "g".into(),
            gang: None,
            phase: Phase::NodesReady,
            at_ms: 1_000,
            elapsed_ms: n,
            detail: None,
        },
    )
}

#[test]
fn a_torn_tail_is_cut_back_to_the_last_newline_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, Config::new()).unwrap();
    log.append(&record(1)).unwrap();
    let good = fs::read(&path).unwrap();
    drop(log);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    let torn = b"{\"schema\":1,\"tsMs\":12";
    f.write_all(torn).unwrap();
    drop(f);

    let log = AuditLog::open(&path, Config::new()).unwrap();
    assert_eq!(log.repaired_bytes(), torn.len() as u64);
    assert_eq!(fs::read(&path).unwrap(), good);
    log.append(&record(2)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    for line in text.lines() {
        Record::parse_line(line).unwrap();
    }
}

#[test]
fn a_failed_append_marks_the_log_unwritable_until_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    // Rotation at every record, keeping one file: a non-empty directory where the rotated
    // file must go makes rotation (and so the append) fail, even for root.
    let config = Config::new().with_max_bytes(1).with_keep_files(1);
    let log = AuditLog::open(&path, config).unwrap();
    log.append(&record(1)).unwrap();
    assert_eq!(log.unwritable(), None);
    let blocker = rotated_path(&path, 1);
    fs::create_dir(&blocker).unwrap();
    fs::write(blocker.join("x"), b"x").unwrap();
    let before = fs::read(&path).unwrap();

    let err = log.append(&record(2)).unwrap_err();
    assert!(matches!(err, Error::Rotate { .. }), "{err:?}");
    let why = log.unwritable().expect("marked unwritable");
    assert!(why.contains("rotating audit log"), "{why}");
    assert!(why.contains(&path.display().to_string()), "{why}");
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "nothing of the refused record"
    );
    log.append(&record(3)).unwrap_err();
    assert!(log.unwritable().is_some());

    fs::remove_dir_all(&blocker).unwrap();
    log.append(&record(4)).unwrap();
    assert_eq!(
        log.unwritable(),
        None,
        "cleared by the next successful append"
    );
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("su-4"), "{text}");
    assert!(fs::read_to_string(&blocker).unwrap().contains("su-1"));
}

#[test]
fn a_file_that_is_one_torn_line_becomes_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    fs::write(&path, b"{\"schema\":1").unwrap();
    let log = AuditLog::open(&path, Config::new()).unwrap();
    assert_eq!(log.repaired_bytes(), 11);
    assert!(log.is_empty());
}

#[test]
fn a_long_tail_without_newline_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-log.bin");
    let junk = vec![b'x'; usize::try_from(MAX_TORN_TAIL).unwrap() + 10];
    fs::write(&path, &junk).unwrap();
    let err = AuditLog::open(&path, Config::new()).unwrap_err();
    assert!(matches!(err, Error::Repair { .. }), "{err}");
    assert!(err.to_string().contains("not-a-log.bin"), "{err}");
    assert_eq!(fs::metadata(&path).unwrap().len(), junk.len() as u64);
}

#[test]
fn opening_in_a_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("audit.jsonl");
    let err = AuditLog::open(&path, Config::new()).unwrap_err();
    assert_eq!(err.kind(), "open");
    assert!(err.to_string().contains("nope/audit.jsonl"), "{err}");
}

#[test]
fn rotation_with_no_kept_files_starts_the_live_file_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, Config::new().with_max_bytes(1).with_keep_files(0)).unwrap();
    log.append(&record(1)).unwrap();
    log.append(&record(2)).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("su-2"));
    assert!(!rotated_path(&path, 1).exists());
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[cfg(unix)]
#[test]
fn the_live_file_and_every_rotated_file_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, Config::new().with_max_bytes(1).with_keep_files(3)).unwrap();
    for n in 0..4 {
        log.append(&record(n)).unwrap();
    }
    let files = [
        path.clone(),
        rotated_path(&path, 1),
        rotated_path(&path, 2),
        rotated_path(&path, 3),
    ];
    for f in &files {
        assert_eq!(mode(f), DEFAULT_FILE_MODE, "{}", f.display());
    }
}

#[cfg(unix)]
#[test]
fn a_configured_mode_is_applied_exactly_and_kept_by_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let config = Config::new()
        .with_max_bytes(1)
        .with_keep_files(2)
        .with_file_mode(0o640);
    let log = AuditLog::open(&path, config).unwrap();
    log.append(&record(1)).unwrap();
    log.append(&record(2)).unwrap();
    assert_eq!(mode(&path), 0o640);
    assert_eq!(mode(&rotated_path(&path, 1)), 0o640);
}

#[cfg(unix)]
#[test]
fn opening_existing_world_readable_files_narrows_them_to_the_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let files = [path.clone(), rotated_path(&path, 1), rotated_path(&path, 7)];
    for f in &files {
        fs::write(f, record(1).to_line().unwrap() + "\n").unwrap();
        fs::set_permissions(f, fs::Permissions::from_mode(0o644)).unwrap();
    }
    let log = AuditLog::open(&path, Config::new()).unwrap();
    for f in &files {
        assert_eq!(mode(f), DEFAULT_FILE_MODE, "{}", f.display());
    }
    // The records are untouched.
    assert_eq!(log.len(), fs::metadata(&path).unwrap().len());
    assert!(!log.is_empty());
}
