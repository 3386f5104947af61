//! Per-day leases of the raw-tier lifecycle (DESIGN.md "Many nodes": leases with fencing
//! tokens): each day's rollup, archive and drop is worked by at most one node at a time.
//!
//! A worker takes the day's lease ([`DayLeases::acquire`]) before any job on it, and gives it
//! up after ([`DayLeases::release`]); a day another node holds is skipped this pass. Every
//! take-over of a lease raises its fencing token. A node that paused past its lease (a long GC
//! pause, a frozen VM) and wakes mid-job is fenced:
//! - its summary write is refused: the summary tier checks the lease in the write's own
//!   transaction ([`crate::rollups::RollupStore::upsert_day_fenced`]), so it never replaces a
//!   newer summary, and never leaves half of one (the transaction is whole or nothing);
//! - its marks are idempotent: a mark never moves back, and a stale job's mark is no newer
//!   than the live one's;
//! - its archive upload is checked against the lease just before the object is put in place,
//!   and before a day is dropped its archive object is verified to cover the day's last
//!   marked arrival (its Parquet footer), so an upload that slipped through is archived again
//!   rather than trusted;
//! - its drop is conditional in the catalog (rolled up and archived up to the last arrival,
//!   nothing in flight) and removing a dropped day twice is harmless.
//!
//! Backends: [`ProcessLeases`] for a node whose stores only it can open (the embedded SQLite
//! files: no other process can work its days, so its leases only keep its own tasks apart),
//! and [`mysql::MysqlDayLeases`], the table `events_day_lease` in the MariaDB summary tier,
//! shared by every node, timed by the database server's clock (so nodes' clocks need not
//! agree).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tidemark_core::day::Day;
use tidemark_core::store::StoreError;

pub mod mysql;

/// A lease on one day: who holds it and its fencing token (raised at each take-over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayLease {
    /// The day.
    pub day: Day,
    /// The holder ([`tidemark_core::lease::holder_name`]).
    pub holder: String,
    /// The fencing token: higher than any earlier holder's.
    pub token: u64,
    /// This holder held it already (another task of the same process): the task that took it
    /// releases it, not this one.
    pub renewed: bool,
}

/// The per-day leases (see the module docs).
#[async_trait]
pub trait DayLeases: Send + Sync + std::fmt::Debug {
    /// Takes the lease on `day` for the lease time (or renews this holder's own), or `None`
    /// while another holder's runs.
    async fn acquire(&self, day: Day) -> Result<Option<DayLease>, StoreError>;
    /// Whether `lease` is still held, unexpired.
    async fn holds(&self, lease: &DayLease) -> Result<bool, StoreError>;
    /// Gives `lease` up, so another node may take the day at once (nothing if it was lost).
    async fn release(&self, lease: &DayLease) -> Result<(), StoreError>;
}

/// Leases within one process (see the module docs).
#[derive(Debug)]
pub struct ProcessLeases {
    holder: String,
    ttl: Duration,
    /// Per day: token, holder, expiry.
    held: Arc<Mutex<LeaseTable>>,
}

type LeaseTable = BTreeMap<Day, (u64, String, Instant)>;

impl ProcessLeases {
    /// Leases held for `ttl` under this process's holder name.
    pub fn new(ttl: Duration) -> Self {
        Self {
            holder: tidemark_core::lease::holder_name(),
            ttl,
            held: Arc::default(),
        }
    }

    /// The same leases under another holder name, with lease time `ttl` (tests: two workers
    /// competing for days).
    pub fn as_holder(&self, holder: impl Into<String>, ttl: Duration) -> Self {
        Self {
            holder: holder.into(),
            ttl,
            held: Arc::clone(&self.held),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, LeaseTable> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl DayLeases for ProcessLeases {
    async fn acquire(&self, day: Day) -> Result<Option<DayLease>, StoreError> {
        let now = Instant::now();
        let mut table = self.table();
        let entry = table.entry(day).or_insert_with(|| (0, String::new(), now));
        let (token, holder, expires) = entry;
        let running = *expires > now;
        if *holder != self.holder && running {
            return Ok(None);
        }
        let renewed = *holder == self.holder && running;
        if !renewed {
            *token += 1;
            holder.clone_from(&self.holder);
        }
        *expires = now + self.ttl;
        Ok(Some(DayLease {
            day,
            holder: self.holder.clone(),
            token: *token,
            renewed,
        }))
    }

    async fn holds(&self, lease: &DayLease) -> Result<bool, StoreError> {
        Ok(self.table().get(&lease.day).is_some_and(|(t, h, e)| {
            *t == lease.token && *h == lease.holder && *e > Instant::now()
        }))
    }

    async fn release(&self, lease: &DayLease) -> Result<(), StoreError> {
        if let Some((t, h, e)) = self.table().get_mut(&lease.day)
            && *t == lease.token
            && *h == lease.holder
        {
            *e = Instant::now();
        }
        Ok(())
    }
}
