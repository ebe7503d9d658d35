//! Building a [`Server`]: its transport, backends, cluster view, engine, scale-up loop or
//! leader-election parts, and its two listeners, one step per function in the order
//! [`Server::bind_with`] takes them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Error, Ha, LifecycleParts, Server, Tls, audit_config, log_resumed};
use crate::cluster::ClusterView;
use crate::config::{self, LeaderElectionSettings, Loaded, ServerSettings, Transport};
use crate::engine::Engine;
use crate::leader::{self, KubeLeases, LeaseStore};
use crate::metrics::Metrics;
use crate::model::BackendSpec;
use crate::provision::Provisioner;
use crate::provision::clusterapi::ClusterApiProvisioner;
use crate::provision::kwok::KwokProvisioner;
use crate::provision::memory::MemoryProvisioner;
use crate::readiness::{Condition, Readiness};
use crate::scaleup::{Recorder, Timeouts};

/// The backends, the Kubernetes client they and the watchers share (when one is needed) and
/// the Lease store of leader election (when enabled).
struct Backends {
    provisioners: Vec<Arc<dyn Provisioner>>,
    client: Option<kube::Client>,
    kwok: Option<Arc<KwokProvisioner>>,
    ha_store: Option<Arc<dyn LeaseStore>>,
}

/// The engine with its optional parts, and what the scale-up loop still needs of them.
struct Wired {
    engine: Engine,
    recorder: Option<Arc<Recorder>>,
    publisher: Option<crate::events::EventPublisher>,
    status: Option<leader::Status>,
}

impl Server {
    /// [`Server::bind`], with leader election (when enabled) on `leases` instead of the
    /// Lease the settings name through the API server (tests run several servers over one
    /// [`leader::MemoryLeases`]).
    ///
    /// # Errors
    /// As [`Server::bind`].
    pub async fn bind_with(
        loaded: Loaded,
        source: Option<config::Source>,
        leases: Option<Arc<dyn LeaseStore>>,
    ) -> Result<Self, Error> {
        let election = loaded.provider.leader_election.clone();
        let settings = loaded.provider.server.clone();
        let tls = transport(&settings)?;
        let metrics = Arc::new(metrics_for(tls.as_deref()));
        let readiness = Arc::new(Readiness::new());
        let backends = backends(&loaded, election.as_ref(), leases).await?;
        let watch_shutdown = CancellationToken::new();
        let k8s_watch = loaded.provider.kubernetes.watch;
        readiness.set(Condition::Synced, !k8s_watch);
        // Node reservation reads DaemonSets; they are watched (and need RBAC) only when some
        // group reserves.
        let view = start_view(
            backends.client.as_ref(),
            k8s_watch,
            loaded.groups.iter().any(|g| g.reservation.enabled),
            &readiness,
            &watch_shutdown,
        )
        .await?;
        let policy = loaded.provider.admission_policy;
        let order = loaded.provider.admission_order;
        let audit_settings = loaded.provider.audit.clone();
        let lifecycle_settings = loaded.provider.lifecycle;
        let deferral = loaded.provider.deferral;
        let engine = Engine::new(loaded, source, backends.provisioners, metrics.clone())
            .await
            .map_err(Error::Engine)?;
        let timeouts = timeouts(&lifecycle_settings);
        let wired = wire(
            engine,
            WireInputs {
                audit: audit_settings.as_ref(),
                election: election.as_ref(),
                timeouts,
                view: view.as_ref(),
                policy,
                order,
                deferral: deferral.enabled,
                client: backends.client.as_ref(),
                ha_store: backends.ha_store.as_ref(),
                metrics: &metrics,
                readiness: &readiness,
            },
        )?;
        let engine = Arc::new(wired.engine);
        let audit_state = engine.clone();
        readiness.probe(
            Condition::AuditWritable,
            Arc::new(move || audit_state.audit_unwritable()),
        );
        let parts = match (&audit_settings, &view) {
            (Some(_), Some(view)) => Some(LifecycleParts {
                view: view.clone(),
                settings: lifecycle_settings,
                // Under `off` gangscaler does not second-guess CA, scale-down included.
                protect: lifecycle_settings.scale_down_protection
                    && policy != crate::planner::Policy::Off,
                publisher: wired.publisher,
                client: backends.client.clone(),
                deferral,
            }),
            _ => None,
        };
        let (lifecycle, ha) = match (election, backends.ha_store, wired.status) {
            (Some(election), Some(store), Some(status)) => {
                log_election(&election, store.as_ref());
                let ha = Ha {
                    election,
                    store,
                    status,
                    audit: audit_settings.map(|a| (a, timeouts)),
                    lifecycle: parts,
                };
                (None, Some(ha))
            }
            _ => {
                let lifecycle = match (wired.recorder, parts) {
                    (Some(recorder), Some(parts)) => {
                        Some(parts.build(recorder, engine.clone(), metrics.clone()))
                    }
                    _ => None,
                };
                (lifecycle, None)
            }
        };
        let grpc = listen("gRPC", settings.address).await?;
        let http = listen("metrics", settings.metrics_address).await?;
        Ok(Self {
            engine,
            metrics,
            grpc: Some(grpc),
            http: Some(http),
            tls,
            connections: settings.connections,
            shutdown_grace_period: settings.shutdown_grace_period,
            tls_poll_interval: settings.tls_poll_interval,
            readiness,
            kwok: backends.kwok,
            watch_shutdown,
            lifecycle,
            ha,
        })
    }
}

