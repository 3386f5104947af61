//! The versions of the link stores (see `tidemark_core::schema`): every table they hold, and
//! every change to them, is here.
//!
//! [`SQLITE`], the embedded store (`links.db`):
//! - version 1: `mailing` and `suppression`; the day tables `links_YYYYMMDD` are made as days
//!   come ([`crate::sqlite`]).
//! - version 2: the campaign-statistics summary ([`crate::stats`]): `mailing_count`,
//!   `mailing_link`, `mailing_hour`, `mailing_unique`, `mailing_delivery`, `hit_group`; and
//!   an index of `mailing` by `mailing_id` (an unsubscribe knows the mailing, not its tenant).
//!
//! [`MYSQL`], the MariaDB / MySQL store (its row in `tidemark_schema_version` is `links`):
//! - version 1: the table `links`, partitioned by day, made with its first partitions by the
//!   first insert ([`crate::mysql`]); nothing to create before.
//! - version 2: `mailing`, `suppression` (the mailing store, shared by every node) and
//!   `links_meta` (the id secret's check value, so nodes with different secrets are refused).
//! - version 3: the campaign-statistics summary, as SQLite's version 2.
//! - version 4: an index of `mailing` by `mailing_id` (an unsubscribe knows the mailing, not
//!   its tenant).
//!
//! Neither has had a layout before version 1: nothing to adopt.

use sqlx::MySqlConnection;
use tidemark_core::schema::{MysqlFuture, MysqlUp, SqliteUp, Step, Versions};

/// The embedded link store (see the module docs).
pub(crate) static SQLITE: Versions<SqliteUp> = Versions {
    store: "links.db",
    marks: &["mailing", "suppression"],
    migrations: &[
        Step {
            what: "mailing and suppression tables",
            up: SqliteUp::Sql(SQLITE_V1),
        },
        Step {
            what: "campaign statistics",
            up: SqliteUp::Sql(SQLITE_V2),
        },
    ],
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

/// Version 2: each mailing's summary. Counters by name (`crate::stats::counter`), the URL of
/// each link position, opens and clicks per UTC hour, the recipients seen per kind of unique (`crate::stats::Unique`), the
/// latest delivery of each recent recipient, and the ids of the hit groups applied.
const SQLITE_V2: &str = "
CREATE TABLE IF NOT EXISTS mailing_count (
    mailing_id TEXT NOT NULL,
    name TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (mailing_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mailing_link (
    mailing_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    url TEXT NOT NULL,
    PRIMARY KEY (mailing_id, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mailing_hour (
    mailing_id TEXT NOT NULL,
    hour_ms INTEGER NOT NULL,
    opens INTEGER NOT NULL,
    clicks INTEGER NOT NULL,
    PRIMARY KEY (mailing_id, hour_ms)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mailing_unique (
    mailing_id TEXT NOT NULL,
    what INTEGER NOT NULL,
    email TEXT NOT NULL,
    PRIMARY KEY (mailing_id, what, email)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mailing_delivery (
    mailing_id TEXT NOT NULL,
    email TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    PRIMARY KEY (mailing_id, email)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mailing_delivery_at ON mailing_delivery (at_ms);
CREATE TABLE IF NOT EXISTS hit_group (
    group_id TEXT NOT NULL PRIMARY KEY,
    at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS hit_group_at ON hit_group (at_ms);
CREATE INDEX IF NOT EXISTS mailing_by_id ON mailing (mailing_id);
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
        Step {
            what: "campaign statistics",
            up: MysqlUp::Sql(MYSQL_V3),
        },
        Step {
            what: "index of mailing by mailing_id",
            up: MysqlUp::Run(index_mailing_by_id),
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

/// Version 3 of the MariaDB store: the campaign-statistics summary, as SQLite's version 2.
const MYSQL_V3: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS mailing_count (
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (mailing_id, name)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS mailing_link (
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        position INT UNSIGNED NOT NULL,
        url LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        PRIMARY KEY (mailing_id, position)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS mailing_hour (
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        hour_ms BIGINT NOT NULL,
        opens BIGINT NOT NULL,
        clicks BIGINT NOT NULL,
        PRIMARY KEY (mailing_id, hour_ms)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS mailing_unique (
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        what INT NOT NULL,
        email VARCHAR(320) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        PRIMARY KEY (mailing_id, what, email)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS mailing_delivery (
        mailing_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        email VARCHAR(320) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        at_ms BIGINT NOT NULL,
        PRIMARY KEY (mailing_id, email),
        KEY at_ms (at_ms)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS hit_group (
        group_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        KEY at_ms (at_ms)
    ) ENGINE=InnoDB",
];

/// Version 4 of the MariaDB store: `mailing_by_id`, made only if missing (a step cut short
/// after its `CREATE INDEX` runs again).
fn index_mailing_by_id(conn: &mut MySqlConnection) -> MysqlFuture<'_> {
    Box::pin(async move {
        let exists: Option<(i64,)> = sqlx::query_as(
            "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE()
             AND table_name = 'mailing' AND index_name = 'mailing_by_id' LIMIT 1",
        )
        .fetch_optional(&mut *conn)
        .await?;
        if exists.is_none() {
            sqlx::query("CREATE INDEX mailing_by_id ON mailing (mailing_id)")
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    })
}
