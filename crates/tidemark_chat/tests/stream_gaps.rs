//! Live streams resumed from a position, on every backend: a client that resumes after
//! ephemeral messages expired is told which seqs it missed (`reload`), then gets the rest in
//! order; and what the user read on another device meanwhile still reaches this client.

#[macro_use]
mod common;

use std::time::Duration;

use common::*;
use tidemark_chat::commit::publish_and_commit;
use tidemark_chat::model::{MessageClass, Reservation};
use tidemark_chat::stream::{Position, StreamEvent, StreamRequest, open};

/// The gap patience of [`small_windows`]: twice its 1 s recovery window.
const PATIENCE_MS: i64 = 2_000;

/// bob's stream in `h`, from `since`.
async fn bobs_stream(h: &Harness, since: Position) -> tokio::sync::mpsc::Receiver<StreamEvent> {
    bobs_stream_from(h, Some(since)).await
}

/// bob's stream in `h`, from `since` or (`None`) from now.
async fn bobs_stream_from(
    h: &Harness,
    since: Option<Position>,
) -> tokio::sync::mpsc::Receiver<StreamEvent> {
    let req = StreamRequest {
        tenant: TENANT.into(),
        user: "bob".into(),
        conversations: None,
        since,
        until_s: None,
    };
    open(&h.service, req).await.unwrap().events
}

/// The next event within 10 s.
async fn next_event(rx: &mut tokio::sync::mpsc::Receiver<StreamEvent>) -> StreamEvent {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an event within 10 s")
        .expect("the stream is open")
}

/// `(conversation_id, seq)` of the message events among `events`.
fn delivered(events: &[StreamEvent]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Message { record, .. } => {
                Some((record.conversation_id.clone(), record.conversation_seq))
            }
            _ => None,
        })
        .collect()
}

/// An event's position.
fn position_of(e: &StreamEvent) -> &str {
    match e {
        StreamEvent::Message { position, .. }
        | StreamEvent::Read { position, .. }
        | StreamEvent::Reload { position, .. }
        | StreamEvent::Ready { position } => position,
    }
}

/// The events of a stream up to and including `ready`.
async fn until_ready(rx: &mut tokio::sync::mpsc::Receiver<StreamEvent>) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event within 10 s")
            .expect("the stream is open");
        let ready = matches!(e, StreamEvent::Ready { .. });
        out.push(e);
        if ready {
            return out;
        }
    }
}

/// Seqs 2 and 3 are ephemeral and expire; a client that got seq 1 resumes a day later.
async fn expired_messages_are_named_not_skipped(h: Harness) {
    let cid = h.conversation(&["ann", "bob"]).await;
    h.send(&cid, "ann", "m1", "standard").await;
    h.send_class(&cid, "ann", "m2", "gone", MessageClass::Ephemeral24h)
        .await;
    h.send_class(&cid, "bob", "m3", "gone", MessageClass::Ephemeral24h)
        .await;
    h.send(&cid, "bob", "m4", "standard").await;
    h.archive_all().await;
    h.advance(25 * 3_600_000);
    let since = Position::parse(&format!("v1;{cid}:1")).unwrap();
    let mut rx = bobs_stream(&h, since).await;
    let events = until_ready(&mut rx).await;
    match &events[..] {
        [
            StreamEvent::Reload {
                conversation_id,
                missed_from: 2,
                missed_to: 3,
                ..
            },
            StreamEvent::Message { record, position },
            StreamEvent::Ready { position: ready },
        ] => {
            assert_eq!(conversation_id, &cid);
            // Once replayed, seq 4, committed a day ago, is under the watermark: not named.
            assert_eq!(ready, &format!("v2;{}", h.now() - PATIENCE_MS));
            assert_eq!(
                (record.conversation_seq, record.body.as_str()),
                (4, "standard")
            );
            // Mid-replay from a `v1` position: every conversation delivered from is named.
            assert_eq!(position, &format!("v1;{cid}:4"));
        }
        other => panic!("{other:#?}"),
    }
    // From the start: seq 1, the missed seqs named, seq 4.
    let mut rx = bobs_stream(&h, Position::default()).await;
    let events = until_ready(&mut rx).await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            StreamEvent::Message { record, .. } => format!("m{}", record.conversation_seq),
            StreamEvent::Reload {
                missed_from,
                missed_to,
                ..
            } => format!("r{missed_from}-{missed_to}"),
            StreamEvent::Read { read_seq, .. } => format!("read{read_seq}"),
            StreamEvent::Ready { .. } => "ready".into(),
        })
        .collect();
    assert_eq!(kinds, ["m1", "r2-3", "m4", "ready"]);
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    expired_messages_are_named,
    small_windows(),
    expired_messages_are_named_not_skipped
);

