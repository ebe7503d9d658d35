//! An ordered YAML/JSON tree: mappings keep their keys in the order they were read, so a
//! converted manifest reads like its input with only the gang fields changed.
//! (`serde_json::Value` sorts keys; its order-keeping feature would rebuild every crate that
//! uses `serde_json`.)

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// One node of a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `null` or an empty value.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// An empty mapping.
    #[must_use]
    pub fn map() -> Self {
        Self::Map(Vec::new())
    }

    /// A string node.
    pub fn str(s: impl Into<String>) -> Self {
        Self::Str(s.into())
    }

    /// The value at `key` of a mapping.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Self::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at `key` of a mapping, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Self::Map(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value at a path of mapping keys.
    #[must_use]
    pub fn at(&self, path: &[&str]) -> Option<&Node> {
        path.iter().try_fold(self, |node, key| node.get(key))
    }

    /// The value at a path of mapping keys, mutably.
    pub fn at_mut(&mut self, path: &[&str]) -> Option<&mut Node> {
        path.iter().try_fold(self, |node, key| node.get_mut(key))
    }

    /// The string at `key`, if it is one.
    #[must_use]
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Node::as_str)
    }

    /// This node as a string.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// This node as an integer.
    #[must_use]
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            Self::UInt(u) => i64::try_from(*u).ok(),
            _ => None,
        }
    }

    /// This node's entries, if it is a mapping.
    #[must_use]
    pub fn entries(&self) -> Option<&[(String, Node)]> {
        match self {
            Self::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// This node's items, if it is a sequence.
    #[must_use]
    pub fn items(&self) -> Option<&[Node]> {
        match self {
            Self::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// This node's items, mutably, if it is a sequence.
    pub fn items_mut(&mut self) -> Option<&mut Vec<Node>> {
        match self {
            Self::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// Sets `key` of a mapping: in place when it exists, appended otherwise. Does nothing
    /// to a node that is not a mapping.
    pub fn set(&mut self, key: &str, value: Node) {
        if let Self::Map(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value,
                None => entries.push((key.to_owned(), value)),
            }
        }
    }

    /// Builder form of [`Node::set`].
    #[must_use]
    pub fn with(mut self, key: &str, value: Node) -> Self {
        self.set(key, value);
        self
    }

    /// Removes `key` from a mapping and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Node> {
        match self {
            Self::Map(entries) => {
                let at = entries.iter().position(|(k, _)| k == key)?;
                Some(entries.remove(at).1)
            }
            _ => None,
        }
    }

    /// Replaces `old` by `new` with `value` at the same position, or appends `new` when
    /// `old` is absent. Returns the old value.
    pub fn rename(&mut self, old: &str, new: &str, value: Node) -> Option<Node> {
        let Self::Map(entries) = self else {
            return None;
        };
        entries.retain(|(k, _)| k != new || k == old);
        match entries.iter().position(|(k, _)| k == old) {
            Some(at) => {
                let (_, previous) = std::mem::replace(&mut entries[at], (new.to_owned(), value));
                Some(previous)
            }
            None => {
                entries.push((new.to_owned(), value));
                None
            }
        }
    }

    /// The JSON value of this node (mapping order is lost).
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Int(i) => Value::from(*i),
            Self::UInt(u) => Value::from(*u),
            Self::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Self::Str(s) => Value::String(s.clone()),
            Self::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Self::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// A node from a JSON value (keys in the value's order, which is sorted).
    #[must_use]
    pub fn from_json(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => n
                .as_i64()
                .map(Self::Int)
                .or_else(|| n.as_u64().map(Self::UInt))
                .unwrap_or_else(|| Self::Float(n.as_f64().unwrap_or_default())),
            Value::String(s) => Self::Str(s.clone()),
            Value::Array(items) => Self::Seq(items.iter().map(Self::from_json).collect()),
            Value::Object(map) => Self::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), Self::from_json(v)))
                    .collect(),
            ),
        }
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => serializer.serialize_unit(),
            Self::Bool(b) => serializer.serialize_bool(*b),
            Self::Int(i) => serializer.serialize_i64(*i),
            Self::UInt(u) => serializer.serialize_u64(*u),
            Self::Float(f) => serializer.serialize_f64(*f),
            Self::Str(s) => serializer.serialize_str(s),
            Self::Seq(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Self::Map(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::UInt(v), Node::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            // Kubernetes' YAML reader turns scalar keys into strings; so do we.
            let key = match key {
                Node::Str(s) => s,
                Node::Bool(b) => b.to_string(),
                Node::Int(i) => i.to_string(),
                Node::UInt(u) => u.to_string(),
                Node::Float(f) => f.to_string(),
                Node::Null => "null".to_owned(),
                Node::Seq(_) | Node::Map(_) => {
                    return Err(de::Error::custom("a mapping key must be a scalar"));
                }
            };
            let value = map.next_value()?;
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn mappings_keep_their_order_through_a_round_trip() {
        let text = "zeta: 1\nalpha:\n  m: x\n  b: [1, 2]\nmid: true\n";
        let node = parse(text);
        let keys: Vec<&str> = node
            .entries()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["zeta", "alpha", "mid"]);
        let out = serde_saphyr::to_string(&node).unwrap();
        assert_eq!(parse(&out), node);
        assert!(out.find("zeta").unwrap() < out.find("alpha").unwrap());
    }

    #[test]
    fn strings_that_look_like_other_scalars_stay_strings() {
        for s in [
            "0", "1.5", "true", "null", "yes", "on", "~", "0644", "1e3", "",
        ] {
            let node = Node::map().with("v", Node::str(s));
            let out = serde_saphyr::to_string(&node).unwrap();
            assert_eq!(
                parse(&out).get("v"),
                Some(&Node::str(s)),
                "{s:?} wrote {out}"
            );
        }
    }

    #[test]
    fn rename_keeps_the_position_and_set_appends() {
        let mut node = parse("a: 1\nold: 2\nz: 3\n");
        node.rename("old", "new", Node::Int(9));
        node.set("tail", Node::Null);
        let keys: Vec<&str> = node
            .entries()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["a", "new", "z", "tail"]);
        assert_eq!(node.get("new"), Some(&Node::Int(9)));
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let err = serde_saphyr::from_str::<Node>("a: 1\na: 2\n").unwrap_err();
        assert!(err.to_string().contains("duplicate"), "{err}");
    }
}
