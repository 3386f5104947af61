//! The link store on MariaDB / MySQL (`links.store = "mysql://…"`; DESIGN.md part B
//! "Storage", seed 001's production shape).
//!
//! One InnoDB table `links`, `PARTITION BY RANGE (TO_DAYS(day))` with one partition
//! `pYYYYMMDD` per UTC day (seed 001: one partition per day, expired days dropped whole):
//! - clustered key `(seq, day)` with `seq` auto-increment, so inserts append at the end of the
//!   day's partition instead of landing at random places (seed 001 problem 1: random 32-char
//!   primary keys made inserts slow down as the table grew);
//! - unique key `(link_id, day)` (a unique key of a partitioned table must hold the
//!   partitioning column);
//! - `ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8`.
//!
//! The same database holds the mailings, the suppression list (`mailings`) and the campaign
//! statistics (`stats`), so nothing of
//! links is local to a node.
//!
//! Data flow:
//! - [`LinkStore::insert`]: the partitions of the batch's days are made sure of first (see
//!   below), then multi-row `INSERT`s of up to [`ROWS_PER_INSERT`] rows, all in one
//!   transaction (all or nothing).
//! - [`LinkStore::lookup`]: the day comes from the id; `WHERE day = ? AND link_id = ?` lets the
//!   server prune to exactly that day's partition (checked by a test with `EXPLAIN
//!   PARTITIONS`), then one unique-key read.
//! - Partitions: a day's partition is added with `ADD PARTITION` when it is later than every
//!   existing one, or split off the partition that covers it with `REORGANIZE PARTITION` when
//!   it is earlier (backfill; that partition is rewritten). Missing days in between are not
//!   filled: a range partition covers every day since the previous one, and a record always
//!   gets its own day's partition before it is written. Retention drops whole partitions
//!   (`DROP PARTITION`); when every partition is expired the table itself is dropped and is
//!   created again by the next insert or create.
//!
//! Partition DDL runs under a lock of the database (`GET_LOCK`, [`DDL_LOCK`]) held by the
//! session that runs it: nodes take turns, and each reads the partitions afresh once it holds
//! the lock, so two nodes never race on `ALTER TABLE`, and a node that dies mid-change frees
//! the lock with its session. Within a process a mutex serialises the callers, and the set of
//! existing days is cached between DDL passes (an insert that meets a partition another node
//! dropped reads it again).

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use async_trait::async_trait;
use sqlx::MySqlConnection;
use sqlx::mysql::MySqlPool;
use sqlx::{Connection, QueryBuilder, Row};
use tidemark_core::day::Day;
use tidemark_core::mysql::{MysqlError, connect, lock_session};
use tidemark_core::schema::migrate_mysql;
use tidemark_core::store::StoreError;
use tokio::sync::Mutex;

mod mailings;
mod stats;

pub use mailings::TakenIn;

use crate::error::{LinksError, Result};
use crate::id::LinkId;
use crate::model::{LinkRecord, Lookup};
use crate::rewrite::LinkKind;
use crate::store::LinkStore;

/// The named lock every node takes before it reads and changes partitions.
const DDL_LOCK: &str = "tidemark_links_ddl";

/// Longest wait for [`DDL_LOCK`]: a partition change takes well under a second, a
/// `REORGANIZE` of a big partition longer.
const DDL_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Rows per multi-row `INSERT` (8 placeholders each, far below the 65,535 limit).
pub const ROWS_PER_INSERT: usize = 500;

/// The lookup statement (day, link id): one partition, one unique-key read.
pub const LOOKUP_SQL: &str = "SELECT url, email, mailing_id, position, kind, created_ms
     FROM links WHERE day = ? AND link_id = ?";

/// MariaDB / MySQL error numbers this store tells apart.
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_NO_PARTITION_FOR_VALUE: u16 = 1526;

fn create_table_sql(days: &[Day]) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS links (
            seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
            day DATE NOT NULL,
            link_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            url LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL,
            email TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL,
            mailing_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NOT NULL,
            position INT UNSIGNED NULL,
            kind TINYINT NOT NULL,
            created_ms BIGINT NOT NULL,
            PRIMARY KEY (seq, day),
            UNIQUE KEY link_day (link_id, day)
        ) ENGINE=InnoDB ROW_FORMAT=COMPRESSED KEY_BLOCK_SIZE=8
        PARTITION BY RANGE (TO_DAYS(day)) ({})",
        partition_defs(days)
    )
}

