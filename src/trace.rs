//! Gang traces for `gangscaler plan --simulate --trace FILE`: gang specs written by hand or
//! exported from a job history, read into planner [`GangShape`]s.
//!
//! A trace is JSON Lines (`*.jsonl`, `*.ndjson`: one gang per line; blank lines and lines
//! starting with `#` are skipped) or YAML (anything else: one gang per document, or a
//! document holding a list of gangs). Each gang:
//!
//! ```yaml
//! name: pretrain                  # optional; default: where it is ("line 3", "document 2")
//! members: 16                     # required, at least 1
//! minCount: 16                    # optional, 1..=members; default: members
//! resources:                      # per member, Kubernetes names and quantities
//!   cpu: "32"
//!   memory: 256Gi
//!   ephemeral-storage: 100Gi
//!   nvidia.com/gpu: 8             # any other name: an extended resource, whole units
//! volumes: {ebs.csi.aws.com: 3}   # attachable volumes per member, per CSI driver
//! nodeSelector: {gangscaler.io/pool: h100}
//! tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
//! topologyKey: topology.gangscaler.io/block
//! ```
//!
//! Unknown keys are errors, as in configuration files. Every error in a file is reported at
//! once, each naming the file, the line or document, the field and the value. Reading is
//! bounded like an object file ([`crate::yaml::OBJECTS`]). Depends on `planner`, `model`,
//! `yaml`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::quantity::Quantity;
use crate::model::{PodDemand, TaintEffect, Toleration, TolerationOperator};
use crate::planner::GangShape;

/// Errors listed at most per file; the rest are counted.
pub const MAX_ERRORS_PER_FILE: usize = 50;

/// The keys of a gang spec.
const KEYS: [&str; 8] = [
    "name",
    "members",
    "minCount",
    "resources",
    "volumes",
    "nodeSelector",
    "tolerations",
    "topologyKey",
];

/// Where in a trace a gang spec is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a JSON Lines file.
    Line(u32),
    /// 1-based YAML document, and the 0-based index when the document is a list.
    Document(u32, Option<u32>),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line(n) => write!(f, "line {n}"),
            Self::Document(d, None) => write!(f, "document {d}"),
            Self::Document(d, Some(i)) => write!(f, "document {d} item {i}"),
        }
    }
}

/// One invalid gang spec field (or line or document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where.
    pub at: Location,
    /// Dotted field path, e.g. `resources.memory`; empty for the whole line or document.
    pub field: String,
    /// The value as written (JSON), when there is one.
    pub value: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.at)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)?;
        if let Some(v) = &self.value {
            write!(f, " (got {v})")?;
        }
        Ok(())
    }
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read (missing, not a file, too large, not UTF-8).
    #[error(transparent)]
    Read(#[from] crate::yaml::ReadError),
    /// The file holds invalid gang specs; every one is listed (up to
    /// [`MAX_ERRORS_PER_FILE`]).
    #[error(
        "{} invalid gang spec(s) in {}:\n  {}{}",
        problems.len() + unlisted,
        path.display(),
        problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "),
        if *unlisted > 0 { format!("\n  ... and {unlisted} more") } else { String::new() }
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The problems, in file order.
        problems: Vec<Problem>,
        /// Problems found but not listed.
        unlisted: usize,
    },
    /// The file holds no gang spec.
    #[error("{}: no gang specs", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

impl Error {
    /// A short, bounded label for metrics and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Read(_) => "read",
            Self::Invalid { .. } => "invalid",
            Self::Empty { .. } => "empty",
        }
    }
}

/// Result alias for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reads the trace at `path` (JSON Lines for `*.jsonl`/`*.ndjson`, YAML otherwise), one shape
/// per gang spec in file order (not collapsed).
///
/// # Errors
/// [`Error::Read`] for a file that cannot be read, [`Error::Invalid`] listing every invalid
/// spec, [`Error::Empty`] for a file without specs.
pub fn read(path: &Path) -> Result<Vec<GangShape>> {
    let text = crate::yaml::read_file(path, &crate::yaml::OBJECTS)?;
    let jsonl = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"));
    parse(&text, jsonl).map_err(|e| e.at(path))
}

/// A parse failure without its file name.
#[derive(Debug)]
pub enum ParseError {
    /// Every invalid spec.
    Invalid(Vec<Problem>),
    /// No spec at all.
    Empty,
}

impl ParseError {
    fn at(self, path: &Path) -> Error {
        match self {
            Self::Invalid(mut problems) => {
                let unlisted = problems.len().saturating_sub(MAX_ERRORS_PER_FILE);
                problems.truncate(MAX_ERRORS_PER_FILE);
                Error::Invalid {
                    path: path.to_path_buf(),
                    problems,
                    unlisted,
                }
            }
            Self::Empty => Error::Empty {
                path: path.to_path_buf(),
            },
        }
    }
}

