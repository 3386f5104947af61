//! A node's leases on the hot store's shards (DESIGN.md "Many nodes": leases with fencing
//! tokens).
//!
//! Each shard's trimming and recovery is worked by at most one node at a time. Before a pass,
//! a worker takes or renews the shards it can ([`ShardLeases::acquire`]): those free or already
//! its node's. Every fenced step presents its lease, and the store checks it in the same atomic
//! step ([`crate::ports::HotStore::trim`], [`crate::ports::HotStore::stale_reserved`]), so a
//! node that paused past its lease time (a long GC pause, a frozen VM) does nothing when it
//! wakes: [`crate::ChatError::LeaseLost`]. A node that dies stops renewing, and another takes
//! its shards within the lease time; one that stops releases them at once
//! ([`ShardLeases::release`]).
//!
//! The trimmer and the recovery worker of one node share one holder name, so they share its
//! leases: whichever renews first keeps them for both.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::try_join_all;

use crate::error::Result;
use crate::ports::{HotStore, ShardLease};

/// The hot store's shard leases of one node (see the module docs).
#[derive(Debug, Clone)]
pub struct ShardLeases {
    hot: Arc<dyn HotStore>,
    holder: String,
    ttl: Duration,
    /// The leases the last [`ShardLeases::acquire`] returned.
    held: Arc<Mutex<Vec<ShardLease>>>,
}

impl ShardLeases {
    /// Leases held for `ttl` (renewed by each pass and each fenced step), under a holder name
    /// of this process's own: `<host>-<pid>-<random>`, so that two processes never share one.
    pub fn new(hot: Arc<dyn HotStore>, ttl: Duration) -> Self {
        Self {
            hot,
            holder: tidemark_core::lease::holder_name(),
            ttl,
            held: Arc::default(),
        }
    }

    /// The same leases under another holder name (tests name their nodes).
    #[must_use]
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The holder name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes or renews every shard it can; returns the leases this node holds now, by shard.
    ///
    /// # Errors
    /// The store's.
    pub async fn acquire(&self) -> Result<Vec<ShardLease>> {
        let ttl_ms = self.ttl.as_millis() as u64;
        let granted = try_join_all((0..self.hot.shards()).map(|shard| async move {
            let token = self.hot.lease_shard(shard, &self.holder, ttl_ms).await?;
            Ok::<_, crate::ChatError>(token.map(|token| ShardLease {
                shard,
                holder: self.holder.clone(),
                token,
                ttl_ms,
            }))
        }))
        .await?;
        let held: Vec<ShardLease> = granted.into_iter().flatten().collect();
        *self.lock() = held.clone();
        Ok(held)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ShardLease>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives up the leases the last [`ShardLeases::acquire`] returned (shutdown); failures are
    /// ignored: those leases then run out by themselves.
    pub async fn release(&self) {
        let held = std::mem::take(&mut *self.lock());
        for lease in &held {
            let _ = self.hot.release_shard(lease).await;
        }
    }
}
