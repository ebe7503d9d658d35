//! The election against [`MemoryLeases`] on tokio's paused clock: taking, renewing,
//! waiting out another holder, losing on a partition or a stalled request before anyone may
//! take over, and handing over on release.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::metrics::Metrics;

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);

fn timing(identity: &str) -> Timing {
    Timing {
        identity: identity.to_owned(),
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
    }
}

fn wall() -> i64 {
    1_777_000_000_000
}

/// One replica: its status, metrics, stop token and elector task.
struct Replica {
    status: Status,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), Lost>>,
}

impl Replica {
    /// Starts `identity` over `store`; it marks itself acting as soon as it leads (the
    /// server resumes from the audit log in between).
    fn start(identity: &str, store: Arc<dyn LeaseStore>) -> Self {
        let metrics = Arc::new(Metrics::new());
        let status = Status::new(identity, store.describe(), metrics.clone());
        let stop = CancellationToken::new();
        let elector = Elector::new(store, timing(identity), status.clone(), wall);
        let task = tokio::spawn(elector.run(stop.clone()));
        let mut roles = status.roles();
        let acting = status.clone();
        tokio::spawn(async move {
            while roles.changed().await.is_ok() {
                if *roles.borrow_and_update() == Role::Leading {
                    acting.set_acting();
                }
            }
        });
        Self {
            status,
            metrics,
            stop,
            task,
        }
    }

    fn acting(&self) -> bool {
        self.status.check_acting().is_ok()
    }
}

/// A replica's own view of a shared store, which can be cut off from it alone.
#[derive(Debug, Clone)]
struct Partitionable {
    store: MemoryLeases,
    cut: Arc<AtomicBool>,
}

impl Partitionable {
    fn new(store: &MemoryLeases) -> Self {
        Self {
            store: store.clone(),
            cut: Arc::new(AtomicBool::new(false)),
        }
    }

