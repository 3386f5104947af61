//! The SQLite runner: the version is `PRAGMA user_version`; everything in one transaction.

use std::path::Path;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::{Found, TooNew, Versions};
use crate::sqlite::SqliteError;

/// How a SQLite migration or adoption step changes the file.
#[derive(Debug)]
pub enum SqliteUp {
    /// A batch of SQL statements.
    Sql(&'static str),
    /// A function on the connection, inside the migration's transaction (for steps that look
    /// before they change, or compute).
    Run(fn(&Connection) -> rusqlite::Result<()>),
}

impl SqliteUp {
    fn run(&self, conn: &Connection) -> rusqlite::Result<()> {
        match self {
            SqliteUp::Sql(sql) => conn.execute_batch(sql),
            SqliteUp::Run(f) => f(conn),
        }
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Brings the SQLite file at `path`, open on `conn` (read-write), to `versions`'s
/// [`Versions::known`] version (see the module docs of [`super`]): every step and the new
/// `user_version` in one `BEGIN IMMEDIATE` transaction. A file at the known version costs one
/// pragma read. Logs each migration at `info`.
///
/// # Errors
/// [`SqliteError::SchemaTooNew`] for a file of a newer build (nothing is changed), or SQLite's
/// error of the step that failed (nothing is changed either).
pub fn migrate_sqlite(
    conn: &Connection,
    path: &Path,
    versions: &Versions<SqliteUp>,
) -> Result<(), SqliteError> {
    let known = versions.known();
    if user_version(conn)? == known {
        return Ok(());
    }
    let too_new = |TooNew { found }| SqliteError::SchemaTooNew {
        path: path.display().to_string(),
        found,
        known,
    };
    // Under the write lock, so no other connection migrates the file between the read of its
    // version and the write of the new one.
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let found = match user_version(&tx)? {
        0 if has_any_table(&tx, versions.marks)? => Found::Unversioned,
        0 => Found::New,
        v => Found::Version(v),
    };
    let steps = versions.plan(found).map_err(too_new)?;
    if steps.is_empty() {
        return Ok(());
    }
    if found == Found::Unversioned {
        tracing::info!(
            store = versions.store,
            path = %path.display(),
            "the file records no schema version (made before versions were recorded): adopting it as version 1"
        );
    }
    for (step, _) in &steps {
        step.up.run(&tx)?;
    }
    tx.pragma_update(None, "user_version", known)?;
    tx.commit()?;
    tracing::info!(
        store = versions.store,
        path = %path.display(),
        from = ?found,
        to = known,
        steps = ?steps.iter().map(|(s, _)| s.what).collect::<Vec<_>>(),
        "schema migrated"
    );
    Ok(())
}

/// Whether any of `tables` exists in the file.
fn has_any_table(conn: &Connection, tables: &[&str]) -> rusqlite::Result<bool> {
    let mut stmt =
        conn.prepare("SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = ?1")?;
    for t in tables {
        if stmt.query_row([t], |r| r.get(0))? {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::super::Step;
    use super::*;
    use crate::sqlite::open_rw;

    /// Version 1 creates `t`; adoption adds `t.b` where missing; version 2 adds table `u`.
    static VERSIONS: Versions<SqliteUp> = Versions {
        store: "t.db",
        marks: &["t"],
        migrations: &[
            Step {
                what: "create t",
                up: SqliteUp::Sql("CREATE TABLE IF NOT EXISTS t (a INTEGER, b INTEGER)"),
            },
            Step {
                what: "create u",
                up: SqliteUp::Sql("CREATE TABLE u (x INTEGER)"),
            },
        ],
        adopt: &[Step {
            what: "add t.b",
            up: SqliteUp::Run(add_b),
        }],
    };

    fn add_b(conn: &Connection) -> rusqlite::Result<()> {
        let has_b: bool = conn.query_row(
            "SELECT count(*) > 0 FROM pragma_table_info('t') WHERE name = 'b'",
            [],
            |r| r.get(0),
        )?;
        if !has_b {
            conn.execute_batch("ALTER TABLE t ADD COLUMN b INTEGER NOT NULL DEFAULT 7")?;
        }
        Ok(())
    }

    fn columns(conn: &Connection, table: &str) -> Vec<String> {
        conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn a_new_file_gets_every_migration_and_the_known_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        migrate_sqlite(&conn, &path, &VERSIONS).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 2);
        assert_eq!(columns(&conn, "t"), ["a", "b"]);
        assert_eq!(columns(&conn, "u"), ["x"]);
        // Again: nothing to do (migration 2 is not repeatable, so it would fail).
        migrate_sqlite(&conn, &path, &VERSIONS).unwrap();
    }

    #[test]
    fn a_file_made_before_versions_is_adopted_with_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        migrate_sqlite(&conn, &path, &VERSIONS).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 2);
        let rows: Vec<(i64, i64)> = conn
            .prepare("SELECT a, b FROM t ORDER BY a")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(rows, [(1, 7), (2, 7)]);
        assert_eq!(columns(&conn, "u"), ["x"]);
    }

    #[test]
    fn a_file_at_version_1_gets_migration_2_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        // Version 1 without `b`: the adoption step must not run on a versioned file.
        conn.execute_batch("CREATE TABLE t (a INTEGER); PRAGMA user_version = 1;")
            .unwrap();
        migrate_sqlite(&conn, &path, &VERSIONS).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 2);
        assert_eq!(columns(&conn, "t"), ["a"]);
        assert_eq!(columns(&conn, "u"), ["x"]);
    }

    #[test]
    fn a_file_of_a_newer_build_is_refused_naming_it_and_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER); PRAGMA user_version = 5;")
            .unwrap();
        let err = migrate_sqlite(&conn, &path, &VERSIONS).unwrap_err();
        assert!(
            matches!(
                err,
                SqliteError::SchemaTooNew {
                    found: 5,
                    known: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{} has schema version 5, this build knows up to 2: use a newer tidemark",
                path.display()
            )
        );
        assert_eq!(user_version(&conn).unwrap(), 5);
        assert!(columns(&conn, "u").is_empty(), "nothing was changed");
        assert!(conn.is_autocommit(), "no transaction is left open");
    }

    #[test]
    fn a_failing_migration_leaves_the_file_as_it_was() {
        static FAILS: Versions<SqliteUp> = Versions {
            store: "t.db",
            marks: &["t"],
            migrations: &[
                Step {
                    what: "create t",
                    up: SqliteUp::Sql("CREATE TABLE t (a INTEGER)"),
                },
                Step {
                    what: "broken",
                    up: SqliteUp::Sql("CREATE TABLE u (x INTEGER); SELECT * FROM missing;"),
                },
            ],
            adopt: &[],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open_rw(&path).unwrap();
        let err = migrate_sqlite(&conn, &path, &FAILS).unwrap_err();
        assert!(err.to_string().contains("no such table: missing"), "{err}");
        assert_eq!(user_version(&conn).unwrap(), 0);
        assert!(columns(&conn, "t").is_empty() && columns(&conn, "u").is_empty());
        assert!(conn.is_autocommit());
    }
}
