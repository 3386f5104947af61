//! The staged commit path and the recovery worker (DESIGN.md part A "Commit path"), each test
//! on the embedded stores (SQLite hot store and outbox, staged) and on a private durable Redis
//! hot store with its SQLite outbox file: a crash between reserve and outbox append leaves a
//! RESERVED record that is invisible until recovery (or a retry) publishes and commits it,
//! exactly once.

#![allow(clippy::clone_on_ref_ptr)] // test wiring: Arc clones of concrete stores into trait objects

use std::sync::Arc;
use std::time::Duration;

use tidemark_chat::commit::{CommitPath, staged_commit};
use tidemark_chat::metrics::ChatMetrics;
use tidemark_chat::model::{MessageClass, Reservation, SendCommand, SendOutcome};
use tidemark_chat::ports::{HotStore, Outbox};
use tidemark_chat::reads::Anchor;
use tidemark_chat::recovery::Recovery;
use tidemark_chat::redis::RedisHot;
use tidemark_chat::sqlite::{SqliteArchive, SqliteHot};
use tidemark_chat::testing::RedisServer;
use tidemark_chat::{ChatConfig, ChatService, ChatStores};
use tidemark_core::clock::{ManualClock, SharedClock};

const START: i64 = 1_800_000_000_000;

struct Harness {
    _dir: tempfile::TempDir,
    _redis: Option<RedisServer>,
    clock: Arc<ManualClock>,
    hot: Arc<dyn HotStore>,
    outbox: Arc<dyn Outbox>,
    svc: ChatService,
    recovery: Recovery,
    cid: String,
}

/// The SQLite hot store and outbox (`hot.db`) on the staged path.
async fn sqlite() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let hot = Arc::new(SqliteHot::open(&dir.path().join("hot.db"), 64).unwrap());
    harness(dir, None, hot.clone(), hot).await
}

/// A private durable redis-server as hot store, `outbox.db` as outbox.
async fn redis() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start().unwrap();
    let hot = Arc::new(RedisHot::connect(&server.url(), 4).await.unwrap());
    let outbox = Arc::new(SqliteHot::open(&dir.path().join("outbox.db"), 64).unwrap());
    harness(dir, Some(server), hot, outbox).await
}

async fn harness(
    dir: tempfile::TempDir,
    redis: Option<RedisServer>,
    hot: Arc<dyn HotStore>,
    outbox: Arc<dyn Outbox>,
) -> Harness {
    let clock = Arc::new(ManualClock::new(START));
    let shared: SharedClock = clock.clone();
    let archive = Arc::new(SqliteArchive::open(&dir.path().join("archive.db")).unwrap());
    let stores = ChatStores {
        hot: hot.clone(),
        outbox: Some(outbox.clone()),
        archive: Some(archive),
        commit_path: CommitPath::Staged {
            hot: hot.clone(),
            outbox: outbox.clone(),
        },
    };
    let cfg = ChatConfig {
        outbox_recovery_window: Duration::from_secs(30),
        ..ChatConfig::default()
    };
    let metrics = ChatMetrics::unregistered();
    let svc = ChatService::new(stores, shared.clone(), cfg.clone(), metrics.clone());
    let recovery = Recovery::new(
        hot.clone(),
        outbox.clone(),
        shared,
        cfg.commit_params(),
        cfg.outbox_recovery_window,
        metrics,
    );
    let cid = svc
        .create_conversation(
            "t",
            tidemark_chat::service::NewConversation {
                members: vec!["a".into(), "b".into()],
                listing_id: None,
                client_conversation_id: None,
                key_owner: None,
            },
        )
        .await
        .unwrap()
        .conversation_id;
    Harness {
        _dir: dir,
        _redis: redis,
        clock,
        hot,
        outbox,
        svc,
        recovery,
        cid,
    }
}

/// Two tests per scenario: `sqlite` and `redis`.
macro_rules! on_both {
    ($name:ident, $scenario:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$scenario(super::sqlite().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$scenario(super::redis().await).await;
            }
        }
    };
}

