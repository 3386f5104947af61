//! Shared harness of the chat integration tests.
//!
//! A [`Harness`] runs the real SQLite backends, or ([`Harness::production`]) a private durable
//! `redis-server` as hot store, a scratch database on the machine's MariaDB as archive and the
//! SQLite outbox file a Redis hot store uses without a Kafka URL; the same tests run on both.
//! Files live in a fresh temporary directory (`hot.db` + `archive.db`, or `outbox.db`); all
//! run under an injected [`ManualClock`], so hot windows, watermarks and TTLs are tested
//! by moving the clock, never by sleeping. Workers are driven by hand: [`Harness::archiver`] and
//! [`Harness::trimmer`] build the real [`Archiver`] and [`Trimmer`], and the tests call their
//! `run_once` directly. Raw helpers look at the stores behind the server's back: the same SQL
//! on the SQLite file or on MariaDB, and the Redis hash of the conversation.

// Every test binary compiles this module but uses only part of it; items are `pub` for the
// test files, not for export.
#![allow(dead_code, unreachable_pub, unused_macros)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, params};
use sqlx::Row;
use sqlx::mysql::MySqlPool;
use tempfile::TempDir;
use tidemark_chat::archiver::Archiver;
use tidemark_chat::commit::CommitPath;
use tidemark_chat::leases::ShardLeases;
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, MessageRecord, SendAck, SendCommand, SendOutcome};
use tidemark_chat::ports::{Archive, HotStore, Outbox};
use tidemark_chat::reads::Anchor;
use tidemark_chat::redis::RedisHot;
use tidemark_chat::service::NewConversation;
use tidemark_chat::sqlite::{SqliteArchive, SqliteHot};
use tidemark_chat::testing::{FaultyArchive, MariadbServer, RedisServer};
use tidemark_chat::trimmer::{TrimOutcome, Trimmer};
use tidemark_chat::{ChatConfig, ChatService, ChatStores};
use tidemark_core::clock::{ManualClock, SharedClock};
use tidemark_core::mysql::{drop_database, scratch_database, test_server_url};

/// Defines a test module `$name` with two tests, `embedded` and `production`, each running
/// `$scenario(harness)` on a fresh [`Harness`] of that kind built from `$cfg`:
/// `on_every_backend!(#[tokio::test] name, small_windows(), name_on);`
macro_rules! on_every_backend {
    ($(#[$meta:meta])* $name:ident, $cfg:expr, $scenario:ident) => {
        mod $name {
            use super::*;
            $(#[$meta])*
            async fn embedded() {
                $scenario(Harness::embedded($cfg).await).await;
            }
            $(#[$meta])*
            async fn production() {
                $scenario(Harness::production($cfg).await).await;
            }
        }
    };
}

/// The tenant every test works in.
pub const TENANT: &str = "acme";

/// Where the manual clock starts: 2026-01-01T00:00:00Z.
pub const START_MS: i64 = 1_767_225_600_000;

/// Small windows so that trimming takes seconds of manual time:
/// hot window 10 s, recovery window 1 s, safety margin 0.5 s.
pub fn small_windows() -> ChatConfig {
    ChatConfig {
        hot_window: Duration::from_secs(10),
        outbox_recovery_window: Duration::from_secs(1),
        safety_margin: Duration::from_millis(500),
        archive_batch_max: 100,
        trim_batch: 64,
        ..ChatConfig::default()
    }
}

/// `d` in ms.
pub fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

/// How the ports are wired.
#[derive(Debug, Clone)]
enum ArchiveWiring {
    /// `ChatStores::open_embedded`.
    Embedded,
    /// The same SQLite files wired by hand, the archive wrapped in a [`FaultyArchive`].
    Faulty,
    /// `ChatStores::open` with `chat.hot` = the Redis, `chat.archive` = the MariaDB database.
    Production(Arc<Production>),
}

/// The servers of a production harness; they outlive restarts of the service.
#[derive(Debug)]
pub struct Production {
    /// The private durable redis-server.
    pub redis: RedisServer,
    /// URL of the scratch MariaDB database.
    pub mysql: String,
    /// A pool on it, to look behind the archive's back.
    pub pool: MySqlPool,
    /// The private MariaDB server the database lives on, if not the machine's shared one.
    pub mariadb: Option<std::sync::Mutex<MariadbServer>>,
}

impl Drop for Production {
    fn drop(&mut self) {
        if self.mariadb.is_some() {
            return; // the private server and its data directory go with it
        }
        // Drop is not async: drop the scratch database from a thread of its own.
        let url = self.mysql.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(drop_database(&url)))
        })
        .join();
    }
}

