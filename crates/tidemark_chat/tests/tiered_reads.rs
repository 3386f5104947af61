//! Reads across the hot tier and the archive (DESIGN.md part A,
//! "Reads", and principle 7 "fail whole, never partial"): paging while the floor F moves,
//! corruption detection, unread counts over both tiers, and ephemeral expiry in both tiers.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Harness, START_MS, TENANT, command, committed, ms, seqs, small_windows};
use futures::future::join_all;
use tidemark_chat::model::{EPHEMERAL_TTL_MS, MessageClass};
use tidemark_chat::reads::Anchor;
use tidemark_chat::service::ConversationSummary;
use tidemark_chat::trimmer::EXPIRED_RECORD_GRACE;
use tidemark_chat::{ChatConfig, ChatError};

fn assert_corrupt<T: std::fmt::Debug>(result: Result<T, ChatError>, seq: u64) {
    match result {
        Err(ChatError::Corrupt(msg)) => assert!(
            msg.contains(&format!("seq {seq}")),
            "the error names seq {seq}: {msg}"
        ),
        other => panic!("expected ChatError::Corrupt for seq {seq}, got {other:?}"),
    }
}

on_every_backend!(
    /// Test 5. 1,000 messages committed in 25 groups of 40, one group per second; with a 30 s hot
    /// window each further second of clock lets the trimmer raise F by exactly 40. A client pages
    /// backwards in steps of 50 (`Latest`, then `Before(first seq of the last page)`) while
    /// archiver and trimmer run and the clock moves between pages: F goes 0, 40, …, 760 and crosses
    /// the pages (page 11 straddles it), yet every seq 1..=1000 comes back exactly once, with its
    /// body.
    ///
    /// Then one archived record (seq 120 ≤ F) is deleted behind the server's back: every history
    /// window that covers it and every unread count that needs it fails with
    /// `ChatError::Corrupt`, while pages and counts that do not need it still work.
    #[tokio::test]
    paging_backwards_while_the_floor_moves_then_a_lost_record_fails_whole,
    ChatConfig {
        hot_window: Duration::from_secs(30),
        ..small_windows()
    },
    paging_backwards_while_the_floor_moves_then_a_lost_record_fails_whole_on
);

