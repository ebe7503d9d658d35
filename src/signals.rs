//! Signals a write can raise. A write past the process's file-size limit (`RLIMIT_FSIZE`,
//! e.g. `prlimit --fsize`) raises `SIGXFSZ`, whose default action ends the process (with a
//! core dump) in the middle of an audit append. With a handler installed the kernel still
//! raises the signal but the write fails with `EFBIG` instead, which the audit log handles like
//! a full disk: the record is refused, the scale-up is not applied, and writing resumes once
//! the limit allows it. (`SIGPIPE`, the other signal a write raises, is ignored by the Rust
//! runtime before `main`.) Depends on nothing of ours.

use tokio::signal::unix::{SignalKind, signal};
use tracing::warn;

/// Installs a `SIGXFSZ` handler for the life of the process and spawns a task that logs each
/// delivery; call it once, early, inside the runtime.
///
/// # Errors
/// When the handler cannot be installed (then a write past the file-size limit would still
/// kill the process, so the caller should not start serving).
pub fn survive_write_signals() -> std::io::Result<()> {
    let mut xfsz = signal(SignalKind::from_raw(libc::SIGXFSZ))?;
    tokio::spawn(async move {
        while xfsz.recv().await.is_some() {
            warn!(
                signal = "SIGXFSZ",
                "a write went past the process's file-size limit; it fails with EFBIG and the process goes on"
            );
        }
    });
    Ok(())
}