/// A chat service on real SQLite files in a temporary directory, with a manual clock.
#[derive(Debug)]
pub struct Harness {
    /// Kept alive (and deleted) with the harness; survives [`Harness::restart`].
    pub dir: TempDir,
    /// The injected clock; tests move it.
    pub clock: Arc<ManualClock>,
    /// The configuration in force.
    pub cfg: ChatConfig,
    /// Metrics shared by the service, the archivers and the trimmers of this harness.
    pub metrics: ChatMetrics,
    /// The service under test.
    pub service: ChatService,
    /// The fault-injecting archive wrapper, if the harness was built with one.
    pub faulty: Option<Arc<FaultyArchive>>,
    wiring: ArchiveWiring,
}

impl Harness {
    /// `ChatStores::open_embedded` in a fresh directory, clock at [`START_MS`].
    pub async fn embedded(cfg: ChatConfig) -> Self {
        Self::open(
            tempfile::tempdir().expect("tempdir"),
            Arc::new(ManualClock::new(START_MS)),
            cfg,
            ArchiveWiring::Embedded,
        )
        .await
    }

    /// A private durable redis-server (hot store), a scratch MariaDB database (archive) and the
    /// Redis hot store's SQLite outbox file, opened through `ChatStores::open`.
    pub async fn production(cfg: ChatConfig) -> Self {
        let redis = RedisServer::start().expect("start redis-server");
        let mysql = scratch_database(&test_server_url(), "tm_chat_harness")
            .await
            .expect("scratch database");
        let pool = tidemark_core::mysql::connect(&mysql, 2)
            .await
            .expect("mysql pool");
        let production = Arc::new(Production {
            redis,
            mysql,
            pool,
            mariadb: None,
        });
        Self::open(
            tempfile::tempdir().expect("tempdir"),
            Arc::new(ManualClock::new(START_MS)),
            cfg,
            ArchiveWiring::Production(production),
        )
        .await
    }

    /// As [`Harness::production`], but the archive lives on a private MariaDB server that the
    /// test may kill and restart ([`Harness::kill_mariadb`], [`Harness::restart_mariadb`]).
    pub async fn production_with_private_mariadb(cfg: ChatConfig) -> Self {
        let redis = RedisServer::start().expect("start redis-server");
        let mariadb = MariadbServer::start().expect("start a private mariadbd");
        let mysql = mariadb.url("tidemark");
        let pool = tidemark_core::mysql::connect(&mysql, 2)
            .await
            .expect("mysql pool");
        let production = Arc::new(Production {
            redis,
            mysql,
            pool,
            mariadb: Some(std::sync::Mutex::new(mariadb)),
        });
        Self::open(
            tempfile::tempdir().expect("tempdir"),
            Arc::new(ManualClock::new(START_MS)),
            cfg,
            ArchiveWiring::Production(production),
        )
        .await
    }

