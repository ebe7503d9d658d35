//! [`AuditLog`]: the append-only JSON Lines writer.
//!
//! # Durability
//!
//! [`AuditLog::append`] encodes the record as one line ending in `\n`, writes it with a single
//! `write_all` to a file opened in append mode, then calls `fdatasync` (`sync_data`) before it
//! returns. A record is *acknowledged* when `append` returns `Ok`; an acknowledged record has
//! reached the disk, so `kill -9` (or a power cut) cannot lose it.
//!
//! A crash in the middle of `append` can leave at most one partial line at the end of the file,
//! never in the middle: records are only ever added at the end, one at a time under a mutex.
//! [`AuditLog::open`] cuts such a torn tail off (everything after the last `\n`) before it
//! appends anything, and [`AuditLog::repaired_bytes`] says how much it cut; those bytes were
//! never acknowledged. If a write or sync fails, `append` truncates the file back to its last
//! acknowledged length before returning the error, so a failed record leaves nothing behind
//! and the caller may retry it without creating a duplicate.
//!
//! One process writes a log at a time; nothing enforces this (no lock file).
//!
//! # When the disk refuses
//!
//! A full filesystem (`ENOSPC`), a file-size limit (`EFBIG`; the process must not die of
//! `SIGXFSZ`, see `crate::signals::survive_write_signals`) or any other write error fails the
//! append as above. The log then remembers that it is *unwritable* ([`AuditLog::unwritable`]
//! says why) until an append succeeds again: there is no background probe, the next append is
//! the retry, so writing resumes by itself once space returns. The callers refuse every action
//! whose record could not be made durable (see the engine's `NodeGroupIncreaseSize`).
//!
//! # Cost
//!
//! Each append blocks the calling thread for one `fdatasync`: tens of microseconds on a
//! local NVMe disk, milliseconds on network or spinning storage. Records are written per
//! admission decision and per phase transition (a few per second at most), so calling
//! `append` directly from async code is acceptable; a caller on a latency-critical path may
//! wrap it in `tokio::task::spawn_blocking` instead. The log is thread-safe (`Sync`).
//!
//! # Rotation
//!
//! When a record would take the live file past [`Config::max_bytes`] (and the file is not
//! empty), the live file is synced and renamed to `<path>.1`, older files shift up
//! (`<path>.1` → `<path>.2`, …), the one past [`Config::keep_files`] is deleted, a fresh live
//! file is created and the directory is synced. Each rename is atomic, so a crash during
//! rotation can leave a gap in the numbering but never a duplicate or partial file. Reading
//! [`rotated_paths`] in order gives every record once, oldest first.
//!
//! # File mode
//!
//! The log says which gangs ran where and why, so it is not world-readable: on Unix the live
//! file is created with [`Config::file_mode`] (`0600` by default) and then set to exactly that
//! mode, whatever the umask. [`AuditLog::open`] also sets the mode of a live or rotated file
//! that already exists (an older gangscaler created them `0644`), and fails, naming the file
//! and both modes, if it cannot. Rotation renames files, which keeps their mode, and creates
//! the fresh live file with the same mode; nothing is ever rewritten through a temporary file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::record::Record;
use super::{Error, Result};

/// A torn tail longer than this is not a partial record of ours: [`AuditLog::open`] refuses
/// to cut it.
pub const MAX_TORN_TAIL: u64 = 4 << 20;

/// Writer settings, built with `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Rotate when a record would take the live file past this many bytes (64 MiB by default).
    pub max_bytes: u64,
    /// Rotated files to keep (`<path>.1` … `<path>.N`; 5 by default). With 0, rotation
    /// discards the old records.
    pub keep_files: u32,
    /// Also print every acknowledged line on stdout (off by default).
    pub copy_to_stdout: bool,
    /// Permission bits of the files (live and rotated), `0o600` by default; Unix only.
    pub file_mode: u32,
}

/// The default [`Config::file_mode`]: read and write for the owner only.
pub const DEFAULT_FILE_MODE: u32 = 0o600;

impl Default for Config {
    fn default() -> Self {
        Self {
            max_bytes: 64 << 20,
            keep_files: 5,
            copy_to_stdout: false,
            file_mode: DEFAULT_FILE_MODE,
        }
    }
}

impl Config {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the rotation size.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets how many rotated files to keep.
    #[must_use]
    pub fn with_keep_files(mut self, keep_files: u32) -> Self {
        self.keep_files = keep_files;
        self
    }

    /// Sets whether acknowledged lines are copied to stdout.
    #[must_use]
    pub fn with_copy_to_stdout(mut self, copy: bool) -> Self {
        self.copy_to_stdout = copy;
        self
    }

    /// Sets the permission bits of the files (only the low 12 bits are used). The owner needs
    /// read and write (`0o600`) to reopen the log after a restart.
    #[must_use]
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode & 0o7777;
        self
    }
}

