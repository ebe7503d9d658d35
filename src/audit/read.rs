//! Reading audit logs back: every line that parses becomes a [`Record`]; every other line
//! (bad JSON, an unknown event or schema version, an empty line, a last line without its
//! newline) becomes a [`BadLine`] naming the file and line number, and is skipped. Only a file
//! that cannot be read at all is an error.
//!
//! Memory stays bounded on hostile input: a line longer than [`MAX_LINE_BYTES`] is skipped
//! without being held whole, an error message quotes at most [`MAX_ERROR_CHARS`] characters
//! of what it read, and at most [`MAX_BAD_LINES_PER_FILE`] bad lines per file are listed (the
//! rest are counted in [`Reading::bad_unlisted`]).

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::log::MAX_TORN_TAIL;
pub use super::log::rotated_paths;
use super::record::Record;
use super::{Error, Result};

/// A line that was skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BadLine {
    /// The file, as given.
    pub file: String,
    /// 1-based line number.
    pub line: u64,
    /// What is wrong with it.
    pub error: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.error)
    }
}

/// A line longer than this (4 MiB, the writer's [`MAX_TORN_TAIL`]) is not a record gangscaler
/// writes: it is skipped as a bad line without being held in memory whole.
pub const MAX_LINE_BYTES: usize = MAX_TORN_TAIL as usize;

/// A bad line's error quotes at most this many characters (serde's messages quote the value).
pub const MAX_ERROR_CHARS: usize = 200;

/// At most this many bad lines of one file are listed; the rest are only counted.
pub const MAX_BAD_LINES_PER_FILE: usize = 1000;

/// What reading some files gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// The records, in file order then line order.
    pub records: Vec<Record>,
    /// The skipped lines, in the same order: the first [`MAX_BAD_LINES_PER_FILE`] of each file.
    pub bad: Vec<BadLine>,
    /// Skipped lines past the first [`MAX_BAD_LINES_PER_FILE`] of their file: counted, not
    /// listed.
    pub bad_unlisted: u64,
}

impl Reading {
    /// Every skipped line, listed or not.
    pub fn bad_total(&self) -> u64 {
        (self.bad.len() as u64).saturating_add(self.bad_unlisted)
    }
}

/// Reads `paths` in the order given.
///
/// # Errors
/// [`Error::Read`] naming the first file that cannot be opened or read; bad lines are not
/// errors.
pub fn read_files<P: AsRef<Path>>(paths: &[P]) -> Result<Reading> {
    let mut out = Reading::default();
    for path in paths {
        let path = path.as_ref();
        let read = File::open(path).and_then(|f| read_lines(BufReader::new(f), path, &mut out));
        read.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(out)
}

/// Reads the lines of one source into `out`, naming it `file` in bad lines.
///
/// # Errors
/// The I/O error of the reader.
pub fn read_lines(reader: impl BufRead, file: &Path, out: &mut Reading) -> io::Result<()> {
    read_lines_within(reader, file, out, MAX_LINE_BYTES, MAX_BAD_LINES_PER_FILE)
}

/// [`read_lines`] with the limits as arguments.
fn read_lines_within(
    mut reader: impl BufRead,
    file: &Path,
    out: &mut Reading,
    max_line: usize,
    max_bad: usize,
) -> io::Result<()> {
    let name = file.display().to_string();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut listed = 0usize;
    loop {
        buf.clear();
        let (len, newline) = read_line_bounded(&mut reader, &mut buf, max_line)?;
        if len == 0 {
            return Ok(());
        }
        line_no += 1;
        let body_len = len - usize::from(newline);
        let error = if body_len > max_line {
            Err(format!(
                "a line of {body_len} bytes, longer than the {max_line} bytes a record may have"
            ))
        } else if !newline {
            Err(format!(
                "truncated: {} bytes without a newline at the end of the file \
                 (a write that was never acknowledged)",
                buf.len()
            ))
        } else {
            let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
            match std::str::from_utf8(body) {
                Err(e) => Err(format!("not UTF-8: {e}")),
                Ok(text) if text.trim().is_empty() => Err("empty line".to_owned()),
                Ok(text) => Record::parse_line(text),
            }
        };
        match error {
            Ok(record) => out.records.push(record),
            Err(_) if listed >= max_bad => out.bad_unlisted = out.bad_unlisted.saturating_add(1),
            Err(error) => {
                listed += 1;
                out.bad.push(BadLine {
                    file: name.clone(),
                    line: line_no,
                    error: shorten(error),
                });
            }
        }
        if !newline {
            return Ok(());
        }
    }
}

/// Reads one line (up to and including its `\n`), keeping at most its first `max + 1` bytes in
/// `buf`; returns its whole length and whether it ended in `\n`. `(0, false)` at the end of the
/// input.
fn read_line_bounded(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<(usize, bool)> {
    let mut total = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((total, false));
        }
        let (n, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        let room = max.saturating_add(1).saturating_sub(buf.len());
        buf.extend_from_slice(&available[..n.min(room)]);
        reader.consume(n);
        total = total.saturating_add(n);
        if done {
            return Ok((total, true));
        }
    }
}

/// `error` cut to [`MAX_ERROR_CHARS`] characters, marked when cut.
fn shorten(mut error: String) -> String {
    if let Some((at, _)) = error.char_indices().nth(MAX_ERROR_CHARS) {
        error.truncate(at);
        error.push_str("… (cut)");
    }
    error
}

/// `paths` in the order they hold the records, whatever the order given (a shell's
/// `audit.jsonl*` puts the live file first): grouped by log, each log's rotated files
/// `<log>.N` … `<log>.1` (oldest first) before `<log>` itself; logs by path. A file given
/// twice (the same path, or another path to the same file) is kept once, so that no record is
/// counted twice. A file that cannot be resolved is kept as given, for the reader to report.
///
/// The report does not depend on this order; the list of files and of bad lines does.
pub fn log_order(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::BTreeSet::new();
    let mut unique: Vec<(PathBuf, &PathBuf)> = paths
        .iter()
        .map(|p| (std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()), p))
        .filter(|(resolved, _)| seen.insert(resolved.clone()))
        .collect();
    unique.sort_by_cached_key(|(resolved, _)| {
        let (base, n) = split_rotation(resolved);
        (base, std::cmp::Reverse(n))
    });
    unique.into_iter().map(|(_, given)| given.clone()).collect()
}

/// `<log>.N` as (`<log>`, N) for a rotation index N ≥ 1 written without leading zeros;
/// anything else as (path, 0).
pub(super) fn split_rotation(path: &Path) -> (PathBuf, u32) {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return (path.to_owned(), 0);
    };
    let Some((base, n)) = name.rsplit_once('.') else {
        return (path.to_owned(), 0);
    };
    let index = (!base.is_empty() && !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse::<u32>().ok())
        .flatten();
    match index {
        Some(n) => (path.with_file_name(base), n),
        None => (path.to_owned(), 0),
    }
}

#[cfg(test)]
mod tests;