async fn paging_backwards_while_the_floor_moves_then_a_lost_record_fails_whole_on(h: Harness) {
    const GROUPS: u64 = 25;
    const GROUP: u64 = 40;
    let cid = h.conversation(&["alice", "bob", "carol"]).await;

    let mut body_of: HashMap<u64, String> = HashMap::new();
    for g in 0..GROUPS {
        if g > 0 {
            h.advance(1_000);
        }
        let sends = (0..GROUP).map(|i| {
            let cmid = format!("g{g}-{i}");
            let cmd = command(
                &cid,
                "alice",
                &cmid,
                &format!("body {cmid}"),
                MessageClass::Standard,
            );
            let service = h.service.clone();
            async move { committed(service.send(cmd).await.expect("send")) }
        });
        for r in join_all(sends).await {
            let group_range = g * GROUP + 1..=(g + 1) * GROUP;
            assert!(group_range.contains(&r.conversation_seq));
            assert_eq!(r.committed_at_ms, START_MS + 1_000 * g as i64);
            body_of.insert(r.conversation_seq, r.body);
        }
    }
    assert_eq!(body_of.len(), 1_000);
    // Group g (seqs 40g+1..=40g+40) has trim score START + g s + 30 s.
    h.advance(5_000); // now START + 29 s: nothing is due yet.

    let mut seen: Vec<u64> = Vec::new();
    let mut anchor = Anchor::Latest;
    for page_no in 0..20u64 {
        if page_no > 0 {
            h.advance(1_000);
        }
        h.archive_all().await;
        h.trim().await;
        let floor = h.floor(&cid).await;
        assert_eq!(floor, GROUP * page_no, "F before page {page_no}");

        let page = h
            .service
            .history(TENANT, &cid, "alice", anchor, 50)
            .await
            .unwrap();
        let want: Vec<u64> = (951 - 50 * page_no..=1000 - 50 * page_no).collect();
        assert_eq!(seqs(&page.messages), want, "page {page_no} (F = {floor})");
        assert_eq!((page.earliest_available_seq, page.latest_seq), (1, 1000));
        for m in &page.messages {
            assert_eq!(m.body, body_of[&m.conversation_seq]);
        }
        seen.extend(seqs(&page.messages));
        anchor = Anchor::Before(page.messages[0].conversation_seq);
    }
    // The last anchor is Before(1): an empty page, not an error.
    let last = h
        .service
        .history(TENANT, &cid, "alice", anchor, 50)
        .await
        .unwrap();
    assert!(last.messages.is_empty());
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=1000).collect::<Vec<_>>(),
        "every seq exactly once"
    );
    let floor = h.floor(&cid).await;
    assert_eq!(floor, 760);
    assert_eq!(h.hot().hot_len().await.unwrap(), 240);

    // Read pointers before the damage: bob below seq 120, carol on it.
    h.service.mark_read(TENANT, &cid, "bob", 100).await.unwrap();
    h.service
        .mark_read(TENANT, &cid, "carol", 120)
        .await
        .unwrap();
    assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 900);
    assert_eq!(h.service.unread(TENANT, &cid, "carol").await.unwrap(), 880);

    h.delete_archived_record(&cid, 120).await;

    // History windows that cover seq 120 fail whole …
    let history = |anchor, limit| h.service.history(TENANT, &cid, "alice", anchor, limit);
    assert_corrupt(history(Anchor::Before(151), 50).await, 120);
    assert_corrupt(history(Anchor::Before(121), 1).await, 120);
    assert_corrupt(history(Anchor::After(100), 50).await, 120);
    assert_corrupt(history(Anchor::After(0), 200).await, 120);
    // … windows that do not cover it still work.
    assert_eq!(
        seqs(&history(Anchor::Before(101), 50).await.unwrap().messages),
        (51..=100).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&history(Anchor::Before(120), 50).await.unwrap().messages),
        (70..=119).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&history(Anchor::After(120), 50).await.unwrap().messages),
        (121..=170).collect::<Vec<_>>()
    );
    // Across F (= 760) and wholly hot.
    assert_eq!(
        seqs(&history(Anchor::Before(781), 50).await.unwrap().messages),
        (731..=780).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&history(Anchor::Latest, 50).await.unwrap().messages),
        (951..=1000).collect::<Vec<_>>()
    );

    // Unread counts that need seq 120 fail whole, also for the sender herself (the count must
    // read the range to know who sent what); a read pointer at 120 or above still counts.
    assert_corrupt(h.service.unread(TENANT, &cid, "bob").await, 120);
    assert_corrupt(h.service.unread(TENANT, &cid, "alice").await, 120);
    assert_corrupt(h.service.user_conversations(TENANT, "bob").await, 120);
    assert_eq!(h.service.unread(TENANT, &cid, "carol").await.unwrap(), 880);
    assert_eq!(
        h.service.user_conversations(TENANT, "carol").await.unwrap(),
        vec![ConversationSummary {
            conversation_id: cid.clone(),
            latest_seq: 1000,
            unread: 880,
        }]
    );
    h.service.mark_read(TENANT, &cid, "bob", 119).await.unwrap();
    assert_corrupt(h.service.unread(TENANT, &cid, "bob").await, 120);
    h.service.mark_read(TENANT, &cid, "bob", 120).await.unwrap();
    assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 880);
}

on_every_backend!(
    /// Test 6. Unread counts = messages in `(read_seq, latest]` not sent by the user, across both
    /// tiers: seqs 1..=6 archived and trimmed (F = 6), 7..=10 hot; alice sends the odd seqs, bob
    /// the even ones. Read pointers on trimmed seqs (3, and F itself) count correctly, and
    /// `user_conversations` reports the same numbers; once everything is trimmed the counts hold.
    #[tokio::test]
    unread_counts_span_both_tiers_and_read_pointers_on_trimmed_seqs,
    small_windows(),
    unread_counts_span_both_tiers_and_read_pointers_on_trimmed_seqs_on
);