/// The path of the `n`th rotated file of `path`: `<path>.<n>`.
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The existing rotated files of `path` (`<path>.N` … `<path>.1`, oldest first), followed by
/// `path` itself: the order in which they hold the records.
///
/// # Errors
/// [`Error::Read`] if the directory cannot be listed.
pub fn rotated_paths(path: &Path) -> Result<Vec<PathBuf>> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Some(base) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(vec![path.to_owned()]);
    };
    let prefix = format!("{base}.");
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut numbers: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix(&prefix)?;
            if n.starts_with('0') {
                return None;
            }
            n.parse::<u32>().ok()
        })
        .collect();
    numbers.sort_unstable_by(|a, b| b.cmp(a));
    let mut paths: Vec<PathBuf> = numbers.into_iter().map(|n| rotated_path(path, n)).collect();
    paths.push(path.to_owned());
    Ok(paths)
}

#[derive(Debug)]
struct Live {
    file: File,
    /// Length of the file up to the last acknowledged record.
    len: u64,
}

/// The append-only audit log (see the module docs for the guarantees).
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    config: Config,
    repaired_bytes: u64,
    // A std mutex: the critical section is one write and one fdatasync, never held across an
    // await, and callers may be sync or async.
    live: Mutex<Live>,
    /// Why the last append failed to reach the disk; `None` while appends succeed.
    unwritable: Mutex<Option<String>>,
}

impl AuditLog {
    /// Opens (or creates) the log at `path`, sets the mode of its live and rotated files to
    /// [`Config::file_mode`] and cuts off a torn tail left by a crash.
    ///
    /// # Errors
    /// [`Error::Open`] if the file cannot be opened or created (its directory must exist), or
    /// the mode of the live file or of a rotated file cannot be set;
    /// [`Error::Repair`] if the torn tail cannot be cut, or is longer than [`MAX_TORN_TAIL`]
    /// (the file is then probably not an audit log, and is left as it is).
    pub fn open(path: impl Into<PathBuf>, config: Config) -> Result<Self> {
        let path = path.into();
        let (file, created) = open_live(&path, config.file_mode).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        if !created {
            for rotated in rotated_paths(&path)? {
                if rotated != path {
                    set_path_mode(&rotated, config.file_mode).map_err(|source| Error::Open {
                        path: rotated.clone(),
                        source,
                    })?;
                }
            }
        }
        let mut live = Live { file, len: 0 };
        let repaired_bytes = repair(&mut live).map_err(|source| Error::Repair {
            path: path.clone(),
            source,
        })?;
        if repaired_bytes > 0 {
            tracing::warn!(
                audit.path = %path.display(),
                bytes = repaired_bytes,
                "cut a torn, unacknowledged last line from the audit log"
            );
        }
        if created {
            sync_dir(&path).map_err(|source| Error::Open {
                path: path.clone(),
                source,
            })?;
        }
        Ok(Self {
            path,
            config,
            repaired_bytes,
            live: Mutex::new(live),
            unwritable: Mutex::new(None),
        })
    }

