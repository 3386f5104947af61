//! Ingest: schema checks, then a durable append to the raw tier. A batch is all or nothing.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tidemark_core::sqlite::SqliteError;

use crate::model::Event;
use crate::raw::RawStore;

/// Events settings (`[events]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// The closed set of values of the `event` tag.
    pub kinds: Vec<String>,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            kinds: ["view", "click", "contact", "email_open", "email_click"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// Why a batch was refused or not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Event `index` of the batch is invalid; nothing of the batch was stored.
    #[error("event {index}: {message}")]
    Invalid {
        /// Position in the batch (0-based).
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The raw tier could not store the batch; nothing was acknowledged.
    #[error("raw tier unavailable: {0}")]
    Unavailable(#[from] SqliteError),
}

/// Checks events and appends them to the raw tier.
#[derive(Debug, Clone)]
pub struct Ingest {
    raw: Arc<dyn RawStore>,
    cfg: EventsConfig,
}

impl Ingest {
    /// Ingest into `raw` with schema `cfg`.
    pub fn new(raw: Arc<dyn RawStore>, cfg: EventsConfig) -> Self {
        Self { raw, cfg }
    }

    /// Validates every event, then appends them all durably (or none). `now_ms` is arrival time.
    pub async fn record(&self, events: Vec<Event>, now_ms: i64) -> Result<usize, IngestError> {
        for (index, e) in events.iter().enumerate() {
            if !self.cfg.kinds.contains(&e.kind) {
                return Err(IngestError::Invalid {
                    index,
                    message: format!(
                        "undeclared value {:?} of tag `event` (declared: {})",
                        e.kind,
                        self.cfg.kinds.join(", ")
                    ),
                });
            }
        }
        let n = events.len();
        self.raw.append(events, now_ms).await?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::SqliteRaw;
    use tidemark_core::day::UtcDay;

    #[tokio::test]
    async fn same_millisecond_events_are_two_rows_and_bad_kinds_store_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
        let ingest = Ingest::new(Arc::clone(&raw) as _, EventsConfig::default());
        let t = 1_795_999_534_123;
        let mut a = Event::new("view", t);
        a.listing_id = Some(7);
        let b = a.clone();
        assert_eq!(ingest.record(vec![a.clone(), b], t).await.unwrap(), 2);
        let bad = Event::new("purchase", t);
        let err = ingest.record(vec![a.clone(), bad], t).await.unwrap_err();
        assert!(
            matches!(err, IngestError::Invalid { index: 1, .. }),
            "{err}"
        );
        let stored = raw.day_events(UtcDay::of_ms(t)).await.unwrap();
        assert_eq!(stored, vec![a.clone(), a]);
        assert!(
            raw.day_events(UtcDay::of_ms(t).plus(1))
                .await
                .unwrap()
                .is_empty()
        );
    }
}
