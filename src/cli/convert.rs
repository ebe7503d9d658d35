//! `gangscaler convert`: manifests from one gang API version to another (or for another
//! Kubernetes minor), the report on standard error.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};

use crate::migrate::api::Target;
use crate::migrate::convert::{Severity, convert};
use crate::migrate::{parse, render};
use crate::yaml;

/// Reads `file` (`-`: standard input), converts it to `to`, writes the result to standard
/// output and the report to standard error.
///
/// Nothing is written to standard output when an object cannot be converted, or, with
/// `strict`, when something would be lost.
///
/// # Errors
/// An unreadable or malformed input, a conversion error, or (with `strict`) a lossy
/// conversion.
pub(super) fn run(file: &Path, to: Target, strict: bool) -> anyhow::Result<()> {
    let (text, name) = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .take(yaml::OBJECTS.max_bytes + 1)
            .read_to_string(&mut text)
            .context("reading standard input")?;
        (text, "-".to_owned())
    } else {
        let text = yaml::read_file(file, &yaml::OBJECTS)?;
        (text, file.display().to_string())
    };
    let docs = parse(&text, &name)?;
    let conversion = convert(&docs, to);
    let mut stderr = std::io::stderr().lock();
    for f in &conversion.findings {
        writeln!(
            stderr,
            "{name}: document {}: {}: {}: {}",
            f.document, f.object, f.severity, f.message
        )?;
    }
    let count = |s: Severity| {
        conversion
            .findings
            .iter()
            .filter(|f| f.severity == s)
            .count()
    };
    if conversion.has_errors() {
        bail!(
            "{name}: {} object(s) cannot be converted to {to}; nothing written",
            count(Severity::Error)
        );
    }
    if strict && conversion.is_lossy() {
        bail!(
            "{name}: --strict: converting to {to} would lose {} field(s) or link(s) listed above; nothing written",
            count(Severity::Lossy)
        );
    }
    let out = render(&conversion.documents)?;
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("writing standard output")?;
    Ok(())
}
