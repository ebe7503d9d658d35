//! The `server` section of the provider file: listen addresses, TLS or plaintext, the
//! shutdown grace period and the limits of gRPC connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::config::walk::{Errors, Obj};
use crate::config::{
    ConnectionSettings, DEFAULT_SHUTDOWN_GRACE_PERIOD, DEFAULT_TLS_POLL_INTERVAL, ServerSettings,
    TlsFiles, Transport,
};

/// Default gRPC address.
const DEFAULT_ADDRESS: &str = "127.0.0.1:8086";
/// Default metrics address.
const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9464";
/// Bounds of `server.shutdownGracePeriod` (0 closes the connections at once).
const SHUTDOWN_GRACE_PERIOD: Bounds =
    (Duration::ZERO, Duration::from_secs(5 * 60), "from 0s to 5m");
/// Bounds of `server.tls.pollInterval`.
const TLS_POLL_INTERVAL: Bounds = (
    Duration::from_millis(100),
    Duration::from_secs(5 * 60),
    "from 100ms to 5m",
);
/// Bounds of `server.connections.handshakeTimeout`.
const HANDSHAKE_TIMEOUT: Bounds = (
    Duration::from_millis(10),
    Duration::from_secs(5 * 60),
    "from 10ms to 5m",
);
/// Bounds of `server.connections.keepaliveInterval` and `.keepaliveTimeout`.
const KEEPALIVE: Bounds = (
    Duration::from_secs(1),
    Duration::from_secs(60 * 60),
    "from 1s to 1h",
);
/// Bounds of `server.connections.idleTimeout` (it must also exceed a keepalive round).
const IDLE_TIMEOUT: Bounds = (
    Duration::from_secs(1),
    Duration::from_secs(24 * 60 * 60),
    "from 1s to 24h",
);
/// Bounds of `server.connections.max`.
const MAX_CONNECTIONS: i64 = 65_536;

