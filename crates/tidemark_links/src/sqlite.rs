//! The embedded link store (`data/links/links.db`): one table `links_YYYYMMDD` per UTC day with
//! a sequential clustered key (`seq INTEGER PRIMARY KEY`, so inserts append) and a unique index
//! on the id (within the day table: unique `(id, day)`); expired days are dropped whole with
//! `DROP TABLE`. Mailings and the suppression list live in the same file. The tables' versions:
//! [`crate::migrations`].
//!
//! Not done here: row compression (SQLite has none built in; the MariaDB store uses
//! `ROW_FORMAT=COMPRESSED`).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};
use tidemark_core::day::Day;
use tidemark_core::schema::migrate_sqlite;
use tidemark_core::sqlite::{GroupWriter, ReadPool, open_rw, opening};

use crate::error::{LinksError, Result};
use crate::id::LinkId;
use crate::model::{LinkRecord, Lookup, Mailing};
use crate::rewrite::LinkKind;
use crate::stats::{Delivery, StatsHit, StoredStats};
use crate::store::{LinkStore, MailingStore};

mod stats;

const PREFIX: &str = "links_";

fn table(day: Day) -> String {
    format!("{PREFIX}{}", day.compact())
}

fn create_partition(conn: &Connection, day: Day) -> rusqlite::Result<()> {
    let t = table(day);
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {t} (
            seq INTEGER PRIMARY KEY,
            link_id TEXT NOT NULL,
            url TEXT NOT NULL,
            email TEXT NOT NULL,
            mailing_id TEXT NOT NULL,
            position INTEGER,
            kind INTEGER NOT NULL,
            created_ms INTEGER NOT NULL
        );
        CREATE UNIQUE INDEX IF NOT EXISTS {t}_id ON {t} (link_id);"
    ))
}

fn partition_days(conn: &Connection) -> rusqlite::Result<Vec<Day>> {
    let mut stmt = conn.prepare_cached(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'links\\_%' ESCAPE '\\'",
    )?;
    let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut days = Vec::new();
    for n in names {
        let n = n?;
        let c = &n[PREFIX.len()..];
        if c.len() == 8
            && let Ok(d) = Day::parse(&format!("{}-{}-{}", &c[..4], &c[4..6], &c[6..]))
        {
            days.push(d);
        }
    }
    days.sort();
    Ok(days)
}

/// Whether `e` says the day's table does not exist: no partition for that day (never created,
/// or dropped meanwhile — then even a cached statement fails when it runs).
fn no_such_table(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(_, Some(m)) if m.contains("no such table"))
}

/// The embedded link and mailing store (see the module docs).
#[derive(Debug)]
pub struct SqliteLinks {
    writer: GroupWriter,
    reads: ReadPool,
    /// Campaign-statistics unique keys known stored ([`crate::stats::SeenUniques`]).
    seen: Arc<crate::stats::SeenUniques>,
}

impl SqliteLinks {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// # Errors
    /// [`LinksError::Store`] naming the file ([`opening`]), also for a file of a newer build
    /// ([`tidemark_core::sqlite::SqliteError::SchemaTooNew`], not retryable).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(opening(path, || {
            let conn = open_rw(path)?;
            migrate_sqlite(&conn, path, &crate::migrations::SQLITE)?;
            let writer = GroupWriter::start("links", conn, 64);
            let reads = ReadPool::open(path, 8)?;
            Ok(Self {
                writer,
                reads,
                seen: Arc::default(),
            })
        })?)
    }
}

#[async_trait]
impl LinkStore for SqliteLinks {
    async fn insert(&self, records: Vec<LinkRecord>) -> Result<()> {
        self.writer
            .write(move |conn| {
                let mut by_day: BTreeMap<Day, Vec<&LinkRecord>> = BTreeMap::new();
                for r in &records {
                    by_day.entry(Day::of_utc_ms(r.created_ms)).or_default().push(r);
                }
                for (day, recs) in by_day {
                    create_partition(conn, day)?;
                    let mut stmt = conn.prepare_cached(&format!(
                        "INSERT INTO {} (link_id, url, email, mailing_id, position, kind, created_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        table(day)
                    ))?;
                    for r in recs {
                        stmt.execute(params![
                            r.link_id,
                            r.url,
                            r.email,
                            r.mailing_id,
                            r.position,
                            r.kind.code(),
                            r.created_ms
                        ])?;
                    }
                }
                Ok::<_, LinksError>(())
            })
            .await
    }

