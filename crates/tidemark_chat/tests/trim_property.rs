//! Property tests of the trimmer against the archiver (DESIGN.md part A,
//! "Trimmer" and principle 2 "never delete what is not safely elsewhere"), over random
//! interleavings of sends, archiver batches, trimmer passes and clock advances on the real
//! SQLite stores with a manual clock.

mod common;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::Duration;

use common::{Harness, TENANT, command, small_windows};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tidemark_chat::ChatConfig;
use tidemark_chat::model::{MessageClass, MessageRecord, SendOutcome};

/// Conversations per case.
const CONVERSATIONS: usize = 3;

/// Short windows (hot 3 s, recovery 0.5 s, margin 0.25 s) and tiny batches, so that a short
/// random sequence trims, and archiver and trimmer batches split.
fn config() -> ChatConfig {
    ChatConfig {
        hot_window: Duration::from_secs(3),
        outbox_recovery_window: Duration::from_millis(500),
        safety_margin: Duration::from_millis(250),
        archive_batch_max: 4,
        trim_batch: 3,
        ..small_windows()
    }
}

/// One step of an interleaving.
#[derive(Debug, Clone)]
enum Op {
    /// A new message into conversation `conv` from member `sender` (0 or 1).
    Send { conv: usize, sender: usize },
    /// A retry of the `nth` message sent so far (modulo their number).
    Retry { nth: usize },
    /// One archiver batch.
    Archive,
    /// One trimmer pass.
    Trim,
    /// Moves the clock forward by this many ms.
    Advance(i64),
    /// Drops the service, stores and workers and opens the same files again, with this hot
    /// window (ms): raised or lowered, it must never let an unarchived message be trimmed.
    Restart(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..CONVERSATIONS, 0..2usize).prop_map(|(conv, sender)| Op::Send { conv, sender }),
        1 => any::<usize>().prop_map(|nth| Op::Retry { nth }),
        2 => Just(Op::Archive),
        2 => Just(Op::Trim),
        3 => (0..2_500i64).prop_map(Op::Advance),
        1 => prop_oneof![Just(1_000u64), Just(3_000), Just(6_000)].prop_map(Op::Restart),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

const MEMBERS: [&str; 2] = ["buyer", "seller"];

/// What the test knows was acknowledged: per conversation, the records by seq (index seq − 1).
#[derive(Debug, Default)]
struct Model {
    conversations: Vec<String>,
    records: HashMap<String, Vec<MessageRecord>>,
    sent: Vec<MessageRecord>,
}

/// After every step: each conversation's hot tier holds every seq of `F+1..=latest`; every seq
/// up to F is in the archive (record and index entry, once, equal to what was acknowledged);
/// no index entry lacks its record; and `ChatService::history` returns every seq `1..=latest`
/// exactly once with the acknowledged content. (The hot tier may also hold seqs at or below F
/// after the hot window was lowered: a later message scored with the smaller window leaves
/// first and raises F. Reads take those seqs from the archive, and the trimmer removes them
/// when their own score is due.)
async fn check_invariants(h: &Harness, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(h.orphan_index_entries().await, 0);
    for cid in &model.conversations {
        let expected = &model.records[cid];
        let latest = expected.len() as u64;
        let floor = h.floor(cid).await;
        let hot = h.hot_seqs(cid).await;
        let above_floor: Vec<u64> = hot.iter().copied().filter(|s| *s > floor).collect();
        prop_assert_eq!(&above_floor, &(floor + 1..=latest).collect::<Vec<_>>());

        let (records, index) = h.archived_seqs(cid).await;
        let trimmed: Vec<u64> = (1..=floor).collect();
        for s in &trimmed {
            prop_assert_eq!(
                records.iter().filter(|r| *r == s).count(),
                1,
                "record {}",
                s
            );
            prop_assert_eq!(index.iter().filter(|r| *r == s).count(), 1, "index {}", s);
        }
        let mut from_archive = h
            .archive()
            .records(TENANT, cid, &trimmed)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        from_archive.sort_by_key(|r| r.conversation_seq);
        let want: Vec<MessageRecord> = trimmed
            .iter()
            .map(|s| expected[*s as usize - 1].clone())
            .collect();
        prop_assert_eq!(from_archive, want);

        let history = h.full_history(cid).await;
        prop_assert_eq!(&history, expected);
    }
    Ok(())
}

async fn run_interleaving(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut h = Harness::embedded(config()).await;
    let mut model = Model::default();
    for _ in 0..CONVERSATIONS {
        let cid = h.conversation(&MEMBERS).await;
        model.records.insert(cid.clone(), Vec::new());
        model.conversations.push(cid);
    }
    let mut archiver = h.archiver().await;
    let mut trimmer = h.trimmer();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Send { conv, sender } => {
                let cid = model.conversations[conv].clone();
                let cmid = format!("m{step}");
                let cmd = command(
                    &cid,
                    MEMBERS[sender],
                    &cmid,
                    &format!("body {step}"),
                    MessageClass::Standard,
                );
                let record = match h.service.send(cmd).await {
                    Ok(SendOutcome::Committed(r)) => r,
                    other => return Err(TestCaseError::fail(format!("send: {other:?}"))),
                };
                let list = model.records.get_mut(&cid).expect("known conversation");
                prop_assert_eq!(record.conversation_seq, list.len() as u64 + 1);
                list.push(record.clone());
                model.sent.push(record);
            }
            Op::Retry { nth } => {
                if model.sent.is_empty() {
                    continue;
                }
                let r = model.sent[nth % model.sent.len()].clone();
                let cmd = command(
                    &r.conversation_id,
                    &r.sender,
                    &r.client_msg_id,
                    "again",
                    r.class,
                );
                let outcome = h
                    .service
                    .send(cmd)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(outcome, SendOutcome::Duplicate(r.ack()));
            }
            Op::Archive => {
                archiver
                    .run_once()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("archiver: {e}")))?;
            }
            Op::Trim => {
                trimmer
                    .run_once()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("trimmer: {e}")))?;
            }
            Op::Advance(ms) => h.advance(ms),
            Op::Restart(hot_window_ms) => {
                drop((archiver, trimmer));
                h.cfg.hot_window = Duration::from_millis(hot_window_ms);
                h = h.restart().await;
                archiver = h.archiver().await;
                trimmer = h.trimmer();
            }
        }
        check_invariants(&h, &model).await?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The trimmer never removes a record that is not in the archive, F always splits the two
    /// tiers exactly, and full history reads stay complete, whatever the interleaving
    /// (restarts included).
    #[test]
    fn trimming_never_outruns_the_archive(ops in proptest::collection::vec(op(), 8..64)) {
        runtime().block_on(run_interleaving(ops))?;
    }
}