    /// Why the log cannot be written now (the error of the last append, which failed), or
    /// `None` while appends succeed. Cleared by the next successful append.
    pub fn unwritable(&self) -> Option<String> {
        self.unwritable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Remembers the outcome of an append that reached the file system, logging each change.
    fn note_writable(&self, failure: Option<&Error>) {
        let mut state = self
            .unwritable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match (failure, state.is_some()) {
            (Some(e), _) => {
                let why = e.chain();
                if state.is_none() {
                    tracing::error!(
                        audit.path = %self.path.display(),
                        error = %why,
                        "the audit log cannot be written: every scale-up is refused until a record can be made durable again"
                    );
                }
                *state = Some(why);
            }
            (None, true) => {
                tracing::info!(
                    audit.path = %self.path.display(),
                    "the audit log can be written again: scale-ups resume"
                );
                *state = None;
            }
            (None, false) => {}
        }
    }

    /// The live file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Bytes of a torn (unacknowledged) last line that [`open`](Self::open) cut off.
    pub fn repaired_bytes(&self) -> u64 {
        self.repaired_bytes
    }

    /// Bytes in the live file.
    pub fn len(&self) -> u64 {
        self.lock().len
    }

    /// Whether the live file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        // Every path that fails mid-append restores `len` and the file before unwinding, so
        // the state behind a poisoned lock is still consistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one record as one line and syncs it to disk; the record is acknowledged (it
    /// survives `kill -9` and power loss) once this returns `Ok`. Rotates first if the line
    /// would take the live file past [`Config::max_bytes`].
    ///
    /// # Errors
    /// [`Error::Encode`], [`Error::Rotate`] or [`Error::Write`]; the record is then not in the
    /// log (a partial write is truncated away) and may be retried.
    pub fn append(&self, record: &Record) -> Result<()> {
        let mut line = record.to_line().map_err(Error::Encode)?;
        line.push('\n');
        let bytes = line.as_bytes();
        let mut live = self.lock();
        let grown = live.len.saturating_add(bytes.len() as u64);
        if live.len > 0
            && grown > self.config.max_bytes
            && let Err(source) = self.rotate(&mut live)
        {
            let e = Error::Rotate {
                path: self.path.clone(),
                source,
            };
            self.note_writable(Some(&e));
            return Err(e);
        }
        let written = live
            .file
            .write_all(bytes)
            .and_then(|()| live.file.sync_data());
        if let Err(source) = written {
            // Take back whatever part of the line reached the file, so the next record does
            // not follow a partial line. If even that fails, the next `open` repairs it.
            let len = live.len;
            let _ = live.file.set_len(len).and_then(|()| live.file.sync_data());
            let e = Error::Write {
                path: self.path.clone(),
                source,
            };
            self.note_writable(Some(&e));
            return Err(e);
        }
        live.len = live.len.saturating_add(bytes.len() as u64);
        drop(live);
        self.note_writable(None);
        if self.config.copy_to_stdout {
            // The record is already durable; a closed stdout must not fail the append.
            let mut out = io::stdout().lock();
            let _ = out.write_all(bytes).and_then(|()| out.flush());
        }
        Ok(())
    }

    fn rotate(&self, live: &mut Live) -> io::Result<()> {
        live.file.sync_all()?;
        let keep = self.config.keep_files;
        if keep > 0 {
            ignore_missing(fs::remove_file(rotated_path(&self.path, keep)))?;
            for n in (1..keep).rev() {
                ignore_missing(fs::rename(
                    rotated_path(&self.path, n),
                    rotated_path(&self.path, n + 1),
                ))?;
            }
            ignore_missing(fs::rename(&self.path, rotated_path(&self.path, 1)))?;
        } else {
            ignore_missing(fs::remove_file(&self.path))?;
        }
        let (file, _) = open_live(&self.path, self.config.file_mode)?;
        sync_dir(&self.path)?;
        *live = Live { file, len: 0 };
        Ok(())
    }
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens `path` for reading and appending, creating it with `mode`, and sets its mode to
/// exactly `mode` (the umask may have narrowed it; an existing file may have another);
/// says whether it was created.
fn open_live(path: &Path, mode: u32) -> io::Result<(File, bool)> {
    let mut create = OpenOptions::new();
    create.read(true).append(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        // Never wider than `mode`, even for an instant.
        create.mode(mode);
    }
    let (file, created) = match create.open(path) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
            OpenOptions::new().read(true).append(true).open(path)?,
            false,
        ),
        Err(e) => return Err(e),
    };
    set_file_mode(&file, path, mode)?;
    Ok((file, created))
}

/// Sets the mode of the open `file` (at `path`, for messages) to `mode` if it differs.
#[cfg(unix)]
fn set_file_mode(file: &File, path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let old = file.metadata()?.permissions().mode() & 0o7777;
    if old == mode {
        return Ok(());
    }
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| mode_error(&e, old, mode))?;
    tracing::info!(
        audit.path = %path.display(),
        mode.old = format_args!("{old:04o}"),
        mode.new = format_args!("{mode:04o}"),
        "set the audit log file mode"
    );
    Ok(())
}

#[cfg(not(unix))]
fn set_file_mode(_: &File, _: &Path, _: u32) -> io::Result<()> {
    Ok(())
}

/// Sets the mode of the (rotated) file at `path` to `mode` if it differs; a file that is
/// gone (rotated away meanwhile) is fine.
#[cfg(unix)]
fn set_path_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let old = match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => m.permissions().mode() & 0o7777,
        // Not a regular file: not ours to change (the reader reports it if it is read).
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if old == mode {
        return Ok(());
    }
    ignore_missing(fs::set_permissions(path, fs::Permissions::from_mode(mode)))
        .map_err(|e| mode_error(&e, old, mode))
}

#[cfg(not(unix))]
fn set_path_mode(_: &Path, _: u32) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn mode_error(e: &io::Error, old: u32, mode: u32) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("setting the file mode from {old:04o} to {mode:04o}: {e}"),
    )
}

/// Makes a created or renamed directory entry durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Cuts everything after the last `\n` and sets `live.len`; returns the bytes cut.
fn repair(live: &mut Live) -> io::Result<u64> {
    const CHUNK: u64 = 64 << 10;
    let len = live.file.metadata()?.len();
    let mut buf = vec![0u8; usize::try_from(CHUNK).unwrap_or(65_536)];
    let mut end = len;
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(CHUNK);
        let n = usize::try_from(end - start).unwrap_or(0);
        let chunk = &mut buf[..n];
        live.file.seek(SeekFrom::Start(start))?;
        live.file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            break start + i as u64 + 1;
        }
        if len - start > MAX_TORN_TAIL {
            return Err(io::Error::other(format!(
                "more than {MAX_TORN_TAIL} bytes without a newline at the end: \
                 not an audit log, left untouched"
            )));
        }
        end = start;
    };
    if len - keep > MAX_TORN_TAIL {
        return Err(io::Error::other(format!(
            "{} bytes without a newline at the end: not an audit log, left untouched",
            len - keep
        )));
    }
    if keep < len {
        live.file.set_len(keep)?;
        live.file.sync_all()?;
    }
    live.len = keep;
    Ok(len - keep)
}

#[cfg(test)]
mod tests;
