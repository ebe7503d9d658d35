//! The HTTP side endpoints: `/metrics` (Prometheus text), `/healthz` (liveness: the process
//! answers) and `/readyz` (every [`Condition`](crate::readiness::Condition) holds; the body
//! names each one and why it fails).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::peers::{Limits, Peers, Refused};
use crate::readiness::Readiness;
use crate::telemetry::Chain;

/// Shared state of the HTTP endpoints.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// The readiness conditions `/readyz` reports.
    pub readiness: Arc<Readiness>,
    /// A connection whose request headers have not arrived this long after it opened (or
    /// after its previous response) is closed; `server.connections.handshakeTimeout`.
    pub header_timeout: Duration,
    /// Open connections from one source address at most;
    /// `server.connections.metricsMaxPerPeer`.
    pub max_per_peer: usize,
}

impl Endpoints {
    fn respond(&self, path: &str) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match path {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.encode(),
            ),
            // Answering at all is the liveness signal: this task runs on the same runtime as
            // the gRPC server. It stays 200 while draining, so a shutdown is not a restart.
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" => {
                let report = self.readiness.report();
                let status = if report.is_ready() {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                (status, "text/plain", report.to_string())
            }
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_owned(),
            ),
        };
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        resp
    }

    /// Serves connections from `listener` until `shutdown` is cancelled: at most
    /// [`MAX_CONNECTIONS`] at a time and `max_per_peer` from one source address (more are
    /// closed at once and counted in `gangscaler_connections_refused_total`), each closed if
    /// its request headers take longer than `header_timeout`; accept errors such as running
    /// out of file descriptors pause the loop (10ms doubling to 1s) and are logged at most
    /// once per 10s.
    pub async fn serve(self, listener: TcpListener, shutdown: CancellationToken) {
        let refused = self.metrics.connections.clone();
        let peers = Peers::with_hook(
            Limits {
                max: MAX_CONNECTIONS,
                max_per_peer: self.max_per_peer,
                reserved: 0,
            },
            Some(Arc::new(move |why: Refused| {
                refused.refused("metrics", why.label());
            })),
        );
        let mut backoff = Duration::ZERO;
        let mut last_warning: Option<Instant> = None;
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::Interrupted
                            | std::io::ErrorKind::WouldBlock
                    ) =>
                {
                    continue;
                }
                Err(e) => {
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        last_warning = Some(crate::clock::mono());
                        warn!(error = %Chain(&e), backoff_ms = backoff.as_millis(), "accepting http connection failed; backing off");
                    }
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => continue,
                    }
                }
            };
            backoff = Duration::ZERO;
            let permit = match peers.admit(peer.ip()) {
                Ok(slot) => slot,
                Err(why) => {
                    debug!(%peer, limit = MAX_CONNECTIONS, max_per_peer = self.max_per_peer, reason = why.label(), "http connection refused");
                    continue;
                }
            };
            let endpoints = self.clone();
            let header_timeout = self.header_timeout;
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let resp = endpoints.respond(req.uri().path());
                    async move { Ok::<_, Infallible>(resp) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    r = conn => if let Err(e) = r {
                        debug!(error = %Chain(&e), %peer, "http connection ended with an error");
                    },
                }
            });
        }
    }
}

/// Open HTTP connections at most; the endpoints are scraped by a few agents.
pub const MAX_CONNECTIONS: usize = 64;
