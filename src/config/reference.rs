//! The configuration reference, read from the validator itself: every field of `provider.yaml`
//! and of a node-group file, with the kind of value it takes. `docs/configuration.md` lists the
//! same fields, and `tests/config_reference.rs` holds the two lists equal.
//!
//! The fields are found by validating skeleton documents while the walker records every key
//! it is asked for. A skeleton starts empty; each section the validator asked for and did not
//! find is added as an empty mapping (each list as a list of one empty mapping), and the
//! document validated again, until nothing new is asked for. The values are not judged, only
//! the keys: what the validator reads is exactly what its unknown-field check accepts.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::validate::{self, BACKEND_TYPES};
use super::walk::Errors;
pub use super::walk::Kind;

/// One field of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Field {
    /// The key path: keys joined with `.`, `[]` after a list whose items are mappings
    /// (`server.tls.certFile`, `taints[].key`).
    pub path: String,
    /// What the validator reads there.
    pub kind: Kind,
}

/// Sections listed as fields themselves, not entered: `defaults.backend` takes the fields of
/// a node group's `backend`, listed with the node-group file.
const NOT_ENTERED: [&str; 1] = ["defaults.backend"];

/// Most rounds of adding sections; the schema is far shallower.
const MAX_ROUNDS: usize = 32;

/// Every field of `provider.yaml`, by path.
pub fn provider_fields() -> Vec<Field> {
    let read = discover(Value::Object(Map::new()), &|doc, errs| {
        validate::provider(doc, Path::new(""), &|_| None, errs);
    });
    leaves(read)
}

/// Every field of a node-group file, by path: the union over the backend types of what a
/// group of that type reads.
pub fn node_group_fields() -> Vec<Field> {
    let (_, defaults) = validate::provider(
        &Value::Object(Map::new()),
        Path::new(""),
        &|_| None,
        &mut Errors::new(Path::new("")),
    );
    let file = Path::new("reference.yaml");
    let mut all = BTreeMap::new();
    for (backend, _) in BACKEND_TYPES {
        let mut skeleton = Map::new();
        let mut section = Map::new();
        section.insert("type".to_owned(), Value::String(backend.to_owned()));
        skeleton.insert("backend".to_owned(), Value::Object(section));
        all.extend(discover(Value::Object(skeleton), &|doc, errs| {
            validate::node_group(doc, file, &defaults, errs);
        }));
    }
    leaves(all)
}

/// The key paths `validate` reads from `doc` grown until it asks for nothing new.
fn discover(mut doc: Value, validate: &dyn Fn(&Value, &mut Errors)) -> BTreeMap<String, Kind> {
    let mut read = BTreeMap::new();
    for _ in 0..MAX_ROUNDS {
        let mut errs = Errors::recording(Path::new(""));
        validate(&doc, &mut errs);
        read = errs.into_read();
        let mut grew = false;
        for (path, kind) in &read {
            let fill = match kind {
                Kind::Section if !NOT_ENTERED.contains(&path.as_str()) => Map::new().into(),
                Kind::List => Value::Array(vec![Map::new().into()]),
                _ => continue,
            };
            grew |= fill_absent(&mut doc, path, fill);
        }
        if !grew {
            break;
        }
    }
    read
}

/// Puts `fill` at `path` of `doc` unless something is there; whether it did.
fn fill_absent(doc: &mut Value, path: &str, fill: Value) -> bool {
    let mut at = doc;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        let (key, item) = match key.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (key, false),
        };
        let Value::Object(map) = at else {
            return false;
        };
        if keys.peek().is_none() {
            let slot = map.entry(key.to_owned()).or_insert(Value::Null);
            if !slot.is_null() {
                return false;
            }
            *slot = fill;
            return true;
        }
        let Some(next) = map.get_mut(key) else {
            return false;
        };
        at = if item {
            match next.get_mut(0) {
                Some(first) => first,
                None => return false,
            }
        } else {
            next
        };
    }
    false
}

/// The paths that are not the section or list of another path, as fields.
fn leaves(read: BTreeMap<String, Kind>) -> Vec<Field> {
    let parent = |path: &str| {
        read.keys().any(|other| {
            other
                .strip_prefix(path)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]."))
        })
    };
    read.iter()
        .filter(|(path, _)| !parent(path))
        .map(|(path, kind)| Field {
            path: path.clone(),
            kind: *kind,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::env;
    use super::*;

    fn paths(fields: &[Field]) -> Vec<&str> {
        fields.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn nested_sections_and_list_items_are_entered() {
        let provider = provider_fields();
        let p = paths(&provider);
        for path in [
            "server.address",
            "server.tls.certFile",
            "server.connections.max",
            "leaderElection.retryPeriod",
            "defaults.backend",
        ] {
            assert!(p.contains(&path), "{path} missing from {p:?}");
        }
        assert!(
            !p.contains(&"server"),
            "a section with fields is not a field"
        );
        let groups = node_group_fields();
        let g = paths(&groups);
        for path in [
            "taints[].effect",
            "backend.machineDeployment.name",
            "backend.attach.failDriver",
            "backend.failure.code",
            "capacity.ephemeralStorage",
        ] {
            assert!(g.contains(&path), "{path} missing from {g:?}");
        }
        assert!(!g.contains(&"taints"), "a list of mappings is not a field");
    }

    /// Every field outside a list can be set through its environment variable: its keys
    /// survive the trip through SCREAMING_SNAKE_CASE and back.
    #[test]
    fn every_field_has_an_environment_variable() {
        let fields = provider_fields().into_iter().chain(node_group_fields());
        for field in fields.filter(|f| !f.path.contains("[]")) {
            let name: Vec<String> = field.path.split('.').map(screaming_snake).collect();
            let var = format!("GANGSCALER__{}", name.join("__"));
            let got = env::overrides(
                std::iter::once((var.clone(), Ok("x".to_owned()))),
                "GANGSCALER",
            )
            .unwrap_or_else(|e| panic!("{var}: {e}"));
            let want: Vec<&str> = field.path.split('.').collect();
            assert_eq!(got.len(), 1, "{var}");
            assert_eq!(got[0].path, want, "{var} does not set {}", field.path);
        }
    }

    /// `maxSize` -> `MAX_SIZE`, as an operator writes it.
    fn screaming_snake(key: &str) -> String {
        let mut out = String::new();
        for c in key.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }
}
