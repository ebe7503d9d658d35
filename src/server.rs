//! Wiring: binds the gRPC and HTTP listeners, sets up mutual TLS (or explicit plaintext),
//! builds the engine with its backends and runs until shutdown. `conn` accepts gRPC
//! connections under timeouts and a limit, `tls` builds the mutual-TLS configuration and
//! reloads it when the files are rotated.
//!
//! **Shutdown.** When the shutdown token is cancelled (SIGTERM or Ctrl-C in `serve`),
//! readiness turns false first ([`Condition::NotDraining`]), then the gRPC listener closes and
//! every connection is asked to finish (HTTP/2 GOAWAY): RPCs in flight run to completion for
//! at most `server.shutdownGracePeriod`, after which the connections still open are closed.
//! The HTTP endpoints keep answering (`/readyz` 503 naming `shutdown`) until the gRPC server
//! has stopped; then the background loops and watchers stop.
//!
//! With leader election (`leaderElection.enabled`) every replica serves gRPC and keeps its
//! cluster view synced, but only the leader acts. A standby's engine refuses changes, its
//! kwok backend writes nothing and `/readyz` says it is a standby. On taking the Lease the
//! replica opens the audit log from every replica's files (resuming the open scale-ups and
//! in-flight requests), starts the kwok and scale-up loops and only then acts. On losing it,
//! it aborts those loops at once and [`Server::run`] returns [`Error::LeadershipLost`], so
//! the process exits non-zero and its kubelet restarts it as a standby.

mod bind;
mod conn;
mod lead;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::util::MapResponseLayer;
use tracing::{info, warn};

use crate::cluster::ClusterView;
use crate::config::{self, AuditSettings, ConnectionSettings, LeaderElectionSettings, Loaded};
use crate::engine::{self, Engine};
use crate::grpc::{Service, status};
use crate::http::Endpoints;
use crate::leader::{self, LeaseStore};
use crate::metrics::Metrics;
use crate::provision::kwok::KwokProvisioner;
use crate::readiness::{Condition, Readiness};

pub use conn::{Conn, incoming, peers_for};
pub use tls::{Polled, Tls};