/// The shortest and longest duration a setting accepts, and how an error names them.
pub(super) type Bounds = (Duration, Duration, &'static str);

/// The `server` section; `None` when the settings are invalid (reported).
pub(super) fn server_settings(
    mut s: Obj<'_>,
    dir: &Path,
    errs: &mut Errors,
) -> Option<ServerSettings> {
    let address = socket_addr(&mut s, "address", DEFAULT_ADDRESS, errs);
    let connections = connection_settings(s.obj_or_empty("connections", errs), errs);
    let metrics_address = socket_addr(&mut s, "metricsAddress", DEFAULT_METRICS_ADDRESS, errs);
    let plaintext = s.bool("plaintext", errs).unwrap_or(false);
    let force = s.bool("allowNonLoopbackPlaintext", errs).unwrap_or(false);
    let shutdown_grace_period = bounded_duration(
        &mut s,
        "shutdownGracePeriod",
        DEFAULT_SHUTDOWN_GRACE_PERIOD,
        SHUTDOWN_GRACE_PERIOD,
        errs,
    );
    let mut tls_poll_interval = DEFAULT_TLS_POLL_INTERVAL;
    let tls = s
        .obj("tls", errs)
        .and_then(|t| tls_files(t, dir, &mut tls_poll_interval, errs));
    let had_tls = s.path("tls");
    let tls_given = s.has("tls");
    s.finish(errs);
    let address = address?;
    if let Some(metrics) = metrics_address
        && conflicts(address, metrics)
    {
        errs.push(
            "server.metricsAddress",
            Some(&Value::String(metrics.to_string())),
            format!(
                "must not be the gRPC server.address ({address}): both listeners cannot bind it"
            ),
        );
        return None;
    }
    let plain = Plain {
        asked: plaintext,
        force,
        tls_given,
        tls_path: had_tls,
    };
    let transport = transport(address, tls, &plain, errs)?;
    Some(ServerSettings {
        address,
        metrics_address: metrics_address?,
        transport,
        connections,
        shutdown_grace_period,
        tls_poll_interval,
    })
}

/// The `server.tls` section: the three files, checked as `serve` would load them, and the
/// poll interval (into `poll_interval`).
fn tls_files(
    mut t: Obj<'_>,
    dir: &Path,
    poll_interval: &mut Duration,
    errs: &mut Errors,
) -> Option<TlsFiles> {
    *poll_interval = bounded_duration(
        &mut t,
        "pollInterval",
        DEFAULT_TLS_POLL_INTERVAL,
        TLS_POLL_INTERVAL,
        errs,
    );
    let file = |key: &'static str, t: &mut Obj<'_>, errs: &mut Errors| -> Option<PathBuf> {
        let p = t.required_string(key, errs)?;
        let path = dir.join(&p);
        if !path.is_file() {
            errs.push(
                &t.path(key),
                Some(&Value::String(p)),
                format!("file {} does not exist", path.display()),
            );
            return None;
        }
        Some(path)
    };
    let cert_file = file("certFile", &mut t, errs);
    let key_file = file("keyFile", &mut t, errs);
    let client_ca_file = file("clientCaFile", &mut t, errs);
    t.finish(errs);
    let files = TlsFiles {
        cert_file: cert_file?,
        key_file: key_file?,
        client_ca_file: Some(client_ca_file?),
    };
    // What `serve` would refuse: no PEM certificate, a key of another certificate.
    if let Err(e) = files.check() {
        for p in e.0 {
            errs.push(
                p.field,
                Some(&Value::String(p.path.display().to_string())),
                p.message,
            );
        }
        return None;
    }
    Some(files)
}

/// What the `server` section says about plaintext and TLS.
struct Plain {
    /// `server.plaintext`.
    asked: bool,
    /// `server.allowNonLoopbackPlaintext`.
    force: bool,
    /// Whether `server.tls` is written (valid or not).
    tls_given: bool,
    /// The path of `server.tls`, for the error when neither is given.
    tls_path: String,
}

/// TLS, or plaintext when asked for and allowed on `address`; `None` when neither (reported).
fn transport(
    address: SocketAddr,
    tls: Option<TlsFiles>,
    plain: &Plain,
    errs: &mut Errors,
) -> Option<Transport> {
    match (tls, plain.asked) {
        (Some(_), true) => {
            errs.push(
                "server.plaintext",
                Some(&Value::Bool(true)),
                "cannot be combined with server.tls",
            );
            None
        }
        (Some(files), false) => Some(Transport::Tls(files)),
        (None, true) => {
            let loopback = address.ip().is_loopback();
            if !loopback && !plain.force {
                errs.push(
                    "server.address",
                    Some(&Value::String(address.to_string())),
                    "plaintext is only allowed on a loopback address; use server.tls, or set server.allowNonLoopbackPlaintext: true to force it",
                );
                return None;
            }
            Some(Transport::Plaintext {
                non_loopback: !loopback,
            })
        }
        (None, false) => {
            if !plain.tls_given {
                errs.push(
                    &plain.tls_path,
                    None,
                    "is required unless server.plaintext: true is set explicitly",
                );
            }
            None
        }
    }
}

/// The duration at `key` of `o`, or `default` when it is absent or invalid (reported).
fn bounded_duration(
    o: &mut Obj<'_>,
    key: &'static str,
    default: Duration,
    (min, max, bounds): Bounds,
    errs: &mut Errors,
) -> Duration {
    match o.duration(key, errs) {
        Some(d) if d >= min && d <= max => d,
        Some(_) => {
            errs.push(
                &o.path(key),
                o.raw(key),
                format!("must be a duration {bounds}"),
            );
            default
        }
        None => default,
    }
}

/// The `server.connections` section. Absent keys, and keys with an invalid value (reported),
/// take the defaults.
fn connection_settings(mut c: Obj<'_>, errs: &mut Errors) -> ConnectionSettings {
    let defaults = ConnectionSettings::default();
    let mut bounded = |key: &'static str, default: Duration, bounds: Bounds, errs: &mut Errors| {
        bounded_duration(&mut c, key, default, bounds, errs)
    };
    let handshake_timeout = bounded(
        "handshakeTimeout",
        defaults.handshake_timeout,
        HANDSHAKE_TIMEOUT,
        errs,
    );
    let keepalive_interval = bounded(
        "keepaliveInterval",
        defaults.keepalive_interval,
        KEEPALIVE,
        errs,
    );
    let keepalive_timeout = bounded(
        "keepaliveTimeout",
        defaults.keepalive_timeout,
        KEEPALIVE,
        errs,
    );
    let idle_timeout = bounded("idleTimeout", defaults.idle_timeout, IDLE_TIMEOUT, errs);
    let max = c
        .int("max", 1, MAX_CONNECTIONS, errs)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(defaults.max);
    let (max_per_peer, reserved_for_certified) = peer_limits(&mut c, max, errs);
    let metrics_max_per_peer = c
        .int(
            "metricsMaxPerPeer",
            1,
            crate::http::MAX_CONNECTIONS as i64,
            errs,
        )
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(defaults.metrics_max_per_peer);
    let round = keepalive_interval + keepalive_timeout;
    if idle_timeout <= round {
        errs.push(
            &c.path("idleTimeout"),
            c.raw("idleTimeout"),
            format!(
                "must be longer than keepaliveInterval + keepaliveTimeout ({}), or live but quiet clients are cut off",
                humantime::format_duration(round)
            ),
        );
    }
    c.finish(errs);
    ConnectionSettings {
        max,
        max_per_peer,
        reserved_for_certified,
        metrics_max_per_peer,
        handshake_timeout,
        idle_timeout,
        keepalive_interval,
        keepalive_timeout,
    }
}