async fn unread_counts_span_both_tiers_and_read_pointers_on_trimmed_seqs_on(h: Harness) {
    let c1 = h.conversation(&["alice", "bob"]).await;
    let send_pair_from = |from: u64, to: u64| {
        let h = &h;
        let c1 = c1.clone();
        async move {
            for s in from..=to {
                let sender = if s % 2 == 1 { "alice" } else { "bob" };
                let r = h.commit(&c1, sender, &format!("m{s}"), "hi").await;
                assert_eq!(r.conversation_seq, s);
            }
        }
    };
    send_pair_from(1, 6).await;
    h.advance(h.margins_ms());
    h.archive_all().await;
    // Committed after T: not archived, so never trimmed by the passes below.
    send_pair_from(7, 10).await;
    h.advance(ms(h.cfg.hot_window));
    assert_eq!(h.trim().await.trimmed, 6);
    assert_eq!(h.floor(&c1).await, 6);
    assert_eq!(h.hot_seqs(&c1).await, vec![7, 8, 9, 10]);

    // A second, all-hot conversation: carol sends 3, alice 1.
    let c2 = h.conversation(&["alice", "carol"]).await;
    for (i, sender) in ["carol", "alice", "carol", "carol"].iter().enumerate() {
        h.commit(&c2, sender, &format!("c2-{i}"), "yo").await;
    }

    let unread = |user: &'static str, cid: String| {
        let h = &h;
        async move { h.service.unread(TENANT, &cid, user).await.unwrap() }
    };
    // Nothing read: the other party's 5 messages each.
    assert_eq!(unread("bob", c1.clone()).await, 5);
    assert_eq!(unread("alice", c1.clone()).await, 5);
    assert_eq!(unread("alice", c2.clone()).await, 3);
    assert_eq!(unread("carol", c2.clone()).await, 1);

    // Pointers on trimmed seqs: bob at 3 → alice's 5, 7, 9; alice at F = 6 → bob's 8, 10.
    h.service.mark_read(TENANT, &c1, "bob", 3).await.unwrap();
    h.service.mark_read(TENANT, &c1, "alice", 6).await.unwrap();
    assert_eq!(unread("bob", c1.clone()).await, 3);
    assert_eq!(unread("alice", c1.clone()).await, 2);
    // A pointer never moves backwards.
    h.service.mark_read(TENANT, &c1, "alice", 2).await.unwrap();
    assert_eq!(unread("alice", c1.clone()).await, 2);

    let summary = |cid: &str, latest_seq, unread| ConversationSummary {
        conversation_id: cid.to_owned(),
        latest_seq,
        unread,
    };
    let sorted = |mut v: Vec<ConversationSummary>| {
        v.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
        v
    };
    let mut want_alice = sorted(vec![summary(&c1, 10, 2), summary(&c2, 4, 3)]);
    let got = h.service.user_conversations(TENANT, "alice").await.unwrap();
    assert_eq!(sorted(got), want_alice);
    let got = h.service.user_conversations(TENANT, "bob").await.unwrap();
    assert_eq!(got, vec![summary(&c1, 10, 3)]);
    let got = h.service.user_conversations(TENANT, "carol").await.unwrap();
    assert_eq!(got, vec![summary(&c2, 4, 1)]);

    // Everything archived and trimmed: the same counts, now read from the archive.
    assert_eq!(h.archive_and_trim_everything().await, 8);
    assert_eq!(h.floor(&c1).await, 10);
    assert_eq!(h.floor(&c2).await, 4);
    assert_eq!(h.hot().hot_len().await.unwrap(), 0);
    assert_eq!(unread("bob", c1.clone()).await, 3);
    assert_eq!(unread("alice", c1.clone()).await, 2);
    h.service.mark_read(TENANT, &c1, "bob", 8).await.unwrap();
    assert_eq!(unread("bob", c1.clone()).await, 1);
    want_alice = sorted(vec![summary(&c1, 10, 2), summary(&c2, 4, 3)]);
    let got = h.service.user_conversations(TENANT, "alice").await.unwrap();
    assert_eq!(sorted(got), want_alice);
    let got = h.service.user_conversations(TENANT, "bob").await.unwrap();
    assert_eq!(got, vec![summary(&c1, 10, 1)]);
}