/// The TLS material to serve with, loaded now so that unusable material is refused by name
/// rather than with a handshake error ("peer sent no certificates") on the first connection;
/// `None`, with a warning, for plaintext.
fn transport(settings: &ServerSettings) -> Result<Option<Arc<Tls>>, Error> {
    match &settings.transport {
        Transport::Tls(files) => Ok(Some(Arc::new(Tls::load(files)?))),
        Transport::Plaintext { non_loopback } => {
            if *non_loopback {
                warn!(
                    address = %settings.address,
                    "PLAINTEXT gRPC ON A NON-LOOPBACK ADDRESS: anyone on the network can resize node groups; configure server.tls"
                );
            } else {
                warn!(address = %settings.address, "serving plaintext gRPC on loopback (explicitly configured)");
            }
            Ok(None)
        }
    }
}

/// The metric families, with the TLS ones (and the certificate just loaded) under TLS.
fn metrics_for(tls: Option<&Tls>) -> Metrics {
    match tls {
        Some(tls) => {
            let metrics = Metrics::new().with_tls();
            if let Some(m) = &metrics.tls {
                m.loaded(crate::clock::now_ms(), tls.not_after(), false);
            }
            metrics
        }
        None => Metrics::new(),
    }
}

/// The in-memory backend, the kwok and Cluster API backends when a group uses them, the
/// Kubernetes client when the kwok backend, the watchers or the Lease need one, and the
/// Lease store: `leases` when given, else the Lease the settings name.
async fn backends(
    loaded: &Loaded,
    election: Option<&LeaderElectionSettings>,
    leases: Option<Arc<dyn LeaseStore>>,
) -> Result<Backends, Error> {
    let mut provisioners: Vec<Arc<dyn Provisioner>> = vec![Arc::new(MemoryProvisioner::new())];
    let k8s = &loaded.provider.kubernetes;
    let needs_kwok = loaded
        .groups
        .iter()
        .any(|g| matches!(g.backend, BackendSpec::Kwok(_)));
    let needs_lease_client = election.is_some() && leases.is_none();
    let client = if needs_kwok || k8s.watch || needs_lease_client {
        Some(
            KwokProvisioner::client(k8s)
                .await
                .map_err(Error::Kubernetes)?,
        )
    } else {
        None
    };
    let kwok = match (&client, needs_kwok) {
        (Some(client), true) => {
            let kwok = Arc::new(KwokProvisioner::new(
                client.clone(),
                k8s.clone(),
                loaded.provider.gpu_label.clone(),
            ));
            // A standby writes nothing, from the first read on (see `Ha`).
            kwok.set_read_only(election.is_some());
            provisioners.push(kwok.clone());
            Some(kwok)
        }
        _ => None,
    };
    if loaded
        .groups
        .iter()
        .any(|g| matches!(g.backend, BackendSpec::ClusterApi(_)))
    {
        let management = k8s
            .management_kubeconfig
            .as_deref()
            .or(k8s.kubeconfig.as_deref());
        let client = crate::provision::kube_client(management)
            .await
            .map_err(Error::ClusterApi)?;
        provisioners.push(Arc::new(ClusterApiProvisioner::new(client)));
    }
    let ha_store: Option<Arc<dyn LeaseStore>> = match (election, leases, &client) {
        (None, _, _) => None,
        (Some(_), Some(store), _) => Some(store),
        (Some(e), None, Some(client)) => Some(Arc::new(KubeLeases::new(
            client.clone(),
            &e.namespace,
            &e.lease_name,
        ))),
        (Some(_), None, None) => None,
    };
    Ok(Backends {
        provisioners,
        client,
        kwok,
        ha_store,
    })
}