/// Parses a trace: JSON Lines when `jsonl`, else a YAML stream.
///
/// # Errors
/// Every invalid spec, or none at all.
pub fn parse(text: &str, jsonl: bool) -> Result<Vec<GangShape>, ParseError> {
    // Decoded as they are met, so problems come in file order.
    let mut shapes = Vec::new();
    let mut problems = Vec::new();
    let mut spec = |at: Location, value: &Value, problems: &mut Vec<Problem>| {
        if let Some(shape) = decode(at, value, problems) {
            shapes.push(shape);
        }
    };
    if jsonl {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = Location::Line(u32::try_from(i + 1).unwrap_or(u32::MAX));
            match serde_json::from_str::<Value>(line) {
                Ok(v) => spec(at, &v, &mut problems),
                Err(e) => problems.push(whole(
                    at,
                    format!(
                        "not valid JSON: {} at column {}",
                        json_message(&e),
                        e.column()
                    ),
                )),
            }
        }
    } else {
        match crate::yaml::documents(text, &crate::yaml::OBJECTS) {
            Ok(docs) => {
                for doc in docs {
                    match doc.value {
                        Value::Null => {}
                        Value::Array(items) => {
                            for (i, v) in items.into_iter().enumerate() {
                                let i = u32::try_from(i).unwrap_or(u32::MAX);
                                spec(Location::Document(doc.number, Some(i)), &v, &mut problems);
                            }
                        }
                        v => spec(Location::Document(doc.number, None), &v, &mut problems),
                    }
                }
            }
            Err(e) => problems.push(whole(
                Location::Document(e.document, None),
                format!("not valid YAML: {}", e.error.message),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(ParseError::Invalid(problems));
    }
    if shapes.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(shapes)
}

/// serde_json's message without its "at line 1 column N" (a trace line is one JSON text).
fn json_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rsplit_once(" at line ") {
        Some((message, _)) => message.to_owned(),
        None => s,
    }
}

fn whole(at: Location, message: String) -> Problem {
    Problem {
        at,
        field: String::new(),
        value: None,
        message,
    }
}

/// The value as written, for a message: JSON, cut after 80 characters.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

/// Collects the problems of one spec.
struct Spec<'a> {
    at: Location,
    problems: &'a mut Vec<Problem>,
    ok: bool,
}

