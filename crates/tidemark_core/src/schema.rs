//! Versioned schemas: each store lists its migrations in one place, and every open brings the
//! store to the version this build knows, or refuses it.
//!
//! A store declares [`Versions`]: `migrations[i]` takes it from version `i` to `i + 1`, so the
//! version a build knows is the length of that list. Version 1 is each store's schema as this
//! build's stores were first versioned: migration 1 creates it (`IF NOT EXISTS`, so that it
//! also completes a store made before versions were recorded). Later changes are migrations
//! 2, 3, …: a migration, once released, is never edited, only followed by another.
//!
//! A store with no version recorded is one of two things:
//! - new (none of its [`Versions::marks`] tables exists): migrations 1…N run;
//! - made before versions were recorded (a mark is there): migration 1 runs, then each of the
//!   store's [`Versions::adopt`] steps, then migrations 2…N. An adoption step recognises one
//!   earlier shape of the store (a missing column, an index since dropped) and changes it to
//!   version 1's; on a store that does not have that shape it changes nothing, so the steps
//!   can run whichever earlier shape the store has.
//!
//! A store whose recorded version is above what this build knows was written by a newer
//! build: it is refused, naming the store and both versions ([`SqliteError::SchemaTooNew`],
//! [`MysqlError::SchemaTooNew`]), instead of being read and written with the wrong layout.
//!
//! Engines:
//! - SQLite ([`migrate_sqlite`]): the version is the file's `PRAGMA user_version`; every
//!   migration and the new version are written in one `BEGIN IMMEDIATE` transaction at open,
//!   so a crash leaves the file as it was.
//! - MariaDB / MySQL ([`migrate_mysql`]): the version is the store's row of
//!   `tidemark_schema_version (store, version, migrated_at)`, one table per database shared by
//!   every store in it. Migrations run under `GET_LOCK` (one lock per database), so two nodes
//!   starting together do not both run them; DDL commits on its own there, so the version is
//!   recorded after each migration, and a migration interrupted midway runs again whole (each
//!   must be safe to repeat: `IF NOT EXISTS`, or a look before the change).
//!
//! Why our own runner rather than the `rusqlite_migration` crate (which also keeps the version
//! in `user_version`): the MariaDB stores need the same list of migrations and the same rules
//! (a newer store refused, a store made before versions adopted), which that crate does not
//! cover, and the runner for SQLite is some forty lines on top of the shared plan. One
//! definition of a store's versions for both engines is worth more than the crate's
//! conveniences (migrations from files, a schema validation helper).

mod mysql;
mod sqlite;

pub use mysql::{LOCK_WAIT, MysqlFuture, MysqlUp, VERSION_TABLE, migrate_mysql};
pub use sqlite::{SqliteUp, migrate_sqlite};

#[cfg(doc)]
use crate::{mysql::MysqlError, sqlite::SqliteError};

/// One migration, or one adoption step: what it does (for logs and docs) and how (an SQL
/// batch or a function on the connection, per engine: [`SqliteUp`], [`MysqlUp`]).
#[derive(Debug)]
pub struct Step<Up: 'static> {
    /// What the step does, in a few words ("add raw_day.pending_since_ms").
    pub what: &'static str,
    /// How.
    pub up: Up,
}

/// A store's versions (see the module docs).
#[derive(Debug)]
pub struct Versions<Up: 'static> {
    /// The store's name in messages and logs; on MariaDB also its key in
    /// `tidemark_schema_version` (at most 64 bytes).
    pub store: &'static str,
    /// Tables of the store: with no version recorded, any of them there means the store was
    /// made before versions were recorded.
    pub marks: &'static [&'static str],
    /// `migrations[i]` takes the store from version `i` to `i + 1`; at least one.
    pub migrations: &'static [Step<Up>],
    /// The steps that bring a store made before versions were recorded to version 1, run after
    /// migration 1 (see the module docs).
    pub adopt: &'static [Step<Up>],
}

/// What a store records before it is migrated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No version, and none of the store's tables: a new store.
    New,
    /// No version, but tables of the store: made before versions were recorded.
    Unversioned,
    /// This version.
    Version(i64),
}

/// A step to run, and the version to record once it ran (`None`: record nothing yet, the
/// store is not at a version until the following steps ran too).
pub(crate) type Planned<'a, Up> = (&'a Step<Up>, Option<i64>);

/// The version a store at `found` has, where known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooNew {
    /// The store's version.
    pub(crate) found: i64,
}

impl<Up> Versions<Up> {
    /// The version this build brings the store to: the number of migrations.
    pub fn known(&self) -> i64 {
        self.migrations.len() as i64
    }

    /// The steps that bring a store at `found` to [`Versions::known`], in order.
    pub(crate) fn plan(&self, found: Found) -> Result<Vec<Planned<'_, Up>>, TooNew> {
        let numbered = |from: usize| {
            self.migrations
                .iter()
                .enumerate()
                .skip(from)
                .map(|(i, m)| (m, Some(i as i64 + 1)))
        };
        Ok(match found {
            Found::New => numbered(0).collect(),
            Found::Unversioned => {
                let Some((first, rest)) = self.migrations.split_first() else {
                    return Ok(Vec::new());
                };
                let adopted = self.adopt.len();
                let mut steps = vec![(first, (adopted == 0).then_some(1))];
                steps.extend(
                    self.adopt
                        .iter()
                        .enumerate()
                        .map(|(i, s)| (s, (i + 1 == adopted).then_some(1))),
                );
                steps.extend(
                    rest.iter()
                        .enumerate()
                        .map(|(i, m)| (m, Some(i as i64 + 2))),
                );
                steps
            }
            Found::Version(v) if v < 0 || v > self.known() => return Err(TooNew { found: v }),
            Found::Version(v) => numbered(v as usize).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn step(what: &'static str) -> Step<()> {
        Step { what, up: () }
    }

    static THREE: Versions<()> = Versions {
        store: "t",
        marks: &["t"],
        migrations: &[step("one"), step("two"), step("three")],
        adopt: &[step("a"), step("b")],
    };

    fn names(plan: Result<Vec<Planned<'_, ()>>, TooNew>) -> Vec<(&'static str, Option<i64>)> {
        plan.unwrap()
            .into_iter()
            .map(|(s, v)| (s.what, v))
            .collect()
    }

    #[test]
    fn a_store_runs_the_migrations_above_its_version_and_adoption_after_the_first() {
        assert_eq!(THREE.known(), 3);
        assert_eq!(
            names(THREE.plan(Found::New)),
            [("one", Some(1)), ("two", Some(2)), ("three", Some(3))]
        );
        assert_eq!(
            names(THREE.plan(Found::Unversioned)),
            [
                ("one", None),
                ("a", None),
                ("b", Some(1)),
                ("two", Some(2)),
                ("three", Some(3))
            ]
        );
        assert_eq!(
            names(THREE.plan(Found::Version(1))),
            [("two", Some(2)), ("three", Some(3))]
        );
        assert_eq!(names(THREE.plan(Found::Version(3))), []);
        assert_eq!(
            THREE.plan(Found::Version(4)).unwrap_err(),
            TooNew { found: 4 }
        );
        assert_eq!(
            THREE.plan(Found::Version(-1)).unwrap_err(),
            TooNew { found: -1 }
        );
    }

    #[test]
    fn without_adoption_steps_the_first_migration_records_version_1() {
        static ONE: Versions<()> = Versions {
            store: "t",
            marks: &["t"],
            migrations: &[step("one")],
            adopt: &[],
        };
        assert_eq!(names(ONE.plan(Found::Unversioned)), [("one", Some(1))]);
    }
}
