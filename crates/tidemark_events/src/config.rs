//! Events configuration (`[events]`; env `TIDEMARK_EVENTS__<KEY>`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidemark_core::engine::{EmbeddedStoreKey, is_embedded};

use crate::calendar::{Calendar, UnknownZone};
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
    /// How long after a day closes it is rolled up (default 1 h).
    #[serde(with = "humantime_serde")]
    pub lateness: Duration,
    /// Largest number of events in one request (default 100,000).
    pub max_batch: usize,
    /// Where raw days are archived as Parquet (see [`crate::archive`]): a directory, a
    /// `file:///…` URL or an object_store URL such as `s3://bucket/prefix` (credentials from
    /// the `AWS_…` environment). Default: the directory `<data_dir>/events/archive`.
    pub archive_url: Option<String>,
    /// How often the raw-tier lifecycle (rollup, archive, drop) runs (default 60 s).
    #[serde(with = "humantime_serde")]
    pub lifecycle_interval: Duration,
    /// How long a node holds a day's lease for its rollup, archive and drop (default 5 min;
    /// [`crate::leases`]): longer than a day's longest job, as a node that dies holding one
    /// keeps the day from the others this long.
    #[serde(with = "humantime_serde")]
    pub day_lease: Duration,
    /// The raw tier: `"sqlite"` (default: `<data_dir>/events/raw.db`, a table per day) or an
    /// InfluxDB 1.x URL `influxdb://host:port/database[?retention=7d]` (seed 002's production
    /// shape; its day catalog is the table `raw_day` of the `rollups` MariaDB database, shared
    /// by every node, or `<data_dir>/events/influx-catalog.db` beside SQLite rollups; see
    /// [`crate::raw::influx`]).
    pub raw: String,
    /// The summary tier (`listing_daily`, `listings`): `"sqlite"` (default:
    /// `<data_dir>/events/rollups.db`) or a MariaDB / MySQL URL
    /// `mysql://user[:password]@host[:port]/database`.
    pub rollups: String,
    /// After how many days without a write or a read a kind is flagged by the event-kind
    /// audit (`GET /v1/events/kinds`, [`crate::usage`]; default 30; `?stale_days=` overrides).
    pub kind_audit_days: u32,
    /// The time zone whose days partition the raw tier, the rollups, reports, the dashboard
    /// and `?day=today`: `"UTC"` (default) or an IANA name such as `"Europe/Sarajevo"`
    /// ([`crate::calendar`]). Recorded with the store at its first start, and kept.
    pub time_zone: String,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            schema: Schema::default(),
            raw_retention: Duration::from_secs(7 * 24 * 3600),
            lateness: Duration::from_secs(3600),
            max_batch: 100_000,
            archive_url: None,
            lifecycle_interval: Duration::from_secs(60),
            day_lease: Duration::from_secs(300),
            raw: "sqlite".into(),
            rollups: "sqlite".into(),
            kind_audit_days: 30,
            time_zone: crate::calendar::UTC.to_owned(),
        }
    }
}

impl EventsConfig {
    /// The days of `time_zone`.
    ///
    /// # Errors
    /// [`UnknownZone`] when `time_zone` names no zone of the IANA database.
    pub fn calendar(&self) -> Result<Calendar, UnknownZone> {
        Calendar::named(&self.time_zone)
    }

    /// The events store keys that name the embedded SQLite store (DESIGN.md "Many nodes": the
    /// nodes of a multi-node deployment share every store, and a SQLite file is one node's):
    /// `events.raw` and `events.rollups`, each with the shared engine's URL form to set instead.
    /// Empty when both are shared engines.
    pub fn embedded_store_keys(&self) -> Vec<EmbeddedStoreKey> {
        let mut keys = Vec::new();
        if is_embedded(&self.raw) {
            keys.push(EmbeddedStoreKey {
                key: "events.raw",
                shared: "influxdb://host:port/database",
            });
        }
        if is_embedded(&self.rollups) {
            keys.push(EmbeddedStoreKey {
                key: "events.rollups",
                shared: "mysql://user:password@host:port/database",
            });
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_store_keys_name_each_sqlite_tier() {
        let keys = |cfg: &EventsConfig| -> Vec<&str> {
            cfg.embedded_store_keys().iter().map(|k| k.key).collect()
        };
        assert_eq!(
            keys(&EventsConfig::default()),
            ["events.raw", "events.rollups"]
        );
        let raw_shared = EventsConfig {
            raw: "influxdb://127.0.0.1:8086/tidemark".into(),
            rollups: " ".into(),
            ..EventsConfig::default()
        };
        assert_eq!(keys(&raw_shared), ["events.rollups"]);
        assert_eq!(
            raw_shared.embedded_store_keys()[0].to_string(),
            r#"events.rollups = "mysql://user:password@host:port/database""#
        );
        let rollups_shared = EventsConfig {
            rollups: "mysql://root@127.0.0.1:3306/tidemark".into(),
            ..EventsConfig::default()
        };
        assert_eq!(keys(&rollups_shared), ["events.raw"]);
        let shared = EventsConfig {
            raw: "influxdb://127.0.0.1:8086/tidemark".into(),
            ..rollups_shared
        };
        assert!(shared.embedded_store_keys().is_empty());
    }
}
