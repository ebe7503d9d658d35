//! A small walker over a parsed YAML document that records every error with its field path
//! and value and flags keys nobody asked for, so a typo never passes silently. It can also
//! record every key path it was asked for, with the kind of value read there: that is the
//! schema `super::reference` lists.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::FieldError;
use crate::model::quantity::Quantity;

/// Most field errors kept per file; the rest are counted in one closing entry, so a junk
/// file cannot print hundreds of thousands of lines.
pub const MAX_ERRORS_PER_FILE: usize = 50;

/// The kind of value the validator reads at a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A mapping of further fields.
    Section,
    /// A list.
    List,
    /// A mapping of free-form keys (labels, CSI drivers).
    Map,
    /// A string (a path, a name, an address, one of a set of words).
    String,
    /// `true` or `false`.
    Bool,
    /// A whole number.
    Int,
    /// A finite number.
    Number,
    /// A Kubernetes quantity (`"16Gi"`).
    Quantity,
    /// A duration (`"30s"`).
    Duration,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Section => "section",
            Self::List => "list",
            Self::Map => "map",
            Self::String => "string",
            Self::Bool => "bool",
            Self::Int => "int",
            Self::Number => "number",
            Self::Quantity => "quantity",
            Self::Duration => "duration",
        })
    }
}

/// Collects field errors for one file.
#[derive(Debug)]
pub struct Errors {
    file: PathBuf,
    list: Vec<FieldError>,
    /// Errors beyond [`MAX_ERRORS_PER_FILE`], counted but not kept.
    dropped: usize,
    /// Every key path read, list indices written `[]`, when recording (see [`Self::recording`]).
    read: Option<BTreeMap<String, Kind>>,
}

impl Errors {
    pub fn new(file: &Path) -> Self {
        Self {
            file: file.to_path_buf(),
            list: Vec::new(),
            dropped: 0,
            read: None,
        }
    }

    /// Like [`Self::new`], and also records every key path the validator reads, for
    /// [`Self::into_read`].
    pub fn recording(file: &Path) -> Self {
        Self {
            read: Some(BTreeMap::new()),
            ..Self::new(file)
        }
    }

    /// The key paths read (`server.tls.certFile`, `taints[].key`) and the kind of value read
    /// at each; empty unless made with [`Self::recording`].
    pub fn into_read(self) -> BTreeMap<String, Kind> {
        self.read.unwrap_or_default()
    }

    /// The errors, with a last entry counting those beyond [`MAX_ERRORS_PER_FILE`].
    pub fn into_list(mut self) -> Vec<FieldError> {
        if self.dropped > 0 {
            self.list.push(FieldError {
                file: self.file,
                field: "(document)".to_owned(),
                value: None,
                message: format!(
                    "{} more error(s) not shown (at most {MAX_ERRORS_PER_FILE} are listed per file)",
                    self.dropped
                ),
                env: None,
            });
        }
        self.list
    }

    pub fn push(&mut self, field: &str, value: Option<&Value>, message: impl Into<String>) {
        if self.list.len() >= MAX_ERRORS_PER_FILE {
            self.dropped += 1;
            return;
        }
        self.list.push(FieldError {
            file: self.file.clone(),
            field: if field.is_empty() {
                "(document)".to_owned()
            } else {
                field.to_owned()
            },
            value: value.map(render),
            message: message.into(),
            env: None,
        });
    }
}

/// A number written as text: Rust's spellings (`1.5`, `nan`, `inf`) and YAML 1.2's
/// non-finite ones (`.nan`, `.inf`, `+.inf`, `-.inf`, in any case the YAML core schema allows).
fn parse_float(s: &str) -> Option<f64> {
    let s = s.trim();
    let (sign, rest) = match s.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    match rest {
        ".nan" | ".NaN" | ".NAN" => Some(f64::NAN),
        ".inf" | ".Inf" | ".INF" => Some(sign * f64::INFINITY),
        _ => s.parse().ok(),
    }
}

/// Renders a value for a message: strings quoted, so empty and space-padded values show.
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// `taints[0].key` -> `taints[].key`: the path of a field in the schema rather than in one
/// document.
fn schema_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// One mapping in the document, with the keys read so far and the kind of value read at each.
pub struct Obj<'a> {
    path: String,
    map: &'a Map<String, Value>,
    seen: BTreeMap<&'static str, Kind>,
}