/// A step of the "archiver stopped" property.
#[derive(Debug, Clone)]
enum StalledOp {
    /// A new message into conversation `conv`.
    Send { conv: usize },
    /// Moves the clock forward by this many ms (up to two days).
    Advance(i64),
}

fn stalled_op() -> impl Strategy<Value = StalledOp> {
    prop_oneof![
        (0..CONVERSATIONS).prop_map(|conv| StalledOp::Send { conv }),
        (1..2 * 24 * 3_600_000i64).prop_map(StalledOp::Advance),
    ]
}

/// With the archiver never run: after every step a trimmer pass trims nothing (the hot tier
/// keeps every message, F stays 0, no watermark, an empty archive), and the archive-lag gauge
/// the pass sets is exactly the age in seconds of the oldest message, so it grows with the clock.
async fn run_stalled(ops: Vec<StalledOp>) -> Result<(), TestCaseError> {
    let h = Harness::embedded(config()).await;
    let mut cids = Vec::new();
    for _ in 0..CONVERSATIONS {
        cids.push(h.conversation(&MEMBERS).await);
    }
    let trimmer = h.trimmer();
    let mut sent = 0u64;
    let mut oldest: Option<i64> = None;
    let mut last_lag = 0i64;
    for (step, op) in ops.into_iter().enumerate() {
        let mut advanced = 0;
        match op {
            StalledOp::Send { conv } => {
                let cmd = command(
                    &cids[conv],
                    MEMBERS[step % 2],
                    &format!("m{step}"),
                    "x",
                    MessageClass::Standard,
                );
                h.service
                    .send(cmd)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                sent += 1;
                oldest.get_or_insert(h.now());
            }
            StalledOp::Advance(ms) => {
                h.advance(ms);
                advanced = ms;
            }
        }
        let out = trimmer
            .run_once()
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(out.trimmed, 0);
        prop_assert_eq!(
            h.hot()
                .hot_len()
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            sent
        );
        prop_assert_eq!(
            h.hot()
                .watermarks()
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?,
            BTreeMap::new()
        );
        for cid in &cids {
            prop_assert_eq!(h.floor(cid).await, 0);
        }
        prop_assert_eq!(h.archive_row_counts().await, (0, 0));

        let lag = h.metrics.archive_lag(0).get();
        let expected = oldest.map_or(0, |t| (h.now() - t) / 1000);
        prop_assert_eq!(lag, expected);
        prop_assert!(
            lag >= last_lag,
            "the lag never shrinks while the archiver is stopped"
        );
        if oldest.is_some() && advanced >= 1000 {
            prop_assert!(lag > last_lag, "the lag grows with the clock");
        }
        last_lag = lag;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// With the archiver stopped nothing is trimmed and the archive lag grows.
    #[test]
    fn stopped_archiver_stops_trimming_and_the_lag_grows(
        ops in proptest::collection::vec(stalled_op(), 1..24)
    ) {
        runtime().block_on(run_stalled(ops))?;
    }
}

/// The watermark T means "every message committed *before* T is archived" (DESIGN.md part A):
/// a message committed in T's own millisecond, after the archiver's snapshot, is not archived
/// yet. With a zero recovery window and a zero safety margin — nothing left between T and the
/// trim cutoff — the trimmer must still keep that message until the archiver has it, instead of
/// trimming it and leaving a silent gap in the history.
#[tokio::test]
async fn message_committed_in_the_watermark_millisecond_is_not_trimmed_unarchived() {
    let h = Harness::embedded(ChatConfig {
        outbox_recovery_window: Duration::ZERO,
        safety_margin: Duration::ZERO,
        ..small_windows()
    })
    .await;
    let cid = h.conversation(&MEMBERS).await;
    h.commit(&cid, "buyer", "m1", "archived").await;
    h.advance(1);
    let t = h.now();
    let mut archiver = h.archiver().await;
    let out = archiver.run_once().await.unwrap();
    assert_eq!((out.archived, out.watermark_published), (1, true));
    assert_eq!(h.watermark().await, Some(t));
    // Same millisecond as T, after the snapshot: not archived.
    let second = h.commit(&cid, "seller", "m2", "not yet archived").await;
    assert_eq!(second.committed_at_ms, t);
    assert_eq!(h.archived_seqs(&cid).await, (vec![1], vec![1]));

    h.advance(common::ms(h.cfg.hot_window));
    assert_eq!(h.trim().await.trimmed, 1);
    assert_eq!(h.floor(&cid).await, 1);
    assert_eq!(h.hot_seqs(&cid).await, vec![2]);
    assert_eq!(common::seqs(&h.full_history(&cid).await), vec![1, 2]);

    // Once archived (under a later T) it may go.
    assert_eq!(archiver.run_once().await.unwrap().archived, 1);
    assert_eq!(h.trim().await.trimmed, 1);
    assert_eq!(h.floor(&cid).await, 2);
    assert_eq!(common::seqs(&h.full_history(&cid).await), vec![1, 2]);
}
