//! Logging setup: an env filter and text or JSON output. In text output every field value is
//! written with its control characters escaped (`\n`, `\r`, `\u{1b}`), as the JSON output
//! escapes them, so a request-derived value holding a newline cannot forge a log line.

use std::fmt::{self, Write};

use tracing::field::Field;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// An error and its sources on one line, `: `-separated: the form errors take in log fields
/// and messages.
pub fn chain(e: &dyn std::error::Error) -> String {
    Chain(e).to_string()
}

/// Displays an error with its whole cause chain, `: `-separated, without allocating: every
/// `error` field of a log line is written through it (`error = %Chain(&e)`), so that no log
/// keeps only the outer message of an error whose cause says what went wrong.
/// `tests/log_fields.rs` holds the code to that.
#[derive(Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'a));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event, with span fields.
    Json,
}

/// Installs the global subscriber. `RUST_LOG` wins over `default_filter`.
///
/// # Errors
/// When the filter does not parse or a subscriber is already installed.
pub fn init(
    format: LogFormat,
    default_filter: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(s) if !s.is_empty() => EnvFilter::try_new(s)?,
        _ => EnvFilter::try_new(default_filter)?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.fmt_fields(text_fields()).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    }
}

/// The field formatter of the text output: `message` bare, every other field as
/// `name=value`, separated by spaces, with control characters in values escaped.
pub fn text_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    debug_fn(text_field).delimited(" ")
}

fn text_field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    if field.name() == "message" {
        return write!(EscapeControls(w), "{value:?}");
    }
    write!(w, "{}=", field.name().trim_start_matches("r#"))?;
    // `%` fields reach here as their Display text, unescaped; `?` fields of text are already
    // quoted and escaped by Debug.
    let text = format!("{value:?}");
    if bare(&text) || quoted(&text) {
        w.write_str(&text)
    } else {
        // Quoted and escaped as Rust's Debug does: a value holding spaces, `=` or quotes
        // (a node-group id ` evil=1`, an error message) stays one field.
        write!(w, "{text:?}")
    }
}

/// Whether `text` can be written without quotes and still read back as one field value:
/// not empty, and no space, control character, `=`, `"` or `\`.
fn bare(text: &str) -> bool {
    !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '=' | '"' | '\\'))
}

/// Whether `text` is one string quoted and escaped as Rust's Debug writes it (what a `?`
/// field of text gives): `"` at both ends and none unescaped between them, and no raw
/// control character.
fn quoted(text: &str) -> bool {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| text.len() >= 2)
    else {
        return false;
    };
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next().is_none() => return false,
            '\\' => {}
            '"' => return false,
            c if c.is_control() => return false,
            _ => {}
        }
    }
    true
}

/// Writes through to the inner writer with every control character escaped as Rust's `Debug`
/// escapes it.
struct EscapeControls<'a, W: Write>(&'a mut W);

impl<W: Write> Write for EscapeControls<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| c.is_control()) {
            self.0.write_str(&rest[..at])?;
            for e in c.escape_debug() {
                self.0.write_char(e)?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
pub(crate) mod tests;
