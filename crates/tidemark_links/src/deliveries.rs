//! The sending pool's outcomes, written to the campaign statistics in groups
//! ([`crate::store::MailingStore::record_deliveries`]): the pool's workers report each
//! message without waiting ([`crate::send::DeliveryLog`]); the first report to find no writer
//! running starts one, which lets a group gather for [`DELIVERY_LINGER`], writes it, and goes
//! on until none is left. A group that fails is tried [`crate::stats::WRITE_ATTEMPTS`] times, then
//! counted in `tidemark_links_stats_failures_total` and logged; past
//! [`MAX_PENDING_DELIVERIES`] waiting, reports are counted there too instead of queued, so a
//! store that is down never blocks sending.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_core::clock::SharedClock;

use crate::metrics::LinksMetrics;
use crate::send::{DeliveryLog, OutgoingMail};
use crate::stats::{Delivery, with_tries};
use crate::store::MailingStore;

/// How long a group of outcomes gathers before it is written.
pub const DELIVERY_LINGER: Duration = Duration::from_millis(50);

/// Most outcomes in one write.
pub const DELIVERY_GROUP: usize = 5_000;

/// Most outcomes waiting at once; later ones are counted as lost.
pub const MAX_PENDING_DELIVERIES: usize = 100_000;

/// The pool's [`DeliveryLog`] of a links service (see the module docs).
#[derive(Debug, Clone)]
pub struct Deliveries {
    store: Arc<dyn MailingStore>,
    clock: SharedClock,
    metrics: LinksMetrics,
    queue: Arc<Mutex<(Vec<Delivery>, bool)>>,
}

impl Deliveries {
    /// Outcomes written to `store`, stamped with `clock`.
    pub fn new(store: Arc<dyn MailingStore>, clock: SharedClock, metrics: LinksMetrics) -> Self {
        Self {
            store,
            clock,
            metrics,
            queue: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Delivery>, bool)> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until every outcome reported so far is written or counted as lost.
    pub async fn drain(&self) {
        while self.lock().1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn write_all(self) {
        loop {
            tokio::time::sleep(DELIVERY_LINGER).await;
            let group: Vec<Delivery> = {
                let mut q = self.lock();
                if q.0.is_empty() {
                    q.1 = false;
                    return;
                }
                let n = q.0.len().min(DELIVERY_GROUP);
                q.0.drain(..n).collect()
            };
            let written = with_tries("delivery outcomes", || {
                self.store
                    .record_deliveries(group.clone(), self.clock.now_ms())
            })
            .await;
            if let Err(error) = written {
                self.metrics.stats_failures.inc_by(group.len() as u64);
                tracing::warn!(%error, outcomes = group.len(), "could not count deliveries");
            }
        }
    }
}

impl DeliveryLog for Deliveries {
    fn record(&self, mail: &OutgoingMail, delivered: bool) {
        let delivery = Delivery {
            mailing_id: mail.mailing_id.clone(),
            email: mail.to.clone(),
            delivered,
            at_ms: self.clock.now_ms(),
        };
        let start = {
            let mut q = self.lock();
            if q.0.len() >= MAX_PENDING_DELIVERIES {
                drop(q);
                self.metrics.stats_failures.inc();
                return;
            }
            q.0.push(delivery);
            !std::mem::replace(&mut q.1, true)
        };
        if start {
            tokio::spawn(self.clone().write_all());
        }
    }
}
