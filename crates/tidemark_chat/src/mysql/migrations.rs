//! The versions of the MariaDB / MySQL archive (see `tidemark_core::schema`; its row in
//! `tidemark_schema_version` is `chat_archive`): every table it holds, and every change to
//! them, is here.
//!
//! - version 1: `archive_meta` (with the archive's identity), `message_record` and
//!   `history_index`, both keyed `(tenant, conversation_id, seq_bucket, conversation_seq)`
//!   ([`super::archive`]); `utf8mb4_bin`, so that ids compare byte for byte, as on SQLite.
//! - adopting a database made before versions were recorded: version 1's `IF NOT EXISTS` adds
//!   `archive_meta` where it is missing; then the expiry index of `history_index`, which served
//!   a purge of entries that tombstones ended, is dropped ([`drop_index_expiry`]).

use sqlx::mysql::MySqlConnection;
use tidemark_core::schema::{MysqlFuture, MysqlUp, Step, Versions};

/// The MariaDB / MySQL archive (see the module docs).
pub(super) static ARCHIVE: Versions<MysqlUp> = Versions {
    store: "chat_archive",
    marks: &["message_record", "history_index"],
    migrations: &[Step {
        what: "archive tables and the archive's identity",
        up: MysqlUp::Run(archive_v1),
    }],
    adopt: &[Step {
        what: "drop the expiry index of history_index",
        up: MysqlUp::Run(drop_index_expiry),
    }],
};

/// Version 1's tables.
const ARCHIVE_V1: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS archive_meta (
        name VARCHAR(64) NOT NULL PRIMARY KEY,
        value BIGINT NOT NULL
    ) ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS message_record (
        tenant VARCHAR(128) NOT NULL,
        conversation_id VARCHAR(128) NOT NULL,
        seq_bucket BIGINT UNSIGNED NOT NULL,
        conversation_seq BIGINT UNSIGNED NOT NULL,
        message_id VARCHAR(64) NOT NULL,
        sender VARCHAR(128) NOT NULL,
        client_msg_id VARCHAR(128) NOT NULL,
        body MEDIUMTEXT NOT NULL,
        class TINYINT NOT NULL,
        committed_at BIGINT NOT NULL,
        expires_at BIGINT NULL,
        PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq),
        KEY message_record_expiry (expires_at)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS history_index (
        tenant VARCHAR(128) NOT NULL,
        conversation_id VARCHAR(128) NOT NULL,
        seq_bucket BIGINT UNSIGNED NOT NULL,
        conversation_seq BIGINT UNSIGNED NOT NULL,
        message_id VARCHAR(64) NOT NULL,
        expires_at BIGINT NULL,
        PRIMARY KEY (tenant, conversation_id, seq_bucket, conversation_seq)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
];

/// Version 1: [`ARCHIVE_V1`], and the archive's identity (a fresh one, unless a database made
/// before versions were recorded has one: [`crate::ports::Archive::identity`]).
fn archive_v1(conn: &mut MySqlConnection) -> MysqlFuture<'_> {
    Box::pin(async move {
        for ddl in ARCHIVE_V1 {
            sqlx::query(ddl).execute(&mut *conn).await?;
        }
        sqlx::query(
            "INSERT INTO archive_meta (name, value) VALUES ('identity', ?)
             ON DUPLICATE KEY UPDATE name = name",
        )
        .bind(crate::ports::fresh_archive_identity())
        .execute(&mut *conn)
        .await?;
        Ok(())
    })
}

/// Adoption: drops `history_index_expiry` where it exists (`DROP INDEX IF EXISTS` is
/// MariaDB's alone, so look first).
fn drop_index_expiry(conn: &mut MySqlConnection) -> MysqlFuture<'_> {
    Box::pin(async move {
        let found: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM information_schema.statistics
             WHERE table_schema = DATABASE() AND table_name = 'history_index'
               AND index_name = 'history_index_expiry' LIMIT 1",
        )
        .fetch_optional(&mut *conn)
        .await?;
        if found.is_some() {
            sqlx::query("ALTER TABLE history_index DROP INDEX history_index_expiry")
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    })
}
