//! The `leaderElection` section of the provider file: the Lease, this replica's identity and
//! the timings, with the defaults taken from the environment (`POD_NAMESPACE`, `POD_NAME`,
//! `HOSTNAME`, the host name).

use std::time::Duration;

use serde_json::Value;

use super::names::{check_dns_label, check_dns_subdomain};
use crate::config::LeaderElectionSettings;
use crate::config::walk::{Errors, Obj};

/// Shortest and longest `leaderElection` timing.
const LEADER_MIN_PERIOD: Duration = Duration::from_millis(100);
const LEADER_MAX_PERIOD: Duration = Duration::from_secs(60 * 60);
/// Up to this multiple of `retryPeriod` passes between two attempts (the jitter).
const LEADER_JITTER: f64 = 1.2;

/// Reads the environment variable of that name.
type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// A value, and where it came from when it was not written in the file.
type Sourced = (String, Option<&'static str>);

/// The `leaderElection` section. Its settings are checked even when it is disabled; defaults
/// that come from the environment (`POD_NAMESPACE`, `POD_NAME`, the host name) only when it
/// is enabled. `None` unless enabled.
pub(super) fn leader_election(
    mut l: Obj<'_>,
    env: Env<'_>,
    errs: &mut Errors,
) -> Option<LeaderElectionSettings> {
    let enabled = l.bool("enabled", errs).unwrap_or(false);
    let lease_name = l
        .string("leaseName", errs)
        .unwrap_or_else(|| LeaderElectionSettings::DEFAULT_LEASE_NAME.to_owned());
    if let Err(e) = check_dns_subdomain(&lease_name) {
        errs.push(
            &l.path("leaseName"),
            Some(&Value::String(lease_name.clone())),
            e,
        );
    }
    let namespace = namespace(&mut l, enabled, env, errs);
    let identity = identity(&mut l, enabled, env, errs);
    let (lease_duration, renew_deadline, retry_period) = timings(&mut l, errs);
    l.finish(errs);
    let (namespace, _) = namespace?;
    let (identity, _) = identity?;
    enabled.then_some(LeaderElectionSettings {
        lease_name,
        namespace,
        identity,
        lease_duration,
        renew_deadline,
        retry_period,
    })
}

/// `namespace`, else (when enabled) `POD_NAMESPACE`, else `kube-system`.
fn namespace(l: &mut Obj<'_>, enabled: bool, env: Env<'_>, errs: &mut Errors) -> Option<Sourced> {
    let namespace = match l.string("namespace", errs) {
        Some(ns) => Some((ns, None)),
        None if enabled => Some(set(env("POD_NAMESPACE")).map_or_else(
            || ("kube-system".to_owned(), None),
            |ns| (ns, Some("POD_NAMESPACE")),
        )),
        None => None,
    };
    if let Some((ns, from)) = &namespace
        && let Err(e) = check_dns_label(ns)
    {
        errs.push(
            &l.path("namespace"),
            Some(&Value::String(ns.clone())),
            from_env(e, *from),
        );
    }
    namespace
}

/// `identity`, else (when enabled) `POD_NAME`, else `HOSTNAME`, else the host name.
fn identity(l: &mut Obj<'_>, enabled: bool, env: Env<'_>, errs: &mut Errors) -> Option<Sourced> {
    let identity = match l.string("identity", errs) {
        Some(id) => Some((id, None)),
        None if enabled => {
            let found = set(env("POD_NAME"))
                .map(|id| (id, "POD_NAME"))
                .or_else(|| set(env("HOSTNAME")).map(|id| (id, "HOSTNAME")))
                .or_else(|| host_name().map(|id| (id, "the host name")));
            match found {
                Some((id, from)) => Some((id, Some(from))),
                None => {
                    errs.push(
                        &l.path("identity"),
                        None,
                        "is not set, and neither POD_NAME, HOSTNAME nor the host name gives one; set it to a name unique among the replicas",
                    );
                    None
                }
            }
        }
        None => None,
    };
    if let Some((id, from)) = &identity
        && let Err(e) = check_identity(id)
    {
        errs.push(
            &l.path("identity"),
            Some(&Value::String(id.clone())),
            from_env(e, *from),
        );
    }
    identity
}

/// A variable's value, unless it is empty.
fn set(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// `leaseDuration`, `renewDeadline` and `retryPeriod`, each its default when absent or
/// invalid (reported), and the checks between them.
fn timings(l: &mut Obj<'_>, errs: &mut Errors) -> (Duration, Duration, Duration) {
    let mut timing = |key: &'static str, default: Duration, errs: &mut Errors| {
        let Some(d) = l.duration(key, errs) else {
            return default;
        };
        let bad = if d < LEADER_MIN_PERIOD || d > LEADER_MAX_PERIOD {
            "must be a duration from 100ms to 1h"
        } else if key == "leaseDuration" && d.subsec_nanos() != 0 {
            "must be a whole number of seconds (a Lease counts in seconds)"
        } else {
            return d;
        };
        errs.push(&l.path(key), l.raw(key), bad);
        default
    };
    let lease_duration = timing(
        "leaseDuration",
        LeaderElectionSettings::DEFAULT_LEASE_DURATION,
        errs,
    );
    let renew_deadline = timing(
        "renewDeadline",
        LeaderElectionSettings::DEFAULT_RENEW_DEADLINE,
        errs,
    );
    let retry_period = timing(
        "retryPeriod",
        LeaderElectionSettings::DEFAULT_RETRY_PERIOD,
        errs,
    );
    check_renew_deadline(l, lease_duration, renew_deadline, retry_period, errs);
    (lease_duration, renew_deadline, retry_period)
}

/// `renewDeadline` is less than `leaseDuration` and more than the jitter times `retryPeriod`.
fn check_renew_deadline(
    l: &Obj<'_>,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    errs: &mut Errors,
) {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    if renew_deadline >= lease_duration {
        errs.push(
            &l.path("renewDeadline"),
            Some(&Value::String(show(renew_deadline))),
            format!(
                "must be less than leaseDuration ({}): the leader must stop acting before another replica may take the lease",
                show(lease_duration)
            ),
        );
    } else if renew_deadline.as_secs_f64() <= retry_period.as_secs_f64() * LEADER_JITTER {
        errs.push(
            &l.path("renewDeadline"),
            Some(&Value::String(show(renew_deadline))),
            format!(
                "must be more than {LEADER_JITTER} × retryPeriod ({}), so that the leader has more than one attempt to renew",
                show(retry_period)
            ),
        );
    }
}

/// `message`, saying where a value not written in the file came from.
fn from_env(message: String, from: Option<&str>) -> String {
    match from {
        Some(from) => format!("{message} (taken from {from}; set it explicitly)"),
        None => message,
    }
}

/// The host name, from the kernel.
fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// A replica identity: it is the Lease's holder and names the replica's audit file.
fn check_identity(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err("must be 1-253 letters, digits, '-', '_' or '.', not starting with '.' (it names this replica's audit file)".to_owned())
    }
}
