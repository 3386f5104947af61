use super::history::{Stored, check};
use super::*;

fn acked(seq: u64, n: u32) -> Acked {
    Acked {
        send: Send {
            cid: "c".into(),
            sender: "a".into(),
            client_msg_id: format!("m{n}"),
            body: format!("body m{n}"),
        },
        ack: Ack {
            seq,
            message_id: format!("id{n}"),
            committed_at: "2026-12-05T00:00:00.000Z".into(),
        },
    }
}

fn stored(a: &Acked) -> Stored {
    Stored {
        seq: a.ack.seq,
        message_id: a.ack.message_id.clone(),
        sender: a.send.sender.clone(),
        body: a.send.body.clone(),
        committed_at: a.ack.committed_at.clone(),
    }
}

fn violations(latest: u64, msgs: Vec<Stored>, acked: &[Acked]) -> Vec<String> {
    let refs: Vec<&Acked> = acked.iter().collect();
    let mut out = Vec::new();
    check("c", &(latest, msgs), &refs, &mut out);
    out
}

#[test]
fn a_history_holding_every_ack_once_passes() {
    let acks = [acked(1, 1), acked(2, 2), acked(3, 3)];
    let msgs = acks.iter().map(stored).collect();
    assert_eq!(violations(3, msgs, &acks), Vec::<String>::new());
}

#[test]
fn a_lost_ack_is_a_gap_and_a_missing_ack() {
    let acks = [acked(1, 1), acked(2, 2), acked(3, 3)];
    let msgs = vec![stored(&acks[0]), stored(&acks[2])];
    let v = violations(3, msgs, &acks);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].contains("not dense") && v[0].contains("missing [2]"),
        "{v:?}"
    );
    assert!(v[1].contains("ACK of m2"), "{v:?}");
}

#[test]
fn another_body_at_an_acked_seq_is_found() {
    let acks = [acked(1, 1)];
    let mut m = stored(&acks[0]);
    m.body = "other".into();
    let v = violations(1, vec![m], &acks);
    assert!(v.iter().any(|l| l.contains("ACK of m1")), "{v:?}");
    assert!(v.iter().any(|l| l.contains("in no ACK")), "{v:?}");
}

#[test]
fn one_send_committed_twice_is_found() {
    let acks = [acked(1, 1)];
    let mut again = stored(&acks[0]);
    again.seq = 2;
    again.message_id = "id-again".into();
    let v = violations(2, vec![stored(&acks[0]), again], &acks);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("committed 2 times, at seqs [1, 2]"), "{v:?}");
}

#[test]
fn retries_take_the_new_acks_and_a_sample_of_the_old() {
    let r = Retries {
        from: 10,
        every: 4,
        offset: 5,
    };
    let wanted: Vec<usize> = (0..13).filter(|&i| r.wants(i)).collect();
    assert_eq!(wanted, [1, 5, 9, 10, 11, 12]);
    assert!((0..5).all(|i| Retries::ALL.wants(i)));
}