    async fn lookup(&self, id: &LinkId, oldest_kept: Day) -> Result<Lookup> {
        let day = id.day();
        if day < oldest_kept {
            return Ok(Lookup::Expired);
        }
        let link_id = id.as_str().to_owned();
        self.reads
            .read_point(move |conn| {
                let sql = format!(
                    "SELECT url, email, mailing_id, position, kind, created_ms FROM {}
                     WHERE link_id = ?1",
                    table(day)
                );
                let mut stmt = match conn.prepare_cached(&sql) {
                    Ok(s) => s,
                    Err(e) if no_such_table(&e) => return Ok(Lookup::Unknown),
                    Err(e) => return Err(e.into()),
                };
                let rec = stmt.query_row([&link_id], |r| {
                    Ok(LinkRecord {
                        link_id: link_id.clone(),
                        url: r.get(0)?,
                        email: r.get(1)?,
                        mailing_id: r.get(2)?,
                        position: r.get(3)?,
                        kind: LinkKind::from_code(r.get(4)?),
                        created_ms: r.get(5)?,
                    })
                });
                match rec {
                    Ok(r) => Ok(Lookup::Found(r)),
                    Err(rusqlite::Error::QueryReturnedNoRows) => Ok(Lookup::Unknown),
                    // A statement cached before the partition was dropped fails when run.
                    Err(e) if no_such_table(&e) => Ok(Lookup::Unknown),
                    Err(e) => Err(e.into()),
                }
            })
            .await
    }

    async fn create_partitions(&self, days: &[Day]) -> Result<()> {
        let days = days.to_vec();
        self.writer
            .write(move |conn| {
                for d in days {
                    create_partition(conn, d)?;
                }
                Ok::<_, LinksError>(())
            })
            .await
    }

    async fn drop_partitions_before(&self, oldest_kept: Day) -> Result<Vec<Day>> {
        self.writer
            .write(move |conn| {
                let old: Vec<Day> = partition_days(conn)?
                    .into_iter()
                    .filter(|d| *d < oldest_kept)
                    .collect();
                for d in &old {
                    conn.execute_batch(&format!("DROP TABLE {}", table(*d)))?;
                }
                Ok::<_, LinksError>(old)
            })
            .await
    }

    async fn partitions(&self) -> Result<Vec<Day>> {
        self.reads.read(|conn| Ok(partition_days(conn)?)).await
    }

    async fn count(&self, day: Day) -> Result<u64> {
        self.reads
            .read(move |conn| {
                if !partition_days(conn)?.contains(&day) {
                    return Ok(0);
                }
                let n: i64 =
                    conn.query_row(&format!("SELECT count(*) FROM {}", table(day)), [], |r| {
                        r.get(0)
                    })?;
                Ok(n as u64)
            })
            .await
    }
}

