//! Opens the events ports the configuration names (`events.raw`, `events.rollups`): the
//! embedded SQLite files by default, or the production engines by URL — InfluxDB for the raw
//! tier, MariaDB / MySQL for the summary tier. The one place that maps a URL to a backend.

use std::path::Path;
use std::sync::Arc;

use tidemark_core::engine::is_embedded;
use tidemark_core::store::StoreError;

use crate::config::EventsConfig;
use crate::raw::{DayCatalog, InfluxRaw, MysqlCatalog, RawStore, SqliteCatalog, SqliteRaw};
use crate::rollups::{MysqlRollups, RollupStore, SqliteRollups};

fn unknown(key: &str, value: &str, expected: &str) -> StoreError {
    StoreError::rejected(
        "config",
        format!(
            "events.{key} must be \"sqlite\" or {expected}, got {:?}",
            tidemark_core::mysql::redact(value)
        ),
    )
}

/// The raw tier of `cfg.raw`, with its files under `events_dir`, its days those of
/// `cfg.time_zone`.
pub async fn open_raw(
    cfg: &EventsConfig,
    events_dir: &Path,
) -> Result<Arc<dyn RawStore>, StoreError> {
    let url = cfg.raw.trim();
    let calendar = cfg
        .calendar()
        .map_err(|e| StoreError::rejected("config", e))?;
    if is_embedded(url) {
        let raw = SqliteRaw::open(&events_dir.join("raw.db"))?;
        return Ok(Arc::new(raw.with_calendar(calendar)));
    }
    if url.starts_with("influxdb://") {
        // The retention policy follows `events.raw_retention` unless the URL sets its own.
        let url = if url.contains("retention=") {
            url.to_owned()
        } else {
            let sep = if url.contains('?') { '&' } else { '?' };
            let hours = cfg.raw_retention.as_secs().div_ceil(3600).max(1);
            format!("{url}{sep}retention={hours}h")
        };
        // The day catalog beside InfluxDB: in the summary tier's MariaDB database when there
        // is one, shared by every node (a local catalog of this node's is merged in once);
        // otherwise this node's own file.
        let local = events_dir.join("influx-catalog.db");
        let rollups = cfg.rollups.trim();
        let catalog: Arc<dyn DayCatalog> = if !is_mysql(rollups) {
            Arc::new(SqliteCatalog::open(&local)?)
        } else {
            let shared = MysqlCatalog::connect(rollups, 8).await?;
            let merged = shared.take_in_local(&local).await?;
            if merged > 0 {
                tracing::info!(days = merged, file = %local.display(),
                    "merged this node's local day catalog into the MariaDB one");
            }
            Arc::new(shared)
        };
        let raw = InfluxRaw::connect_with_catalog(&url, catalog).await?;
        return Ok(Arc::new(raw.with_calendar(calendar)));
    }
    Err(unknown("raw", url, "an influxdb:// URL"))
}

/// The summary tier of `cfg.rollups`, with its file (SQLite) under `events_dir`.
pub async fn open_rollups(
    cfg: &EventsConfig,
    events_dir: &Path,
) -> Result<Arc<dyn RollupStore>, StoreError> {
    let url = cfg.rollups.trim();
    if is_embedded(url) {
        return Ok(Arc::new(SqliteRollups::open(
            &events_dir.join("rollups.db"),
        )?));
    }
    if is_mysql(url) {
        return Ok(Arc::new(MysqlRollups::connect(url, 16).await?));
    }
    Err(unknown("rollups", url, "a mysql:// URL"))
}

/// Both tiers of `cfg`, as [`open_raw`] and [`open_rollups`] open them, once their time zone
/// is agreed ([`crate::calendar::agree_time_zone`]): what a process that writes events or
/// summaries opens.
///
/// # Errors
/// Those of opening either tier, and a [`tidemark_core::store::ErrorKind::Rejected`] naming
/// both zones when `events.time_zone` is not the zone the stores' days were cut in.
pub async fn open_both(
    cfg: &EventsConfig,
    events_dir: &Path,
) -> Result<(Arc<dyn RawStore>, Arc<dyn RollupStore>), StoreError> {
    let raw = open_raw(cfg, events_dir).await?;
    let rollups = open_rollups(cfg, events_dir).await?;
    crate::calendar::agree_time_zone(raw.calendar(), raw.as_ref(), rollups.as_ref()).await?;
    Ok((raw, rollups))
}

/// Whether `url` names a MariaDB / MySQL database.
fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql://") || url.starts_with("mariadb://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_urls_are_refused_with_the_key_named() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EventsConfig {
            raw: "postgres://x/y".into(),
            rollups: "influxdb://h/db".into(),
            ..EventsConfig::default()
        };
        let err = open_raw(&cfg, dir.path()).await.unwrap_err().to_string();
        assert!(err.contains("events.raw must be"), "{err}");
        let err = open_rollups(&cfg, dir.path())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("events.rollups must be"), "{err}");
        assert!(open_raw(&EventsConfig::default(), dir.path()).await.is_ok());
    }
}
