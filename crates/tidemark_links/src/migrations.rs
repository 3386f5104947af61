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
//! - version 2: `mailing`, `suppression` (the mailing store, shared by every node) and
//!   `links_meta` (the id secret's check value, so nodes with different secrets are refused).
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
    migrations: &[
        Step {
            what: "links, partitioned by day (made by the first insert)",
            up: MysqlUp::Sql(&[]),
        },
        Step {
            what: "mailing, suppression and links_meta tables",
            up: MysqlUp::Sql(MYSQL_V2),
        },
    ],
    adopt: &[],
};

/// Version 2 of the MariaDB store. Addresses are stored lower case (the service normalises
/// them) and compared byte for byte; a template is at most `links.max_template_bytes` (1 MiB
/// by default), well inside `MEDIUMTEXT`.
const MYSQL_V2: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS mailing (
        tenant VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        subject TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        sender VARCHAR(320) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        html MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant, mailing_id)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS suppression (
        tenant VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        email VARCHAR(320) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        PRIMARY KEY (tenant, email)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS links_meta (
        name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
        value VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
    ) ENGINE=InnoDB",
];
