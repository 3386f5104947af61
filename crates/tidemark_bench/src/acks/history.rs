//! A conversation's whole history read over HTTP, and the checks of ACKs against it.

use std::collections::HashMap;

use anyhow::{Context, bail};
use serde_json::Value;

use super::{Acked, Api};

/// One message of a history page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// `conversation_seq`.
    pub seq: u64,
    /// `message_id`.
    pub message_id: String,
    /// `sender`.
    pub sender: String,
    /// `body`.
    pub body: String,
    /// `committed_at`.
    pub committed_at: String,
}

/// Widest page the API serves.
const PAGE: u64 = 200;

/// Every message of conversation `cid` as its member `reader` reads it, oldest first, and its
/// `latest_seq`: pages of `GET /v1/conversations/{cid}/messages?user=…&after=…&limit=200` from
/// the start, each starting after the last (or, on a page cut at its byte budget, after its
/// last message).
pub async fn read_history(
    api: &Api,
    cid: &str,
    reader: &str,
) -> anyhow::Result<(u64, Vec<Stored>)> {
    let mut out: Vec<Stored> = Vec::new();
    let mut after = 0u64;
    let mut latest = None;
    loop {
        let url = format!(
            "{}/v1/conversations/{cid}/messages?user={reader}&after={after}&limit={PAGE}",
            api.base
        );
        let resp = api
            .client
            .get(&url)
            .bearer_auth(&api.key)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status();
        let page: Value = resp.json().await.with_context(|| format!("GET {url}"))?;
        if !status.is_success() {
            bail!("GET {url}: {status} {page}");
        }
        let newest = *latest.get_or_insert(page["latest_seq"].as_u64().unwrap_or(0));
        let msgs = page["messages"].as_array().cloned().unwrap_or_default();
        for m in &msgs {
            out.push(parse(m).with_context(|| format!("GET {url}: a message {m}"))?);
        }
        after = match (page["truncated"].as_bool(), out.last()) {
            (Some(true), Some(last)) if last.seq > after => last.seq,
            _ => after + PAGE,
        };
        if after >= newest {
            return Ok((newest, out));
        }
    }
}

fn parse(m: &Value) -> Option<Stored> {
    let s = |k: &str| m[k].as_str().map(str::to_owned);
    Some(Stored {
        seq: m["conversation_seq"].as_u64()?,
        message_id: s("message_id")?,
        sender: s("sender")?,
        body: s("body")?,
        committed_at: s("committed_at")?,
    })
}

/// Checks the history of `cid` (`latest_seq`, messages) against the ACKs of its sends: seqs
/// dense from 1 to `latest_seq`; every ACK at its seq with its id, sender, body and commit
/// time; every send once; nothing no ACK names. Adds a line to `violations` for each miss.
pub(super) fn check(
    cid: &str,
    (latest, msgs): &(u64, Vec<Stored>),
    acked: &[&Acked],
    violations: &mut Vec<String>,
) {
    let seqs: Vec<u64> = msgs.iter().map(|m| m.seq).collect();
    if seqs.iter().copied().ne(1..=*latest) {
        let missing: Vec<u64> = (1..=*latest).filter(|s| !seqs.contains(s)).collect();
        violations.push(format!(
            "{cid}: seqs not dense 1..={latest}: {} messages read, missing {}, read {}",
            seqs.len(),
            few(&missing),
            few(&seqs)
        ));
    }
    let at: HashMap<u64, &Stored> = msgs.iter().map(|m| (m.seq, m)).collect();
    let mut named: HashMap<(&str, &str), u64> = HashMap::new();
    for a in acked {
        named.insert((&a.send.sender, &a.send.body), a.ack.seq);
        let want = Stored {
            seq: a.ack.seq,
            message_id: a.ack.message_id.clone(),
            sender: a.send.sender.clone(),
            body: a.send.body.clone(),
            committed_at: a.ack.committed_at.clone(),
        };
        match at.get(&a.ack.seq) {
            Some(m) if **m == want => {}
            found => violations.push(format!(
                "{cid}: ACK of {} is {want:?}, the history holds {found:?}",
                a.send.client_msg_id
            )),
        }
    }
    let mut seen: HashMap<(&str, &str), Vec<u64>> = HashMap::new();
    for m in msgs {
        seen.entry((&m.sender, &m.body)).or_default().push(m.seq);
        if !named.contains_key(&(m.sender.as_str(), m.body.as_str())) {
            violations.push(format!("{cid}: seq {} is in no ACK: {m:?}", m.seq));
        }
    }
    for ((sender, body), seqs) in seen.iter().filter(|(_, s)| s.len() > 1) {
        violations.push(format!(
            "{cid}: one send ({sender}: {body:?}) committed {} times, at seqs {}",
            seqs.len(),
            few(seqs)
        ));
    }
}

/// At most the first 20 of `v`, for a one-line message.
fn few(v: &[u64]) -> String {
    let shown: Vec<String> = v.iter().take(20).map(u64::to_string).collect();
    let more = v.len().saturating_sub(20);
    if more > 0 {
        format!("[{} … and {more} more]", shown.join(", "))
    } else {
        format!("[{}]", shown.join(", "))
    }
}
