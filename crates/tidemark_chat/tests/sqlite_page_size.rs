//! `hot.db`'s page size ([`tidemark_chat::sqlite::HOT_PAGE_SIZE`]): a new file gets 1 KiB
//! pages, a file made before with 4 KiB pages keeps them, and both hold every body size up to
//! the 64 KiB limit whole (a body over a page spills into overflow pages).

use std::path::Path;
use std::sync::Arc;

use tidemark_chat::model::{MessageClass, SendCommand, SendOutcome};
use tidemark_chat::ports::{CommitParams, FusedCommit, HotStore};
use tidemark_chat::sqlite::{HOT_PAGE_SIZE, SqliteHot};
use tidemark_core::clock::{ManualClock, SharedClock};

const T0: i64 = 1_800_000_000_000;

fn page_size(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap()
}

/// Sends bodies of 1 B to 64 KiB into one conversation and reads them back from a reopened
/// store: every body whole, seqs 1..=n.
async fn bodies_round_trip(path: &Path) {
    let clock: SharedClock = Arc::new(ManualClock::new(T0));
    let params = CommitParams {
        dedup_window_ms: 60_000,
        hot_window_ms: 3_600_000,
    };
    let sizes = [1, 700, 1_000, 1_024, 3_000, 4_096, 20_000, 65_536];
    let bodies: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let letter = char::from(b'a' + i as u8);
            std::iter::repeat_n(letter, n).collect()
        })
        .collect();
    let hot = SqliteHot::open(path, 64).unwrap();
    let cid = "c-1".to_string();
    hot.create_conversation("t1", &cid, &["u1".into(), "u2".into()], None, T0)
        .await
        .unwrap();
    for (i, body) in bodies.iter().enumerate() {
        let cmd = SendCommand {
            tenant: "t1".into(),
            conversation_id: cid.clone(),
            sender: "u1".into(),
            client_msg_id: format!("k{i}"),
            body: body.clone(),
            class: MessageClass::Standard,
        };
        let outcome = hot.commit_fused(cmd, &clock, params, true).await.unwrap();
        assert!(matches!(outcome, SendOutcome::Committed(_)), "{outcome:?}");
    }
    drop(hot);

    let hot = SqliteHot::open(path, 64).unwrap();
    let slice = hot.hot_slice("t1", &cid, 1, 100, T0).await.unwrap();
    let seqs: Vec<u64> = slice.records.iter().map(|r| r.conversation_seq).collect();
    let expected: Vec<u64> = (1..=sizes.len() as u64).collect();
    assert_eq!(seqs, expected);
    let read: Vec<&str> = slice.records.iter().map(|r| r.body.as_str()).collect();
    let sent: Vec<&str> = bodies.iter().map(String::as_str).collect();
    assert_eq!(read, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_hot_file_has_small_pages_and_holds_every_body_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.db");
    bodies_round_trip(&path).await;
    assert_eq!(page_size(&path), i64::from(HOT_PAGE_SIZE));
    assert_eq!(HOT_PAGE_SIZE, 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_file_made_with_4_kib_pages_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.db");
    // An empty file with SQLite's default 4 KiB pages, in WAL.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "page_size", 4096).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE earlier (v INTEGER)")
        .unwrap();
    drop(conn);
    bodies_round_trip(&path).await;
    assert_eq!(page_size(&path), 4096);
}