fn partition_name(day: Day) -> String {
    format!("p{}", day.compact())
}

/// `PARTITION pYYYYMMDD VALUES LESS THAN (TO_DAYS('<next day>'))`, comma-separated.
fn partition_defs(days: &[Day]) -> String {
    days.iter()
        .map(|d| {
            format!(
                "PARTITION {} VALUES LESS THAN (TO_DAYS('{}'))",
                partition_name(*d),
                d.plus(1)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One partition change.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PartitionDdl {
    /// The table does not exist: create it with these days.
    Create(Vec<Day>),
    /// Days later than every existing partition.
    Add(Vec<Day>),
    /// Split the partition of `covering` into `into` (which ends with `covering`).
    Reorganize { covering: Day, into: Vec<Day> },
}

impl PartitionDdl {
    fn sql(&self) -> String {
        match self {
            PartitionDdl::Create(days) => create_table_sql(days),
            PartitionDdl::Add(days) => {
                format!("ALTER TABLE links ADD PARTITION ({})", partition_defs(days))
            }
            PartitionDdl::Reorganize { covering, into } => format!(
                "ALTER TABLE links REORGANIZE PARTITION {} INTO ({})",
                partition_name(*covering),
                partition_defs(into)
            ),
        }
    }
}

/// What it takes to give every day of `wanted` its own partition when `existing` (ascending)
/// have one. Pure, so it is tested without a server.
fn plan(existing: &[Day], wanted: &[Day]) -> Vec<PartitionDdl> {
    let have: BTreeSet<Day> = existing.iter().copied().collect();
    let missing: BTreeSet<Day> = wanted
        .iter()
        .copied()
        .filter(|d| !have.contains(d))
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    let Some(&last) = have.last() else {
        return vec![PartitionDdl::Create(missing.into_iter().collect())];
    };
    let mut out = Vec::new();
    let mut splits: BTreeMap<Day, Vec<Day>> = BTreeMap::new();
    let mut above = Vec::new();
    for d in missing {
        match have.range(d..).next() {
            Some(&covering) => splits.entry(covering).or_default().push(d),
            None => above.push(d),
        }
    }
    for (covering, mut into) in splits {
        into.push(covering);
        out.push(PartitionDdl::Reorganize { covering, into });
    }
    if !above.is_empty() {
        debug_assert!(above[0] > last);
        out.push(PartitionDdl::Add(above));
    }
    out
}

fn is_db_error(e: &sqlx::Error, code: u16) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|m| m.number() == code)
}

impl From<sqlx::Error> for LinksError {
    fn from(e: sqlx::Error) -> Self {
        LinksError::Store(e.into())
    }
}

impl From<MysqlError> for LinksError {
    fn from(e: MysqlError) -> Self {
        match e {
            MysqlError::BadUrl { .. } => LinksError::Invalid(e.to_string()),
            MysqlError::Sqlx(e) => e.into(),
            MysqlError::SchemaTooNew { .. } | MysqlError::SchemaLocked { .. } => {
                LinksError::Store(e.into())
            }
        }
    }
}

/// The day-partitioned link store on MariaDB / MySQL (see the module docs).
#[derive(Debug)]
pub struct MysqlLinks {
    pool: MySqlPool,
    /// Days that have a partition, as last read or changed by this process; `None` until read.
    known: Mutex<Option<BTreeSet<Day>>>,
    /// Campaign-statistics unique keys known stored ([`crate::stats::SeenUniques`]).
    seen: crate::stats::SeenUniques,
}

impl MysqlLinks {
    /// Connects to `url` (`mysql://user[:password]@host[:port]/database`; the database is
    /// created if missing) with a pool of `max_connections`, and brings the store to its
    /// version ([`crate::migrations::MYSQL`]; a store of a newer build is refused). The table
    /// is created with the first partitions.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self> {
        let pool = connect(url, max_connections).await?;
        migrate_mysql(&pool, &crate::migrations::MYSQL).await?;
        Ok(Self {
            pool,
            known: Mutex::new(None),
            seen: crate::stats::SeenUniques::default(),
        })
    }

    /// The pool (for tests that read query plans).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// A session holding this database's partition lock (see the module docs).
    async fn ddl_session(&self) -> Result<MySqlConnection> {
        lock_session(&self.pool, DDL_LOCK, DDL_LOCK_WAIT)
            .await?
            .ok_or_else(|| {
                LinksError::Store(StoreError::unavailable(
                    "mysql",
                    format!(
                        "another node held the link partition lock for {} s",
                        DDL_LOCK_WAIT.as_secs()
                    ),
                ))
            })
    }

    /// Gives every day of `days` its own partition (DDL only for the missing ones).
    async fn ensure(&self, days: &[Day]) -> Result<()> {
        let mut known = self.known.lock().await;
        if let Some(k) = known.as_ref()
            && days.iter().all(|d| k.contains(d))
        {
            return Ok(());
        }
        // Forget the cache first: if a statement fails, the next call reads the truth.
        *known = None;
        let mut conn = self.ddl_session().await?;
        let changed = ensure_locked(&mut conn, days).await;
        let _ = conn.close().await;
        *known = Some(changed?);
        Ok(())
    }

    async fn insert_once(&self, records: &[LinkRecord]) -> std::result::Result<(), sqlx::Error> {
        insert_batch(&self.pool, records).await
    }
}

#[async_trait]
impl LinkStore for MysqlLinks {
    async fn insert(&self, records: Vec<LinkRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let days: Vec<Day> = records
            .iter()
            .map(|r| Day::of_utc_ms(r.created_ms))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        self.ensure(&days).await?;
        match self.insert_once(&records).await {
            // Another process dropped the table or a partition meanwhile: make sure again, once.
            Err(e)
                if is_db_error(&e, ER_NO_SUCH_TABLE)
                    || is_db_error(&e, ER_NO_PARTITION_FOR_VALUE) =>
            {
                *self.known.lock().await = None;
                self.ensure(&days).await?;
                Ok(self.insert_once(&records).await?)
            }
            other => Ok(other?),
        }
    }

    async fn lookup(&self, id: &LinkId, oldest_kept: Day) -> Result<Lookup> {
        let day = id.day();
        if day < oldest_kept {
            return Ok(Lookup::Expired);
        }
        let row = sqlx::query(LOOKUP_SQL)
            .bind(day.to_string())
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await;
        let row = match row {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(Lookup::Unknown),
            // No table: no partition at all (never created, or every one expired).
            Err(e) if is_db_error(&e, ER_NO_SUCH_TABLE) => return Ok(Lookup::Unknown),
            Err(e) => return Err(e.into()),
        };
        Ok(Lookup::Found(LinkRecord {
            link_id: id.as_str().to_owned(),
            url: row.try_get(0)?,
            email: row.try_get(1)?,
            mailing_id: row.try_get(2)?,
            position: row.try_get(3)?,
            kind: LinkKind::from_code(row.try_get::<i8, _>(4)?.into()),
            created_ms: row.try_get(5)?,
        }))
    }

    async fn create_partitions(&self, days: &[Day]) -> Result<()> {
        self.ensure(days).await
    }

    async fn drop_partitions_before(&self, oldest_kept: Day) -> Result<Vec<Day>> {
        let mut known = self.known.lock().await;
        *known = None;
        let mut conn = self.ddl_session().await?;
        let dropped = drop_locked(&mut conn, oldest_kept).await;
        let _ = conn.close().await;
        let (old, left) = dropped?;
        *known = Some(left);
        Ok(old)
    }

    async fn partitions(&self) -> Result<Vec<Day>> {
        let mut conn = self.pool.acquire().await?;
        Ok(read_partitions(&mut conn).await?.into_iter().collect())
    }

    async fn count(&self, day: Day) -> Result<u64> {
        let n = sqlx::query("SELECT COUNT(*) FROM links WHERE day = ?")
            .bind(day.to_string())
            .fetch_one(&self.pool)
            .await;
        match n {
            Ok(r) => Ok(u64::try_from(r.try_get::<i64, _>(0)?).unwrap_or(0)),
            Err(e) if is_db_error(&e, ER_NO_SUCH_TABLE) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

/// The days that have a partition, read from the server.
async fn read_partitions(conn: &mut MySqlConnection) -> Result<BTreeSet<Day>> {
    let rows = sqlx::query(
        "SELECT PARTITION_NAME FROM information_schema.PARTITIONS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'
           AND PARTITION_NAME IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut days = BTreeSet::new();
    for r in rows {
        let name: String = r.try_get(0)?;
        let c = name.trim_start_matches('p');
        if c.len() == 8
            && let Ok(d) = Day::parse(&format!("{}-{}-{}", &c[..4], &c[4..6], &c[6..]))
        {
            days.insert(d);
        }
    }
    Ok(days)
}

/// On a session holding the partition lock: reads the partitions another node may just have
/// changed, makes the missing ones of `days`, and returns the partitions now there.
async fn ensure_locked(conn: &mut MySqlConnection, days: &[Day]) -> Result<BTreeSet<Day>> {
    let existing: Vec<Day> = read_partitions(conn).await?.into_iter().collect();
    let steps = plan(&existing, days);
    for step in &steps {
        sqlx::query(&step.sql()).execute(&mut *conn).await?;
    }
    if !steps.is_empty() {
        tracing::info!(?days, "created link partitions");
    }
    read_partitions(conn).await
}

/// On a session holding the partition lock: drops the partitions of days before
/// `oldest_kept` (the table, when that is every one); returns the days dropped and the
/// partitions left.
async fn drop_locked(
    conn: &mut MySqlConnection,
    oldest_kept: Day,
) -> Result<(Vec<Day>, BTreeSet<Day>)> {
    let existing = read_partitions(conn).await?;
    let old: Vec<Day> = existing.range(..oldest_kept).copied().collect();
    if old.is_empty() {
        return Ok((old, existing));
    }
    if old.len() == existing.len() {
        // A partitioned table cannot lose its last partition: drop the table whole.
        sqlx::query("DROP TABLE IF EXISTS links")
            .execute(&mut *conn)
            .await?;
    } else {
        let names: Vec<String> = old.iter().map(|d| partition_name(*d)).collect();
        sqlx::query(&format!(
            "ALTER TABLE links DROP PARTITION {}",
            names.join(", ")
        ))
        .execute(&mut *conn)
        .await?;
    }
    Ok((old, read_partitions(conn).await?))
}

/// Inserts `records` into `links` in one transaction of multi-row statements of at most
/// [`ROWS_PER_INSERT`] rows; each row's `day` is its id's UTC day (seed 001: inserts append,
/// one partition per day). Shared by [`MysqlLinks`] and the seed-001 benchmark, which runs the
/// same statement on other table layouts.
pub async fn insert_batch(
    pool: &sqlx::MySqlPool,
    records: &[LinkRecord],
) -> std::result::Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    for chunk in records.chunks(ROWS_PER_INSERT) {
        let mut q = QueryBuilder::new(
            "INSERT INTO links (day, link_id, url, email, mailing_id, position, kind, created_ms) ",
        );
        q.push_values(chunk, |mut b, r| {
            b.push_bind(Day::of_utc_ms(r.created_ms).to_string())
                .push_bind(&r.link_id)
                .push_bind(&r.url)
                .push_bind(&r.email)
                .push_bind(&r.mailing_id)
                .push_bind(r.position)
                .push_bind(r.kind.code())
                .push_bind(r.created_ms);
        });
        q.build().execute(&mut *tx).await?;
    }
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Day {
        Day::parse(s).unwrap()
    }

    #[test]
    fn partitions_are_added_above_and_split_off_below() {
        let (a, b, c) = (d("2026-11-28"), d("2026-11-29"), d("2026-11-30"));
        assert_eq!(plan(&[], &[c, a]), vec![PartitionDdl::Create(vec![a, c])]);
        assert!(plan(&[a, b], &[b, a]).is_empty());
        assert_eq!(plan(&[a], &[a, b, c]), vec![PartitionDdl::Add(vec![b, c])]);
        let early = d("2026-11-20");
        assert_eq!(
            plan(&[a, c], &[early, b, c.plus(1)]),
            vec![
                PartitionDdl::Reorganize {
                    covering: a,
                    into: vec![early, a]
                },
                PartitionDdl::Reorganize {
                    covering: c,
                    into: vec![b, c]
                },
                PartitionDdl::Add(vec![c.plus(1)]),
            ]
        );
        assert_eq!(
            PartitionDdl::Add(vec![b]).sql(),
            "ALTER TABLE links ADD PARTITION (PARTITION p20261129 VALUES LESS THAN (TO_DAYS('2026-11-30')))"
        );
    }
}
