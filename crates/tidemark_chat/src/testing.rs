//! Test wrappers around the ports (STYLE.md: counting, failing on demand), used by the fault
//! tests of the archiver and available to any backend's conformance run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::error::{ChatError, Result};
use crate::model::{IndexEntry, MessageRecord};
use crate::ports::Archive;

/// Forwards to an inner archive, but fails the next `n` calls of a chosen write.
#[derive(Debug)]
pub struct FaultyArchive {
    inner: Arc<dyn Archive>,
    fail_records: AtomicUsize,
    fail_index: AtomicUsize,
    /// Calls of `put_records` (including failed ones).
    pub record_writes: AtomicUsize,
    /// Calls of `put_index` (including failed ones).
    pub index_writes: AtomicUsize,
}

impl FaultyArchive {
    /// Wraps `inner`; nothing fails until asked.
    pub fn new(inner: Arc<dyn Archive>) -> Self {
        Self {
            inner,
            fail_records: AtomicUsize::new(0),
            fail_index: AtomicUsize::new(0),
            record_writes: AtomicUsize::new(0),
            index_writes: AtomicUsize::new(0),
        }
    }
    /// The next `n` `put_records` calls fail without writing.
    pub fn fail_next_records(&self, n: usize) {
        self.fail_records.store(n, Ordering::SeqCst);
    }
    /// The next `n` `put_index` calls fail without writing.
    pub fn fail_next_index(&self, n: usize) {
        self.fail_index.store(n, Ordering::SeqCst);
    }
}

fn take_failure(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl Archive for FaultyArchive {
    async fn put_records(&self, records: &[MessageRecord]) -> Result<()> {
        self.record_writes.fetch_add(1, Ordering::SeqCst);
        if take_failure(&self.fail_records) {
            return Err(ChatError::Unavailable(
                "injected put_records failure".into(),
            ));
        }
        self.inner.put_records(records).await
    }
    async fn put_index(&self, entries: &[IndexEntry]) -> Result<()> {
        self.index_writes.fetch_add(1, Ordering::SeqCst);
        if take_failure(&self.fail_index) {
            return Err(ChatError::Unavailable("injected put_index failure".into()));
        }
        self.inner.put_index(entries).await
    }
    async fn index_range(
        &self,
        t: &str,
        c: &str,
        lo: u64,
        hi: u64,
        now: i64,
    ) -> Result<Vec<IndexEntry>> {
        self.inner.index_range(t, c, lo, hi, now).await
    }
    async fn records(&self, t: &str, c: &str, seqs: &[u64]) -> Result<Vec<MessageRecord>> {
        self.inner.records(t, c, seqs).await
    }
    async fn earliest_seq(&self, t: &str, c: &str, now: i64) -> Result<Option<u64>> {
        self.inner.earliest_seq(t, c, now).await
    }
    async fn purge_expired(&self, now: i64, batch: usize) -> Result<usize> {
        self.inner.purge_expired(now, batch).await
    }
}