    fn check(&self) -> Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            Err(Error::Unavailable("partitioned".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl LeaseStore for Partitionable {
    fn describe(&self) -> String {
        self.store.describe()
    }
    async fn get(&self) -> Result<Option<LeaseRecord>> {
        self.check()?;
        self.store.get().await
    }
    async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord> {
        self.check()?;
        self.store.create(record).await
    }
    async fn replace(&self, record: &LeaseRecord) -> Result<LeaseRecord> {
        self.check()?;
        self.store.replace(record).await
    }
}

fn held_by(holder: &str) -> LeaseRecord {
    LeaseRecord {
        holder: Some(holder.to_owned()),
        lease_duration_s: Some(15),
        acquire_ms: Some(wall()),
        renew_ms: Some(wall()),
        transitions: 3,
        version: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_takes_an_absent_lease_and_renews_it_every_retry_period() {
    let store = MemoryLeases::new();
    let a = Replica::start("a", Arc::new(store.clone()));
    sleep(Duration::from_millis(10)).await;
    assert_eq!(a.status.role(), Role::Leading);
    assert!(a.acting());
    let first = store.lease().unwrap();
    assert_eq!(first.holder(), Some("a"));
    assert_eq!(first.lease_duration_s, Some(15));
    assert_eq!(first.transitions, 0);
    assert_eq!(a.metrics.leader.get(), 1);
    assert_eq!(a.metrics.leader_transitions.get(), 1, "none -> a");
    let calls = store.calls();
    sleep(Duration::from_secs(60)).await;
    // A get and a replace per renewal, one renewal per retry period.
    let renewals = (store.calls() - calls) / 2;
    assert!((28..=31).contains(&renewals), "{renewals} renewals in 60s");
    let later = store.lease().unwrap();
    assert_eq!(later.holder(), Some("a"));
    assert_eq!(later.transitions, 0, "renewals are not transitions");
    assert!(a.acting());
    assert_eq!(a.metrics.leader_transitions.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_standby_refuses_until_the_holder_has_not_renewed_for_the_lease_duration() {
    let store = MemoryLeases::new();
    store.put(held_by("other"));
    let b = Replica::start("b", Arc::new(store.clone()));
    let started = crate::clock::mono();
    sleep(Duration::from_millis(10)).await;
    assert_eq!(b.status.role(), Role::Standby);
    let refusal = b.status.check_acting().unwrap_err();
    assert_eq!(
        refusal,
        NotLeader::Standby {
            identity: "b".into(),
            leader: Some("other".into()),
            lease: "memory/gangscaler".into()
        }
    );
    assert!(
        refusal.to_string().contains("the leader is other"),
        "{refusal}"
    );
    assert!(b.status.not_ready().unwrap().contains("standby (b)"));
    // The holder renews for a minute: b stays a standby.
    for _ in 0..30 {
        sleep(RETRY).await;
        let mut renewed = store.lease().unwrap();
        renewed.renew_ms = renewed.renew_ms.map(|t| t + 2000);
        store.put(renewed);
        assert_eq!(b.status.role(), Role::Standby);
    }
    // It stops: b takes over once 15 s have passed since it saw the last renewal.
    let last = crate::clock::mono();
    let mut roles = b.status.roles();
    roles.wait_for(|r| *r == Role::Leading).await.unwrap();
    let waited = last.elapsed();
    assert!(
        waited >= LEASE && waited <= LEASE + RETRY.mul_f64(1.2) + Duration::from_secs(2),
        "took over {waited:?} after the last renewal"
    );
    assert!(started.elapsed() > Duration::from_secs(60));
    let lease = store.lease().unwrap();
    assert_eq!(lease.holder(), Some("b"));
    assert_eq!(lease.transitions, 4);
    assert_eq!(b.metrics.leader_transitions.get(), 1, "other -> b");
    sleep(Duration::from_millis(10)).await;
    assert!(b.acting());
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_leader_stops_acting_before_the_standby_may_take_over() {
    let store = MemoryLeases::new();
    let a_view = Partitionable::new(&store);
    let a = Replica::start("a", Arc::new(a_view.clone()));
    sleep(Duration::from_millis(10)).await;
    let b = Replica::start("b", Arc::new(store.clone()));
    sleep(Duration::from_secs(20)).await;
    assert!(a.acting() && !b.acting());

    a_view.cut.store(true, Ordering::SeqCst);
    let cut = crate::clock::mono();
    let (mut a_stopped, mut b_started) = (None, None);
    while b_started.is_none() {
        sleep(Duration::from_millis(100)).await;
        assert!(
            !(a.acting() && b.acting()),
            "two leaders at {:?}",
            cut.elapsed()
        );
        if a_stopped.is_none() && !a.acting() {
            a_stopped = Some(cut.elapsed());
        }
        if b.acting() {
            b_started = Some(cut.elapsed());
        }
        assert!(cut.elapsed() < Duration::from_secs(60), "b never took over");
    }
    let (a_stopped, b_started) = (a_stopped.unwrap(), b_started.unwrap());
    assert!(a_stopped <= RENEW, "a acted {a_stopped:?} after the cut");
    assert!(
        b_started >= LEASE - RETRY,
        "b took over {b_started:?} after the cut"
    );
    assert!(b_started - a_stopped >= LEASE - RENEW - RETRY);
    let lost = a.task.await.unwrap().unwrap_err();
    assert!(lost.reason.contains("not renewed"), "{lost}");
    assert_eq!(a.status.role(), Role::Lost);
    assert_eq!(a.metrics.leader.get(), 0);
    assert_eq!(b.metrics.leader.get(), 1);
    assert!(matches!(
        a.status.check_acting(),
        Err(NotLeader::Lost { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewal_hangs_stops_at_the_renew_deadline() {
    let store = MemoryLeases::new();
    let a = Replica::start("a", Arc::new(store.clone()));
    sleep(Duration::from_secs(5)).await;
    assert!(a.acting());
    store.set_stalled(true);
    let stalled = crate::clock::mono();
    let lost = a.task.await.unwrap().unwrap_err();
    assert!(stalled.elapsed() <= RENEW, "{:?}", stalled.elapsed());
    assert!(a.status.check_acting().is_err());
    assert!(lost.reason.contains("renewDeadline"), "{lost}");
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_finds_another_holder_stops_at_once() {
    let store = MemoryLeases::new();
    let a = Replica::start("a", Arc::new(store.clone()));
    sleep(Duration::from_secs(5)).await;
    assert!(a.acting());
    // Someone overwrites the Lease (an operator, or a replica with a broken clock).
    store.put(held_by("intruder"));
    let lost = a.task.await.unwrap().unwrap_err();
    assert!(lost.reason.contains("intruder"), "{lost}");
    assert!(a.status.check_acting().is_err());
}

#[tokio::test(start_paused = true)]
async fn replicas_racing_for_a_free_lease_elect_exactly_one() {
    let store = MemoryLeases::new();
    let replicas: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| Replica::start(id, Arc::new(store.clone())))
        .collect();
    for _ in 0..100 {
        sleep(Duration::from_millis(300)).await;
        let leaders = replicas.iter().filter(|r| r.acting()).count();
        assert_eq!(leaders, 1);
    }
    let holder = store.lease().unwrap().holder.unwrap();
    let leader = replicas.iter().find(|r| r.acting()).unwrap();
    assert_eq!(leader.status.identity(), holder);
    for r in &replicas {
        assert_eq!(r.status.leader().as_deref(), Some(holder.as_str()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_the_next_attempt() {
    let store = MemoryLeases::new();
    let a = Replica::start("a", Arc::new(store.clone()));
    sleep(Duration::from_millis(10)).await;
    let b = Replica::start("b", Arc::new(store.clone()));
    sleep(Duration::from_secs(10)).await;
    assert!(a.acting() && !b.acting());
    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    assert_eq!(store.lease().unwrap().holder(), None);
    assert_eq!(a.status.role(), Role::Standby);
    let released = crate::clock::mono();
    let mut roles = b.status.roles();
    roles.wait_for(|r| *r == Role::Leading).await.unwrap();
    assert!(
        released.elapsed() <= RETRY.mul_f64(1.2) + Duration::from_millis(10),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(store.lease().unwrap().holder(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_store_keeps_a_standby_standing_by() {
    let store = MemoryLeases::new();
    store.set_failing(true);
    let a = Replica::start("a", Arc::new(store.clone()));
    sleep(Duration::from_secs(60)).await;
    assert_eq!(a.status.role(), Role::Standby);
    assert!(matches!(
        a.status.check_acting(),
        Err(NotLeader::Standby { leader: None, .. })
    ));
    store.set_failing(false);
    sleep(RETRY * 2).await;
    assert!(a.acting());
}
