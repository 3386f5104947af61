//! The versions of the summary tier (see `tidemark_core::schema`): every table it holds, and
//! every change to them, is here.
//!
//! [`SQLITE`], the embedded summary tier (`rollups.db`; [`super::SqliteRollups`] gives the
//! reasons for its keys):
//! - version 1: `listing_daily` keyed `(listing_id, event, day)` with an index on `day`,
//!   `rollup_kinds`, and `listings` with its index `(tenant, account_id)`.
//! - version 2: `listing_monthly`, the month sums of `listing_daily` (as on MariaDB), built
//!   from the days already there.
//! - version 3: `kind_written` and `kind_read`, the event-kind audit ([`crate::usage`]).
//! - version 4: `listing_daily_visitors` and `listing_monthly_visitors`, the visitor sketches
//!   of period uniques ([`crate::visitors`]), and `raw_window_needs` ([`crate::raw_window`]).
//! - version 5: `events_meta`, the time zone the store's days are cut in
//!   ([`crate::calendar`]), as on MariaDB.
//! - adopting a file made before versions were recorded: a `listing_daily` keyed
//!   `(listing_id, day, event)` is rebuilt with version 1's key ([`rekey_listing_daily`]), and
//!   `rollup_kinds` gets every kind `listing_daily` holds ([`fill_rollup_kinds`]): the report
//!   reads a kind's rows only once the kind is listed there.
//!
//! [`MYSQL`], the summary tier on MariaDB / MySQL (its row in `tidemark_schema_version` is
//! `events_rollups`; [`super::MysqlRollups`] gives the reasons):
//! - version 1: `listing_daily` keyed `(listing_id, day, event)` with an index on `day`,
//!   `listings` with its index `(tenant, account_id, id)`, `listing_monthly` (the month sums of
//!   `listing_daily`) with an index on `month`.
//! - version 2: `events_day_lease`, the per-day leases of the lifecycle ([`crate::leases`]),
//!   here so that a summary write checks its lease in its own transaction; `events_meta`,
//!   the events schema the nodes sharing the database agree on, and the time zone of their
//!   days ([`crate::calendar`]).
//! - version 3: `kind_written` and `kind_read`, the event-kind audit ([`crate::usage`]).
//! - version 4: `listing_daily_visitors`, `listing_monthly_visitors` and `raw_window_needs`,
//!   as on SQLite.
//! - adopting a database made before versions were recorded: `listing_monthly`, which version
//!   1's `IF NOT EXISTS` made empty beside the days of a database made before it, is built from
//!   `listing_daily` ([`build_listing_monthly`]).

use rusqlite::Connection;
use sqlx::mysql::MySqlConnection;
use tidemark_core::schema::{MysqlFuture, MysqlUp, SqliteUp, Step, Versions};

/// The embedded summary tier (see the module docs).
pub(super) static SQLITE: Versions<SqliteUp> = Versions {
    store: "rollups.db",
    marks: &["listing_daily", "listings"],
    migrations: &[
        Step {
            what: "listing_daily, rollup_kinds and listings",
            up: SqliteUp::Sql(SQLITE_V1),
        },
        Step {
            what: "listing_monthly, built from listing_daily",
            up: SqliteUp::Sql(SQLITE_V2),
        },
        Step {
            what: "kind_written and kind_read",
            up: SqliteUp::Sql(SQLITE_V3),
        },
        Step {
            what: "listing_daily_visitors, listing_monthly_visitors and raw_window_needs",
            up: SqliteUp::Sql(SQLITE_V4),
        },
        Step {
            what: "events_meta",
            up: SqliteUp::Sql(SQLITE_V5),
        },
    ],
    adopt: &[
        Step {
            what: "key listing_daily (listing_id, event, day)",
            up: SqliteUp::Run(rekey_listing_daily),
        },
        Step {
            what: "list the kinds of listing_daily in rollup_kinds",
            up: SqliteUp::Run(fill_rollup_kinds),
        },
    ],
};