/// bob reads on another device while this client is away: the client still gets what it
/// missed (a position that leant on the read pointer lost seqs 2 and 3 here).
async fn reads_elsewhere_take_nothing_from_this_client(h: Harness) {
    let cid = h.conversation(&["ann", "bob"]).await;
    h.send(&cid, "ann", "m1", "one").await;
    let mut rx = bobs_stream(&h, Position::default()).await;
    until_ready(&mut rx).await;
    h.service.mark_read(TENANT, &cid, "bob", 1).await.unwrap();
    let position = match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
        Ok(Some(StreamEvent::Read {
            position, read_seq, ..
        })) => {
            assert_eq!(read_seq, 1);
            position
        }
        other => panic!("{other:?}"),
    };
    drop(rx);
    h.send(&cid, "ann", "m2", "two").await;
    h.send(&cid, "ann", "m3", "three").await;
    h.service.mark_read(TENANT, &cid, "bob", 3).await.unwrap();
    let mut rx = bobs_stream(&h, Position::parse(&position).unwrap()).await;
    let seqs: Vec<u64> = until_ready(&mut rx)
        .await
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Message { record, .. } => Some(record.conversation_seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [2, 3], "after {position}");
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    reads_elsewhere,
    small_windows(),
    reads_elsewhere_take_nothing_from_this_client
);

/// A position ahead of the conversation (kept from before a reset) is named and clamped: the
/// next message is delivered; a stream whose token expires is cut.
async fn positions_ahead_are_clamped_and_streams_end_at_expiry(h: Harness) {
    let cid = h.conversation(&["ann", "bob"]).await;
    h.send(&cid, "ann", "m1", "one").await;
    h.send(&cid, "ann", "m2", "two").await;
    let mut rx = bobs_stream(&h, Position::parse(&format!("v1;{cid}:100")).unwrap()).await;
    match &until_ready(&mut rx).await[..] {
        [
            StreamEvent::Reload {
                missed_from: 3,
                missed_to: 100,
                position,
                ..
            },
            StreamEvent::Ready { .. },
        ] => assert_eq!(position, &format!("v1;{cid}:2")),
        other => panic!("{other:#?}"),
    }
    h.send(&cid, "ann", "m3", "three").await;
    match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
        Ok(Some(StreamEvent::Message { record, .. })) => assert_eq!(record.conversation_seq, 3),
        other => panic!("{other:?}"),
    }

    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let req = StreamRequest {
        tenant: TENANT.into(),
        user: "bob".into(),
        conversations: None,
        since: None,
        until_s: Some(now_s + 1),
    };
    let mut opened = open(&h.service, req).await.unwrap();
    until_ready(&mut opened.events).await;
    tokio::time::timeout(Duration::from_secs(5), opened.cut.cancelled())
        .await
        .expect("cut at its expiry");
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    ahead_and_expiry,
    small_windows(),
    positions_ahead_are_clamped_and_streams_end_at_expiry
);