    fn private_mariadb(&self) -> std::sync::MutexGuard<'_, MariadbServer> {
        match &self.wiring {
            ArchiveWiring::Production(p) => p
                .mariadb
                .as_ref()
                .expect("a harness with a private MariaDB")
                .lock()
                .expect("mariadb lock"),
            _ => panic!("a harness with a private MariaDB"),
        }
    }

    /// SIGKILLs the private MariaDB server.
    pub fn kill_mariadb(&self) {
        self.private_mariadb().kill();
    }

    /// Restarts the private MariaDB server on its data directory.
    pub fn restart_mariadb(&self) {
        self.private_mariadb().restart().expect("restart mariadbd");
    }

    /// Runs `scenario` on the embedded backends, then on the production ones.
    pub async fn on_every_backend<F, Fut>(cfg: ChatConfig, scenario: F)
    where
        F: Fn(Harness) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        scenario(Self::embedded(cfg.clone()).await).await;
        scenario(Self::production(cfg).await).await;
    }

    /// The embedded SQLite stores wired by hand, the archive wrapped in a [`FaultyArchive`].
    pub async fn with_faulty_archive(cfg: ChatConfig) -> Self {
        Self::open(
            tempfile::tempdir().expect("tempdir"),
            Arc::new(ManualClock::new(START_MS)),
            cfg,
            ArchiveWiring::Faulty,
        )
        .await
    }

    /// Opens `<dir>/chat/hot.db` and `<dir>/chat/archive.db`: through
    /// `ChatStores::open_embedded`, or wired by hand the same way with the archive wrapped.
    async fn open(
        dir: TempDir,
        clock: Arc<ManualClock>,
        cfg: ChatConfig,
        wiring: ArchiveWiring,
    ) -> Self {
        let shared: SharedClock = Arc::clone(&clock) as SharedClock;
        let (stores, faulty) = match &wiring {
            ArchiveWiring::Production(p) => {
                let cfg = ChatConfig {
                    hot: p.redis.url(),
                    archive: p.mysql.clone(),
                    ..cfg.clone()
                };
                (
                    ChatStores::open(dir.path(), &cfg)
                        .await
                        .expect("open production stores"),
                    None,
                )
            }
            ArchiveWiring::Embedded => (
                ChatStores::open_embedded(dir.path(), &cfg).expect("open embedded stores"),
                None,
            ),
            ArchiveWiring::Faulty => {
                let chat = dir.path().join("chat");
                std::fs::create_dir_all(&chat).expect("chat dir");
                let hot = Arc::new(
                    SqliteHot::open(&chat.join("hot.db"), cfg.commit_batch_max).expect("hot.db"),
                );
                let inner: Arc<dyn Archive> =
                    Arc::new(SqliteArchive::open(&chat.join("archive.db")).expect("archive.db"));
                let faulty = Arc::new(FaultyArchive::new(inner));
                let stores = ChatStores {
                    commit_path: CommitPath::Fused {
                        store: Arc::clone(&hot) as _,
                        with_outbox: true,
                    },
                    outbox: Some(Arc::clone(&hot) as Arc<dyn Outbox>),
                    archive: Some(Arc::clone(&faulty) as Arc<dyn Archive>),
                    hot,
                };
                (stores, Some(faulty))
            }
        };
        let metrics = ChatMetrics::unregistered();
        let service = ChatService::new(stores, shared, cfg.clone(), metrics.clone());
        Self {
            dir,
            clock,
            cfg,
            metrics,
            service,
            faulty,
            wiring,
        }
    }

    /// A "restart": drops the service and every store handle (the SQLite writers shut down),
    /// then opens the same directory again. The clock keeps its time.
    pub async fn restart(self) -> Self {
        let Self {
            dir,
            clock,
            cfg,
            service,
            faulty,
            wiring,
            ..
        } = self;
        drop(service);
        drop(faulty);
        Self::open(dir, clock, cfg, wiring).await
    }

    /// The data directory (`<dir>/chat/hot.db`, `<dir>/chat/archive.db`).
    pub fn chat_dir(&self) -> PathBuf {
        self.dir.path().join("chat")
    }

    /// The clock as the components take it.
    pub fn shared_clock(&self) -> SharedClock {
        Arc::clone(&self.clock) as SharedClock
    }

    /// Now, in Unix ms.
    pub fn now(&self) -> i64 {
        use tidemark_core::clock::Clock;
        self.clock.now_ms()
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: i64) {
        self.clock.advance(ms);
    }

    /// The hot store port.
    pub fn hot(&self) -> Arc<dyn HotStore> {
        Arc::clone(&self.service.stores().hot)
    }

    /// The outbox port.
    pub fn outbox(&self) -> Arc<dyn Outbox> {
        Arc::clone(self.service.stores().outbox.as_ref().expect("tiered mode"))
    }

    /// The archive port (the faulty wrapper if there is one).
    pub fn archive(&self) -> Arc<dyn Archive> {
        Arc::clone(self.service.stores().archive.as_ref().expect("tiered mode"))
    }

    /// A real archiver over this harness's stores (applies the start rule).
    pub async fn archiver(&self) -> Archiver {
        Archiver::start(
            0,
            self.outbox(),
            self.archive(),
            self.hot(),
            self.shared_clock(),
            self.cfg.archive_batch_max,
            self.metrics.clone(),
        )
        .await
        .expect("archiver start rule")
    }

    /// The watermark T of the whole outbox ([`tidemark_chat::archiver::watermark`]).
    pub async fn watermark(&self) -> Option<i64> {
        let published = self.hot().watermarks().await.expect("watermarks");
        tidemark_chat::archiver::watermark(&published, self.outbox().partitions())
    }

    /// A real trimmer over this harness's stores, sharing the harness's metrics.
    pub fn trimmer(&self) -> Trimmer {
        let s = self.service.stores();
        Trimmer::new(
            self.hot(),
            s.outbox.clone(),
            s.archive.clone(),
            self.shared_clock(),
            self.cfg.clone(),
            self.metrics.clone(),
        )
        .with_leases(self.leases())
    }

    /// The harness's shard leases: one holder name for all its trimmers and recovery workers,
    /// across restarts too, as one node's.
    pub fn leases(&self) -> ShardLeases {
        ShardLeases::new(self.hot(), self.cfg.shard_lease).with_holder("harness")
    }

    /// Runs a fresh archiver until the outbox is drained; returns how many records it wrote.
    pub async fn archive_all(&self) -> usize {
        let mut archiver = self.archiver().await;
        let mut total = 0;
        loop {
            let out = archiver.run_once().await.expect("archiver batch");
            total += out.archived;
            if out.archived == 0 {
                assert!(out.watermark_published, "a drained archiver publishes T");
                return total;
            }
        }
    }

    /// One trimmer pass.
    pub async fn trim(&self) -> TrimOutcome {
        self.trimmer().run_once().await.expect("trimmer pass")
    }

    /// The shortest wait after a commit before an archiver run whose watermark T lets the
    /// trimmer take that commit: recovery window + safety margin + 1 ms (T is exclusive).
    pub fn margins_ms(&self) -> i64 {
        ms(self.cfg.outbox_recovery_window) + ms(self.cfg.safety_margin) + 1
    }

    /// Makes everything committed so far leave the hot tier: waits out the margins
    /// ([`Harness::margins_ms`]), archives everything (T = now), waits out the hot window,
    /// trims. Returns how many records were trimmed.
    pub async fn archive_and_trim_everything(&self) -> usize {
        self.advance(self.margins_ms());
        self.archive_all().await;
        self.advance(ms(self.cfg.hot_window));
        self.trim().await.trimmed
    }

    /// Creates a conversation between `members`.
    pub async fn conversation(&self, members: &[&str]) -> String {
        self.service
            .create_conversation(
                TENANT,
                NewConversation {
                    members: members.iter().map(|m| (*m).to_owned()).collect(),
                    listing_id: Some(42),
                    client_conversation_id: None,
                    key_owner: None,
                },
            )
            .await
            .expect("create conversation")
            .conversation_id
    }

    /// SEND of a standard message.
    pub async fn send(
        &self,
        cid: &str,
        sender: &str,
        client_msg_id: &str,
        body: &str,
    ) -> SendOutcome {
        self.send_class(cid, sender, client_msg_id, body, MessageClass::Standard)
            .await
    }

    /// SEND of a message of `class`.
    pub async fn send_class(
        &self,
        cid: &str,
        sender: &str,
        client_msg_id: &str,
        body: &str,
        class: MessageClass,
    ) -> SendOutcome {
        self.service
            .send(command(cid, sender, client_msg_id, body, class))
            .await
            .expect("send")
    }

    /// SEND that must commit a new message; returns its record.
    pub async fn commit(
        &self,
        cid: &str,
        sender: &str,
        client_msg_id: &str,
        body: &str,
    ) -> MessageRecord {
        committed(self.send(cid, sender, client_msg_id, body).await)
    }

    /// The conversation's floor F.
    pub async fn floor(&self, cid: &str) -> u64 {
        self.service
            .conversation(TENANT, cid)
            .await
            .expect("conversation")
            .floor
    }

    /// The whole history of a conversation through `ChatService::history`, oldest first,
    /// read in pages of 200 with `After` anchors.
    pub async fn full_history(&self, cid: &str) -> Vec<MessageRecord> {
        let members = self
            .service
            .conversation(TENANT, cid)
            .await
            .unwrap()
            .members;
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .service
                .history(TENANT, cid, &members[0], Anchor::After(after), 200)
                .await
                .expect("history page");
            out.extend(page.messages);
            after += 200;
            if after >= page.latest_seq {
                return out;
            }
        }
    }

    /// A read-write connection to `<dir>/chat/<file>`, behind the server's back.
    pub fn raw(&self, file: &str) -> Connection {
        raw_connection(&self.chat_dir().join(file))
    }

    /// Runs `sql` (the same text on SQLite and MariaDB, `?` placeholders bound to `args`)
    /// against the archive and returns the first column of every row as integers.
    async fn archive_ints(&self, sql: &str, args: &[&str]) -> Vec<i64> {
        match &self.wiring {
            ArchiveWiring::Production(p) => {
                let mut q = sqlx::query(sql);
                for a in args {
                    q = q.bind(*a);
                }
                q.fetch_all(&p.pool)
                    .await
                    .expect("archive query")
                    .iter()
                    .map(|r| {
                        r.try_get::<i64, _>(0)
                            .or_else(|_| r.try_get::<u64, _>(0).map(|v| v as i64))
                            .expect("integer column")
                    })
                    .collect()
            }
            _ => {
                let conn = self.raw("archive.db");
                let mut stmt = conn.prepare(sql).expect("prepare");
                stmt.query_map(rusqlite::params_from_iter(args), |r| r.get::<_, i64>(0))
                    .expect("query")
                    .map(|v| v.expect("row"))
                    .collect()
            }
        }
    }

    /// Seqs of the conversation in the archive: `(message_record, history_index)`, ascending,
    /// with duplicates kept (so "exactly once" can be checked).
    pub async fn archived_seqs(&self, cid: &str) -> (Vec<u64>, Vec<u64>) {
        let mut out = Vec::new();
        for table in ["message_record", "history_index"] {
            let sql = format!(
                "SELECT conversation_seq FROM {table}
                 WHERE tenant = ? AND conversation_id = ? ORDER BY conversation_seq"
            );
            let seqs = self.archive_ints(&sql, &[TENANT, cid]).await;
            out.push(seqs.into_iter().map(|s| s as u64).collect::<Vec<u64>>());
        }
        let index = out.pop().unwrap_or_default();
        (out.pop().unwrap_or_default(), index)
    }

    /// Number of `(message_record, history_index)` rows in the whole archive.
    pub async fn archive_row_counts(&self) -> (u64, u64) {
        let records = self
            .archive_ints("SELECT count(*) FROM message_record", &[])
            .await;
        let index = self
            .archive_ints("SELECT count(*) FROM history_index", &[])
            .await;
        (records[0] as u64, index[0] as u64)
    }

    /// Unexpired index entries (at the harness's clock) whose record is missing from the
    /// archive (must always be 0; an expired ephemeral message's entry is a tombstone).
    pub async fn orphan_index_entries(&self) -> u64 {
        let sql = format!(
            "SELECT count(*) FROM history_index i
             WHERE (i.expires_at IS NULL OR i.expires_at > {}) AND NOT EXISTS (
                 SELECT 1 FROM message_record r
                 WHERE r.tenant = i.tenant AND r.conversation_id = i.conversation_id
                   AND r.conversation_seq = i.conversation_seq
                   AND r.message_id = i.message_id)",
            self.now()
        );
        self.archive_ints(&sql, &[]).await[0] as u64
    }

    /// Seqs of the conversation still held in the hot tier (any state), ascending.
    pub async fn hot_seqs(&self, cid: &str) -> Vec<u64> {
        if let ArchiveWiring::Production(p) = &self.wiring {
            let hot = RedisHot::connect(&p.redis.url(), 1).await.expect("redis");
            return hot.held_seqs(TENANT, cid).await.expect("held seqs");
        }
        let conn = self.raw("hot.db");
        let mut stmt = conn
            .prepare(
                "SELECT conversation_seq FROM message
                 WHERE tenant = ?1 AND conversation_id = ?2 ORDER BY conversation_seq",
            )
            .expect("prepare");
        stmt.query_map(params![TENANT, cid], |r| r.get::<_, i64>(0))
            .expect("query")
            .map(|s| s.expect("row") as u64)
            .collect()
    }

    /// Deletes one archived message record behind the server's back (its index entry stays).
    pub async fn delete_archived_record(&self, cid: &str, seq: u64) {
        let n = self.delete_from_archive(cid, seq, "message_record").await;
        assert_eq!(n, 1, "seq {seq} was in the archive");
    }

    /// Deletes one history-index entry behind the server's back (its record stays).
    pub async fn delete_index_entry(&self, cid: &str, seq: u64) {
        let n = self.delete_from_archive(cid, seq, "history_index").await;
        assert_eq!(n, 1, "seq {seq} was indexed");
    }

    /// Deletes the rows of `seq` from the archive's `table` (`archive.db` embedded, MariaDB in
    /// production); returns how many went.
    async fn delete_from_archive(&self, cid: &str, seq: u64, table: &str) -> usize {
        let sql = format!(
            "DELETE FROM {table} WHERE tenant = ? AND conversation_id = ? AND conversation_seq = ?"
        );
        match &self.wiring {
            ArchiveWiring::Production(p) => sqlx::query(&sql)
                .bind(TENANT)
                .bind(cid)
                .bind(seq)
                .execute(&p.pool)
                .await
                .expect("delete")
                .rows_affected() as usize,
            _ => self
                .raw("archive.db")
                .execute(&sql, params![TENANT, cid, seq as i64])
                .expect("delete"),
        }
    }

    /// Deletes one record of the hot tier behind the server's back: on SQLite its `message`
    /// row, on Redis its field of the conversation's records hash.
    pub async fn delete_hot_record(&self, cid: &str, seq: u64) {
        let n: usize = match &self.wiring {
            ArchiveWiring::Production(p) => {
                let client = redis::Client::open(p.redis.url()).expect("redis url");
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("redis");
                redis::cmd("HDEL")
                    .arg(tidemark_chat::redis::keys::records_key(TENANT, cid))
                    .arg(seq)
                    .query_async(&mut conn)
                    .await
                    .expect("HDEL")
            }
            _ => self
                .raw("hot.db")
                .execute(
                    "DELETE FROM message
                     WHERE tenant = ?1 AND conversation_id = ?2 AND conversation_seq = ?3",
                    params![TENANT, cid, seq as i64],
                )
                .expect("delete"),
        };
        assert_eq!(n, 1, "seq {seq} was hot");
    }
}

