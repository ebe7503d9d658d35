//! The HTTP side endpoints: `/metrics` (Prometheus text), `/healthz` (process alive) and
//! `/readyz` (serving gRPC with a valid configuration, and every named [`Readiness`]
//! condition holding, e.g. being the leader; a 503 body names those that do not).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Shared state of the HTTP endpoints.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Metrics to expose.
    pub metrics: Arc<Metrics>,
    /// Set once the gRPC server accepts calls.
    pub ready: Arc<AtomicBool>,
    /// Set once the cluster view (if any) has synced; admission refuses to plan before.
    pub synced: Arc<AtomicBool>,
    /// A connection whose request headers have not arrived this long after it opened (or
    /// after its previous response) is closed; `server.connections.handshakeTimeout`.
    pub header_timeout: Duration,
    /// Further named conditions `/readyz` requires.
    pub readiness: Readiness,
}

/// A readiness condition: `None` while it holds, else why it does not.
pub type Probe = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Named conditions `/readyz` requires besides serving gRPC and the cluster view's sync
/// (e.g. `leader`: only the leader of several replicas is ready, so that a Service routes
/// Cluster Autoscaler to it). Each is asked at every request.
#[derive(Clone, Default)]
pub struct Readiness {
    conditions: Vec<(&'static str, Probe)>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.conditions.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Readiness {
    /// No conditions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also requires `probe`, reported as `name` when it fails.
    #[must_use]
    pub fn with(
        mut self,
        name: &'static str,
        probe: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.conditions.push((name, Arc::new(probe)));
        self
    }

    /// The conditions that do not hold now, with why.
    pub fn failing(&self) -> Vec<(&'static str, String)> {
        self.conditions
            .iter()
            .filter_map(|(name, probe)| probe().map(|why| (*name, why)))
            .collect()
    }
}

impl Endpoints {
    fn respond(&self, path: &str) -> Response<Full<Bytes>> {
        let (status, content_type, body) = match path {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.encode(),
            ),
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            "/readyz" => {
                let failing = self.readiness.failing();
                if self.ready.load(Ordering::Acquire)
                    && self.synced.load(Ordering::Acquire)
                    && failing.is_empty()
                {
                    (StatusCode::OK, "text/plain", "ready\n".to_owned())
                } else {
                    let mut body = "not ready\n".to_owned();
                    for (name, why) in failing {
                        body.push_str(&format!("{name}: {why}\n"));
                    }
                    (StatusCode::SERVICE_UNAVAILABLE, "text/plain", body)
                }
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
    /// [`MAX_CONNECTIONS`] at a time (more are closed at once), each closed if its request
    /// headers take longer than `header_timeout`; accept errors such as running out of file
    /// descriptors pause the loop (10ms doubling to 1s) and are logged at most once per 10s.
    pub async fn serve(self, listener: TcpListener, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
                        last_warning = Some(Instant::now());
                        warn!(error = %e, backoff_ms = backoff.as_millis(), "accepting http connection failed; backing off");
                    }
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => continue,
                    }
                }
            };
            backoff = Duration::ZERO;
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                debug!(%peer, limit = MAX_CONNECTIONS, "http connection refused: limit reached");
                continue;
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
                        debug!(error = %e, %peer, "http connection ended with an error");
                    },
                }
            });
        }
    }
}

/// Open HTTP connections at most; the endpoints are scraped by a few agents.
pub const MAX_CONNECTIONS: usize = 64;