impl<'a> Obj<'a> {
    /// The document root, or an error if the root is not a mapping.
    pub fn root(v: &'a Value, errs: &mut Errors) -> Option<Self> {
        Self::at(String::new(), v, errs)
    }

    /// The document root; a non-mapping root is reported and read as an empty mapping.
    pub fn root_or_empty(v: &'a Value, errs: &mut Errors) -> Obj<'a> {
        Self::root(v, errs).unwrap_or_else(|| Self::empty(String::new()))
    }

    /// A nested mapping; absent or invalid (reported) reads as an empty mapping.
    pub fn obj_or_empty(&mut self, key: &'static str, errs: &mut Errors) -> Obj<'a> {
        let path = self.path(key);
        self.obj(key, errs).unwrap_or_else(|| Self::empty(path))
    }

    fn empty(path: String) -> Obj<'a> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        Obj {
            path,
            map: EMPTY.get_or_init(Map::new),
            seen: BTreeMap::new(),
        }
    }

    fn at(path: String, v: &'a Value, errs: &mut Errors) -> Option<Self> {
        match v {
            Value::Object(map) => Some(Self {
                path,
                map,
                seen: BTreeMap::new(),
            }),
            Value::Null => None,
            other => {
                errs.push(&path, Some(other), "must be a mapping");
                None
            }
        }
    }

    /// The path of a key of this mapping.
    pub fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn get(&mut self, key: &'static str, kind: Kind) -> Option<&'a Value> {
        self.seen.insert(key, kind);
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// The value of a key as written, without marking the key as read (for error messages).
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// Whether the key is present with a non-null value (valid or not).
    pub fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !v.is_null())
    }

    /// Reports a missing required key.
    pub fn missing(&self, key: &str, errs: &mut Errors) {
        errs.push(&self.path(key), None, "is required");
    }

    /// A nested mapping.
    pub fn obj(&mut self, key: &'static str, errs: &mut Errors) -> Option<Obj<'a>> {
        let path = self.path(key);
        self.get(key, Kind::Section)
            .and_then(|v| Obj::at(path, v, errs))
    }

    /// A string.
    pub fn string(&mut self, key: &'static str, errs: &mut Errors) -> Option<String> {
        let v = self.get(key, Kind::String)?;
        match v {
            Value::String(s) => Some(s.clone()),
            // Environment overrides parse `1` or `true`; a YAML scalar is meant as text here.
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                errs.push(&self.path(key), Some(other), "must be a string");
                None
            }
        }
    }