/// `maxPerPeer` (default: 32, at most `max`) and `reservedForCertified` (default: a sixteenth
/// of `max`), each checked against `max`.
fn peer_limits(c: &mut Obj<'_>, max: usize, errs: &mut Errors) -> (usize, usize) {
    let defaults = ConnectionSettings::default();
    let per_peer = c
        .int("maxPerPeer", 1, MAX_CONNECTIONS, errs)
        .and_then(|n| usize::try_from(n).ok());
    let max_per_peer = match per_peer {
        Some(n) if n > max => {
            errs.push(
                &c.path("maxPerPeer"),
                c.raw("maxPerPeer"),
                format!("must not exceed max ({max}): one source address cannot hold more connections than the listener"),
            );
            max
        }
        Some(n) => n,
        None => defaults.max_per_peer.min(max),
    };
    let reserved = c
        .int("reservedForCertified", 0, MAX_CONNECTIONS, errs)
        .and_then(|n| usize::try_from(n).ok());
    let reserved_for_certified = match reserved {
        Some(n) if n >= max => {
            errs.push(
                &c.path("reservedForCertified"),
                c.raw("reservedForCertified"),
                format!("must be below max ({max}), or no client without a certificate could ever connect"),
            );
            max / crate::config::RESERVED_SHARE
        }
        Some(n) => n,
        None => max / crate::config::RESERVED_SHARE,
    };
    (max_per_peer, reserved_for_certified)
}

/// Whether two listen addresses would fight over one port: the same port (not 0, which picks
/// a free one) on the same IP, or with either on the unspecified address.
fn conflicts(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The address at `key` of `o` (`default` when absent); `None` when invalid (reported).
fn socket_addr(
    o: &mut Obj<'_>,
    key: &'static str,
    default: &str,
    errs: &mut Errors,
) -> Option<SocketAddr> {
    let text = o.string(key, errs).unwrap_or_else(|| default.to_owned());
    match text.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.push(
                &o.path(key),
                Some(&Value::String(text)),
                "must be an IP:port address such as 127.0.0.1:8086",
            );
            None
        }
    }
}
