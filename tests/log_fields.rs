//! Every `error` field of a log line under `src/` carries the whole cause chain: it is written
//! `error = %Chain(&e)` (`gangscaler::telemetry::Chain`), or holds text already made of the
//! chain (`chain(&e)`, `x.chain()`, or a binding named `why` or `message`, which by this
//! rule hold such text). An error value written bare (`error = %e`, `error = ?e`) would log
//! only its outer message, such as `reading …/h100-8x.yaml` without the reason; this test
//! names each such line.

#![expect(
    clippy::unwrap_used,
    reason = "a test aborts loudly on a tree it cannot read"
)]

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether the expression after `error = %` (or `?`) is one of the chained forms.
fn chained(expr: &str) -> bool {
    let word: String = expr
        .chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '(' | ')' | '&' | ':'))
        .collect();
    word.starts_with("Chain(")
        || word.starts_with("chain(")
        || word.starts_with("crate::telemetry::chain(")
        || word.contains(".chain()")
        || word == "why"
        || word == "message"
}

/// The `error = %…` fields of `text` that are not chained: (line, the field's text).
fn unchained(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("error = ") {
            let after = &rest[at + "error = ".len()..];
            // The field named `error` itself, not `first.error` or `my_error`.
            let own = rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| matches!(c, ' ' | '(' | ','));
            if own
                && let Some(expr) = after.strip_prefix('%').or_else(|| after.strip_prefix('?'))
                && !chained(expr)
            {
                out.push((n + 1, line.trim().to_owned()));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn every_logged_error_keeps_its_cause_chain() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, field) in unchained(&text) {
            found.push(format!("{}:{line}: {field}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "log the whole cause chain: write `error = %Chain(&e)` (gangscaler::telemetry::Chain):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_bare_error_field() {
    let bad = "warn!(node_group.id = %g.id, error = %e, \"failed\");\nerror!(error = ?err, \"x\");";
    assert_eq!(unchained(bad).len(), 2);
    assert!(unchained("warn!(first.error = ?first.error, \"x\");").is_empty());
    let good =
        "warn!(error = %Chain(&e), \"a\"); error!(error = %why, \"b\"); x(error = %w.chain());";
    assert_eq!(unchained(good), Vec::<(usize, String)>::new());
}