on_every_backend!(
    /// Ephemeral 24 h messages vanish from history and unread counts in both tiers exactly when
    /// the clock reaches `committed_at + 24 h` (still there 1 ms before), and the trimmer then
    /// purges their records from the archive ([`EXPIRED_RECORD_GRACE`] later) and keeps their
    /// index entries as tombstones, without breaking reads; `earliest_available_seq` skips them.
    #[tokio::test]
    ephemeral_messages_vanish_from_both_tiers_after_24_hours,
    small_windows(),
    ephemeral_messages_vanish_from_both_tiers_after_24_hours_on
);

async fn ephemeral_messages_vanish_from_both_tiers_after_24_hours_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;
    let eph = MessageClass::Ephemeral24h;
    let std = MessageClass::Standard;

    // Seqs 1..=3 at START, then archived and trimmed (F = 3).
    for (cmid, sender, class) in [
        ("e1", "alice", eph),
        ("s2", "bob", std),
        ("s3", "alice", std),
    ] {
        committed(h.send_class(&cid, sender, cmid, "b", class).await);
    }
    assert_eq!(h.archive_and_trim_everything().await, 3);
    assert_eq!(h.floor(&cid).await, 3);
    // Seqs 4..=5 at START + 11.501 s, hot (the archiver does not run again for now).
    let t_hot = h.now();
    assert_eq!(t_hot, START_MS + 11_501);
    let e4 = committed(h.send_class(&cid, "bob", "e4", "b", eph).await);
    assert_eq!(e4.expires_at_ms, Some(t_hot + EPHEMERAL_TTL_MS));
    committed(h.send_class(&cid, "alice", "s5", "b", std).await);
    assert_eq!(h.hot_seqs(&cid).await, vec![4, 5]);

    let history = || async {
        h.service
            .history(TENANT, &cid, "alice", Anchor::Latest, 50)
            .await
            .unwrap()
    };
    let unread = |user: &'static str| {
        let (h, cid) = (&h, &cid);
        async move { h.service.unread(TENANT, cid, user).await.unwrap() }
    };
    assert_eq!(seqs(&history().await.messages), vec![1, 2, 3, 4, 5]);
    assert_eq!(unread("bob").await, 3);

    // 1 ms before seq 1 expires: still visible.
    h.clock.set(START_MS + EPHEMERAL_TTL_MS - 1);
    let page = history().await;
    assert_eq!(seqs(&page.messages), vec![1, 2, 3, 4, 5]);
    assert_eq!(page.earliest_available_seq, 1);
    // Seq 1 (archive) expires.
    h.advance(1);
    let page = history().await;
    assert_eq!(seqs(&page.messages), vec![2, 3, 4, 5]);
    assert_eq!(page.earliest_available_seq, 2);
    assert_eq!(unread("bob").await, 2);
    assert_eq!(unread("alice").await, 2);
    // Seq 4 (hot) expires.
    h.clock.set(t_hot + EPHEMERAL_TTL_MS);
    let page = history().await;
    assert_eq!(seqs(&page.messages), vec![2, 3, 5]);
    assert_eq!(page.earliest_available_seq, 2);
    assert_eq!(unread("alice").await, 1);
    assert_eq!(
        seqs(
            &h.service
                .history(TENANT, &cid, "alice", Anchor::After(3), 1)
                .await
                .unwrap()
                .messages
        ),
        Vec::<u64>::new(),
        "the window 4..=4 holds only an expired message"
    );

    // The trimmer purges expired seq 1's record from the archive once the grace is over; its
    // index entry stays, a tombstone. 4 and 5 stay hot (T is old).
    assert_eq!(h.archive_row_counts().await, (3, 3));
    let out = h.trim().await;
    assert_eq!(
        (out.trimmed, out.purged),
        (0, 0),
        "seq 1 expired 11.5 s ago"
    );
    h.advance(ms(EXPIRED_RECORD_GRACE));
    let out = h.trim().await;
    assert_eq!((out.trimmed, out.purged), (0, 1));
    assert_eq!(h.archived_seqs(&cid).await, (vec![2, 3], vec![1, 2, 3]));
    assert_eq!(h.hot_seqs(&cid).await, vec![4, 5]);
    assert_eq!(seqs(&history().await.messages), vec![2, 3, 5]);

    // Archived and trimmed late, the expired seq 4 is purged too; reads are unchanged.
    assert_eq!(h.archive_and_trim_everything().await, 2);
    assert_eq!(h.floor(&cid).await, 5);
    assert_eq!(
        h.archived_seqs(&cid).await,
        (vec![2, 3, 5], vec![1, 2, 3, 4, 5])
    );
    let page = history().await;
    assert_eq!(seqs(&page.messages), vec![2, 3, 5]);
    assert_eq!((page.earliest_available_seq, page.latest_seq), (2, 5));
    assert_eq!(unread("alice").await, 1);
    assert_eq!(unread("bob").await, 2);
}

