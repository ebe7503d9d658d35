//! Names for objects and fields in what the readers report: the namespace of an object
//! written without one, `namespace/name` for messages, and the dotted path of a field.

/// Namespace assumed for namespaced objects written without one.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// `namespace/name`, `name` or `<unnamed>`, for messages; empty parts count as missing.
pub(crate) fn object_name(namespace: Option<&str>, name: Option<&str>) -> String {
    match (
        namespace.filter(|n| !n.is_empty()),
        name.filter(|n| !n.is_empty()),
    ) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => name.to_owned(),
        _ => "<unnamed>".to_owned(),
    }
}

/// The dotted path of a field `inner` (as `serde_path_to_error` writes it, `.` for the value
/// itself) below `prefix` (empty for the object root).
pub(crate) fn join_path(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner) {
        (true, p) => p.to_owned(),
        (false, ".") => prefix.to_owned(),
        (false, p) => format!("{prefix}.{p}"),
    }
}
