//! Checks of Kubernetes names: DNS labels and subdomains, label keys and values, extended
//! resource names. Each returns the message of an error, for the caller to push with its
//! field and value.

/// A DNS label (RFC 1123): a namespace, a node-group id.
pub(super) fn check_dns_label(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("must be a DNS label: 1-63 lowercase letters, digits or '-', starting and ending alphanumeric".to_owned())
    }
}

/// A DNS subdomain (RFC 1123): an object name, a label-key prefix, a CSI driver.
pub(super) fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1-253 characters".to_owned());
    }
    for part in s.split('.') {
        let ok = !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-');
        if !ok {
            return Err(
                "must be a DNS subdomain (lowercase letters, digits, '-' and '.')".to_owned(),
            );
        }
    }
    Ok(())
}

/// The name part of a label key (or a label value): 1-63 alphanumerics, `-`, `_`, `.`.
fn check_name_part(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(
            "name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
                .to_owned(),
        )
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name part.
pub(super) fn check_label_key(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix).map_err(|e| format!("prefix {e}"))?;
            check_name_part(name)
        }
        None => check_name_part(s),
    }
}

/// A label value: empty, or a name part.
pub(super) fn check_label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    check_name_part(s).map_err(|_| {
        "must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
            .to_owned()
    })
}

/// An extended resource name, which must be qualified (`example.com/name`).
pub(super) fn check_resource_name(s: &str) -> Result<(), String> {
    match s.split_once('/') {
        Some(_) => check_label_key(s).map_err(|e| format!("extended resource name {e}")),
        None => Err("extended resource name must be qualified, like example.com/name".to_owned()),
    }
}
