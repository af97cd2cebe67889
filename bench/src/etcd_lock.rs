//! The etcd lock baseline of the cluster benchmarks: etcd's Lock API
//! (its v3lock service, through the library's own etcd client), as a program without single-flight
//! would guard a key across hosts: lock the key's name, run the work,
//! unlock. Waiters block in `lock` until every holder before them has
//! unlocked (etcd queues them by revision). A lock hands no result on, so
//! every caller runs the work itself once it holds the lock.

use std::time::Duration;

use single_flight::_internal::election::etcd::REQUEST_TIMEOUT;
use single_flight::_internal::election::etcd::client::{Client, describe};

use crate::lab::Place;

/// The lease that each caller's locks live under: etcd ties a lock to a
/// lease, so that a crashed holder's lock ends with it. Far longer than a
/// benchmark's run (seconds), so that it never expires during one, and
/// granted once per caller, as a long-lived program would (without one,
/// etcd grants a lease for every lock: another write).
const LEASE_TTL_SECONDS: i64 = 60;

/// How long one call may wait for the lock before it counts as failed: far
/// beyond a key's queue here (8 holders of 1 ms each), so that only a
/// stuck etcd reaches it, and the run still ends.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// One thread's connection to etcd, for one key.
pub struct Caller {
    client: Client,
    lease: i64,
    name: String,
}

impl Caller {
    /// Connects to the etcd of this worker's place and grants the lease.
    pub async fn connect(key: &str) -> Result<Caller, String> {
        let place = Place::from_env();
        let client = Client::connect(&place.endpoints, None, REQUEST_TIMEOUT)?;
        let (lease, _) = client
            .lease_grant(LEASE_TTL_SECONDS)
            .await
            .map_err(|error| describe(&error))?;
        Ok(Caller {
            client,
            lease,
            // Under the run's cluster name: no two runs share a lock.
            name: format!("sf-bench-lock/{}/{key}", place.cluster),
        })
    }

    /// One call: lock, the work, unlock. Returns the value, and that this
    /// call ran the work (every call does).
    pub fn call(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        work: impl FnOnce() -> String,
    ) -> Result<(String, bool), String> {
        let lock = self.client.lock(self.name.as_str(), self.lease);
        let locked = runtime
            .block_on(async { tokio::time::timeout(LOCK_TIMEOUT, lock).await })
            .map_err(|_| format!("no lock within {LOCK_TIMEOUT:?}"))?
            .map_err(|error| describe(&error))?;
        let value = work();
        runtime
            .block_on(self.client.unlock(locked))
            .map_err(|error| describe(&error))?;
        Ok((value, true))
    }
}