    /// A string that must be one of `choices` (spelling, value): its value, or `None` when
    /// absent or, reported as "must be a, b or c", not one of them.
    pub fn one_of<T: Copy>(
        &mut self,
        key: &'static str,
        choices: &[(&str, T)],
        errs: &mut Errors,
    ) -> Option<T> {
        let s = self.string(key, errs)?;
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == s) {
            return Some(*v);
        }
        let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
        let listed = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.concat(),
        };
        errs.push(
            &self.path(key),
            Some(&Value::String(s)),
            format!("must be {listed}"),
        );
        None
    }

    /// A required non-empty string.
    pub fn required_string(&mut self, key: &'static str, errs: &mut Errors) -> Option<String> {
        match self.string(key, errs) {
            Some(s) if s.trim().is_empty() => {
                errs.push(
                    &self.path(key),
                    Some(&Value::String(s)),
                    "must not be empty",
                );
                None
            }
            Some(s) => Some(s),
            None => {
                if !self.has(key) {
                    self.missing(key, errs);
                }
                None
            }
        }
    }

    /// A boolean (also accepts the strings `true`/`false` that environment overrides give).
    pub fn bool(&mut self, key: &'static str, errs: &mut Errors) -> Option<bool> {
        let v = self.get(key, Kind::Bool)?;
        match v {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s == "true" => Some(true),
            Value::String(s) if s == "false" => Some(false),
            other => {
                errs.push(&self.path(key), Some(other), "must be true or false");
                None
            }
        }
    }

    /// An integer in `[min, max]`.
    pub fn int(&mut self, key: &'static str, min: i64, max: i64, errs: &mut Errors) -> Option<i64> {
        let v = self.get(key, Kind::Int)?;
        let n = match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(_) => {
                errs.push(
                    &self.path(key),
                    Some(v),
                    format!("must be an integer from {min} to {max}"),
                );
                None
            }
            None => {
                errs.push(&self.path(key), Some(v), "must be an integer");
                None
            }
        }
    }

    /// A finite number in `[min, max]`. NaN and infinity (YAML `.nan`, `.inf`, `-.inf`, which
    /// the parser hands over as those strings, or `nan`/`inf` from an environment override)
    /// are refused naming the field and the value.
    pub fn float(
        &mut self,
        key: &'static str,
        min: f64,
        max: f64,
        errs: &mut Errors,
    ) -> Option<f64> {
        let v = self.get(key, Kind::Number)?;
        let n = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => parse_float(s),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() && n >= min && n <= max => Some(n),
            Some(n) if !n.is_finite() => {
                errs.push(
                    &self.path(key),
                    Some(v),
                    format!("must be a finite number from {min} to {max}, not NaN or infinity"),
                );
                None
            }
            _ => {
                errs.push(
                    &self.path(key),
                    Some(v),
                    format!("must be a number from {min} to {max}"),
                );
                None
            }
        }
    }

    /// A Kubernetes quantity, written as a string or a number.
    pub fn quantity(&mut self, key: &'static str, errs: &mut Errors) -> Option<Quantity> {
        let v = self.get(key, Kind::Quantity)?;
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                errs.push(
                    &self.path(key),
                    Some(other),
                    "must be a quantity such as \"16Gi\" or \"500m\"",
                );
                return None;
            }
        };
        match Quantity::parse(&text) {
            Ok(q) => Some(q),
            Err(e) => {
                errs.push(
                    &self.path(key),
                    Some(v),
                    format!("is not a valid quantity: {e}"),
                );
                None
            }
        }
    }

    /// A duration such as `20s`, `5m` or `1h30m`.
    pub fn duration(&mut self, key: &'static str, errs: &mut Errors) -> Option<Duration> {
        let v = self.get(key, Kind::Duration)?;
        let parsed = match v {
            Value::String(s) if s.trim() == "0" => Ok(Duration::ZERO),
            Value::Number(n) if n.as_u64() == Some(0) => Ok(Duration::ZERO),
            Value::String(s) => humantime::parse_duration(s.trim()).map_err(|e| e.to_string()),
            _ => Err("expected a string".to_owned()),
        };
        match parsed {
            Ok(d) => Some(d),
            Err(e) => {
                errs.push(
                    &self.path(key),
                    Some(v),
                    format!("must be a duration such as \"30s\" or \"5m\": {e}"),
                );
                None
            }
        }
    }

    /// A mapping of strings to raw values, in key order.
    pub fn map(&mut self, key: &'static str, errs: &mut Errors) -> Vec<(String, &'a Value)> {
        match self.get(key, Kind::Map) {
            None => Vec::new(),
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Some(other) => {
                errs.push(&self.path(key), Some(other), "must be a mapping");
                Vec::new()
            }
        }
    }

    /// A list of raw values.
    pub fn list(&mut self, key: &'static str, errs: &mut Errors) -> Vec<&'a Value> {
        match self.get(key, Kind::List) {
            None => Vec::new(),
            Some(Value::Array(a)) => a.iter().collect(),
            Some(other) => {
                errs.push(&self.path(key), Some(other), "must be a list");
                Vec::new()
            }
        }
    }

    /// A mapping nested at an explicit path (list items).
    pub fn item(path: String, v: &'a Value, errs: &mut Errors) -> Option<Obj<'a>> {
        Obj::at(path, v, errs)
    }

    /// Reports every key that was never read (and, when `errs` is recording, records the
    /// keys that were).
    pub fn finish(self, errs: &mut Errors) {
        if let Some(read) = &mut errs.read {
            for (k, kind) in &self.seen {
                read.insert(schema_path(&join(&self.path, k)), *kind);
            }
        }
        for (k, v) in self.map {
            if !self.seen.contains_key(k.as_str()) {
                let known: Vec<&str> = self.seen.keys().copied().collect();
                errs.push(
                    &join(&self.path, k),
                    Some(v),
                    format!("unknown field; expected one of: {}", known.join(", ")),
                );
            }
        }
    }
}