/// A raw connection with a busy timeout (the server's writer may hold the file briefly).
pub fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open sqlite file");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

/// A SEND command in [`TENANT`].
pub fn command(
    cid: &str,
    sender: &str,
    client_msg_id: &str,
    body: &str,
    class: MessageClass,
) -> SendCommand {
    SendCommand {
        tenant: TENANT.to_owned(),
        conversation_id: cid.to_owned(),
        sender: sender.to_owned(),
        client_msg_id: client_msg_id.to_owned(),
        body: body.to_owned(),
        class,
    }
}

/// The record of a fresh commit; panics on a duplicate.
pub fn committed(outcome: SendOutcome) -> MessageRecord {
    match outcome {
        SendOutcome::Committed(r) => r,
        SendOutcome::Duplicate(ack) => panic!("expected a new commit, got a duplicate {ack:?}"),
    }
}

/// The ACK of a retry; panics on a fresh commit.
pub fn duplicate(outcome: SendOutcome) -> SendAck {
    match outcome {
        SendOutcome::Duplicate(ack) => ack,
        SendOutcome::Committed(r) => panic!("expected a duplicate, got a new commit {r:?}"),
    }
}

/// The seqs of a list of records, in order.
pub fn seqs(records: &[MessageRecord]) -> Vec<u64> {
    records.iter().map(|r| r.conversation_seq).collect()
}
