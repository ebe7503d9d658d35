//! `gangscaler webhook`: the compatibility webhook's process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::config::TlsFiles;
use crate::server::Tls;
use crate::webhook::{self, Webhook};

/// How often the TLS files are read for rotation.
const TLS_POLL: Duration = Duration::from_secs(10);

/// Serves the webhook on `listen` until SIGTERM or Ctrl-C.
///
/// # Errors
/// Unusable TLS files, a port that cannot be bound, no kubeconfig, or a failed API
/// discovery at start.
pub(super) async fn run(
    listen: SocketAddr,
    files: TlsFiles,
    kubeconfig: Option<PathBuf>,
    reservation_tolerations: bool,
) -> anyhow::Result<()> {
    if files.client_ca_file.is_none() {
        warn!(
            "no --client-ca: serving without client certificates; any client that can reach the port and trusts the serving certificate can ask for a pod's PodGroup to be created from its Workload"
        );
    }
    let tls = Arc::new(Tls::load(&files).context("loading the webhook's TLS files")?);
    let client = crate::provision::kube_client(kubeconfig.as_deref())
        .await
        .context("building the Kubernetes client (--kubeconfig, KUBECONFIG or in-cluster)")?;
    let hook = Webhook::new(client, reservation_tolerations).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding --listen {listen}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    info!(%addr, served = ?hook.served().map(|a| a.api_version()), "webhook listening");
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        super::wait_for_signal().await;
        info!("shutdown signal received");
        signal.cancel();
    });
    tokio::spawn(tls.clone().run(TLS_POLL, None, now_ms, shutdown.clone()));
    tokio::spawn(hook.clone().refresh(shutdown.clone()));
    webhook::serve(hook, listener, tls, shutdown).await;
    Ok(())
}