/// The cluster view when `watch` is on (readiness's `Synced` turns true once it has
/// synced), or `None`: then gang admission is inactive. With `daemon_sets`, it watches
/// DaemonSets too.
async fn start_view(
    client: Option<&kube::Client>,
    watch: bool,
    daemon_sets: bool,
    readiness: &Arc<Readiness>,
    watch_shutdown: &CancellationToken,
) -> Result<Option<Arc<ClusterView>>, Error> {
    match (client, watch) {
        (Some(client), true) => {
            let view = ClusterView::start(client.clone(), watch_shutdown)
                .await
                .map_err(Error::Watch)?;
            if daemon_sets {
                view.watch_daemon_sets(watch_shutdown);
            }
            let view = Arc::new(view);
            let syncing = view.clone();
            let flag = readiness.clone();
            tokio::spawn(async move {
                syncing.wait_ready().await;
                flag.set(Condition::Synced, true);
            });
            Ok(Some(view))
        }
        _ => {
            info!(
                "gang admission inactive: kubernetes.watch is false, CA's deltas are applied as asked"
            );
            Ok(None)
        }
    }
}

/// The lifecycle timeouts in milliseconds.
fn timeouts(lifecycle: &config::LifecycleSettings) -> Timeouts {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Timeouts {
        registration_ms: ms(lifecycle.registration_timeout),
        formation_ms: ms(lifecycle.formation_timeout),
        attach_ms: ms(lifecycle.attach_timeout),
    }
}

/// What [`wire`] gives the engine.
struct WireInputs<'a> {
    audit: Option<&'a config::AuditSettings>,
    election: Option<&'a LeaderElectionSettings>,
    timeouts: Timeouts,
    view: Option<&'a Arc<ClusterView>>,
    policy: crate::planner::Policy,
    /// The order of pending gangs of one priority (`admission.order`).
    order: crate::planner::Order,
    /// Whether deferral runs (`admission.deferral.enabled`; it needs a cluster client).
    deferral: bool,
    client: Option<&'a kube::Client>,
    ha_store: Option<&'a Arc<dyn LeaseStore>>,
    metrics: &'a Arc<Metrics>,
    readiness: &'a Arc<Readiness>,
}

/// The engine with its audit log (opened now only without leader election: under it the log
/// is opened on taking the Lease, from every replica's files, and a standby reads and writes
/// none), gang admission and Events (with a cluster view), and leadership (under election).
fn wire(mut engine: Engine, inputs: WireInputs<'_>) -> Result<Wired, Error> {
    let mut recorder_handle = None;
    if let (Some(audit), None) = (inputs.audit, inputs.election) {
        let (recorder, resumed) = Recorder::open(&audit.path, audit_config(audit), inputs.timeouts)
            .map_err(Error::Audit)?;
        log_resumed(&audit.path, &resumed, inputs.metrics);
        let recorder = Arc::new(recorder);
        engine = engine.with_audit(recorder.clone());
        recorder_handle = Some(recorder);
    }
    let mut publisher = None;
    if let Some(view) = inputs.view {
        info!(
            policy = inputs.policy.as_str(),
            order = inputs.order.as_str(),
            gang.api = ?view.gang_api(),
            "gang admission active"
        );
        engine = engine
            .with_admission_in_order(inputs.policy, inputs.order, view.clone())
            .with_repair_where_asked(inputs.deferral && inputs.client.is_some());
        if let Some(client) = inputs.client {
            let instance = match inputs.election {
                Some(e) => e.identity.clone(),
                None => std::env::var("HOSTNAME").unwrap_or_else(|_| "gangscaler".to_owned()),
            };
            let events = crate::events::EventPublisher::new(client.clone(), instance);
            engine = engine.with_events(events.clone());
            publisher = Some(events);
        }
    }
    let status = match (inputs.election, inputs.ha_store) {
        (Some(e), Some(store)) => {
            let status = leader::Status::new(&e.identity, store.describe(), inputs.metrics.clone());
            engine = engine.with_leadership(status.clone());
            let probe = status.clone();
            inputs
                .readiness
                .probe(Condition::Leader, Arc::new(move || probe.not_ready()));
            Some(status)
        }
        _ => None,
    };
    Ok(Wired {
        engine,
        recorder: recorder_handle,
        publisher,
        status,
    })
}

/// Logs that this replica stands by until it holds the Lease.
fn log_election(election: &LeaderElectionSettings, store: &dyn LeaseStore) {
    info!(
        lease = %store.describe(),
        identity = %election.identity,
        lease_duration_ms = election.lease_duration.as_millis(),
        renew_deadline_ms = election.renew_deadline.as_millis(),
        retry_period_ms = election.retry_period.as_millis(),
        "leader election active: standing by until this replica holds the lease"
    );
}

/// A listener on `addr` for the `what` endpoint.
async fn listen(what: &'static str, addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}
