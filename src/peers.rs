//! Which connections a listener takes, by source address: at most `max` open in all, at most
//! `max_per_peer` from one address, and the last `reserved` slots only for addresses that
//! completed a mutual-TLS handshake recently (certified clients: Cluster Autoscaler with its
//! client certificate). One peer that holds or churns connections can then take no more than
//! its own share, and a certified client that reconnects after a network blip finds a slot
//! even when many addresses flood the listener.
//!
//! The decision is synchronous and O(1) per connection under one lock; memory is bounded by
//! `max` (one counter per address with open connections) and [`MAX_CERTIFIED_PEERS`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an address stays certified after its last completed mutual-TLS handshake.
pub const CERTIFIED_FOR: Duration = Duration::from_secs(60 * 60);

/// Most certified addresses remembered; past it the one certified longest ago is forgotten.
pub const MAX_CERTIFIED_PEERS: usize = 1024;

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most.
    pub max: usize,
    /// Open connections from one source address at most.
    pub max_per_peer: usize,
    /// Slots of `max` only certified addresses may take (0: none reserved).
    pub reserved: usize,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address already holds `max_per_peer` connections.
    PerPeer,
    /// The listener holds `max` connections, or `max - reserved` and the address is not
    /// certified.
    Full,
}

impl Refused {
    /// A bounded label for metrics and logs: `per_peer` or `full`.
    pub fn label(self) -> &'static str {
        match self {
            Self::PerPeer => "per_peer",
            Self::Full => "full",
        }
    }
}

/// Counts a refusal (the metrics hook of the listener's owner).
pub type OnRefused = Arc<dyn Fn(Refused) + Send + Sync>;

/// The open connections of one listener, by source address.
pub struct Peers {
    limits: Limits,
    state: Mutex<State>,
    on_refused: Option<OnRefused>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Open connections.
    open: usize,
    /// Open connections not yet certified: they may take only `max - reserved` slots.
    uncertified: usize,
    /// Open connections per address (addresses with none are removed).
    by_peer: HashMap<IpAddr, usize>,
    /// When each address last completed a mutual-TLS handshake.
    certified: HashMap<IpAddr, Instant>,
}

impl State {
    fn is_certified(&self, peer: IpAddr, now: Instant) -> bool {
        self.certified
            .get(&peer)
            .is_some_and(|at| now.saturating_duration_since(*at) < CERTIFIED_FOR)
    }
}

impl Peers {
    /// A listener's peers under `limits` (`reserved` is capped at `max - 1`, so that an
    /// uncertified client can always connect to an idle listener).
    pub fn new(limits: Limits) -> Arc<Self> {
        Self::with_hook(limits, None)
    }

    /// [`Peers::new`], calling `on_refused` for every refused connection.
    pub fn with_hook(limits: Limits, on_refused: Option<OnRefused>) -> Arc<Self> {
        let limits = Limits {
            max: limits.max.max(1),
            max_per_peer: limits.max_per_peer.max(1),
            reserved: limits.reserved.min(limits.max.saturating_sub(1)),
        };
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
            on_refused,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change is a few counter updates that cannot panic half-way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a slot for a connection from `peer`, or says why not (and counts the refusal).
    ///
    /// # Errors
    /// [`Refused::PerPeer`] or [`Refused::Full`].
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        let admitted = self.try_admit(peer, crate::clock::mono_std());
        if let (Err(why), Some(hook)) = (&admitted, &self.on_refused) {
            hook(*why);
        }
        admitted
    }

    fn try_admit(self: &Arc<Self>, peer: IpAddr, now: Instant) -> Result<Slot, Refused> {
        let mut s = self.state();
        let mine = s.by_peer.get(&peer).copied().unwrap_or(0);
        if mine >= self.limits.max_per_peer {
            return Err(Refused::PerPeer);
        }
        if s.open >= self.limits.max {
            return Err(Refused::Full);
        }
        let certified = s.is_certified(peer, now);
        if !certified && s.uncertified >= self.limits.max - self.limits.reserved {
            return Err(Refused::Full);
        }
        s.open += 1;
        if !certified {
            s.uncertified += 1;
        }
        *s.by_peer.entry(peer).or_insert(0) += 1;
        Ok(Slot {
            peers: self.clone(),
            peer,
            certified,
        })
    }

    /// Open connections now: in all, and from `peer`.
    pub fn open(&self, peer: IpAddr) -> (usize, usize) {
        let s = self.state();
        (s.open, s.by_peer.get(&peer).copied().unwrap_or(0))
    }
}