impl Spec<'_> {
    fn bad(&mut self, field: &str, value: Option<&Value>, message: impl Into<String>) {
        self.ok = false;
        self.problems.push(Problem {
            at: self.at,
            field: field.to_owned(),
            value: value.map(shown),
            message: message.into(),
        });
    }

    fn string(&mut self, field: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::String(_) => {
                self.bad(field, Some(v), "must not be empty");
                None
            }
            _ => {
                self.bad(field, Some(v), "expected a string");
                None
            }
        }
    }

    fn count(&mut self, field: &str, v: &Value, least: u64) -> Option<u32> {
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if u64::from(n) >= least => Some(n),
            Some(_) => {
                self.bad(field, Some(v), format!("must be at least {least}"));
                None
            }
            None => {
                self.bad(
                    field,
                    Some(v),
                    format!("expected a whole number from {least} to {}", u32::MAX),
                );
                None
            }
        }
    }

    fn map<'v>(&mut self, field: &str, v: &'v Value) -> Option<&'v serde_json::Map<String, Value>> {
        let m = v.as_object();
        if m.is_none() {
            self.bad(field, Some(v), "expected a mapping");
        }
        m
    }

    fn resources(&mut self, v: &Value, demand: &mut PodDemand) {
        let Some(m) = self.map("resources", v) else {
            return;
        };
        for (name, q) in m {
            let field = format!("resources.{name}");
            let text = match q {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => {
                    self.bad(
                        &field,
                        Some(q),
                        "expected a quantity such as \"8\" or \"16Gi\"",
                    );
                    continue;
                }
            };
            let quantity = match Quantity::parse(&text) {
                Ok(q) => q,
                Err(e) => {
                    self.bad(&field, Some(q), format!("is not a valid quantity: {e}"));
                    continue;
                }
            };
            match name.as_str() {
                "cpu" => demand.cpu_milli = quantity.milli(),
                "memory" => demand.memory_bytes = quantity.units_ceil(),
                "ephemeral-storage" => demand.ephemeral_storage_bytes = quantity.units_ceil(),
                "" => self.bad("resources", Some(v), "a resource name must not be empty"),
                _ if !quantity.is_whole() => self.bad(
                    &field,
                    Some(q),
                    "an extended resource must be a whole number",
                ),
                _ if quantity.units_ceil() == 0 => {}
                _ => {
                    demand.extended.insert(name.clone(), quantity.units_ceil());
                }
            }
        }
    }

    fn volumes(&mut self, v: &Value, demand: &mut PodDemand) {
        let Some(m) = self.map("volumes", v) else {
            return;
        };
        for (driver, n) in m {
            if let Some(n) = self.count(&format!("volumes.{driver}"), n, 0)
                && n > 0
            {
                demand.volumes.insert(driver.clone(), n);
            }
        }
    }

    fn node_selector(&mut self, v: &Value, demand: &mut PodDemand) {
        let Some(m) = self.map("nodeSelector", v) else {
            return;
        };
        for (key, value) in m {
            if let Some(value) = value.as_str() {
                demand.node_selector.insert(key.clone(), value.to_owned());
            } else {
                self.bad(
                    &format!("nodeSelector.{key}"),
                    Some(value),
                    "expected a string",
                );
            }
        }
    }

    fn tolerations(&mut self, v: &Value, demand: &mut PodDemand) {
        let Some(items) = v.as_array() else {
            self.bad("tolerations", Some(v), "expected a list");
            return;
        };
        for (i, t) in items.iter().enumerate() {
            let path = format!("tolerations[{i}]");
            if let Some(t) = self.toleration(&path, t) {
                demand.tolerations.push(t);
            }
        }
    }

    fn toleration(&mut self, path: &str, v: &Value) -> Option<Toleration> {
        let m = self.map(path, v)?;
        let mut ok = true;
        let text = |this: &mut Self, key: &str| match m.get(key) {
            None => Some(String::new()),
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                this.bad(&format!("{path}.{key}"), Some(other), "expected a string");
                None
            }
        };
        let key = text(self, "key");
        let value = text(self, "value");
        let operator = text(self, "operator");
        let effect = text(self, "effect");
        for k in m.keys() {
            if !["key", "operator", "value", "effect"].contains(&k.as_str()) {
                self.bad(
                    &format!("{path}.{k}"),
                    None,
                    "unknown field; expected one of: key, operator, value, effect",
                );
                ok = false;
            }
        }
        let (key, value, operator, effect) = (key?, value?, operator?, effect?);
        let operator = match operator.as_str() {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            _ => {
                self.bad(
                    &format!("{path}.operator"),
                    m.get("operator"),
                    "expected Equal or Exists",
                );
                return None;
            }
        };
        let effect = match effect.as_str() {
            "" => None,
            e => match TaintEffect::parse(e) {
                Some(e) => Some(e),
                None => {
                    self.bad(
                        &format!("{path}.effect"),
                        m.get("effect"),
                        "expected NoSchedule, PreferNoSchedule or NoExecute",
                    );
                    return None;
                }
            },
        };
        if operator == TolerationOperator::Exists && !value.is_empty() {
            self.bad(
                &format!("{path}.value"),
                m.get("value"),
                "must be empty with operator Exists",
            );
            ok = false;
        }
        if operator == TolerationOperator::Equal && key.is_empty() {
            self.bad(
                &format!("{path}.key"),
                None,
                "required unless operator is Exists",
            );
            ok = false;
        }
        ok.then_some(Toleration {
            key,
            operator,
            value,
            effect,
        })
    }
}

/// One gang spec; `None` (with problems recorded) when it is invalid.
fn decode(at: Location, value: &Value, problems: &mut Vec<Problem>) -> Option<GangShape> {
    let mut spec = Spec {
        at,
        problems,
        ok: true,
    };
    let Some(m) = value.as_object() else {
        spec.bad("", Some(value), "expected a gang spec (a mapping)");
        return None;
    };
    for key in m.keys() {
        if !KEYS.contains(&key.as_str()) {
            spec.bad(
                key,
                None,
                format!("unknown field; expected one of: {}", KEYS.join(", ")),
            );
        }
    }
    let name = match m.get("name") {
        Some(v) => spec.string("name", v),
        None => Some(at.to_string()),
    };
    let members = match m.get("members") {
        Some(v) => spec.count("members", v, 1),
        None => {
            spec.bad("members", None, "required");
            None
        }
    };
    let min_count = match m.get("minCount") {
        Some(v) => spec.count("minCount", v, 1),
        None => members,
    };
    if let (Some(members), Some(min)) = (members, min_count)
        && min > members
    {
        spec.bad(
            "minCount",
            m.get("minCount"),
            format!("must not exceed members ({members})"),
        );
    }
    let mut demand = PodDemand::default();
    if let Some(v) = m.get("resources") {
        spec.resources(v, &mut demand);
    }
    if let Some(v) = m.get("volumes") {
        spec.volumes(v, &mut demand);
    }
    if let Some(v) = m.get("nodeSelector") {
        spec.node_selector(v, &mut demand);
    }
    if let Some(v) = m.get("tolerations") {
        spec.tolerations(v, &mut demand);
    }
    let topology_key = match m.get("topologyKey") {
        Some(v) => spec.string("topologyKey", v).map(Some),
        None => Some(None),
    };
    if !spec.ok {
        return None;
    }
    let (name, members, min_count, topology_key) = (name?, members?, min_count?, topology_key?);
    Some(GangShape::new(
        name.clone(),
        format!("{name}[*]"),
        demand,
        members,
        min_count,
        topology_key,
    ))
}

#[cfg(test)]
mod tests;
