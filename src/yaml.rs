//! Bounded YAML: every YAML text gangscaler reads (configuration files, Kubernetes object
//! files) is read and parsed here, with a cap on the file size and a parser budget on alias
//! expansion, nesting depth and node count, so a small hostile file (a "billion laughs" alias
//! bomb) is an error instead of gigabytes of memory. Depends on nothing of ours.
//!
//! Parsing uses `serde-saphyr`, whose budget counts every event replayed through an alias.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

/// How much of a YAML input is accepted: the file size and the parser budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file read, in bytes.
    pub max_bytes: u64,
    /// Deepest nesting of mappings and sequences.
    pub max_depth: usize,
    /// Most nodes (mappings, sequences and scalars), counted after alias expansion.
    pub max_nodes: usize,
    /// Most parser events replayed through aliases, over the whole input.
    pub max_alias_events: usize,
    /// Most aliases (`*name`) and most anchors (`&name`), each.
    pub max_aliases: usize,
    /// Most documents in one input.
    pub max_documents: usize,
}

/// Configuration files (`provider.yaml`, node-group files): 1 MiB, 32 levels, 100,000 nodes,
/// 10,000 events replayed through aliases.
pub const CONFIG: Limits = Limits {
    max_bytes: 1 << 20,
    max_depth: 32,
    max_nodes: 100_000,
    max_alias_events: 10_000,
    max_aliases: 1_000,
    max_documents: 1,
};

/// Kubernetes object files (`gangscaler plan --objects`): 64 MiB, 64 levels, 16 million
/// nodes, 100,000 events replayed through aliases (`kubectl` never writes aliases), 100,000
/// documents.
pub const OBJECTS: Limits = Limits {
    max_bytes: 64 << 20,
    max_depth: 64,
    max_nodes: 16_000_000,
    max_alias_events: 100_000,
    max_aliases: 10_000,
    max_documents: 100_000,
};

impl Limits {
    fn options(&self, kubernetes: bool) -> serde_saphyr::Options {
        let max_bytes = usize::try_from(self.max_bytes).unwrap_or(usize::MAX);
        serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_reader_input_bytes: Some(max_bytes),
                max_depth: self.max_depth,
                max_nodes: self.max_nodes,
                // A node is one event (a scalar) or two (a collection's start and end).
                max_events: self.max_nodes.saturating_mul(3),
                max_aliases: self.max_aliases,
                max_anchors: self.max_aliases,
                max_documents: self.max_documents,
                max_total_scalar_bytes: max_bytes,
                max_recorded_anchor_events: self.max_alias_events,
                max_recorded_anchor_bytes: max_bytes,
            },
            alias_limits: serde_saphyr::alias_limits! {
                max_total_replayed_events: self.max_alias_events,
            },
            // Comments are not needed: not emitting them keeps them out of the event count.
            emit_comments: false,
            // YAML 1.2 booleans only: `yes`, `on` stay strings, as a label value should.
            strict_booleans: true,
            // Kubernetes reads YAML 1.1, where `0644` (a volume's defaultMode) is octal; in
            // configuration files a leading zero is kept as written (`rack: 007`).
            legacy_octal_numbers: kubernetes,
            leading_zero_numbers_as_strings: !kubernetes,
            // `.nan`, `.inf`, `-.inf` (and literals past f64, `1e999`): a configuration file
            // reads them as the strings `.nan`, `.inf`, `-.inf`, so the setting that holds one
            // is refused by name and value (`price: must be a finite number ...`); rejecting
            // them while parsing could only name the line. Kubernetes objects keep the
            // rejection (JSON, which Kubernetes converts YAML to, has no NaN or infinity).
            non_finite_float_policy: if kubernetes {
                serde_saphyr::NonFiniteFloatPolicy::Reject
            } else {
                serde_saphyr::NonFiniteFloatPolicy::AsString
            },
        }
    }
}

/// Why a YAML file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The path exists but is not a regular file (a directory, a FIFO, a socket, a device).
    #[error("{} is a {kind}, not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file is larger than the limit.
    #[error("{} is larger than the {} limit for this kind of file", path.display(), Size(*limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
}

/// A byte count written the way the limits are documented (`1 MiB`, `64 MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MIB: u64 = 1 << 20;
        const KIB: u64 = 1 << 10;
        match self.0 {
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            n => write!(f, "{n} bytes"),
        }
    }
}

