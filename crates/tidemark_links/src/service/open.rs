//! Opening the links service on its stores: the embedded SQLite file, or MariaDB for every
//! piece of links state (link records, mailings, suppression list, the id secret's check
//! value), so that nodes share all of it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use tidemark_core::clock::SharedClock;
use tidemark_core::store::StoreError;
use tidemark_events::Ingest;

use super::LinksService;
use crate::config::LinksConfig;
use crate::error::{LinksError, Result};
use crate::id::IdCodec;
use crate::metrics::LinksMetrics;
use crate::mysql::{MysqlLinks, TakenIn};
use crate::send::SendingPool;
use crate::sqlite::SqliteLinks;
use crate::store::{LinkStore, MailingStore};

/// Reads the id secret from config or `<dir>/id.key`, creating the file on first use.
pub fn load_or_create_secret(cfg: &LinksConfig, dir: &Path) -> Result<[u8; 16]> {
    let parse = |hex: &str| -> Option<[u8; 16]> {
        let hex = hex.trim();
        if hex.len() != 32 {
            return None;
        }
        let mut key = [0u8; 16];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(key)
    };
    if let Some(s) = &cfg.id_secret {
        return parse(s)
            .ok_or_else(|| LinksError::Invalid("links.id_secret must be 32 hex digits".into()));
    }
    let path = dir.join("id.key");
    let io = |e: std::io::Error| LinksError::Store(StoreError::file(&path, e));
    match std::fs::read_to_string(&path) {
        Ok(s) => parse(&s).ok_or_else(|| {
            LinksError::Invalid(format!("{} must hold 32 hex digits", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key: [u8; 16] = rand::random();
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            let tmp = path.with_extension("tmp");
            // A secret: readable by its owner only, whatever the umask (not 0644 under 022).
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io)?;
            file.write_all(format!("{hex}\n").as_bytes()).map_err(io)?;
            drop(file);
            std::fs::rename(&tmp, &path).map_err(io)?;
            Ok(key)
        }
        Err(e) => Err(io(e)),
    }
}

fn check_track_base(cfg: &LinksConfig) -> Result<()> {
    if !(cfg.track_base.starts_with("http://") || cfg.track_base.starts_with("https://")) {
        return Err(LinksError::Invalid(format!(
            "links.track_base must be an http(s) URL, got {:?}",
            cfg.track_base
        )));
    }
    Ok(())
}

impl LinksService {
    /// The embedded default: `<data_dir>/links/links.db`, `.eml` files under
    /// `<data_dir>/mail-out/` unless an SMTP transport is configured.
    pub fn open_embedded(
        data_dir: &Path,
        cfg: LinksConfig,
        ingest: Ingest,
        clock: SharedClock,
        metrics: LinksMetrics,
    ) -> Result<Self> {
        check_track_base(&cfg)?;
        let dir = data_dir.join("links");
        std::fs::create_dir_all(&dir)
            .map_err(|e| StoreError::file(&dir, e).with_context("creating"))?;
        let store = Arc::new(SqliteLinks::open(&dir.join("links.db"))?);
        let codec = IdCodec::new(load_or_create_secret(&cfg, &dir)?);
        Self::with_link_store(
            data_dir,
            cfg,
            (Arc::clone(&store) as _, store),
            codec,
            ingest,
            clock,
            metrics,
        )
    }

    /// Opens the link store `cfg.store` names (`"sqlite"`, or `mysql://…` for the MariaDB
    /// day-partitioned store, which holds the mailings and the suppression list too: a node's
    /// local ones from before are moved in, and a node whose id secret differs from the
    /// store's is refused); otherwise as
    /// [`LinksService::open_embedded`]. Errors: a store URL that is neither
    /// ([`LinksError::Invalid`]), or a database that cannot be reached
    /// ([`LinksError::Store`]).
    pub async fn open(
        data_dir: &Path,
        cfg: LinksConfig,
        ingest: Ingest,
        clock: SharedClock,
        metrics: LinksMetrics,
    ) -> Result<Self> {
        let store = cfg.store.trim().to_owned();
        if tidemark_core::engine::is_embedded(&store) {
            return Self::open_embedded(data_dir, cfg, ingest, clock, metrics);
        }
        check_track_base(&cfg)?;
        if !(store.starts_with("mysql://") || store.starts_with("mariadb://")) {
            return Err(LinksError::Invalid(format!(
                "links.store must be \"sqlite\" or a mysql:// URL, got {:?}",
                tidemark_core::mysql::redact(&store)
            )));
        }
        let dir = data_dir.join("links");
        std::fs::create_dir_all(&dir)
            .map_err(|e| StoreError::file(&dir, e).with_context("creating"))?;
        let links = Arc::new(MysqlLinks::connect(&store, 16).await?);
        let codec = IdCodec::new(load_or_create_secret(&cfg, &dir)?);
        links.check_id_secret(&codec.fingerprint()).await?;
        let local = dir.join("links.db");
        let taken = links.take_in_local(&local).await?;
        if taken != TakenIn::default() {
            tracing::info!(
                mailings = taken.mailings,
                suppressions = taken.suppressions,
                file = %local.display(),
                "moved this node's local mailings and suppression list into the MariaDB link store"
            );
        }
        Self::with_link_store(
            data_dir,
            cfg,
            (Arc::clone(&links) as _, links),
            codec,
            ingest,
            clock,
            metrics,
        )
    }

    fn with_link_store(
        data_dir: &Path,
        cfg: LinksConfig,
        (links, mailings): (Arc<dyn LinkStore>, Arc<dyn MailingStore>),
        codec: IdCodec,
        ingest: Ingest,
        clock: SharedClock,
        metrics: LinksMetrics,
    ) -> Result<Self> {
        let pool = SendingPool::start(&cfg.mail, data_dir.join("mail-out"))
            .map_err(|e| LinksError::Invalid(format!("links.mail: {e}")))?;
        Ok(Self::new(
            links,
            mailings,
            ingest,
            Arc::new(pool),
            codec,
            cfg,
            clock,
            metrics,
        ))
    }
}
