//! Accepting gRPC connections under limits, before tonic sees them: at most
//! `server.connections.max` open, at most `maxPerPeer` from one source address, the last
//! `reservedForCertified` slots only for addresses that completed a mutual-TLS handshake
//! within the hour ([`crate::peers`]; one more is closed at once), a deadline from accept to the
//! first HTTP/2 bytes that covers the TLS handshake, an idle timeout after that, and an accept
//! loop that backs off on errors such as running out of file descriptors instead of spinning.
//! Refusals and failed handshakes are logged, each kind at most once per [`LOG_EVERY`] with a
//! count of the ones left out, so a flood of bad connections cannot flood the log. Each
//! handshake takes the TLS material served at that moment ([`Tls::acceptor`]), so a rotation
//! applies to new connections only. A connection fails its reads and writes once the `force`
//! token is cancelled, which is how the end of the shutdown grace period closes the
//! connections still open.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, warn};

use super::tls::Tls;
use crate::config::ConnectionSettings;
use crate::peers::{self, OnRefused, Peers, Refused, Slot};
use crate::telemetry::Chain;

/// Each kind of connection refusal or failure is logged at most once per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// The first pause after an accept error; it doubles up to [`MAX_BACKOFF`] while errors last.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between accept attempts while accepting fails.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The slots of a listener under `settings`: the reserve for certified clients applies only
/// when `tls` verifies client certificates; `on_refused` counts each refusal.
pub fn peers_for(
    settings: &ConnectionSettings,
    tls: Option<&Tls>,
    on_refused: Option<OnRefused>,
) -> Arc<Peers> {
    let verifies = tls.is_some_and(Tls::verifies_clients);
    Peers::with_hook(
        peers::Limits {
            max: settings.max,
            max_per_peer: settings.max_per_peer,
            reserved: if verifies {
                settings.reserved_for_certified
            } else {
                0
            },
        },
        on_refused,
    )
}

/// Starts accepting on `listener` and returns the connections that `peers` took and that
/// passed the TLS handshake (when `tls` is given), for tonic's `serve_with_incoming`.
/// Accepting stops (and the listener closes) when `shutdown` is cancelled or the returned
/// stream is dropped; every connection handed out fails its I/O once `force` is cancelled.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    settings: ConnectionSettings,
    peers: Arc<Peers>,
    shutdown: CancellationToken,
    force: CancellationToken,
) -> impl Stream<Item = Result<Conn, io::Error>> + Send + 'static {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let accepting = Accepting {
        tls,
        settings,
        peers,
        logs: Arc::new(Logs::default()),
    };
    tokio::spawn(accept_loop(listener, accepting, tx, shutdown, force));
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|c| c.map(Ok)))
}

/// What the accept loop hands every connection it takes.
struct Accepting {
    tls: Option<Arc<Tls>>,
    settings: ConnectionSettings,
    peers: Arc<Peers>,
    logs: Arc<Logs>,
}

async fn accept_loop(
    listener: TcpListener,
    accepting: Accepting,
    tx: mpsc::UnboundedSender<Conn>,
    shutdown: CancellationToken,
    force: CancellationToken,
) {
    let Accepting {
        tls,
        settings,
        peers,
        logs,
    } = accepting;
    // Dropping the set when the loop ends aborts the handshakes still running.
    let mut handshakes = JoinSet::new();
    let mut backoff = Duration::ZERO;
    loop {
        while handshakes.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            () = tx.closed() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if per_connection(&e) => {
                debug!(error = %Chain(&e), "a connection failed while being accepted");
                continue;
            }
            Err(e) => {
                backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                if let Some(suppressed) = logs.accept_failed.ready() {
                    warn!(
                        error = %Chain(&e),
                        backoff_ms = backoff.as_millis(),
                        suppressed,
                        "accepting a gRPC connection failed; backing off"
                    );
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => continue,
                }
            }
        };
        backoff = Duration::ZERO;
        let permit = match peers.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                log_refusal(&logs, &peers, peer, why);
                drop(stream);
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(peer = %peer, error = %Chain(&e), "setting TCP_NODELAY failed");
        }
        handshakes.spawn(handshake(
            stream,
            peer,
            permit,
            tls.clone(),
            settings,
            logs.clone(),
            Handoff {
                tx: tx.clone(),
                force: force.clone(),
            },
        ));
    }
}