/// How often the kwok backend turns due capacity into nodes and runs its simulated attacher.
const KWOK_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// How long, once the grace period is over and the remaining connections were told to
/// close, the server waits for them before it stops regardless.
const FORCED_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Server start-up and run errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be bound.
    #[error("binding {what} listener on {addr}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A TLS file is unusable: no PEM certificate, no usable key, a key that does not match
    /// the certificate, a client CA that cannot be a trust anchor.
    #[error("checking the TLS files")]
    TlsFiles(#[source] config::TlsError),
    /// TLS material was rejected (a key not matching the certificate, an unusable CA).
    #[error("{what}")]
    Tls {
        /// The step and the files involved.
        what: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The engine could not start.
    #[error("starting the engine")]
    Engine(#[source] engine::Error),
    /// The Kubernetes client for the Cluster API management cluster could not be built.
    #[error("connecting to the Cluster API management cluster")]
    ClusterApi(#[source] kube::Error),
    /// The Kubernetes client for the kwok backend could not be built.
    #[error("connecting to Kubernetes for the kwok backend")]
    Kubernetes(#[source] kube::Error),
    /// The audit log could not be opened.
    #[error("opening the audit log")]
    Audit(#[source] crate::audit::Error),
    /// The cluster view could not start.
    #[error("starting the cluster view")]
    Watch(#[source] crate::cluster::WatchError),
    /// The gRPC server failed.
    #[error("serving gRPC")]
    Serve(#[source] tonic::transport::Error),
    /// This replica led and could not renew the Lease in time: it stopped acting at once
    /// and exits, so that it restarts as a standby.
    #[error("leader election")]
    LeadershipLost(#[source] leader::Lost),
    /// A task of the server panicked or was cancelled unexpectedly.
    #[error("{0} task failed")]
    Task(&'static str, #[source] tokio::task::JoinError),
}

/// A bound, not yet running server.
pub struct Server {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    /// Taken when the gRPC server starts.
    grpc: Option<TcpListener>,
    /// Taken when the HTTP endpoints start.
    http: Option<TcpListener>,
    tls: Option<Arc<Tls>>,
    connections: ConnectionSettings,
    shutdown_grace_period: Duration,
    tls_poll_interval: Duration,
    readiness: Arc<Readiness>,
    kwok: Option<Arc<KwokProvisioner>>,
    watch_shutdown: CancellationToken,
    lifecycle: Option<crate::scaleup::Loop>,
    ha: Option<Ha>,
}

/// What a replica under leader election needs to take over once it holds the Lease.
struct Ha {
    election: LeaderElectionSettings,
    store: Arc<dyn LeaseStore>,
    status: leader::Status,
    audit: Option<(AuditSettings, crate::scaleup::Timeouts)>,
    lifecycle: Option<LifecycleParts>,
}

/// Everything the scale-up loop needs but the audit recorder.
struct LifecycleParts {
    view: Arc<ClusterView>,
    settings: config::LifecycleSettings,
    protect: bool,
    publisher: Option<crate::events::EventPublisher>,
    client: Option<kube::Client>,
    deferral: config::DeferralSettings,
}

impl LifecycleParts {
    fn build(
        self,
        recorder: Arc<crate::scaleup::Recorder>,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
    ) -> crate::scaleup::Loop {
        info!(
            interval_ms = self.settings.interval.as_millis(),
            scale_down_protection = self.protect,
            no_verdict_after_ms = self.settings.no_verdict_after.as_millis(),
            "scale-up lifecycle tracking active"
        );
        let mut lifecycle = crate::scaleup::Loop::new(
            recorder,
            self.view,
            engine,
            metrics,
            self.settings.interval,
            crate::clock::now_ms,
        )
        .with_no_verdict_after(self.settings.no_verdict_after);
        if let Some(events) = self.publisher {
            lifecycle = lifecycle.with_events(events);
        }
        if let Some(client) = self.client {
            if self.deferral.enabled {
                info!(
                    horizon_ms = self.deferral.horizon.as_millis(),
                    ca_new_pod_scale_up_delay_ms =
                        self.deferral.ca_new_pod_scale_up_delay.as_millis(),
                    "deferral on: gangs strict would not admit now are kept out of CA's scale-up"
                );
                lifecycle = lifecycle.with_deferral(crate::scaleup::defer::Deferring {
                    marker: crate::scaleup::defer::PodMarker::new(client.clone()),
                    horizon: self.deferral.horizon,
                    floor: self.deferral.ca_new_pod_scale_up_delay,
                });
            }
            lifecycle =
                lifecycle.with_protection(crate::scaleup::Marker::new(client), self.protect);
        }
        lifecycle
    }
}

fn audit_config(audit: &AuditSettings) -> crate::audit::Config {
    crate::audit::Config::new()
        .with_max_bytes(audit.max_bytes)
        .with_keep_files(audit.keep_files)
        .with_copy_to_stdout(audit.stdout)
        .with_file_mode(audit.file_mode)
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("grpc", &self.grpc_addr())
            .field("http", &self.http_addr())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Concurrent RPCs per gRPC connection at most (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`);
/// with `server.connections.max` it bounds the requests held at once. Cluster Autoscaler
/// issues its calls one or a few at a time over a single connection.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 100;

impl Server {
    /// Builds the engine and binds both listeners (port 0 picks a free port).
    ///
    /// # Errors
    /// [`Error::Bind`], [`Error::TlsFiles`], [`Error::Tls`] or [`Error::Engine`].
    pub async fn bind(loaded: Loaded, source: Option<config::Source>) -> Result<Self, Error> {
        Self::bind_with(loaded, source, None).await
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The engine (for tests and tools that drive it in-process).
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.clone()
    }

    /// The readiness conditions behind `/readyz`. Whoever owns a condition sets it here;
    /// leader election, when on, probes [`Condition::Leader`].
    pub fn readiness(&self) -> Arc<Readiness> {
        self.readiness.clone()
    }

    /// The TLS configuration being served and reloaded, if the server uses TLS.
    pub fn tls(&self) -> Option<Arc<Tls>> {
        self.tls.clone()
    }

    /// Serves until `shutdown` is cancelled, then drains: readiness turns false, RPCs in flight
    /// get up to `server.shutdownGracePeriod` to finish, and the connections still open after
    /// it are closed.
    ///
    /// # Errors
    /// [`Error::Serve`] if the gRPC server fails; under leader election
    /// [`Error::LeadershipLost`] when this replica led and could not renew the Lease in time
    /// (it has stopped acting; the process should exit so that it restarts as a standby),
    /// and [`Error::Audit`] if the audit log cannot be opened on taking over.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), Error> {
        // Everything but the gRPC server stops once it has drained.
        let stop = CancellationToken::new();
        // Cancelled when the grace period is over: the connections still open are closed.
        let force = CancellationToken::new();
        let background = self.start_background(&shutdown, &stop);
        let result = self.serve_grpc(&shutdown, &force).await;
        // An increase CA stopped waiting for still runs: let it finish before the loops stop.
        if !self.engine.settle(self.shutdown_grace_period).await {
            warn!(
                grace_period_ms = self.shutdown_grace_period.as_millis(),
                "a NodeGroupIncreaseSize was still running when the grace period ended"
            );
        }
        self.readiness.set(Condition::Serving, false);
        shutdown.cancel();
        force.cancel();
        stop.cancel();
        self.watch_shutdown.cancel();
        let led = background.join().await;
        info!("gangscaler stopped");
        result.map_err(Error::Serve)?;
        led
    }

    /// Starts what runs beside the gRPC server: the HTTP endpoints, the TLS reloader, and
    /// the kwok and lifecycle loops (without leader election from the start; with it, only
    /// on the leader, by the election task).
    fn start_background(
        &mut self,
        shutdown: &CancellationToken,
        stop: &CancellationToken,
    ) -> Background {
        let endpoints = Endpoints {
            metrics: self.metrics.clone(),
            readiness: self.readiness.clone(),
            header_timeout: self.connections.handshake_timeout,
            max_per_peer: self.connections.metrics_max_per_peer,
        };
        let http = self
            .http
            .take()
            .map(|listener| tokio::spawn(endpoints.serve(listener, stop.clone())));
        let mut tasks: Vec<tokio::task::JoinHandle<()>> = http.into_iter().collect();
        if let Some(tls) = self.tls.clone() {
            let metrics = self.metrics.tls.clone();
            tasks.push(tokio::spawn(tls.run(
                self.tls_poll_interval,
                metrics,
                crate::clock::now_ms,
                stop.clone(),
            )));
        }
        let Some(ha) = self.ha.take() else {
            if let Some(kwok) = self.kwok.clone() {
                tasks.push(spawn_kwok(kwok, self.engine.clone(), stop.clone()));
            }
            if let Some(lifecycle) = self.lifecycle.take() {
                tasks.push(tokio::spawn(lifecycle.run(stop.clone())));
            }
            return Background {
                tasks,
                election: None,
            };
        };
        let stop_election = CancellationToken::new();
        let lead = tokio::spawn(lead::lead(
            ha,
            self.engine.clone(),
            self.kwok.clone(),
            self.metrics.clone(),
            shutdown.clone(),
            stop_election.clone(),
        ));
        Background {
            tasks,
            election: Some((lead, stop_election)),
        }
    }

    /// Serves gRPC until `shutdown`, then drains: readiness turns false before tonic stops
    /// accepting and sends GOAWAY; once the grace period is over, `force` closes the
    /// connections still open.
    async fn serve_grpc(
        &mut self,
        shutdown: &CancellationToken,
        force: &CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        let limits = self.connections;
        let addresses = (self.grpc_addr(), self.http_addr());
        let Some(grpc) = self.grpc.take() else {
            return Ok(());
        };
        let refused = self.metrics.connections.clone();
        let peers = conn::peers_for(
            &limits,
            self.tls.as_deref(),
            Some(Arc::new(move |why: crate::peers::Refused| {
                refused.refused("grpc", why.label());
            })),
        );
        let incoming = conn::incoming(
            grpc,
            self.tls.clone(),
            limits,
            peers,
            shutdown.clone(),
            force.clone(),
        );
        self.readiness.set(Condition::Serving, true);
        self.log_serving(addresses);
        let draining = {
            let token = shutdown.clone();
            let readiness = self.readiness.clone();
            let grace = self.shutdown_grace_period;
            async move {
                token.cancelled().await;
                readiness.set(Condition::NotDraining, false);
                info!(
                    grace_period_ms = grace.as_millis(),
                    "shutting down: not ready, draining RPCs in flight"
                );
            }
        };
        let service = Service::new(self.engine.clone(), self.metrics.clone());
        let serve = tonic::transport::Server::builder()
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
            .http2_keepalive_interval(Some(limits.keepalive_interval))
            .http2_keepalive_timeout(Some(limits.keepalive_timeout))
            .layer(MapResponseLayer::new(
                status::oversize_is_resource_exhausted::<tonic::body::Body>,
            ))
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(incoming, draining);
        tokio::pin!(serve);
        let grace = self.shutdown_grace_period;
        let grace_over = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            result = &mut serve => result,
            () = grace_over => {
                warn!(
                    grace_period_ms = grace.as_millis(),
                    "shutdown grace period over: closing the connections still open"
                );
                force.cancel();
                match tokio::time::timeout(FORCED_CLOSE_WAIT, &mut serve).await {
                    Ok(result) => result,
                    Err(_) => {
                        warn!("connections did not close in time; stopping regardless");
                        Ok(())
                    }
                }
            }
        }
    }

    /// The line that says the server is up, with its (gRPC, HTTP) addresses and limits.
    fn log_serving(&self, (grpc, http): (Option<SocketAddr>, Option<SocketAddr>)) {
        let limits = self.connections;
        let tls = self.tls.is_some();
        info!(
            grpc.address = ?grpc,
            http.address = ?http,
            tls,
            connections.max = limits.max,
            connections.max_per_peer = limits.max_per_peer,
            connections.reserved_for_certified = if tls { limits.reserved_for_certified } else { 0 },
            connections.handshake_timeout_ms = limits.handshake_timeout.as_millis(),
            connections.idle_timeout_ms = limits.idle_timeout.as_millis(),
            shutdown_grace_period_ms = self.shutdown_grace_period.as_millis(),
            "gangscaler serving"
        );
    }
}

/// The tasks that run beside the gRPC server.
struct Background {
    /// HTTP endpoints, TLS reloader, and (without leader election) the kwok and lifecycle
    /// loops: each stops when the server's `stop` token is cancelled.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Under leader election: the election task and the token that lets it give the Lease up.
    election: Option<(
        tokio::task::JoinHandle<Result<(), Error>>,
        CancellationToken,
    )>,
}

impl Background {
    /// Waits for every task once the server has stopped: no RPC is in flight any more, so
    /// the leader may give the Lease up (once its loops have stopped, see `lead`).
    async fn join(self) -> Result<(), Error> {
        if let Some((_, stop)) = &self.election {
            stop.cancel();
        }
        for task in self.tasks {
            let _ = task.await;
        }
        match self.election {
            Some((task, _)) => task.await.map_err(|e| Error::Task("leader election", e))?,
            None => Ok(()),
        }
    }
}

fn spawn_kwok(
    kwok: Arc<KwokProvisioner>,
    engine: Arc<Engine>,
    token: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        kwok.run(move || engine.config().groups.clone(), KWOK_PERIOD, token)
            .await;
    })
}

/// Logs what opening the audit log found and sets `gangscaler_audit_unreadable_lines`. Lines
/// that could not be read back are a warning naming the file, the count and the first of
/// them: their records, open scale-ups included, are not followed (their nodes are neither
/// protected nor reserved). The server starts all the same (see docs/audit-schema.md,
/// "Lines that cannot be read back").
fn log_resumed(path: &std::path::Path, resumed: &crate::scaleup::Resumed, metrics: &Metrics) {
    let unreadable = (resumed.bad.len() as u64).saturating_add(resumed.bad_unlisted);
    metrics
        .audit_unreadable_lines
        .set(i64::try_from(unreadable).unwrap_or(i64::MAX));
    if let Some(first) = resumed.bad.first() {
        let files: std::collections::BTreeSet<&str> =
            resumed.bad.iter().map(|b| b.file.as_str()).collect();
        let files = files.into_iter().collect::<Vec<_>>().join(",");
        warn!(
            audit.path = %path.display(),
            unreadable_lines = unreadable,
            files = %files,
            first.file = %first.file,
            first.line = first.line,
            first.error = ?first.error,
            records = resumed.records,
            open = resumed.open,
            "audit log lines could not be read back: the scale-ups they record are not followed (no scale-down protection or reservation for their nodes); run the version that wrote them, or see docs/audit-schema.md"
        );
    }
    info!(
        audit.path = %path.display(),
        files = resumed.files.len(),
        records = resumed.records,
        open = resumed.open,
        bad_lines = resumed.bad.len(),
        bad_lines_unlisted = resumed.bad_unlisted,
        repaired_bytes = resumed.repaired_bytes,
        "audit log opened"
    );
}