#[async_trait]
impl MailingStore for SqliteLinks {
    async fn create_mailing(&self, m: Mailing) -> Result<()> {
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO mailing (tenant, mailing_id, subject, sender, html, created_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        m.tenant,
                        m.mailing_id,
                        m.subject,
                        m.from,
                        m.html,
                        m.created_ms
                    ],
                )?;
                Ok::<_, LinksError>(())
            })
            .await
    }

    async fn mailing(&self, tenant: &str, mailing_id: &str) -> Result<Option<Mailing>> {
        let (tenant, mid) = (tenant.to_owned(), mailing_id.to_owned());
        self.reads
            .read(move |conn| {
                Ok(conn
                    .prepare_cached(
                        "SELECT subject, sender, html, created_ms FROM mailing
                         WHERE tenant = ?1 AND mailing_id = ?2",
                    )?
                    .query_row(params![tenant, mid], |r| {
                        Ok(Mailing {
                            mailing_id: mid.clone(),
                            tenant: tenant.clone(),
                            subject: r.get(0)?,
                            from: r.get(1)?,
                            html: r.get(2)?,
                            created_ms: r.get(3)?,
                        })
                    })
                    .optional()?)
            })
            .await
    }

    async fn mailing_by_id(&self, mailing_id: &str) -> Result<Option<Mailing>> {
        let mid = mailing_id.to_owned();
        self.reads
            .read(move |conn| {
                Ok(conn
                    .prepare_cached(
                        "SELECT tenant, subject, sender, html, created_ms FROM mailing
                         WHERE mailing_id = ?1",
                    )?
                    .query_row(params![mid], |r| {
                        Ok(Mailing {
                            mailing_id: mid.clone(),
                            tenant: r.get(0)?,
                            subject: r.get(1)?,
                            from: r.get(2)?,
                            html: r.get(3)?,
                            created_ms: r.get(4)?,
                        })
                    })
                    .optional()?)
            })
            .await
    }

    async fn suppress(&self, tenant: &str, emails: &[String]) -> Result<()> {
        let (tenant, emails) = (tenant.to_owned(), emails.to_vec());
        self.writer
            .write(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "INSERT OR IGNORE INTO suppression (tenant, email) VALUES (?1, ?2)",
                )?;
                for e in &emails {
                    stmt.execute(params![tenant, e.to_lowercase()])?;
                }
                Ok::<_, LinksError>(())
            })
            .await
    }

    async fn unsuppress(&self, tenant: &str, email: &str) -> Result<bool> {
        let (tenant, email) = (tenant.to_owned(), email.to_lowercase());
        self.writer
            .write(move |conn| {
                Ok::<_, LinksError>(
                    conn.execute(
                        "DELETE FROM suppression WHERE tenant = ?1 AND email = ?2",
                        params![tenant, email],
                    )? > 0,
                )
            })
            .await
    }

    async fn suppressed(&self, tenant: &str, emails: &[String]) -> Result<HashSet<String>> {
        let (tenant, emails) = (tenant.to_owned(), emails.to_vec());
        self.reads
            .read(move |conn| {
                let mut stmt = conn
                    .prepare_cached("SELECT 1 FROM suppression WHERE tenant = ?1 AND email = ?2")?;
                let mut out = HashSet::new();
                for e in emails {
                    let e = e.to_lowercase();
                    if stmt.exists(params![tenant, e])? {
                        out.insert(e);
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn add_counts(
        &self,
        mailing_id: &str,
        counts: &[(String, i64)],
        links: &[(u32, String)],
    ) -> Result<()> {
        let (mailing, counts, links) = (mailing_id.to_owned(), counts.to_vec(), links.to_vec());
        self.writer
            .write(move |conn| stats::add_counts(conn, &mailing, &counts, &links))
            .await
    }

    async fn record_deliveries(&self, deliveries: Vec<Delivery>, now_ms: i64) -> Result<()> {
        self.writer
            .write(move |conn| stats::record_deliveries(conn, &deliveries, now_ms))
            .await
    }

    async fn apply_hits(&self, group_id: &str, hits: Vec<StatsHit>, now_ms: i64) -> Result<bool> {
        let (group, seen) = (group_id.to_owned(), Arc::clone(&self.seen));
        let (applied, fresh) = self
            .writer
            .write(move |conn| stats::apply_hits(conn, &group, &hits, now_ms, &seen))
            .await?;
        self.seen.remember(fresh);
        Ok(applied)
    }

    async fn stats(&self, mailing_id: &str) -> Result<StoredStats> {
        let mailing = mailing_id.to_owned();
        self.reads
            .read(move |conn| stats::stats(conn, &mailing))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that is not a database is refused naming the file (SQLite's message names none).
    #[test]
    fn an_open_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        tidemark_core::sqlite::assert_open_names_the_file(
            &dir.path().join("links.db"),
            SqliteLinks::open,
        );
    }

    fn user_version(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    }

    /// A file made before versions were recorded is taken as version 1, its rows kept, and
    /// migrated to the campaign statistics of version 2.
    #[tokio::test]
    async fn a_file_made_before_versions_is_adopted_as_version_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("links.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "{}
                 INSERT INTO mailing VALUES ('t', 'm1', 'Hello', 'a@b.c', '<p>x</p>', 5);",
                crate::migrations::SQLITE_V1
            ))
            .unwrap();
        let store = SqliteLinks::open(&path).unwrap();
        let kept = store.mailing("t", "m1").await.unwrap().unwrap();
        assert_eq!(kept.subject, "Hello");
        assert_eq!(user_version(&path), 2);
        store
            .add_counts("m1", &[("rendered".into(), 4)], &[])
            .await
            .unwrap();
        assert_eq!(store.stats("m1").await.unwrap().counts["rendered"], 4);
    }

    /// A file of a newer build is refused, naming it and both versions.
    #[test]
    fn a_file_of_a_newer_build_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("links.db");
        SqliteLinks::open(&path).unwrap();
        assert_eq!(user_version(&path), 2);
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 3")
            .unwrap();
        let err = SqliteLinks::open(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "sqlite: {} has schema version 3, this build knows up to 2: use a newer tidemark",
                path.display()
            )
        );
    }
}
