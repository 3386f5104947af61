//! The partition manager (DESIGN.md principle 4): creates the day partitions of the next few
//! days ahead of time and drops partitions past retention whole.

use std::sync::Arc;
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::day::Day;
use tidemark_core::health::StoreHealth;
use tidemark_core::retry::Retry;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::service::LINKS_STORE;
use crate::store::LinkStore;

/// Days created ahead of today.
pub const DAYS_AHEAD: i32 = 3;

/// The first day still kept when today is `today` and records are kept `retention_days`.
pub fn oldest_kept(today: Day, retention_days: u32) -> Day {
    today.plus(-(retention_days.max(1) as i32 - 1))
}

/// Keeps the partitions of one link store.
#[derive(Debug)]
pub struct PartitionManager {
    store: Arc<dyn LinkStore>,
    clock: SharedClock,
    retention_days: u32,
    /// Where its writes are reported ([`PartitionManager::with_store_health`]).
    health: StoreHealth,
}

impl PartitionManager {
    /// A manager keeping `retention_days` days.
    pub fn new(store: Arc<dyn LinkStore>, clock: SharedClock, retention_days: u32) -> Self {
        Self {
            store,
            clock,
            retention_days,
            health: StoreHealth::default(),
        }
    }

    /// Reports a pass that fails for want of space to `health`, the node's, under
    /// [`LINKS_STORE`].
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// One pass; returns the days dropped.
    pub async fn run_once(&self) -> Result<Vec<Day>> {
        let today = Day::of_utc_ms(self.clock.now_ms());
        let ahead: Vec<Day> = (0..=DAYS_AHEAD).map(|d| today.plus(d)).collect();
        self.store.create_partitions(&ahead).await?;
        let dropped = self
            .store
            .drop_partitions_before(oldest_kept(today, self.retention_days))
            .await?;
        if !dropped.is_empty() {
            tracing::info!(?dropped, "dropped expired link partitions");
        }
        Ok(dropped)
    }

    /// Runs a pass now and then every `every` until `cancel`. After a failed pass, the
    /// workers' rule ([`tidemark_core::retry`]): a retryable failure is tried again after a
    /// back-off from 10 s up to `every`, so that days ahead are created before they are
    /// needed; any other after `every`, logged once.
    pub async fn run(self, every: Duration, cancel: CancellationToken) {
        let mut retry = Retry::new(
            "links partition manager",
            Duration::from_secs(10).min(every),
            every,
        );
        loop {
            // Only failures are reported: a pass over partitions that exist writes nothing,
            // and says nothing of whether the store has room.
            let pause = match self.run_once().await {
                Ok(_) => {
                    retry.succeeded();
                    every
                }
                Err(error) => {
                    self.health.failed(LINKS_STORE, &error);
                    retry.failed(&error, error.is_retryable())
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_window() {
        let today = Day::parse("2026-11-30").unwrap();
        assert_eq!(oldest_kept(today, 1), today);
        assert_eq!(oldest_kept(today, 180).to_string(), "2026-06-04");
    }
}
