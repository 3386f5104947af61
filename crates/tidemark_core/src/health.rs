//! Whether the node's stores have room, for `/readyz`.
//!
//! A full disk lets a store answer reads while every write fails, so a read probe says ready
//! while every write answers 503. So whoever writes to a store (the SEND path, the archiver,
//! the link and event writers, the rollups and the lifecycle) reports the outcome here under
//! the store's name: a failure of kind [`ErrorKind::Full`] marks that store full, and the next
//! write to it that succeeds clears the mark. `/readyz` answers 503 `storage_full` while any
//! store is marked; unlike the SEND path's own rule (`tidemark_chat::health`, ten seconds)
//! a full store does not become ready by waiting, since space only comes back when someone
//! frees it. The workers keep retrying meanwhile ([`crate::retry`]), so the first write after
//! space is back clears the mark without any request.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::store::{AsStoreError, ErrorKind};

/// The name under which [`StoreHealth::check_free_space`] marks a data directory low on space.
pub const DATA_DISK: &str = "data disk";

const MIB: f64 = 1024.0 * 1024.0;

/// The stores marked full, shared by every writer of a node and `/readyz`; clones share it.
#[derive(Debug, Clone, Default)]
pub struct StoreHealth {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Set while any store is marked: a write that succeeds reads only this (no lock) when all
    /// is well.
    any_full: AtomicBool,
    /// Store name → the error that marked it.
    full: Mutex<BTreeMap<&'static str, String>>,
}

impl StoreHealth {
    /// Records the outcome of a write to `store` (a name such as `"chat hot store"`): a
    /// [`ErrorKind::Full`] failure marks it, a success clears it, other failures change
    /// nothing.
    pub fn record<T, E: AsStoreError + std::fmt::Display>(
        &self,
        store: &'static str,
        outcome: &Result<T, E>,
    ) {
        match outcome {
            Ok(_) => self.wrote(store),
            Err(e) => self.failed(store, e),
        }
    }

    /// A write to `store` failed with `error`: marks it if `error` is [`ErrorKind::Full`].
    pub fn failed<E: AsStoreError + std::fmt::Display>(&self, store: &'static str, error: &E) {
        if error.store_kind() == Some(ErrorKind::Full) {
            self.mark_full(store, error);
        }
    }

    /// A write to `store` succeeded: clears its mark, if any.
    pub fn wrote(&self, store: &'static str) {
        if !self.inner.any_full.load(Ordering::Relaxed) {
            return;
        }
        let mut full = self.lock();
        if full.remove(store).is_some() {
            tracing::info!(store, "store accepts writes again");
        }
        self.inner
            .any_full
            .store(!full.is_empty(), Ordering::Relaxed);
    }

    /// Checks the space left on the file system that holds `dir`: less than `min_free` bytes
    /// available marks [`DATA_DISK`] full (so `/readyz` says so before any write fails, also
    /// right after a start on a full disk), `min_free` or more clears that mark. Returns the
    /// bytes available to the server (`statvfs`: `f_bavail × f_frsize`). Errors: `statvfs`
    /// failed (the mark is left as it was).
    pub fn check_free_space(&self, dir: &Path, min_free: u64) -> std::io::Result<u64> {
        let fs = rustix::fs::statvfs(dir)?;
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if free < min_free {
            let why = format!(
                "{} has {:.1} MiB free, below min_free_disk_mb ({} MiB)",
                dir.display(),
                free as f64 / MIB,
                min_free as f64 / MIB
            );
            self.mark_full(DATA_DISK, &why);
        } else {
            self.wrote(DATA_DISK);
        }
        Ok(free)
    }

    fn mark_full(&self, store: &'static str, error: &dyn std::fmt::Display) {
        let mut full = self.lock();
        if full.insert(store, error.to_string()).is_none() {
            tracing::error!(store, %error, "store is full: not ready until a write succeeds");
        }
        self.inner.any_full.store(true, Ordering::Relaxed);
    }

    /// `Err` naming every store marked full and the error that marked it.
    pub fn check(&self) -> Result<(), String> {
        if !self.inner.any_full.load(Ordering::Relaxed) {
            return Ok(());
        }
        let full = self.lock();
        if full.is_empty() {
            return Ok(());
        }
        let stores: Vec<String> = full.iter().map(|(s, e)| format!("{s}: {e}")).collect();
        Err(format!(
            "storage full, no write has succeeded since: {}",
            stores.join("; ")
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, String>> {
        self.inner
            .full
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_data_dir_below_its_free_space_floor_is_reported_until_it_is_above() {
        let dir = tempfile::tempdir().unwrap();
        let health = StoreHealth::default();
        let free = health.check_free_space(dir.path(), 0).unwrap();
        assert!(free > 0);
        assert_eq!(health.check(), Ok(()));
        // A floor above what the disk has: marked, naming the directory and both figures.
        health.check_free_space(dir.path(), u64::MAX).unwrap();
        let why = health.check().unwrap_err();
        assert!(
            why.starts_with(&format!(
                "storage full, no write has succeeded since: data disk: {} has ",
                dir.path().display()
            )) && why.contains(" MiB free, below min_free_disk_mb ("),
            "{why}"
        );
        health.check_free_space(dir.path(), free / 2).unwrap();
        assert_eq!(health.check(), Ok(()));
        assert!(
            health
                .check_free_space(&dir.path().join("gone"), 0)
                .is_err()
        );
    }

    #[test]
    fn a_full_store_is_reported_until_a_write_to_it_succeeds() {
        let health = StoreHealth::default();
        let full = || StoreError::new(ErrorKind::Full, "sqlite", "database or disk is full");
        assert_eq!(health.check(), Ok(()));
        health.record::<(), _>("links", &Err(StoreError::unavailable("mysql", "down")));
        assert_eq!(health.check(), Ok(()), "only Full marks a store");
        health.record::<(), _>("links", &Err(full()));
        health.record::<(), _>("events raw tier", &Err(full()));
        assert_eq!(
            health.check(),
            Err("storage full, no write has succeeded since: events raw tier: sqlite: database or disk is full; links: sqlite: database or disk is full".into())
        );
        // Another store's success clears nothing; a clone shares the marks.
        let other = health.clone();
        other.record::<_, StoreError>("chat hot store", &Ok(()));
        other.record::<_, StoreError>("links", &Ok(()));
        assert_eq!(
            health.check(),
            Err("storage full, no write has succeeded since: events raw tier: sqlite: database or disk is full".into())
        );
        health.wrote("events raw tier");
        assert_eq!(health.check(), Ok(()));
    }
}