fn cmd(cid: &str, key: &str) -> SendCommand {
    SendCommand {
        tenant: "t".into(),
        conversation_id: cid.into(),
        sender: "a".into(),
        client_msg_id: key.into(),
        body: format!("body {key}"),
        class: MessageClass::Standard,
    }
}

async fn visible_seqs(h: &Harness) -> Vec<u64> {
    let page = h
        .svc
        .history("t", &h.cid, "a", Anchor::Latest, 200)
        .await
        .unwrap();
    page.messages.iter().map(|m| m.conversation_seq).collect()
}

on_both!(
    staged_commit_publishes_before_it_acknowledges,
    staged_commit_publishes_before_it_acknowledges_on
);

async fn staged_commit_publishes_before_it_acknowledges_on(h: Harness) {
    let out = h.svc.send(cmd(&h.cid, "k1")).await.unwrap();
    let SendOutcome::Committed(rec) = &out else {
        panic!("{out:?}")
    };
    assert_eq!(rec.conversation_seq, 1);
    let outbox = h.outbox.fetch(0, 0, 10).await.unwrap();
    assert_eq!(outbox, vec![(0, rec.clone())]);
    assert_eq!(visible_seqs(&h).await, vec![1]);
    assert_eq!(
        h.svc.send(cmd(&h.cid, "k1")).await.unwrap(),
        SendOutcome::Duplicate(rec.ack())
    );
}

on_both!(
    a_crash_after_reserve_is_recovered_exactly_once,
    a_crash_after_reserve_is_recovered_exactly_once_on
);

async fn a_crash_after_reserve_is_recovered_exactly_once_on(h: Harness) {
    // The process "dies" right after step 1: reserved, never appended, never committed.
    let params = h.svc.config().commit_params();
    let Reservation::Reserved {
        record,
        fresh: true,
    } = h
        .hot
        .reserve(cmd(&h.cid, "lost"), START, params)
        .await
        .unwrap()
    else {
        panic!("expected a fresh reservation")
    };
    h.svc.send(cmd(&h.cid, "next")).await.unwrap();
    assert_eq!(
        visible_seqs(&h).await,
        vec![2],
        "a RESERVED record is not readable"
    );

    // Inside the recovery window nothing is touched; after it, the record is published once.
    h.clock.advance(29_000);
    assert_eq!(h.recovery.run_once().await.unwrap(), 0);
    h.clock.advance(2_000);
    assert_eq!(h.recovery.run_once().await.unwrap(), 1);
    assert_eq!(h.recovery.run_once().await.unwrap(), 0);
    assert_eq!(visible_seqs(&h).await, vec![1, 2]);
    let in_outbox: Vec<u64> = h
        .outbox
        .fetch(0, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|(_, r)| r.conversation_seq)
        .collect();
    assert_eq!(
        in_outbox,
        vec![2, 1],
        "published after the later message; the archiver tolerates reordering"
    );
    // The client's retry gets the ACK of the recovered record.
    assert_eq!(
        h.svc.send(cmd(&h.cid, "lost")).await.unwrap(),
        SendOutcome::Duplicate(record.ack())
    );
}

on_both!(
    a_retry_finishes_a_reserved_send_itself,
    a_retry_finishes_a_reserved_send_itself_on
);

async fn a_retry_finishes_a_reserved_send_itself_on(h: Harness) {
    let params = h.svc.config().commit_params();
    let Reservation::Reserved { record, .. } = h
        .hot
        .reserve(cmd(&h.cid, "k"), START, params)
        .await
        .unwrap()
    else {
        panic!("expected a reservation")
    };
    let shared: SharedClock = h.clock.clone();
    let out = staged_commit(
        h.hot.as_ref(),
        h.outbox.as_ref(),
        &shared,
        params,
        cmd(&h.cid, "k"),
    )
    .await
    .unwrap();
    assert_eq!(out, SendOutcome::Duplicate(record.ack()));
    assert_eq!(visible_seqs(&h).await, vec![1]);
    h.clock.advance(60_000);
    assert_eq!(
        h.recovery.run_once().await.unwrap(),
        0,
        "nothing left for recovery"
    );
    assert_eq!(h.outbox.offsets(0).await.unwrap(), (0, 1));
}