on_every_backend!(
    /// DESIGN.md part A "Reads": both tiers are dense over what a read needs, so a lost index
    /// entry (archive, seq ≤ F) or a lost hot record (seq > F), deleted behind the server's
    /// back, fails every history window and unread count that needs it with
    /// `ChatError::Corrupt`, not a page or a count with a silent gap (a 200 with a seq
    /// missing). An expired ephemeral message stays
    /// the one gap a page may have, in either tier, also once its archive record is purged.
    #[tokio::test]
    a_lost_index_entry_or_hot_record_fails_whole,
    small_windows(),
    a_lost_index_entry_or_hot_record_fails_whole_on
);

async fn a_lost_index_entry_or_hot_record_fails_whole_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;
    for seq in 1..=20 {
        send_numbered(&h, &cid, seq).await;
    }
    assert_eq!(h.archive_and_trim_everything().await, 20);
    for seq in 21..=30 {
        send_numbered(&h, &cid, seq).await;
    }
    assert_eq!(h.floor(&cid).await, 20);
    // Both ephemeral messages expire, and the archive's record of seq 5 is purged.
    h.advance(EPHEMERAL_TTL_MS + ms(EXPIRED_RECORD_GRACE));
    let out = h.trim().await;
    assert_eq!((out.trimmed, out.purged), (0, 1));
    let without = |range: std::ops::RangeInclusive<u64>| -> Vec<u64> {
        range.filter(|s| s % 20 != 5).collect()
    };
    assert_eq!(h.archived_seqs(&cid).await.0, without(1..=20));

    let h = {
        let history = |anchor, limit| h.service.history(TENANT, &cid, "alice", anchor, limit);
        assert_eq!(
            seqs(&history(Anchor::After(0), 200).await.unwrap().messages),
            without(1..=30)
        );
        // Bob's unread: alice's odd seqs but the two expired ones.
        assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 13);

        // A lost index entry (seq 12, archived). A restart drops the open archive's copy.
        h.delete_index_entry(&cid, 12).await;
        h.restart().await
    };
    let history = |anchor, limit| h.service.history(TENANT, &cid, "alice", anchor, limit);
    assert_corrupt(history(Anchor::After(0), 200).await, 12);
    assert_corrupt(history(Anchor::Latest, 30).await, 12);
    assert_corrupt(history(Anchor::Before(13), 1).await, 12);
    assert_corrupt(history(Anchor::After(11), 1).await, 12);
    assert_corrupt(h.service.unread(TENANT, &cid, "bob").await, 12);
    assert_corrupt(h.service.user_conversations(TENANT, "alice").await, 12);
    // What does not need seq 12 still reads, the expired seqs 5 and 25 as the only gaps.
    assert_eq!(
        seqs(&history(Anchor::Before(12), 50).await.unwrap().messages),
        without(1..=11)
    );
    assert_eq!(
        seqs(&history(Anchor::After(12), 50).await.unwrap().messages),
        without(13..=30)
    );
    h.service.mark_read(TENANT, &cid, "bob", 12).await.unwrap();
    assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 8);
    h.service
        .mark_read(TENANT, &cid, "alice", 12)
        .await
        .unwrap();

    // A lost hot record (seq 27): every window and count over the hot seqs that holds it.
    h.delete_hot_record(&cid, 27).await;
    let hot_gap = 21..=30;
    assert_hot_gap(history(Anchor::After(12), 50).await, &hot_gap);
    assert_hot_gap(history(Anchor::Latest, 10).await, &hot_gap);
    assert_hot_gap(history(Anchor::Before(28), 1).await, &(27..=27));
    assert_hot_gap(h.service.unread(TENANT, &cid, "bob").await, &hot_gap);
    assert_hot_gap(h.service.unread(TENANT, &cid, "alice").await, &hot_gap);
    assert_hot_gap(h.service.user_conversations(TENANT, "bob").await, &hot_gap);
    assert_eq!(
        seqs(&history(Anchor::After(27), 50).await.unwrap().messages),
        vec![28, 29, 30]
    );
    assert_eq!(
        seqs(&history(Anchor::Before(27), 14).await.unwrap().messages),
        without(13..=26)
    );
    h.service.mark_read(TENANT, &cid, "bob", 27).await.unwrap();
    assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 1);
}

