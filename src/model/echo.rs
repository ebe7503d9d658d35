//! Request-derived text as it appears in status messages and log lines: escaped, so a value
//! holding a newline cannot forge a log line, and cut short, so a megabyte-long id is not
//! echoed back as a megabyte-long message. Depends on std only.

use std::fmt::{self, Write};

/// At most this many characters of an echoed value are shown, escapes included.
pub const ECHO_CHARS: usize = 128;

/// Displays a request-derived string safe to put in a message or a log line: control and other
/// non-printable characters, `"` and `\` escaped as Rust's `Debug` escapes them, and the value
/// cut once [`ECHO_CHARS`] characters of escaped text are written (an escape is never split),
/// followed by `…(N bytes)` naming its full length. At most `ECHO_CHARS` characters, so at
/// most `4 * ECHO_CHARS` bytes, plus the suffix, whatever the value holds.
/// `Display` writes the bare escaped text; `Debug` writes it between double quotes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Echo<'a>(pub &'a str);

/// Wraps `value` for display in a message or a log line (see [`Echo`]).
pub fn echo(value: &str) -> Echo<'_> {
    Echo(value)
}

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = 0;
        for c in self.0.chars() {
            let escaped = c.escape_debug();
            let width = if c == '\'' { 1 } else { escaped.len() };
            if shown + width > ECHO_CHARS {
                return write!(f, "…({} bytes)", self.0.len());
            }
            shown += width;
            if c == '\'' {
                f.write_char(c)?;
            } else {
                for e in escaped {
                    f.write_char(e)?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_shown_whole_and_escaped() {
        assert_eq!(echo("gpu-a").to_string(), "gpu-a");
        assert_eq!(
            echo("n1\nINFO forged line\r\u{1b}[31m\"q\"\\'").to_string(),
            "n1\\nINFO forged line\\r\\u{1b}[31m\\\"q\\\"\\\\'"
        );
        assert_eq!(format!("{:?}", echo("a\nb")), "\"a\\nb\"");
        assert_eq!(echo("").to_string(), "");
    }

    #[test]
    fn long_values_are_cut_and_name_their_length() {
        let long = "x".repeat(1 << 20);
        let shown = echo(&long).to_string();
        assert_eq!(shown, format!("{}…(1048576 bytes)", "x".repeat(ECHO_CHARS)));
        // Exactly the limit is not cut.
        let exact = "y".repeat(ECHO_CHARS);
        assert_eq!(echo(&exact).to_string(), exact);
        // Characters, not bytes: a multi-byte character is never split.
        let wide = "é".repeat(ECHO_CHARS + 1);
        let shown = echo(&wide).to_string();
        assert!(shown.starts_with(&"é".repeat(ECHO_CHARS)), "{shown}");
        assert!(
            shown.ends_with(&format!("…({} bytes)", wide.len())),
            "{shown}"
        );
    }

    #[test]
    fn escapes_count_toward_the_limit_and_are_never_split() {
        // Each of these is shown as the 9 characters `\u{e1f31}`.
        let hidden = "\u{e1f31}".repeat(1000);
        let shown = echo(&hidden).to_string();
        let (text, suffix) = shown.split_once('…').expect("cut");
        assert_eq!(text, "\\u{e1f31}".repeat(ECHO_CHARS / 9));
        assert_eq!(suffix, format!("({} bytes)", hidden.len()));
        let newlines = "\n".repeat(ECHO_CHARS);
        let shown = echo(&newlines).to_string();
        let (text, _) = shown.split_once('…').expect("cut");
        assert_eq!(text, "\\n".repeat(ECHO_CHARS / 2));
    }
}