/// Logs a refused connection, at most once per [`LOG_EVERY`] for each reason.
fn log_refusal(logs: &Logs, peers: &Peers, peer: SocketAddr, why: Refused) {
    let limits = peers.limits();
    let (open, from_peer) = peers.open(peer.ip());
    match why {
        Refused::PerPeer => {
            if let Some(suppressed) = logs.peer_limit_reached.ready() {
                warn!(
                    peer = %peer,
                    limit = limits.max_per_peer,
                    open,
                    suppressed,
                    "gRPC connection refused: this address holds server.connections.maxPerPeer connections"
                );
            }
        }
        Refused::Full => {
            if let Some(suppressed) = logs.limit_reached.ready() {
                warn!(
                    peer = %peer,
                    limit = limits.max,
                    reserved = limits.reserved,
                    open,
                    from_peer,
                    suppressed,
                    "gRPC connection refused: server.connections.max reached (the reservedForCertified slots are kept for addresses that completed a mutual-TLS handshake)"
                );
            }
        }
    }
}

/// Where a connection goes once its handshake is done, and what closes it at the end of the
/// shutdown grace period.
struct Handoff {
    tx: mpsc::UnboundedSender<Conn>,
    force: CancellationToken,
}

/// Accept errors that concern one connection only (it was reset before it was accepted):
/// accepting goes on at once. Any other error (`EMFILE`, `ENFILE`, `ENOBUFS`, ...) means the
/// process or system is out of something, and the loop backs off.
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

async fn handshake(
    stream: TcpStream,
    peer: SocketAddr,
    mut permit: Slot,
    tls: Option<Arc<Tls>>,
    settings: ConnectionSettings,
    logs: Arc<Logs>,
    handoff: Handoff,
) {
    let deadline = crate::clock::mono() + settings.handshake_timeout;
    let info = TcpConnectInfo {
        local_addr: stream.local_addr().ok(),
        remote_addr: Some(peer),
    };
    let io = match tls {
        None => Io::Plain(stream),
        Some(tls) => match tokio::time::timeout_at(deadline, tls.acceptor().accept(stream)).await {
            Ok(Ok(stream)) => {
                // The handshake checked the client's certificate when the server asks for one.
                if tls.verifies_clients() {
                    permit.certify();
                }
                Io::Tls(Box::new(stream))
            }
            Ok(Err(e)) => {
                if let Some(suppressed) = logs.handshake_failed.ready() {
                    warn!(peer = %peer, error = %Chain(&e), suppressed, "TLS handshake failed; connection closed");
                }
                return;
            }
            Err(_) => {
                if let Some(suppressed) = logs.handshake_timed_out.ready() {
                    warn!(
                        peer = %peer,
                        timeout_ms = settings.handshake_timeout.as_millis(),
                        suppressed,
                        "TLS handshake not finished within server.connections.handshakeTimeout; connection closed"
                    );
                }
                return;
            }
        },
    };
    let conn = Conn {
        io,
        info,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        last_read: None,
        settings,
        logs,
        // A child token per connection: each waits on its own notifier rather than all of
        // them on one shared lock.
        force: Box::pin(handoff.force.child_token().cancelled_owned()),
        _permit: permit,
    };
    // A closed channel means the server is stopping: the connection is dropped (closed).
    let _ = handoff.tx.send(conn);
}

