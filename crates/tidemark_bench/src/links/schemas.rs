//! Seed 001's two slower link-table shapes on MariaDB, for the insert part's comparison with
//! Tidemark's ([`tidemark_links::mysql::MysqlLinks`]): the same columns and multi-row batches,
//! only the keys differ.
//!
//! - (a) `random-pk`: the 32-character random id is the primary key. InnoDB clusters rows by
//!   it, so each insert lands at a random page of an ever larger tree: the seed's slowdown.
//! - (b) `autoinc-unique`: an auto-increment clustered key (rows append) plus a unique
//!   `(link_id, day)` index that still takes random ids at random places.
//!
//! Both get ids from a CSPRNG without a time prefix, as the seed's did.

use sqlx::mysql::MySqlPool;
use tidemark_links::model::LinkRecord;

/// Which shape (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MysqlSchema {
    /// (a) random 32-character id as the primary key.
    RandomPk,
    /// (b) auto-increment key + unique `(link_id, day)`, random ids.
    AutoincUnique,
    /// (c) Tidemark: time-carrying ids, day partitions, auto-increment key (`MysqlLinks`).
    Tidemark,
}

impl MysqlSchema {
    /// The label printed with its figures.
    pub fn label(self) -> &'static str {
        match self {
            MysqlSchema::RandomPk => "(a) MariaDB, random 32-char id as primary key",
            MysqlSchema::AutoincUnique => {
                "(b) MariaDB, auto-increment key + unique (link_id, day), random ids"
            }
            MysqlSchema::Tidemark => {
                "(c) MariaDB, Tidemark: time-carrying ids, day partitions (MysqlLinks::insert)"
            }
        }
    }

    fn ddl(self) -> Option<&'static str> {
        match self {
            MysqlSchema::RandomPk => Some(
                "CREATE TABLE links (
                    link_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
                    day DATE NOT NULL, url LONGTEXT NOT NULL, email TEXT NOT NULL,
                    mailing_id VARCHAR(255) NOT NULL, position INT UNSIGNED NULL,
                    kind TINYINT NOT NULL, created_ms BIGINT NOT NULL
                ) ENGINE=InnoDB",
            ),
            MysqlSchema::AutoincUnique => Some(
                "CREATE TABLE links (
                    seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
                    link_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
                    day DATE NOT NULL, url LONGTEXT NOT NULL, email TEXT NOT NULL,
                    mailing_id VARCHAR(255) NOT NULL, position INT UNSIGNED NULL,
                    kind TINYINT NOT NULL, created_ms BIGINT NOT NULL,
                    UNIQUE KEY link_day (link_id, day)
                ) ENGINE=InnoDB",
            ),
            MysqlSchema::Tidemark => None,
        }
    }
}

/// Creates the table of `schema` (not for [`MysqlSchema::Tidemark`], which makes its own).
pub(super) async fn create(pool: &MySqlPool, schema: MysqlSchema) -> anyhow::Result<()> {
    if let Some(ddl) = schema.ddl() {
        sqlx::query(ddl).execute(pool).await?;
    }
    Ok(())
}

/// A random 32-character id (hex of 128 CSPRNG bits), no time in it.
pub(super) fn random_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Inserts `records` in one transaction of multi-row statements (the statement `MysqlLinks`
/// runs, whatever the table layout).
pub(super) async fn insert(pool: &MySqlPool, records: &[LinkRecord]) -> anyhow::Result<()> {
    Ok(tidemark_links::mysql::insert_batch(pool, records).await?)
}