/// Version 3: the event-kind audit. Events per `(kind, day of the event)` with the last
/// arrival, and each kind's last read and its reader.
const SQLITE_V3: &str = "
CREATE TABLE IF NOT EXISTS kind_written (
    kind TEXT NOT NULL,
    day INTEGER NOT NULL,
    events INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kind_read (
    kind TEXT NOT NULL PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    reader TEXT NOT NULL
) WITHOUT ROWID;
";

/// Version 4: the visitor sketches of `listing_daily` and `listing_monthly` rows
/// ([`crate::visitors`]), keyed as those rows, in tables of their own so that the sums the
/// report reads stay as dense as before (rows rolled up earlier have none: not known); and
/// `raw_window_needs`, how often raw days of each age were needed ([`crate::raw_window`]).
const SQLITE_V4: &str = "
CREATE TABLE IF NOT EXISTS listing_daily_visitors (
    listing_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    day INTEGER NOT NULL,
    sketch BLOB NOT NULL,
    PRIMARY KEY (listing_id, event, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS listing_monthly_visitors (
    listing_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    month INTEGER NOT NULL,
    sketch BLOB NOT NULL,
    PRIMARY KEY (listing_id, event, month)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS raw_window_needs (
    need TEXT NOT NULL,
    age INTEGER NOT NULL,
    count INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,
    PRIMARY KEY (need, age)
) WITHOUT ROWID;
";

/// Version 5: settings the store keeps by name: `time_zone`, the zone its days are cut in.
const SQLITE_V5: &str = "
CREATE TABLE IF NOT EXISTS events_meta (
    name TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
";

pub(super) const SQLITE_V1: &str = "
CREATE TABLE IF NOT EXISTS listing_daily (
    listing_id INTEGER NOT NULL,
    day INTEGER NOT NULL,
    event TEXT NOT NULL,
    total INTEGER NOT NULL,
    uniques INTEGER NOT NULL,
    PRIMARY KEY (listing_id, event, day)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS listing_daily_day ON listing_daily (day);
CREATE TABLE IF NOT EXISTS rollup_kinds (kind TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS listings (
    tenant TEXT NOT NULL,
    listing_id INTEGER NOT NULL,
    account_id INTEGER NOT NULL,
    PRIMARY KEY (tenant, listing_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS listings_account ON listings (tenant, account_id);
";

/// Version 2: `listing_monthly`, the month sums of `listing_daily` (`month` is the day number of
/// the month's first day; `days` the daily rows summed), clustered like `listing_daily`, and
/// built from the days already there.
pub(super) const SQLITE_V2: &str = "
CREATE TABLE IF NOT EXISTS listing_monthly (
    listing_id INTEGER NOT NULL,
    month INTEGER NOT NULL,
    event TEXT NOT NULL,
    total INTEGER NOT NULL,
    uniques INTEGER NOT NULL,
    days INTEGER NOT NULL,
    PRIMARY KEY (listing_id, event, month)
) WITHOUT ROWID;
INSERT INTO listing_monthly (listing_id, month, event, total, uniques, days)
    SELECT listing_id, unixepoch(date(day * 86400, 'unixepoch', 'start of month')) / 86400 AS m,
           event, sum(total), sum(uniques), count(*)
    FROM listing_daily GROUP BY listing_id, event, m ORDER BY listing_id, event, m;
";

/// The primary key columns of `listing_daily`, in key order, comma-separated.
fn listing_daily_key(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row(
        "SELECT group_concat(name, ',') FROM
             (SELECT name FROM pragma_table_info('listing_daily') WHERE pk > 0 ORDER BY pk)",
        [],
        |r| r.get(0),
    )
}

/// Adoption: a `listing_daily` keyed in another order is copied into a table of version 1's
/// key, which then takes its name (rows sorted by the new key as they are inserted).
fn rekey_listing_daily(conn: &Connection) -> rusqlite::Result<()> {
    if listing_daily_key(conn)? == "listing_id,event,day" {
        return Ok(());
    }
    conn.execute_batch(
        "DROP INDEX IF EXISTS listing_daily_day;
         ALTER TABLE listing_daily RENAME TO listing_daily_rekeyed;
         CREATE TABLE listing_daily (
             listing_id INTEGER NOT NULL,
             day INTEGER NOT NULL,
             event TEXT NOT NULL,
             total INTEGER NOT NULL,
             uniques INTEGER NOT NULL,
             PRIMARY KEY (listing_id, event, day)
         ) WITHOUT ROWID;
         INSERT INTO listing_daily (listing_id, day, event, total, uniques)
             SELECT listing_id, day, event, total, uniques FROM listing_daily_rekeyed
             ORDER BY listing_id, event, day;
         DROP TABLE listing_daily_rekeyed;
         CREATE INDEX listing_daily_day ON listing_daily (day);",
    )
}

/// Adoption: every kind of `listing_daily` is listed in `rollup_kinds`.
fn fill_rollup_kinds(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "INSERT OR IGNORE INTO rollup_kinds (kind) SELECT DISTINCT event FROM listing_daily",
    )
}

/// The summary tier on MariaDB / MySQL (see the module docs).
pub(super) static MYSQL: Versions<MysqlUp> = Versions {
    store: "events_rollups",
    marks: &["listing_daily", "listings"],
    migrations: &[
        Step {
            what: "listing_daily, listings and listing_monthly",
            up: MysqlUp::Sql(&MYSQL_V1),
        },
        Step {
            what: "events_day_lease and events_meta",
            up: MysqlUp::Sql(&[
                "CREATE TABLE IF NOT EXISTS events_meta (
                    name VARCHAR(64) NOT NULL PRIMARY KEY,
                    value MEDIUMTEXT NOT NULL
                ) ENGINE=InnoDB",
                "CREATE TABLE IF NOT EXISTS events_day_lease (
                    day INT NOT NULL PRIMARY KEY,
                    holder VARCHAR(128) NOT NULL,
                    token BIGINT UNSIGNED NOT NULL,
                    expires_ms BIGINT NOT NULL
                ) ENGINE=InnoDB",
            ]),
        },
        Step {
            what: "kind_written and kind_read",
            up: MysqlUp::Sql(&[
                "CREATE TABLE IF NOT EXISTS kind_written (
                    kind VARCHAR(100) NOT NULL,
                    day DATE NOT NULL,
                    events BIGINT UNSIGNED NOT NULL,
                    last_ms BIGINT NOT NULL,
                    PRIMARY KEY (kind, day)
                ) ENGINE=InnoDB",
                "CREATE TABLE IF NOT EXISTS kind_read (
                    kind VARCHAR(100) NOT NULL PRIMARY KEY,
                    at_ms BIGINT NOT NULL,
                    reader VARCHAR(32) NOT NULL
                ) ENGINE=InnoDB",
            ]),
        },
        Step {
            what: "listing_daily_visitors, listing_monthly_visitors and raw_window_needs",
            up: MysqlUp::Sql(&[
                "CREATE TABLE IF NOT EXISTS listing_daily_visitors (
                    listing_id BIGINT NOT NULL,
                    day DATE NOT NULL,
                    event VARCHAR(100) NOT NULL,
                    sketch MEDIUMBLOB NOT NULL,
                    PRIMARY KEY (listing_id, day, event)
                ) ENGINE=InnoDB",
                "CREATE TABLE IF NOT EXISTS listing_monthly_visitors (
                    listing_id BIGINT NOT NULL,
                    month DATE NOT NULL,
                    event VARCHAR(100) NOT NULL,
                    sketch MEDIUMBLOB NOT NULL,
                    PRIMARY KEY (listing_id, month, event)
                ) ENGINE=InnoDB",
                "CREATE TABLE IF NOT EXISTS raw_window_needs (
                    need VARCHAR(16) NOT NULL,
                    age INT UNSIGNED NOT NULL,
                    count BIGINT UNSIGNED NOT NULL,
                    first_ms BIGINT NOT NULL,
                    PRIMARY KEY (need, age)
                ) ENGINE=InnoDB",
            ]),
        },
    ],
    adopt: &[Step {
        what: "build listing_monthly from listing_daily",
        up: MysqlUp::Run(build_listing_monthly),
    }],
};

const MYSQL_V1: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS listing_daily (
        listing_id BIGINT NOT NULL,
        day DATE NOT NULL,
        event VARCHAR(100) NOT NULL,
        total BIGINT UNSIGNED NOT NULL,
        uniques BIGINT UNSIGNED NOT NULL,
        PRIMARY KEY (listing_id, day, event),
        KEY listing_daily_day (day)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS listings (
        tenant VARCHAR(255) NOT NULL,
        id BIGINT NOT NULL,
        account_id BIGINT NOT NULL,
        PRIMARY KEY (tenant, id),
        KEY listings_account (tenant, account_id, id)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS listing_monthly (
        listing_id BIGINT NOT NULL,
        month DATE NOT NULL,
        event VARCHAR(100) NOT NULL,
        total BIGINT NOT NULL,
        uniques BIGINT NOT NULL,
        days INT NOT NULL,
        PRIMARY KEY (listing_id, month, event),
        KEY listing_monthly_month (month)
    ) ENGINE=InnoDB",
];

/// Adoption: an empty `listing_monthly` is built from `listing_daily` (one row per listing,
/// month and kind; `days` counts the daily rows summed). One that holds rows was kept with
/// the days from its start and is left as it is.
fn build_listing_monthly(conn: &mut MySqlConnection) -> MysqlFuture<'_> {
    Box::pin(async move {
        let months: Option<(i64,)> = sqlx::query_as("SELECT 1 FROM listing_monthly LIMIT 1")
            .fetch_optional(&mut *conn)
            .await?;
        if months.is_none() {
            sqlx::query(
                "INSERT INTO listing_monthly (listing_id, month, event, total, uniques, days)
                 SELECT listing_id, DATE_FORMAT(day, '%Y-%m-01'), event, SUM(total),
                        SUM(uniques), COUNT(*)
                 FROM listing_daily GROUP BY listing_id, DATE_FORMAT(day, '%Y-%m-01'), event",
            )
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
