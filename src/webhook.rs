//! `gangscaler webhook`: a mutating admission webhook (HTTPS, `admission.k8s.io/v1`) that
//! lets one job controller run unchanged on 1.35, 1.36, 1.37 and 1.38. The controller marks its
//! pods with version-neutral annotations ([`ANNOTATION_WORKLOAD`],
//! [`ANNOTATION_TEMPLATE`], optionally [`ANNOTATION_REPLICA_KEY`]); the webhook adds the
//! link the served API expects (1.35 `spec.workloadRef`, 1.36+ `spec.schedulingGroup`) and,
//! from 1.36 on, creates the pod's PodGroup from its Workload's template when it does not
//! exist yet.
//!
//! - **Idempotent**: an existing PodGroup is used as it is; a create that loses a race to
//!   another replica (409) is success. A pod that already names its gang is not touched.
//! - **Side effects**: only the PodGroup, and none on a dry-run request (the PodGroup create
//!   is sent as a dry run too): declare `sideEffects: NoneOnDryRun`.
//! - **Refusals** name the annotation, the Workload or the template: a missing Workload is
//!   404 (the controller retries the pod once it exists), an API failure 503, a template
//!   inside a CompositePodGroup template (1.37+) 400 (its PodGroup needs a parent
//!   CompositePodGroup, which the webhook does not create). With `failurePolicy: Fail` a pod
//!   is never admitted without its link.
//! - **TLS**: the gRPC server's `server::Tls`, with the files' rotation. With a client CA,
//!   mutual TLS: the API server presents a client certificate from its admission
//!   configuration (`WebhookAdmissionConfiguration` `kubeConfigFile`). Without one, server
//!   TLS only (for control planes whose admission configuration cannot be set). Either way
//!   the API server verifies ours with the webhook's `caBundle`.
//! - The served version is read by API discovery at start and every [`SERVED_REFRESH`], so
//!   an upgrade from 1.35 to 1.36 switches the link without a restart.
//!
//! The decision is pure ([`review`]); the API calls are in [`cluster`].

pub mod cluster;
pub mod review;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::ConnectionSettings;
use crate::migrate::api::GangApi;
pub use crate::migrate::api::{ANNOTATION_REPLICA_KEY, ANNOTATION_TEMPLATE, ANNOTATION_WORKLOAD};
use crate::server::{Tls, incoming, peers_for};
use crate::telemetry::Chain;
use review::{Decision, ReviewOutcome};

/// How often the served gang API version is read again.
pub const SERVED_REFRESH: Duration = Duration::from_secs(30);
/// The largest AdmissionReview body read (a pod with big annotations fits easily).
pub const MAX_BODY: usize = 4 << 20;
/// The longest the webhook spends on the API server for one review; the webhook
/// configuration's `timeoutSeconds` should be above it (10 is the default and fits).
pub const API_TIMEOUT: Duration = Duration::from_secs(8);

/// The webhook's shared state.
pub struct Webhook {
    client: kube::Client,
    served: ArcSwap<Option<GangApi>>,
    /// Add the toleration of each member's gang reservation taint (`--reservation-tolerations`).
    tolerate: bool,
}

/// Webhook start-up errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// API discovery failed at start.
    #[error("reading the served scheduling.k8s.io versions")]
    Discovery(#[source] kube::Error),
}

impl Webhook {
    /// Reads the served gang API version once. With `tolerate`, members also get the
    /// toleration of their gang's reservation taint.
    ///
    /// # Errors
    /// [`Error::Discovery`] when the API server cannot be asked.
    pub async fn new(client: kube::Client, tolerate: bool) -> Result<Arc<Self>, Error> {
        let served = cluster::served(&client).await.map_err(Error::Discovery)?;
        info!(served = ?served.map(GangApi::api_version), tolerate, "gang API version");
        Ok(Arc::new(Self {
            client,
            served: ArcSwap::from_pointee(served),
            tolerate,
        }))
    }

    /// The version links are written for now.
    #[must_use]
    pub fn served(&self) -> Option<GangApi> {
        **self.served.load()
    }