/// bob has 30 conversations. Once the watermark passes their messages, a position names only
/// the conversation active since; resuming from it gets exactly what was sent meanwhile in the
/// conversations it leaves out, and nothing twice.
async fn positions_name_only_recently_active_conversations(h: Harness) {
    let mut cids = Vec::new();
    for i in 0..30 {
        let cid = h.conversation(&["ann", "bob"]).await;
        h.send(&cid, "ann", &format!("first-{i}"), "hello").await;
        cids.push(cid);
    }
    let mut rx = bobs_stream(&h, Position::parse("v1").unwrap()).await;
    let replay = until_ready(&mut rx).await;
    assert_eq!(delivered(&replay).len(), 30);
    let ready = Position::parse(position_of(replay.last().unwrap())).unwrap();
    assert_eq!(ready.len(), 30, "all delivered after the watermark");

    h.advance(PATIENCE_MS + 1);
    h.send(&cids[0], "ann", "second-0", "again").await;
    let live = next_event(&mut rx).await;
    assert_eq!(
        delivered(std::slice::from_ref(&live)),
        [(cids[0].clone(), 2)]
    );
    let compact = position_of(&live).to_owned();
    assert_eq!(
        compact,
        format!("v2;{};{}:2", h.now() - PATIENCE_MS, cids[0]),
        "only the conversation active since the watermark"
    );
    drop(rx);

    h.advance(10);
    h.send(&cids[7], "ann", "second-7", "while away").await;
    h.send(&cids[0], "bob", "third-0", "from another device")
        .await;
    h.send(&cids[7], "ann", "third-7", "while away").await;
    let mut rx = bobs_stream(&h, Position::parse(&compact).unwrap()).await;
    let mut got = delivered(&until_ready(&mut rx).await);
    got.sort();
    let mut want = vec![
        (cids[0].clone(), 3),
        (cids[7].clone(), 2),
        (cids[7].clone(), 3),
    ];
    want.sort();
    assert_eq!(got, want, "from {compact}");
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    compact_positions,
    small_windows(),
    positions_name_only_recently_active_conversations
);

/// A seq still RESERVED when the client connects (its SEND in flight, or awaiting recovery)
/// reaches the client once it commits, even with a later seq committed before the connect.
async fn a_seq_reserved_at_connect_is_delivered_when_it_commits(h: Harness) {
    let cid = h.conversation(&["ann", "bob"]).await;
    h.send(&cid, "ann", "m1", "one").await;
    let params = h.service.config().commit_params();
    let reserved = match h
        .hot()
        .reserve(
            command(&cid, "ann", "m2", "two", MessageClass::Standard),
            h.now(),
            params,
        )
        .await
        .unwrap()
    {
        Reservation::Reserved { record, .. } => record,
        other => panic!("{other:?}"),
    };
    h.send(&cid, "ann", "m3", "three").await;
    let mut rx = bobs_stream_from(&h, None).await;
    let replay = until_ready(&mut rx).await;
    assert!(delivered(&replay).is_empty(), "{replay:?}");
    publish_and_commit(
        h.hot().as_ref(),
        h.outbox().as_ref(),
        std::slice::from_ref(&reserved),
        &h.shared_clock(),
        params,
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        got.extend(delivered(&[next_event(&mut rx).await]));
    }
    assert_eq!(got, [(cid.clone(), 2), (cid.clone(), 3)]);
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    reserved_at_connect,
    small_windows(),
    a_seq_reserved_at_connect_is_delivered_when_it_commits
);

/// A client that drops during a replay from `v1` resumes with what it has not got: the
/// conversations not replayed yet, from their first message.
async fn a_replay_from_the_start_cut_short_resumes_whole(h: Harness) {
    let mut cids = Vec::new();
    for i in 0..5 {
        let cid = h.conversation(&["ann", "bob"]).await;
        for j in 0..3 {
            h.send(&cid, "ann", &format!("m{i}-{j}"), "hi").await;
        }
        cids.push(cid);
    }
    h.advance(PATIENCE_MS + 1);
    let mut rx = bobs_stream(&h, Position::parse("v1").unwrap()).await;
    let first = next_event(&mut rx).await;
    let position = position_of(&first).to_owned();
    assert!(position.starts_with("v1;"), "{position}");
    drop(rx);
    let mut got = delivered(std::slice::from_ref(&first));
    let mut rx = bobs_stream(&h, Position::parse(&position).unwrap()).await;
    got.extend(delivered(&until_ready(&mut rx).await));
    got.sort();
    let mut want: Vec<(String, u64)> = cids
        .iter()
        .flat_map(|c| (1..=3).map(move |s| (c.clone(), s)))
        .collect();
    want.sort();
    assert_eq!(got, want, "from {position}");
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    replay_cut_short,
    small_windows(),
    a_replay_from_the_start_cut_short_resumes_whole
);