/// Commits the message that gets `seq` (checked): alice sends the odd seqs, bob the even ones;
/// seqs 5, 25, 45, … are ephemeral.
async fn send_numbered(h: &Harness, cid: &str, seq: u64) {
    let sender = if seq % 2 == 1 { "alice" } else { "bob" };
    let class = if seq % 20 == 5 {
        MessageClass::Ephemeral24h
    } else {
        MessageClass::Standard
    };
    let r = committed(
        h.send_class(cid, sender, &format!("k{seq}"), "b", class)
            .await,
    );
    assert_eq!(r.conversation_seq, seq);
}

/// A `ChatError::Corrupt` that names the hot seqs `range` as short of a record.
fn assert_hot_gap<T: std::fmt::Debug>(
    result: Result<T, ChatError>,
    range: &std::ops::RangeInclusive<u64>,
) {
    let want = format!(
        "seqs {}..={}: the hot tier holds",
        range.start(),
        range.end()
    );
    match result {
        Err(ChatError::Corrupt(msg)) => assert!(msg.contains(&want), "{want:?} in {msg:?}"),
        other => panic!("expected ChatError::Corrupt for hot seqs {range:?}, got {other:?}"),
    }
}

on_every_backend!(
    /// Every read names its reader, who must be a member: a history page and an unread count
    /// are refused (`ChatError::NotMember`) for anyone else before anything is read, and a
    /// blank reader is refused as invalid; members read as before.
    #[tokio::test]
    reads_are_refused_to_non_members,
    small_windows(),
    reads_are_refused_to_non_members_on
);

async fn reads_are_refused_to_non_members_on(h: Harness) {
    let cid = h.conversation(&["alice", "bob"]).await;
    committed(
        h.send_class(&cid, "alice", "m1", "secret", MessageClass::Standard)
            .await,
    );
    let not_member = |r: Result<_, ChatError>| {
        assert!(
            matches!(&r, Err(ChatError::NotMember { user, .. }) if user == "mallory"),
            "{r:?}"
        );
    };
    not_member(
        h.service
            .history(TENANT, &cid, "mallory", Anchor::Latest, 50)
            .await
            .map(|p| p.messages.len() as u64),
    );
    not_member(h.service.unread(TENANT, &cid, "mallory").await);
    let blank = h
        .service
        .history(TENANT, &cid, " ", Anchor::Latest, 50)
        .await;
    assert!(matches!(blank, Err(ChatError::Invalid(_))), "{blank:?}");
    let page = h
        .service
        .history(TENANT, &cid, "bob", Anchor::Latest, 50)
        .await
        .unwrap();
    assert_eq!(seqs(&page.messages), vec![1]);
    assert_eq!(page.messages[0].body, "secret");
    assert_eq!(h.service.unread(TENANT, &cid, "bob").await.unwrap(), 1);
}