    /// Re-reads the served version every [`SERVED_REFRESH`] until `shutdown`.
    pub async fn refresh(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(SERVED_REFRESH) => {}
            }
            match cluster::served(&self.client).await {
                Ok(now) if now != self.served() => {
                    info!(before = ?self.served().map(GangApi::api_version), now = ?now.map(GangApi::api_version), "served gang API version changed");
                    self.served.store(Arc::new(now));
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %Chain(&e), "reading the served gang API version failed; keeping the last one")
                }
            }
        }
    }

    /// Answers one AdmissionReview body.
    pub async fn review(&self, body: &[u8]) -> Result<serde_json::Value, review::Error> {
        let request = review::read(body)?;
        let served = self.served();
        let namespace = request.namespace.clone().unwrap_or_default();
        let pod = request
            .object
            .as_ref()
            .and_then(|o| {
                o.pointer("/metadata/name")
                    .or_else(|| o.pointer("/metadata/generateName"))
            })
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let outcome = match review::decide(&request, served, self.tolerate) {
            Decision::Unchanged(_) => ReviewOutcome::Allow,
            Decision::Tolerate { gang, toleration } => {
                info!(namespace, pod, gang, "reservation toleration added");
                ReviewOutcome::Patch {
                    ops: vec![review::toleration_op(request.object.as_ref(), toleration)],
                }
            }
            Decision::Deny(message) => {
                warn!(namespace, pod, %message, "pod refused");
                ReviewOutcome::Deny { code: 400, message }
            }
            Decision::Link {
                link,
                field,
                value,
                pod_group,
                toleration,
            } => {
                let ensured = match (served, pod_group) {
                    (Some(api), Some(_)) => {
                        let dry_run = request.dry_run.unwrap_or(false);
                        let call = cluster::ensure_pod_group(
                            &self.client,
                            api,
                            &namespace,
                            &link,
                            dry_run,
                        );
                        match tokio::time::timeout(API_TIMEOUT, call).await {
                            Ok(r) => r.map(|_| ()),
                            Err(_) => Err(cluster::Error::Api {
                                what: format!("making sure of the PodGroup within {API_TIMEOUT:?}"),
                                source: kube::Error::Service("timed out".into()),
                            }),
                        }
                    }
                    _ => Ok(()),
                };
                match ensured {
                    Ok(()) => {
                        let tolerated = toleration.is_some();
                        info!(namespace, pod, workload = %link.workload, template = %link.template, field, tolerated, "pod linked");
                        let mut ops = vec![review::link_op(field, value)];
                        ops.extend(
                            toleration.map(|t| review::toleration_op(request.object.as_ref(), t)),
                        );
                        ReviewOutcome::Patch { ops }
                    }
                    Err(e) => {
                        warn!(namespace, pod, error = %Chain(&e), "pod refused");
                        ReviewOutcome::Deny {
                            code: e.code(),
                            message: crate::telemetry::chain(&e),
                        }
                    }
                }
            }
        };
        Ok(review::respond(&request.uid, &outcome))
    }
}

/// Serves the webhook on `listener` with mutual TLS until `shutdown`: `POST /mutate` takes
/// AdmissionReviews, `GET /healthz` answers `ok`.
pub async fn serve(
    webhook: Arc<Webhook>,
    listener: TcpListener,
    tls: Arc<Tls>,
    shutdown: CancellationToken,
) {
    let force = shutdown.child_token();
    // The API server is the one client, from a few addresses: no per-address limit here.
    let settings = ConnectionSettings {
        max_per_peer: ConnectionSettings::default().max,
        ..ConnectionSettings::default()
    };
    let peers = peers_for(&settings, Some(&tls), None);
    let mut conns = Box::pin(incoming(
        listener,
        Some(tls),
        settings,
        peers,
        shutdown.clone(),
        force,
    ));
    while let Some(conn) = conns.next().await {
        let Ok(conn) = conn else { continue };
        let webhook = webhook.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let webhook = webhook.clone();
                async move { Ok::<_, Infallible>(handle(&webhook, req).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let served = builder.serve_connection(TokioIo::new(conn), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                r = served => if let Err(e) = r {
                    tracing::debug!(error = %Chain(&*e), "webhook connection ended with an error");
                },
            }
        });
    }
}

async fn handle(webhook: &Webhook, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String| {
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        resp
    };
    match (req.method().as_str(), req.uri().path()) {
        ("GET", "/healthz") => reply(StatusCode::OK, "ok\n".into()),
        ("POST", "/mutate") => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("reading the body (at most {MAX_BODY} bytes): {e}\n"),
                    );
                }
            };
            match webhook.review(&body).await {
                Ok(v) => {
                    let mut resp = reply(StatusCode::OK, v.to_string());
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    resp
                }
                Err(e) => reply(StatusCode::BAD_REQUEST, format!("{e}\n")),
            }
        }
        (_, path) => reply(
            StatusCode::NOT_FOUND,
            format!("no route {path}: POST /mutate, GET /healthz\n"),
        ),
    }
}

/// The address a webhook listens on by default (all interfaces: the API server reaches it
/// through a Service; tests pass 127.0.0.1).
#[must_use]
pub fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8443))
}