/// One open connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    peers: Arc<Peers>,
    peer: IpAddr,
    certified: bool,
}

impl Slot {
    /// The connection completed a mutual-TLS handshake (its client certificate chains to the
    /// client CA): its address is certified for [`CERTIFIED_FOR`], and this connection no
    /// longer counts against the slots uncertified addresses may take.
    pub fn certify(&mut self) {
        let now = crate::clock::mono_std();
        let mut s = self.peers.state();
        if !self.certified {
            self.certified = true;
            s.uncertified = s.uncertified.saturating_sub(1);
        }
        if !s.certified.contains_key(&self.peer) && s.certified.len() >= MAX_CERTIFIED_PEERS {
            let oldest = s
                .certified
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(peer, _)| *peer);
            if let Some(oldest) = oldest {
                s.certified.remove(&oldest);
            }
        }
        s.certified.insert(self.peer, now);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.peers.state();
        s.open = s.open.saturating_sub(1);
        if !self.certified {
            s.uncertified = s.uncertified.saturating_sub(1);
        }
        if let Some(n) = s.by_peer.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn limits(max: usize, max_per_peer: usize, reserved: usize) -> Limits {
        Limits {
            max,
            max_per_peer,
            reserved,
        }
    }

    #[test]
    fn one_peer_cannot_take_more_than_its_share() {
        let peers = Peers::new(limits(10, 3, 0));
        let flood: Vec<Slot> = (0..3).map(|_| peers.admit(ip(2)).unwrap()).collect();
        assert_eq!(peers.admit(ip(2)).unwrap_err(), Refused::PerPeer);
        let other = peers
            .admit(ip(1))
            .expect("another address still gets a slot");
        assert_eq!(peers.open(ip(2)), (4, 3));
        drop(flood);
        assert_eq!(peers.open(ip(2)), (1, 0), "freed slots are given back");
        drop(other);
        assert!(
            peers.state().by_peer.is_empty(),
            "no entry is kept for an address without connections"
        );
    }

    #[test]
    fn the_reserved_slots_go_only_to_certified_addresses() {
        let peers = Peers::new(limits(4, 4, 2));
        // The client connects once and completes its handshake: its address is certified, and
        // that connection counts against the whole listener, not the uncertified share.
        let mut ca = peers.admit(ip(1)).unwrap();
        ca.certify();
        let flood: Vec<Slot> = (0..2).map(|_| peers.admit(ip(2)).unwrap()).collect();
        assert_eq!(
            peers.admit(ip(3)).unwrap_err(),
            Refused::Full,
            "uncertified addresses share max - reserved"
        );
        drop(ca);
        let again = peers
            .admit(ip(1))
            .expect("the certified address reconnects into a reserved slot");
        let _last = peers.admit(ip(1)).expect("and may take the last one too");
        assert_eq!(peers.admit(ip(1)).unwrap_err(), Refused::Full, "max holds");
        drop((flood, again));
    }

    #[test]
    fn certification_expires_and_memory_is_bounded() {
        let peers = Peers::new(limits(2, 2, 1));
        let mut first = peers.admit(ip(1)).unwrap();
        first.certify();
        let now = crate::clock::mono_std();
        assert!(peers.state().is_certified(ip(1), now));
        assert!(!peers.state().is_certified(ip(1), now + CERTIFIED_FOR));
        drop(first);
        for i in 0..=MAX_CERTIFIED_PEERS {
            let peer = IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]);
            peers.admit(peer).unwrap().certify();
        }
        assert_eq!(peers.state().certified.len(), MAX_CERTIFIED_PEERS);
    }

    #[test]
    fn refusals_are_counted_by_reason() {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let peers = Peers::with_hook(
            limits(2, 1, 0),
            Some(Arc::new(move |why| {
                assert_eq!(why, Refused::PerPeer);
                seen.fetch_add(1, Ordering::Relaxed);
            })),
        );
        let _held = peers.admit(ip(2)).unwrap();
        for _ in 0..5 {
            assert!(peers.admit(ip(2)).is_err());
        }
        assert_eq!(count.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_reserve_as_large_as_max_still_leaves_one_slot() {
        let peers = Peers::new(limits(3, 3, 3));
        assert_eq!(peers.limits().reserved, 2);
        let _one = peers.admit(ip(9)).expect("an idle listener takes anyone");
    }
}
