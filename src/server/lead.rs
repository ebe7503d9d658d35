//! What a replica under leader election runs: the election, the take-over once it holds the
//! Lease and the stop when it loses it (see the module docs of [`server`](super)).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::{Error, Ha, audit_config, log_resumed, spawn_kwok};
use crate::engine::Engine;
use crate::leader::{self, Elector, Role};
use crate::metrics::Metrics;
use crate::provision::kwok::KwokProvisioner;
use crate::telemetry::Chain;

/// A replica under leader election: runs the election; once this replica holds the Lease,
/// takes over (see [`take_over`]) and acts until `shutdown` (then stops its loops, waits for
/// `stop_election`, which [`Server::run`](super::Server::run) cancels once gRPC has drained, and releases the
/// Lease) or until the Lease is lost (then aborts its loops at once, cancels `shutdown` and
/// returns [`Error::LeadershipLost`]).
pub(super) async fn lead(
    mut ha: Ha,
    engine: Arc<Engine>,
    kwok: Option<Arc<KwokProvisioner>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    stop_election: CancellationToken,
) -> Result<(), Error> {
    let elector = Elector::new(
        ha.store.clone(),
        leader::Timing::from(&ha.election),
        ha.status.clone(),
        crate::clock::now_ms,
    );
    let mut election = tokio::spawn(elector.run(stop_election.clone()));
    let mut roles = ha.status.roles();
    let leading = tokio::select! {
        () = shutdown.cancelled() => false,
        r = roles.wait_for(|r| *r == Role::Leading) => r.is_ok(),
    };
    let acting = CancellationToken::new();
    let mut tasks = Vec::new();
    if leading {
        let took = tokio::select! {
            r = take_over(&mut ha, &engine, kwok, &metrics, &acting) => Some(r),
            // Lost while taking over: nothing acts yet.
            r = &mut election => return ended(r, &shutdown),
        };
        match took {
            Some(Ok(t)) => tasks = t,
            Some(Err(e)) => {
                error!(error = %Chain(&e), "taking over as leader failed; stopping");
                shutdown.cancel();
                return Err(e);
            }
            None => {}
        }
    }
    tokio::select! {
        () = shutdown.cancelled() => {}
        r = &mut election => {
            // Lost: stop acting now, not at the next tick.
            for t in &tasks {
                t.abort();
            }
            for t in tasks {
                let _ = t.await;
            }
            return ended(r, &shutdown);
        }
    }
    acting.cancel();
    for t in tasks {
        let _ = t.await;
    }
    tokio::select! {
        () = stop_election.cancelled() => {}
        r = &mut election => return ended(r, &shutdown),
    }
    ended(election.await, &shutdown)
}

/// The result of the election task: [`Error::LeadershipLost`] (after cancelling `shutdown`)
/// if it lost the Lease.
fn ended(
    r: Result<Result<(), leader::Lost>, tokio::task::JoinError>,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(lost)) => {
            shutdown.cancel();
            Err(Error::LeadershipLost(lost))
        }
        Err(e) => {
            shutdown.cancel();
            Err(Error::Task("leader election", e))
        }
    }
}

/// Makes this replica, which holds the Lease now, the acting leader: opens its audit log
/// resuming from every replica's files (open scale-ups, in-flight requests), lets the kwok
/// backend write and starts its loop and the scale-up loop (stopped by `acting`), then opens
/// the engine's gate. Returns the loops' tasks.
async fn take_over(
    ha: &mut Ha,
    engine: &Arc<Engine>,
    kwok: Option<Arc<KwokProvisioner>>,
    metrics: &Arc<Metrics>,
    acting: &CancellationToken,
) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let started = crate::clock::mono_std();
    let mut tasks = Vec::new();
    if let Some((audit, timeouts)) = ha.audit.clone() {
        let own = crate::audit::replica_log(&audit.path, &ha.election.identity);
        let template = audit.path.clone();
        let path = own.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let others = crate::audit::discover(&template)?;
            crate::scaleup::Recorder::open_merged(&path, audit_config(&audit), timeouts, &others)
        })
        .await
        .map_err(|e| Error::Task("opening the audit log", e))?;
        let (recorder, resumed) = opened.map_err(Error::Audit)?;
        log_resumed(&own, &resumed, metrics);
        let recorder = Arc::new(recorder);
        engine.take_over(recorder.clone());
        if let Some(parts) = ha.lifecycle.take() {
            let lifecycle = parts.build(recorder, engine.clone(), metrics.clone());
            tasks.push(tokio::spawn(lifecycle.run(acting.clone())));
        }
    }
    if let Some(kwok) = kwok {
        kwok.set_read_only(false);
        tasks.push(spawn_kwok(kwok, engine.clone(), acting.clone()));
    }
    ha.status.set_acting();
    info!(
        lease = %ha.status.lease(),
        identity = %ha.election.identity,
        took_over_ms = started.elapsed().as_millis(),
        "took over as leader: acting"
    );
    Ok(tasks)
}
