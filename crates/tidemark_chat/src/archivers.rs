//! One archiver per outbox partition this node owns (DESIGN.md "Many nodes": archivers share a
//! consumer group and own partitions), following ownership as the group moves partitions
//! between nodes.
//!
//! At start the archivers of the partitions owned then are started, each with its partition's
//! start rule ([`crate::archiver`]); a refusal stops the node's start, as on one node. From
//! then on, every [`FOLLOW`], what the node owns is read again
//! ([`crate::ports::Outbox::owned_partitions`]): an archiver is started for each partition
//! gained (a refused start is logged and tried again at the next look) and stopped for each
//! partition lost. An archiver that finds its partition gone when it stores its position
//! ([`crate::ChatError::PartitionLost`]) stops by itself. While a partition has no archiver
//! anywhere, its watermark stands still and so does the trimmer's T: nothing is trimmed that
//! is not archived.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tidemark_core::clock::SharedClock;
use tidemark_core::health::StoreHealth;
use tidemark_core::throttle::Throttle;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::archiver::Archiver;
use crate::error::Result;
use crate::metrics::ChatMetrics;
use crate::ports::{Archive, HotStore, Outbox};

/// How often a node looks again at which partitions it owns.
pub const FOLLOW: Duration = Duration::from_secs(1);

/// The archivers of one node (see the module docs).
#[derive(Debug, Clone)]
pub struct Archivers {
    outbox: Arc<dyn Outbox>,
    archive: Arc<dyn Archive>,
    hot: Arc<dyn HotStore>,
    clock: SharedClock,
    batch_max: usize,
    idle: Duration,
    metrics: ChatMetrics,
    health: StoreHealth,
}

impl Archivers {
    /// The archivers of the partitions this node owns, with `chat.archive_batch_max` and
    /// `chat.archive_idle`, reporting their writes to `health`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        outbox: Arc<dyn Outbox>,
        archive: Arc<dyn Archive>,
        hot: Arc<dyn HotStore>,
        clock: SharedClock,
        batch_max: usize,
        idle: Duration,
        metrics: ChatMetrics,
        health: StoreHealth,
    ) -> Self {
        Self {
            outbox,
            archive,
            hot,
            clock,
            batch_max,
            idle,
            metrics,
            health,
        }
    }

    /// Starts the archivers of the partitions owned now and the task that follows ownership,
    /// into `tasks`; all stop when `cancel` fires.
    ///
    /// # Errors
    /// A partition owned now whose start rule refuses it, or a store's error.
    pub async fn spawn(self, tasks: &mut JoinSet<()>, cancel: &CancellationToken) -> Result<()> {
        let mut first = Vec::new();
        for partition in self.outbox.owned_partitions().await? {
            first.push(self.start(partition).await?);
        }
        let cancel = cancel.clone();
        tasks.spawn(async move { self.follow(first, cancel).await });
        Ok(())
    }

    async fn start(&self, partition: u32) -> Result<Archiver> {
        Ok(Archiver::start(
            partition,
            Arc::clone(&self.outbox),
            Arc::clone(&self.archive),
            Arc::clone(&self.hot),
            Arc::clone(&self.clock),
            self.batch_max,
            self.metrics.clone(),
        )
        .await?
        .with_store_health(self.health.clone()))
    }

    async fn follow(self, first: Vec<Archiver>, cancel: CancellationToken) {
        let mut running: BTreeMap<u32, (CancellationToken, JoinHandle<()>)> = BTreeMap::new();
        let launch = |archiver: Archiver| {
            let token = cancel.child_token();
            let handle = tokio::spawn(archiver.run(self.idle, token.clone()));
            (token, handle)
        };
        for archiver in first {
            running.insert(archiver.partition(), launch(archiver));
        }
        // A refused start is tried again every look, logged once a minute.
        let refused = Throttle::new(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(FOLLOW) => {}
            }
            // An archiver that found its partition gone has stopped.
            running.retain(|_, (_, handle)| !handle.is_finished());
            let owned = match self.outbox.owned_partitions().await {
                Ok(owned) => owned,
                Err(error) => {
                    tracing::warn!(%error, "chat archivers: which outbox partitions this node owns");
                    continue;
                }
            };
            let lost: Vec<u32> = running
                .keys()
                .copied()
                .filter(|p| !owned.contains(p))
                .collect();
            for partition in lost {
                if let Some((token, handle)) = running.remove(&partition) {
                    token.cancel();
                    let _ = handle.await;
                    tracing::info!(
                        partition,
                        "outbox partition moved to another node's archiver"
                    );
                }
            }
            for partition in owned {
                if running.contains_key(&partition) {
                    continue;
                }
                match self.start(partition).await {
                    Ok(archiver) => {
                        tracing::info!(partition, "archiving outbox partition");
                        running.insert(partition, launch(archiver));
                    }
                    Err(error) => {
                        if refused.allow().is_some() {
                            tracing::error!(partition, %error, "chat archiver not started");
                        }
                    }
                }
            }
        }
        for (token, handle) in running.into_values() {
            token.cancel();
            let _ = handle.await;
        }
    }
}
