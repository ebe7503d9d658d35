//! The HTTP side endpoints: `/metrics` (Prometheus text), `/healthz` (process alive) and
//! `/readyz` (serving gRPC with a valid configuration).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
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
            "/readyz"
                if self.ready.load(Ordering::Acquire) && self.synced.load(Ordering::Acquire) =>
            {
                (StatusCode::OK, "text/plain", "ready\n".to_owned())
            }
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "not ready\n".to_owned(),
            ),
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

    /// Serves connections from `listener` until `shutdown` is cancelled.
    pub async fn serve(self, listener: TcpListener, shutdown: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accepting http connection failed");
                    continue;
                }
            };
            let endpoints = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let resp = endpoints.respond(req.uri().path());
                    async move { Ok::<_, Infallible>(resp) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
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
