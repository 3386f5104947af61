//! The node's open streams, by `(tenant, user)`: commits and read-pointer moves mark the
//! conversation in each of them and wake them, without waiting; bounds per user and per node.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::error::{ChatError, Result};
use crate::metrics::ChatMetrics;

/// What changed for one open stream since it last looked.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    pub(super) messages: BTreeSet<String>,
    pub(super) reads: BTreeSet<String>,
}

/// One open stream, as the hub sees it.
#[derive(Debug, Default)]
pub(super) struct Subscription {
    dirty: Mutex<Dirty>,
    pub(super) wake: Notify,
}

impl Subscription {
    fn mark(&self, cid: &str, read: bool) {
        if let Ok(mut d) = self.dirty.lock() {
            let set = if read { &mut d.reads } else { &mut d.messages };
            set.insert(cid.to_owned());
        }
        self.wake.notify_one();
    }

    pub(super) fn take(&self) -> Dirty {
        self.dirty
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

type Key = (String, String);

/// The node's open streams by `(tenant, user)`.
#[derive(Debug)]
pub struct StreamHub {
    open: Mutex<HashMap<Key, Vec<Arc<Subscription>>>>,
    count: AtomicUsize,
    max_per_user: usize,
    max_connections: usize,
    pub(super) closed: CancellationToken,
    metrics: ChatMetrics,
}

impl StreamHub {
    /// A hub with the bounds of `chat.stream_max_per_user` and `chat.stream_max_connections`.
    pub fn new(max_per_user: usize, max_connections: usize, metrics: ChatMetrics) -> Self {
        Self {
            open: Mutex::default(),
            count: AtomicUsize::new(0),
            max_per_user,
            max_connections,
            closed: CancellationToken::new(),
            metrics,
        }
    }

    /// A message of `cid` was committed (its SEND acknowledged): wakes the streams of its
    /// `members`. Never waits.
    pub fn committed(&self, tenant: &str, cid: &str, members: &[String]) {
        let Ok(open) = self.open.lock() else { return };
        for m in members {
            // The lookup key borrows nothing: a map keyed by owned pairs needs an owned probe.
            if let Some(subs) = open.get(&(tenant.to_owned(), m.clone())) {
                subs.iter().for_each(|s| s.mark(cid, false));
            }
        }
    }

    /// `user`'s read pointer in `cid` moved: wakes that user's streams. Never waits.
    pub fn read_moved(&self, tenant: &str, cid: &str, user: &str) {
        let Ok(open) = self.open.lock() else { return };
        if let Some(subs) = open.get(&(tenant.to_owned(), user.to_owned())) {
            subs.iter().for_each(|s| s.mark(cid, true));
        }
    }

    /// Ends every open stream (a graceful stop); clients resume elsewhere or after the restart.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Fires when [`StreamHub::close`] is called.
    pub(super) fn closing(&self) -> CancellationToken {
        self.closed.clone()
    }

    pub(super) fn subscribe(self: &Arc<Self>, tenant: &str, user: &str) -> Result<Registration> {
        let key = (tenant.to_owned(), user.to_owned());
        let mut open = self
            .open
            .lock()
            .map_err(|_| ChatError::Invalid("stream registry unusable".into()))?;
        if self.count.load(Ordering::Relaxed) >= self.max_connections {
            return Err(ChatError::TooManyStreams {
                message: format!(
                    "this node holds its most live streams ({}); retry, or connect to another node",
                    self.max_connections
                ),
                node: true,
            });
        }
        let subs = open.entry(key.clone()).or_default();
        if subs.len() >= self.max_per_user {
            return Err(ChatError::TooManyStreams {
                message: format!(
                    "user {user:?} already has {} live streams open on this node, the most allowed",
                    subs.len()
                ),
                node: false,
            });
        }
        let sub = Arc::new(Subscription::default());
        subs.push(Arc::clone(&sub));
        self.count.fetch_add(1, Ordering::Relaxed);
        self.metrics.stream_clients.inc();
        Ok(Registration {
            hub: Arc::clone(self),
            key,
            sub,
        })
    }
}

/// A stream's place in the hub, given back when the stream ends.
#[derive(Debug)]
pub(super) struct Registration {
    pub(super) hub: Arc<StreamHub>,
    key: Key,
    pub(super) sub: Arc<Subscription>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut open) = self.hub.open.lock()
            && let Some(subs) = open.get_mut(&self.key)
        {
            subs.retain(|s| !Arc::ptr_eq(s, &self.sub));
            if subs.is_empty() {
                open.remove(&self.key);
            }
        }
        self.hub.count.fetch_sub(1, Ordering::Relaxed);
        self.hub.metrics.stream_clients.dec();
    }
}
