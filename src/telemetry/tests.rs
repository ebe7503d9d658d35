use std::io;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use super::*;

/// Collects everything a test subscriber writes.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// The text written so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// A text-format subscriber as `init` builds it, writing into `out`, at every level.
pub(crate) fn text_subscriber(out: &Captured) -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("trace"))
        .with_ansi(false)
        .with_writer(out.clone())
        .fmt_fields(text_fields())
        .finish()
}

#[test]
fn text_output_escapes_newlines_in_display_and_debug_fields_and_spans() {
    let out = Captured::default();
    tracing::subscriber::with_default(text_subscriber(&out), || {
        let name = "n1\nINFO gangscaler: forged line\r\u{1b}[2J";
        let span = tracing::info_span!("rpc", node.name = %name);
        let _entered = span.enter();
        tracing::info!(node.name = %name, debug = ?name, count = 3, "node refused");
    });
    let text = out.text();
    assert_eq!(text.lines().count(), 1, "one event, one line: {text:?}");
    assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text:?}");
    assert!(
        text.contains(r#"node.name="n1\nINFO gangscaler: forged line\r\u{1b}[2J""#),
        "Display values with spaces are quoted and escaped: {text}"
    );
    assert!(
        text.contains(r#"debug="n1\nINFO gangscaler: forged line\r\u{1b}[2J""#),
        "Debug values are not escaped twice: {text}"
    );
    assert!(text.contains("node refused node.name="), "{text}");
    assert!(text.trim_end().ends_with(" count=3"), "{text}");
    assert!(
        text.contains(r#"rpc{node.name="n1\nINFO gangscaler: forged line"#),
        "span fields: {text}"
    );
}

#[test]
fn a_request_value_cannot_add_fields_to_a_text_line() {
    let out = Captured::default();
    tracing::subscriber::with_default(text_subscriber(&out), || {
        let id = "evil outcome=OK admitted=true";
        let span = tracing::info_span!("rpc", rpc = "NodeGroupIncreaseSize", node_group.id = %id);
        let _entered = span.enter();
        tracing::info!(
            node_group.id = %id,
            quote = %"a\"b",
            slash = %"C:\\x",
            empty = %"",
            plain = %"gpu-a",
            looks_quoted = %"\"x\" y=\"z\"",
            count = 3,
            "rpc refused"
        );
    });
    let text = out.text();
    let fields = logfmt(text.trim_end());
    assert_eq!(
        fields
            .iter()
            .filter(|(k, _)| k == "outcome" || k == "admitted")
            .count(),
        0,
        "no forged field: {text}"
    );
    for (key, want) in [
        ("node_group.id", "evil outcome=OK admitted=true"),
        ("quote", "a\"b"),
        ("slash", "C:\\x"),
        ("empty", ""),
        ("plain", "gpu-a"),
        ("looks_quoted", "\"x\" y=\"z\""),
        ("count", "3"),
    ] {
        assert!(
            fields.iter().any(|(k, v)| k == key && v == want),
            "{key} should read back as {want:?}: {fields:?} from {text}"
        );
    }
    assert!(
        text.contains("plain=gpu-a "),
        "plain values stay bare: {text}"
    );
}

/// The `key=value` fields of a text line, reading quoted values as Rust string literals.
fn logfmt(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq]
            .rsplit([' ', '{', ':'])
            .next()
            .unwrap_or("")
            .to_owned();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(body) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = body.char_indices();
            let mut end = body.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(match n {
                                'n' => '\n',
                                'r' => '\r',
                                't' => '\t',
                                other => other,
                            });
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &body[end..])
        } else {
            let end = after.find([' ', '}']).unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        out.push((key, value));
        rest = next;
    }
    out
}
