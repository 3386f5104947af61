//! Events configuration (`[events]`; env `TIDEMARK_EVENTS__<KEY>`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::schema::Schema;

/// Events settings (`[events]`; `[events.schema]` for the schema).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Measurement, tag, kinds and declared fields.
    pub schema: Schema,
    /// How long a day stays in the raw tier after its last event arrived (default 7 days);
    /// it leaves only once rolled up and archived.
    #[serde(with = "humantime_serde")]
    pub raw_retention: Duration,
    /// How long after a UTC day closes it is rolled up (default 1 h).
    #[serde(with = "humantime_serde")]
    pub lateness: Duration,
    /// Largest number of events in one request (default 100,000).
    pub max_batch: usize,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            schema: Schema::default(),
            raw_retention: Duration::from_secs(7 * 24 * 3600),
            lateness: Duration::from_secs(3600),
            max_batch: 100_000,
        }
    }
}