/// A conversation a position names at seq 0 stays named until the stream has read it, so a
/// second drop before its replay loses none of it.
async fn a_conversation_named_at_zero_stays_named_until_read(h: Harness) {
    let x = h.conversation(&["ann", "bob"]).await;
    let y = h.conversation(&["ann", "bob"]).await;
    let (first, second) = if x < y { (x, y) } else { (y, x) };
    for j in 0..2 {
        h.send(&first, "ann", &format!("x{j}"), "hi").await;
    }
    for j in 0..3 {
        h.send(&second, "ann", &format!("y{j}"), "hi").await;
    }
    h.advance(PATIENCE_MS + 1);
    let since = format!("v2;{};{first}:1;{second}:0", h.now() - PATIENCE_MS);
    let mut rx = bobs_stream(&h, Position::parse(&since).unwrap()).await;
    let one = next_event(&mut rx).await;
    assert_eq!(delivered(std::slice::from_ref(&one)), [(first.clone(), 2)]);
    let position = position_of(&one).to_owned();
    assert!(position.ends_with(&format!(";{second}:0")), "{position}");
    drop(rx);
    let mut rx = bobs_stream(&h, Position::parse(&position).unwrap()).await;
    let got = delivered(&until_ready(&mut rx).await);
    assert_eq!(got, [(second.clone(), 1), (second.clone(), 2), (second, 3)]);
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    named_at_zero,
    small_windows(),
    a_conversation_named_at_zero_stays_named_until_read
);

/// A stream that fell behind by more than the patience (its client slow, its replay long)
/// hands out positions under a watermark it has caught up to, not one a patience before now: a
/// message committed in another conversation meanwhile is not taken as delivered.
async fn a_stream_behind_names_no_watermark_past_what_it_read(h: Harness) {
    let a = h.conversation(&["ann", "bob"]).await;
    let b = h.conversation(&["ann", "bob"]).await;
    h.send(&a, "ann", "a1", "one").await;
    for i in 0..100 {
        h.send(&b, "ann", &format!("b{i}"), "flood").await;
    }
    // A replay of more than the stream buffers: it blocks on bob's client.
    let since = format!("v2;{};{a}:1;{b}:0", h.now() - 1);
    let mut rx = bobs_stream(&h, Position::parse(&since).unwrap()).await;
    let full = tokio::time::Instant::now();
    while rx.len() < tidemark_chat::stream::STREAM_BUFFER {
        assert!(full.elapsed() < Duration::from_secs(10), "the buffer fills");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Committed while the stream is busy, which then stays busy past the patience.
    h.advance(5_000);
    h.send(&a, "ann", "a2", "two").await;
    h.advance(10_000);
    let mut last_b = String::new();
    let mut seen = Vec::new();
    while seen.len() < 101 {
        let e = next_event(&mut rx).await;
        for (cid, seq) in delivered(std::slice::from_ref(&e)) {
            if cid == b {
                last_b = position_of(&e).to_owned();
            }
            seen.push((cid, seq));
        }
    }
    assert_eq!(seen.last(), Some(&(a.clone(), 2)), "a2 after the replay");
    drop(rx);
    // Resumed from the replay's last event, sent after the patience had passed: `a2` comes.
    let mut rx = bobs_stream(&h, Position::parse(&last_b).unwrap()).await;
    let got = delivered(&until_ready(&mut rx).await);
    assert_eq!(got, [(a.clone(), 2)], "from {last_b}");
}

on_every_backend!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    stream_behind,
    small_windows(),
    a_stream_behind_names_no_watermark_past_what_it_read
);