/// What a path is, for an error message.
pub fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        return "regular file";
    }
    if t.is_dir() {
        return "directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_socket() {
            return "socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "device";
        }
    }
    "special file"
}

/// Reads a UTF-8 text file of at most `limits.max_bytes`, following symbolic links. The type
/// is checked before the file is opened, so a FIFO never blocks the caller.
///
/// # Errors
/// [`ReadError::Io`] (missing, dangling symlink, symlink loop, permission, not UTF-8),
/// [`ReadError::NotAFile`] or [`ReadError::TooLarge`].
pub fn read_file(path: &Path, limits: &Limits) -> Result<String, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile {
            path: path.to_path_buf(),
            kind: file_kind(&meta),
        });
    }
    let too_large = || ReadError::TooLarge {
        path: path.to_path_buf(),
        limit: limits.max_bytes,
    };
    if meta.len() > limits.max_bytes {
        return Err(too_large());
    }
    // The size may change between the check and the read: never read past the limit.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(limits.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limits.max_bytes {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// A YAML text that could not be parsed, or that exceeded its budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// 1-based line of the problem, when known.
    pub line: Option<u64>,
    /// The parser's message, with its line and column, on one line.
    pub message: String,
}

impl Error {
    fn from_saphyr(e: &serde_saphyr::Error, limits: &Limits) -> Self {
        let location = e.location().filter(|l| l.line() > 0);
        let message = match plain_words(root(e), limits) {
            Some(words) => match location {
                Some(l) => format!("line {}, column {}: {words}", l.line(), l.column()),
                None => words,
            },
            None => {
                let message = e.render_with_options(serde_saphyr::render_options! {
                    snippets: serde_saphyr::SnippetMode::Off,
                });
                // One line: a message may carry notes on later lines.
                message
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        };
        Self {
            line: location.map(|l| l.line()),
            message,
        }
    }

    fn too_large(len: usize, limits: &Limits) -> Self {
        Self {
            line: None,
            message: format!(
                "{len} bytes of YAML exceed the {} limit",
                Size(limits.max_bytes)
            ),
        }
    }
}

/// The error under the parser's wrappers (source snippets, alias replay context).
fn root(mut e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    use serde_saphyr::Error as E;
    loop {
        match e {
            E::WithSnippet { error, .. } | E::AliasError { error, .. } => e = error,
            _ => return e,
        }
    }
}

/// The problems a person can cause and fix, in their words (which key, which limit, what to
/// do); `None` for the rest, which keep the parser's own message.
fn plain_words(e: &serde_saphyr::Error, limits: &Limits) -> Option<String> {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach as B;
    let aliases = || {
        format!(
            "anchors and aliases (`&name` ... `*name`) expand to more than the {} parser events a file of this kind may expand through aliases: write the repeated values out, or alias smaller parts",
            limits.max_alias_events
        )
    };
    Some(match e {
        E::DuplicateMappingKey { key: Some(key), .. } => {
            format!("the key `{key}` is set twice in the same mapping: keep one of them")
        }
        E::DuplicateMappingKey { key: None, .. } => {
            "a key is set twice in the same mapping: keep one of them".to_owned()
        }
        E::AliasReplayCounterOverflow { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => aliases(),
        E::Budget { breach, .. } => match breach {
            B::RecordedAnchorEvents { .. } | B::RecordedAnchorBytes { .. } => aliases(),
            B::Aliases { .. } | B::Anchors { .. } | B::AliasAnchorRatio { .. } => format!(
                "more than {} anchors or aliases: a file of this kind may use at most {} of each",
                limits.max_aliases, limits.max_aliases
            ),
            B::Depth { .. } => format!(
                "mappings and lists are nested deeper than the {} levels a file of this kind may have",
                limits.max_depth
            ),
            B::Events { .. } | B::Nodes { .. } => format!(
                "more than the {} values (keys, scalars, mappings, lists, counted after aliases expand) a file of this kind may hold",
                limits.max_nodes
            ),
            B::Documents { .. } => format!(
                "more than the {} YAML document(s) (`---`) a file of this kind may hold",
                limits.max_documents
            ),
            B::InputBytes { .. } | B::ScalarBytes { .. } => format!(
                "larger than the {} a file of this kind may hold",
                Size(limits.max_bytes)
            ),
            _ => format!(
                "exceeds the YAML limits for a file of this kind (alias expansion, nesting depth, node count): {e}"
            ),
        },
        _ => return None,
    })
}

/// Parses one YAML document under the configuration-file budget ([`CONFIG`] semantics:
/// YAML 1.2 booleans, leading zeros kept as strings). An empty document is `null`.
///
/// # Errors
/// Malformed YAML, more than one document, duplicate keys, or a budget breach (too deep,
/// too many nodes, too much alias expansion), with the line and column.
pub fn config_value(text: &str, limits: &Limits) -> Result<Value, Error> {
    if text.len() as u64 > limits.max_bytes {
        return Err(Error::too_large(text.len(), limits));
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, limits.options(false))
        .map_err(|e| Error::from_saphyr(&e, limits))?;
    let mut docs = docs.into_iter();
    match (docs.next(), docs.next()) {
        (None, _) => Ok(Value::Null),
        (Some(v), None) => Ok(v),
        (Some(_), Some(_)) => Err(Error {
            line: None,
            message: "expected one YAML document, found several (`---`)".to_owned(),
        }),
    }
}

/// One non-empty document of a multi-document YAML stream, with its 1-based number (empty
/// documents are counted, so the number is what a reader counts by `---`).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// 1-based document number.
    pub number: u32,
    /// The document.
    pub value: Value,
}

/// A YAML stream error with the number of the document it happened in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("document {document}: {error}")]
pub struct StreamError {
    /// 1-based document number.
    pub document: u32,
    /// The parse error.
    #[source]
    pub error: Error,
}

/// Parses a multi-document YAML stream of Kubernetes objects (YAML 1.1 octal numbers, as
/// Kubernetes reads them) under `limits`. Empty documents are skipped but counted.
///
/// # Errors
/// The first malformed document or budget breach, with its document number.
pub fn documents(text: &str, limits: &Limits) -> Result<Vec<Document>, StreamError> {
    Ok(documents_as::<Value>(text, limits)?
        .into_iter()
        .map(|(number, value)| Document { number, value })
        .collect())
}

/// [`documents`] into any deserializable type (an order-keeping tree, say), each with its
/// 1-based document number.
///
/// # Errors
/// The first malformed document or budget breach, with its document number.
pub fn documents_as<T: serde::de::DeserializeOwned>(
    text: &str,
    limits: &Limits,
) -> Result<Vec<(u32, T)>, StreamError> {
    if text.len() as u64 > limits.max_bytes {
        return Err(StreamError {
            document: 1,
            error: Error::too_large(text.len(), limits),
        });
    }
    let parsed: Result<Vec<serde_saphyr::Spanned<T>>, _> =
        serde_saphyr::from_multiple_with_options(text, limits.options(true));
    match parsed {
        Ok(docs) => {
            // Empty documents produce no value: number the others by where they start.
            let starts = document_starts(text);
            Ok(docs
                .into_iter()
                .map(|d| (document_at(&starts, d.referenced.line()), d.value))
                .collect())
        }
        Err(e) => {
            let error = Error::from_saphyr(&e, limits);
            let starts = document_starts(text);
            let document = error.line.map_or_else(
                || u32::try_from(starts.len().max(1)).unwrap_or(u32::MAX),
                |line| document_at(&starts, line),
            );
            Err(StreamError { document, error })
        }
    }
}

/// The 1-based line of each document start (explicit `---` or implicit), in order, as far as
/// the text parses. The raw parser expands no aliases, so this is linear in the text.
fn document_starts(text: &str) -> Vec<u64> {
    use serde_saphyr::granit_parser::{Event, Parser};
    let mut starts = Vec::new();
    for item in Parser::new_from_str(text) {
        match item {
            Ok((Event::DocumentStart(..), span)) => {
                starts.push(u64::try_from(span.start.line()).unwrap_or(u64::MAX));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    starts
}

/// The number of the document containing `line`: how many documents start at or before it.
fn document_at(starts: &[u64], line: u64) -> u32 {
    let n = starts.partition_point(|&s| s <= line).max(1);
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Writes `value` as one YAML document.
///
/// # Errors
/// When `value` cannot be represented (a map with non-string keys, say).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(value)
}

#[cfg(test)]
mod tests;
