//! The versions of the link stores (see `tidemark_core::schema`): every table they hold, and
//! every change to them, is here.
//!
//! [`SQLITE`], the embedded store (`links.db`):
//! - version 1: `mailing` and `suppression`; the day tables `links_YYYYMMDD` are made as days
//!   come ([`crate::sqlite`]).
//!
//! [`MYSQL`], the MariaDB / MySQL store (its row in `tidemark_schema_version` is `links`):
//! - version 1: the table `links`, partitioned by day, made with its first partitions by the
//!   first insert ([`crate::mysql`]); nothing to create before.
//!
//! Neither has had a layout before version 1: nothing to adopt.

use tidemark_core::schema::{MysqlUp, SqliteUp, Step, Versions};

/// The embedded link store (see the module docs).
pub(crate) static SQLITE: Versions<SqliteUp> = Versions {
    store: "links.db",
    marks: &["mailing", "suppression"],
    migrations: &[Step {
        what: "mailing and suppression tables",
        up: SqliteUp::Sql(SQLITE_V1),
    }],
    adopt: &[],
};

pub(crate) const SQLITE_V1: &str = "
CREATE TABLE IF NOT EXISTS mailing (
    tenant TEXT NOT NULL,
    mailing_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    sender TEXT NOT NULL,
    html TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, mailing_id)
);
CREATE TABLE IF NOT EXISTS suppression (
    tenant TEXT NOT NULL,
    email TEXT NOT NULL,
    PRIMARY KEY (tenant, email)
) WITHOUT ROWID;
";

/// The MariaDB / MySQL link store (see the module docs).
pub(crate) static MYSQL: Versions<MysqlUp> = Versions {
    store: "links",
    marks: &["links"],
    migrations: &[Step {
        what: "links, partitioned by day (made by the first insert)",
        up: MysqlUp::Sql(&[]),
    }],
    adopt: &[],
};
