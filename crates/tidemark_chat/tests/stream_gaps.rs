//! Live streams resumed from a position, on every backend: a client that resumes after
//! ephemeral messages expired is told which seqs it missed (`reload`), then gets the rest in
//! order; and what the user read on another device meanwhile still reaches this client.

#[macro_use]
mod common;

use std::time::Duration;

use common::*;
use tidemark_chat::model::MessageClass;
use tidemark_chat::stream::{Position, StreamEvent, StreamRequest, open};

/// bob's stream in `h`, from `since`.
async fn bobs_stream(h: &Harness, since: Position) -> tokio::sync::mpsc::Receiver<StreamEvent> {
    let req = StreamRequest {
        tenant: TENANT.into(),
        user: "bob".into(),
        conversations: None,
        since: Some(since),
        until_s: None,
    };
    open(&h.service, req).await.unwrap().events
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
            StreamEvent::Ready { .. },
        ] => {
            assert_eq!(conversation_id, &cid);
            assert_eq!(
                (record.conversation_seq, record.body.as_str()),
                (4, "standard")
            );
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
