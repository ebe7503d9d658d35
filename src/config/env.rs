//! Environment overrides: `GANGSCALER__SERVER__ADDRESS=...` for the provider file and
//! `GANGSCALER_NG_<STEM>__MAX_SIZE=...` for a node-group file. After the prefix, `__`
//! separates nested keys and each key is written in SCREAMING_SNAKE_CASE for a camelCase key
//! (`MAX_SIZE` sets `maxSize`). Values that read as a boolean, an integer or a finite number
//! become one; anything else is a string. The validator checks overridden values exactly like
//! written ones.

use serde_json::{Map, Number, Value};

/// One override: the camelCase key path and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// Key path, outermost first (`["capacity", "pods"]`).
    pub path: Vec<String>,
    /// The parsed value.
    pub value: Value,
    /// The variable, as named in the environment.
    pub variable: String,
    /// Its value, as written.
    pub raw: String,
}

/// An override applied to a document: where, by which variable, and what it replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The dotted key path it set (`server.connections.max`), as field errors name fields.
    pub field: String,
    /// The variable, as named in the environment.
    pub variable: String,
    /// Its value, as written.
    pub raw: String,
    /// What the file had at that path (`None`: nothing).
    pub replaced: Option<Value>,
}

impl Applied {
    /// Whether an error of `field` concerns the value this override set: the same path, or
    /// one inside it.
    pub fn covers(&self, field: &str) -> bool {
        field
            .strip_prefix(self.field.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    }
}

/// The overrides among `vars` for `prefix` (matched case-insensitively, followed by `__`),
/// sorted by key path so that the result never depends on the environment's order. A value
/// that is not valid Unicode is passed as `Err(())`.
///
/// # Errors
/// A message naming the variable when it has an empty key segment or a non-Unicode value.
pub fn overrides(
    vars: impl Iterator<Item = (String, Result<String, ()>)>,
    prefix: &str,
) -> Result<Vec<Override>, String> {
    let pattern = format!("{prefix}__").to_lowercase();
    let mut out = Vec::new();
    for (name, value) in vars {
        let lower = name.to_lowercase();
        let Some(rest) = lower.strip_prefix(&pattern) else {
            continue;
        };
        let value = value
            .map_err(|()| format!("environment variable {name}: the value is not valid Unicode"))?;
        let segments: Vec<&str> = rest.split("__").collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(format!(
                "environment variable {name}: empty key between `__` separators"
            ));
        }
        out.push(Override {
            path: segments.into_iter().map(camel_case).collect(),
            value: parse(&value),
            variable: name,
            raw: value,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Applies `overrides` to `doc`, creating mappings as needed and replacing any non-mapping
/// value in the way, and returns what each one replaced, so that an error in an overridden
/// value can name its variable. An empty document becomes a mapping; a document whose root
/// is not a mapping is left for the validator to report.
pub fn apply(doc: &mut Value, overrides: Vec<Override>) -> Vec<Applied> {
    let mut applied = Vec::with_capacity(overrides.len());
    if overrides.is_empty() {
        return applied;
    }
    if doc.is_null() {
        *doc = Value::Object(Map::new());
    }
    for o in overrides {
        let Some((last, parents)) = o.path.split_last() else {
            continue;
        };
        let mut at = &mut *doc;
        for key in parents {
            let Value::Object(map) = at else {
                break;
            };
            let slot = map
                .entry(key.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            at = slot;
        }
        if let Value::Object(map) = at {
            let replaced = map.insert(last.clone(), o.value);
            applied.push(Applied {
                field: o.path.join("."),
                variable: o.variable,
                raw: o.raw,
                replaced,
            });
        }
    }
    applied
}

/// `max_size` -> `maxSize` (the segment is already lower case).
fn camel_case(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for (i, word) in segment.split('_').filter(|w| !w.is_empty()).enumerate() {
        let mut chars = word.chars();
        if i > 0
            && let Some(first) = chars.next()
        {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        } else {
            out.push_str(word);
        }
    }
    out
}

/// `true`/`false` (any case), an integer, a finite number, else the string as given.
fn parse(value: &str) -> Value {
    if let Ok(b) = value.to_lowercase().parse::<bool>() {
        return Value::Bool(b);
    }
    if let Ok(n) = value.parse::<i64>() {
        return Value::Number(n.into());
    }
    if let Some(n) = value
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(Number::from_f64)
    {
        return Value::Number(n);
    }
    Value::String(value.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(list: &[(&str, &str)]) -> impl Iterator<Item = (String, Result<String, ()>)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), Ok((*v).to_owned())))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn keys_after_the_prefix_become_camel_case_paths() {
        let o = overrides(
            vars(&[
                ("GANGSCALER__SERVER__METRICS_ADDRESS", "127.0.0.1:1"),
                ("GANGSCALER_NG_GPU_A__MAX_SIZE", "7"),
                ("gangscaler__lifecycle__attach_timeout", "2m"),
            ]),
            "GANGSCALER",
        )
        .unwrap();
        assert_eq!(
            o,
            [
                Override {
                    path: vec!["lifecycle".into(), "attachTimeout".into()],
                    value: json!("2m"),
                    variable: "gangscaler__lifecycle__attach_timeout".into(),
                    raw: "2m".into(),
                },
                Override {
                    path: vec!["server".into(), "metricsAddress".into()],
                    value: json!("127.0.0.1:1"),
                    variable: "GANGSCALER__SERVER__METRICS_ADDRESS".into(),
                    raw: "127.0.0.1:1".into(),
                },
            ]
        );
    }

    #[test]
    fn values_are_typed_like_yaml_scalars() {
        assert_eq!(parse("TRUE"), json!(true));
        assert_eq!(parse("7"), json!(7));
        assert_eq!(parse("0.5"), json!(0.5));
        assert_eq!(parse("nan"), json!("nan"));
        assert_eq!(parse("inf"), json!("inf"));
        assert_eq!(parse("16Gi"), json!("16Gi"));
        assert_eq!(parse(""), json!(""));
    }

    #[test]
    fn malformed_variables_are_named() {
        let err = overrides(vars(&[("GANGSCALER__SERVER____X", "1")]), "GANGSCALER").unwrap_err();
        assert!(err.contains("GANGSCALER__SERVER____X"), "{err}");
        let err = overrides(
            vec![("GANGSCALER__A".to_owned(), Err(()))].into_iter(),
            "GANGSCALER",
        )
        .unwrap_err();
        assert!(err.contains("GANGSCALER__A"), "{err}");
    }

    fn set(path: &[&str], value: Value) -> Override {
        Override {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            raw: value.to_string(),
            value,
            variable: format!("GANGSCALER__{}", path.join("__").to_uppercase()),
        }
    }

    #[test]
    fn each_applied_override_says_what_it_replaced_and_which_errors_are_its_own() {
        let mut doc = json!({"maxSize": 16, "capacity": {"cpu": "1"}});
        let applied = apply(
            &mut doc,
            vec![
                set(&["maxSize"], json!("abc")),
                set(&["capacity", "pods"], json!(4)),
            ],
        );
        assert_eq!(applied[0].field, "maxSize");
        assert_eq!(applied[0].variable, "GANGSCALER__MAXSIZE");
        assert_eq!(applied[0].replaced, Some(json!(16)));
        assert_eq!(applied[1].field, "capacity.pods");
        assert_eq!(applied[1].replaced, None);
        assert!(applied[0].covers("maxSize"));
        assert!(
            !applied[0].covers("maxSizeX"),
            "a longer key is another field"
        );
        assert!(applied[1].covers("capacity.pods"));
        assert!(
            !applied[1].covers("capacity"),
            "the section around it is not its own"
        );
        let section = Applied {
            field: "taints".into(),
            variable: "V".into(),
            raw: String::new(),
            replaced: None,
        };
        assert!(section.covers("taints[0].effect"));
    }

    #[test]
    fn overrides_create_and_replace_what_is_in_the_way() {
        let mut doc = json!({"server": "oops", "capacity": {"cpu": "1"}});
        apply(
            &mut doc,
            vec![
                set(&["capacity", "pods"], json!(4)),
                set(&["server", "address"], json!("x")),
            ],
        );
        assert_eq!(
            doc,
            json!({"server": {"address": "x"}, "capacity": {"cpu": "1", "pods": 4}})
        );
        let mut empty = Value::Null;
        apply(&mut empty, vec![set(&["maxSize"], json!(3))]);
        assert_eq!(empty, json!({"maxSize": 3}));
        let mut list = json!([1]);
        apply(&mut list, vec![set(&["maxSize"], json!(3))]);
        assert_eq!(list, json!([1]), "left for the validator to report");
    }
}
