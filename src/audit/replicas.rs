//! The audit logs of several replicas (leader election, `docs/ha.md`): each replica appends
//! to its own log, `audit.path` with [`IDENTITY`] replaced by its identity, in a directory
//! every replica mounts. Only the leader writes, so the logs hold the terms one after
//! another; a new leader reads them all ([`discover`], [`read_merged`]) before it acts, and
//! `audit report` reads them all too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::read::{Reading, log_order, read_files, rotated_paths, split_rotation};
use super::record::Record;
use super::{Error, Result};

/// The placeholder for the replica identity in `audit.path`.
pub const IDENTITY: &str = "{identity}";

/// `template` with [`IDENTITY`] replaced by `identity`: this replica's live log.
pub fn replica_log(template: &Path, identity: &str) -> PathBuf {
    PathBuf::from(template.to_string_lossy().replace(IDENTITY, identity))
}

/// Every file of every replica's log that `template` names (its file name holds
/// [`IDENTITY`]; any non-empty text stands for it), rotated files included, grouped by log
/// in [`log_order`]. A log whose live file is gone but whose rotated files remain is listed
/// by those. No file at all (or no directory yet) gives an empty list.
///
/// # Errors
/// [`Error::Read`] if the directory exists but cannot be listed.
pub fn discover(template: &Path) -> Result<Vec<PathBuf>> {
    let dir = match template.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = template
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let (prefix, suffix) = name.split_once(IDENTITY).unwrap_or((name, ""));
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Read { path: dir, source }),
    };
    let mut logs = BTreeSet::new();
    for entry in entries.filter_map(std::result::Result::ok) {
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let (base, _) = split_rotation(&entry.path());
        let Some(base_name) = base.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let matches = base_name.len() > prefix.len() + suffix.len()
            && base_name.starts_with(prefix)
            && base_name.ends_with(suffix);
        if matches {
            logs.insert(base);
        }
    }
    let mut files = Vec::new();
    for log in logs {
        files.extend(rotated_paths(&log)?.into_iter().filter(|p| p.is_file()));
    }
    Ok(log_order(&files))
}

/// Reads the files of one or more logs (in any order) and merges their records by time:
/// each log's own records keep their order, and the logs' records interleave by `tsMs`
/// (on a tie, the log with the smaller path first). Bad lines are listed as
/// [`read_files`] lists them, log by log.
///
/// With one log this is [`read_files`] over [`log_order`]. With several (replicas that led
/// one after another) it gives the records in the order they were written, as long as the
/// replicas' clocks agree to better than the gap between two terms.
///
/// # Errors
/// [`Error::Read`] naming the first file that cannot be read.
pub fn read_merged(paths: &[PathBuf]) -> Result<Reading> {
    let ordered = log_order(paths);
    let mut groups: Vec<Vec<PathBuf>> = Vec::new();
    let mut last_base: Option<PathBuf> = None;
    for p in ordered {
        let (base, _) = split_rotation(&std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone()));
        if last_base.as_ref() != Some(&base) {
            groups.push(Vec::new());
            last_base = Some(base);
        }
        if let Some(g) = groups.last_mut() {
            g.push(p);
        }
    }
    let mut out = Reading::default();
    let mut logs: Vec<std::vec::IntoIter<Record>> = Vec::with_capacity(groups.len());
    for g in &groups {
        let r = read_files(g)?;
        out.bad.extend(r.bad);
        out.bad_unlisted = out.bad_unlisted.saturating_add(r.bad_unlisted);
        logs.push(r.records.into_iter());
    }
    out.records = merge(logs);
    Ok(out)
}

/// Interleaves `logs` by `tsMs`, each log's order kept (a k-way merge of their heads).
fn merge(logs: Vec<std::vec::IntoIter<Record>>) -> Vec<Record> {
    let mut heads: Vec<std::iter::Peekable<std::vec::IntoIter<Record>>> =
        logs.into_iter().map(Iterator::peekable).collect();
    let mut out = Vec::new();
    loop {
        let next = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, h)| h.peek().map(|r| (r.ts_ms, i)))
            .min();
        let Some((_, i)) = next else {
            return out;
        };
        if let Some(r) = heads.get_mut(i).and_then(Iterator::next) {
            out.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{Event, Phase, PhaseEvent};

    fn phase(ts: i64, id: &str) -> Record {
        Record::new(
            ts,
            PhaseEvent {
                scale_up_id: id.to_owned(),
                node_group: "g".to_owned(),
                gang: None,
                phase: Phase::NodesReady,
                at_ms: ts,
                elapsed_ms: 0,
                detail: None,
            },
        )
    }

    fn write(path: &Path, records: &[Record]) {
        let text: String = records
            .iter()
            .map(|r| format!("{}\n", serde_json::to_string(r).unwrap()))
            .collect();
        std::fs::write(path, text).unwrap();
    }

    fn ids(reading: &Reading) -> Vec<String> {
        reading
            .records
            .iter()
            .map(|r| match &r.event {
                Event::Phase(p) => p.scale_up_id.clone(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn discover_finds_every_replicas_live_and_rotated_files_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let template = dir.path().join("audit-{identity}.jsonl");
        for name in [
            "audit-a.jsonl",
            "audit-a.jsonl.1",
            "audit-b.jsonl.2",
            "audit-.jsonl",
            "other.jsonl",
            "audit-c.json",
        ] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("audit-d.jsonl")).unwrap();
        let names: Vec<String> = discover(&template)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["audit-a.jsonl.1", "audit-a.jsonl", "audit-b.jsonl.2"],
            "rotated before live, logs by path; no empty identity, no directory"
        );
        assert!(
            discover(&dir.path().join("none/{identity}.jsonl"))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            replica_log(&template, "gs-0"),
            dir.path().join("audit-gs-0.jsonl")
        );
    }

    #[test]
    fn read_merged_interleaves_logs_by_time_and_keeps_each_logs_order() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        // a led, then b, then a again; a's clock stepped back once inside its own log.
        write(&rotated(&a), &[phase(10, "a1"), phase(20, "a2")]);
        write(&a, &[phase(60, "a4"), phase(55, "a5")]);
        write(&b, &[phase(30, "b1"), phase(40, "b2")]);
        let files = vec![b.clone(), a.clone(), rotated(&a)];
        let got = read_merged(&files).unwrap();
        assert_eq!(ids(&got), ["a1", "a2", "b1", "b2", "a4", "a5"]);
        assert!(got.bad.is_empty());
        // One log: exactly its file order.
        assert_eq!(
            ids(&read_merged(std::slice::from_ref(&a)).unwrap()),
            ["a4", "a5"]
        );
    }

    fn rotated(p: &Path) -> PathBuf {
        crate::audit::log::rotated_path(p, 1)
    }
}