/// Rate limits of the log lines about refused and failed connections.
#[derive(Debug, Default)]
struct Logs {
    limit_reached: Throttle,
    peer_limit_reached: Throttle,
    accept_failed: Throttle,
    handshake_failed: Throttle,
    handshake_timed_out: Throttle,
    no_request: Throttle,
}

/// Lets one event of a kind through per [`LOG_EVERY`] and counts the others.
#[derive(Debug, Default)]
struct Throttle {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

impl Throttle {
    /// `Some(events left out since the last one logged)` if this one should be logged.
    fn ready(&self) -> Option<u64> {
        let now = crate::clock::mono();
        // A poisoned lock only means another thread panicked while logging: keep going.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some(at) if now.saturating_duration_since(at) < LOG_EVERY => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An accepted connection, handed to tonic. Reads fail with `TimedOut` (and tonic closes the
/// connection) when no HTTP/2 bytes arrived by the handshake deadline, or, once they did,
/// when nothing was read for `idleTimeout`. Holds its slot of the listener's [`Peers`] until
/// dropped.
pub struct Conn {
    io: Io,
    info: TcpConnectInfo,
    /// The handshake deadline until the first read, then the idle deadline, re-armed lazily
    /// from `last_read` when it fires.
    deadline: Pin<Box<Sleep>>,
    last_read: Option<Instant>,
    settings: ConnectionSettings,
    logs: Arc<Logs>,
    /// Completes when the server stops waiting for this connection to finish.
    force: Pin<Box<WaitForCancellationFutureOwned>>,
    _permit: Slot,
}

impl Conn {
    fn peer(&self) -> String {
        self.info
            .remote_addr
            .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
    }

    /// `Ready` with an error once the server has stopped waiting for connections to finish.
    fn poll_forced(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        self.force.as_mut().poll(cx).map(|()| {
            debug!(peer = %self.peer(), "connection closed at the end of the shutdown grace period");
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server shut down: the grace period for RPCs in flight is over",
            )
        })
    }

    /// `Ready` when the connection has been silent too long; re-arms the idle deadline when
    /// reads happened since it was set.
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let Some(last) = self.last_read else {
                if let Some(suppressed) = self.logs.no_request.ready() {
                    warn!(
                        peer = %self.peer(),
                        timeout_ms = self.settings.handshake_timeout.as_millis(),
                        suppressed,
                        "no HTTP/2 request within server.connections.handshakeTimeout; connection closed"
                    );
                }
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 request within the handshake timeout",
                ));
            };
            let idle_until = last + self.settings.idle_timeout;
            if idle_until <= crate::clock::mono() {
                debug!(peer = %self.peer(), "idle gRPC connection closed");
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for longer than the idle timeout",
                ));
            }
            self.deadline.as_mut().reset(idle_until);
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_forced(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let polled = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        match polled {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let first = this.last_read.is_none();
                    this.last_read = Some(crate::clock::mono());
                    if first {
                        let idle_until = crate::clock::mono() + this.settings.idle_timeout;
                        this.deadline.as_mut().reset(idle_until);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => this.poll_deadline(cx).map(Err),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_forced(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_forced(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(e) = this.poll_forced(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_throttle_lets_one_event_through_per_interval_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.ready(), Some(0));
        assert_eq!(t.ready(), None);
        assert_eq!(t.ready(), None);
        tokio::time::advance(LOG_EVERY).await;
        assert_eq!(t.ready(), Some(2), "the two left out are counted");
        assert_eq!(t.ready(), None);
    }

    #[test]
    fn only_per_connection_accept_errors_skip_the_backoff() {
        assert!(per_connection(&io::ErrorKind::ConnectionAborted.into()));
        assert!(per_connection(&io::ErrorKind::ConnectionReset.into()));
        // EMFILE: the process is out of file descriptors; retrying at once would spin.
        assert!(!per_connection(&io::Error::from_raw_os_error(24)));
        assert!(!per_connection(&io::ErrorKind::OutOfMemory.into()));
    }
}
