//! The versions of the raw tier's SQLite files (see `tidemark_core::schema`): `raw.db` (the
//! embedded raw tier) and the InfluxDB raw tier's local catalog (`influx-catalog.db`). Both
//! hold the day catalog `raw_day` ([`super::catalog`]); `raw.db` also the day tables
//! `raw_YYYYMMDD`, made as days come ([`super::SqliteRaw`]).
//!
//! - version 1: `raw_day`. `pending` counts events of appends in flight (InfluxDB: being
//!   written to the server, not yet counted) and `pending_since_ms` is when the latest of them
//!   began; `next_seq` numbers a day's events (InfluxDB: the nanosecond tie-break of equal
//!   timestamps).
//! - adopting a file made before versions were recorded: a catalog made before appends in
//!   flight were counted gains `pending` and `next_seq` ([`add_pending_and_next_seq`]); one
//!   made before their start was kept gains `pending_since_ms` ([`add_pending_since`]).

use rusqlite::Connection;
use tidemark_core::schema::{SqliteUp, Step, Versions};

/// The raw tier's files (see the module docs).
pub(super) static RAW: Versions<SqliteUp> = Versions {
    store: "raw day catalog",
    marks: &["raw_day"],
    migrations: &[Step {
        what: "raw_day catalog",
        up: SqliteUp::Sql(RAW_V1),
    }],
    adopt: &[
        Step {
            what: "add raw_day.pending and raw_day.next_seq",
            up: SqliteUp::Run(add_pending_and_next_seq),
        },
        Step {
            what: "add raw_day.pending_since_ms",
            up: SqliteUp::Run(add_pending_since),
        },
    ],
};

const RAW_V1: &str = "
CREATE TABLE IF NOT EXISTS raw_day (
    day INTEGER PRIMARY KEY,
    events INTEGER NOT NULL,
    last_arrival_ms INTEGER NOT NULL,
    rolled_up_arrival_ms INTEGER,
    archived_arrival_ms INTEGER,
    dropped_ms INTEGER,
    pending INTEGER NOT NULL DEFAULT 0,
    pending_since_ms INTEGER,
    next_seq INTEGER NOT NULL DEFAULT 0
);
";

/// Whether `raw_day` has the column `name`.
fn has_column(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('raw_day') WHERE name = ?1",
        [name],
        |r| r.get(0),
    )
}

/// Adoption: a catalog without `pending` and `next_seq` gains them, at 0 (no append in flight;
/// a day's numbers start at 0, which only the InfluxDB raw tier uses, and its catalog has had
/// them from its start).
fn add_pending_and_next_seq(conn: &Connection) -> rusqlite::Result<()> {
    if !has_column(conn, "pending")? {
        conn.execute_batch("ALTER TABLE raw_day ADD COLUMN pending INTEGER NOT NULL DEFAULT 0")?;
    }
    if !has_column(conn, "next_seq")? {
        conn.execute_batch("ALTER TABLE raw_day ADD COLUMN next_seq INTEGER NOT NULL DEFAULT 0")?;
    }
    Ok(())
}

/// Adoption: a catalog without `pending_since_ms` gains it. A day still counting events in
/// flight gets the adoption's time (Unix ms, wall clock) as their start: they hold the day
/// until [`super::catalog::PENDING_EXPIRES_MS`] after it, as any append in flight does; with
/// no start at all they would hold it for ever (`NULL` is never older than the expiry).
fn add_pending_since(conn: &Connection) -> rusqlite::Result<()> {
    if !has_column(conn, "pending_since_ms")? {
        conn.execute_batch(
            "ALTER TABLE raw_day ADD COLUMN pending_since_ms INTEGER;
             UPDATE raw_day SET pending_since_ms = CAST(unixepoch('subsec') * 1000 AS INTEGER)
             WHERE pending > 0;",
        )?;
    }
    Ok(())
}

/// Test support: an in-memory catalog at the known version.
#[cfg(test)]
pub(super) fn in_memory() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    tidemark_core::schema::migrate_sqlite(&conn, std::path::Path::new(":memory:"), &RAW).unwrap();
    conn
}

#[cfg(test)]
mod tests;
