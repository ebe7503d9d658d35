//! [`MemoryLeases`]: a Lease in this process, with the API server's semantics the election
//! relies on (a replace at a stale version and a second create conflict), and failures and
//! stalls to inject. Tests run several electors (or several servers) over one.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::{Error, LeaseRecord, LeaseStore, Result};

/// A Lease in memory; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemoryLeases {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    lease: Option<LeaseRecord>,
    version: u64,
    failing: bool,
    stalled: bool,
    calls: u64,
}

impl Inner {
    /// Stores `record` under the next version, as the API server does on every write, and
    /// returns what was stored.
    fn store(&mut self, record: &LeaseRecord) -> LeaseRecord {
        self.version += 1;
        let mut stored = record.clone();
        stored.version = Some(self.version.to_string());
        self.lease = Some(stored.clone());
        stored
    }
}

impl MemoryLeases {
    /// No Lease yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the Lease as another writer would (a new version).
    pub fn put(&self, record: LeaseRecord) {
        self.inner().store(&record);
    }

    /// The Lease now.
    pub fn lease(&self) -> Option<LeaseRecord> {
        self.inner().lease.clone()
    }

    /// While `failing`, every call fails at once (an unreachable API server).
    pub fn set_failing(&self, failing: bool) {
        self.inner().failing = failing;
    }

    /// While `stalled`, every call hangs until it is cleared (a request that never returns).
    pub fn set_stalled(&self, stalled: bool) {
        self.inner().stalled = stalled;
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.inner().calls
    }

    async fn enter(&self) -> Result<()> {
        loop {
            {
                let mut inner = self.inner();
                if !inner.stalled {
                    inner.calls += 1;
                    if inner.failing {
                        return Err(Error::Unavailable("the lease store is failing".into()));
                    }
                    return Ok(());
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

#[async_trait]
impl LeaseStore for MemoryLeases {
    fn describe(&self) -> String {
        "memory/gangscaler".to_owned()
    }

    async fn get(&self) -> Result<Option<LeaseRecord>> {
        self.enter().await?;
        Ok(self.lease())
    }

    async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord> {
        self.enter().await?;
        let mut inner = self.inner();
        if inner.lease.is_some() {
            return Err(Error::Conflict);
        }
        Ok(inner.store(record))
    }

    async fn replace(&self, record: &LeaseRecord) -> Result<LeaseRecord> {
        self.enter().await?;
        let mut inner = self.inner();
        let current = inner.lease.as_ref().and_then(|l| l.version.clone());
        if current.is_none() || current != record.version {
            return Err(Error::Conflict);
        }
        Ok(inner.store(record))
    }
}
