//! What a crash test knows about its SENDs, and the checks it runs after every restart.
//!
//! A client records each SEND's outcome in a [`Ledger`]: the ACK (`201`, or `200` for a
//! retry), no answer (the request may have reached the server before it died, so the message
//! may or may not be committed), or nothing sent (the connection was refused). After the
//! server is restarted on the same stores, [`Ledger::check`]:
//!
//! 1. retries every unanswered send: it must be answered with an ACK (`201` if it was not
//!    committed, `200` with the first ACK if it was), which joins the others;
//! 2. reads every conversation's whole history through the public HTTP API (`GET
//!    /v1/conversations/{cid}/messages?after=…` pages, so across the hot tier and the
//!    archive): seqs are dense `1..=latest_seq`; every ACK is there at its seq with its
//!    message id, sender, body and commit time; each send is there once (one seq for a
//!    `client_msg_id`, however often it was retried); no message is there that no ACK names;
//! 3. retries ACKed sends (those since the last check and a sample of older ones): each is
//!    answered `200` with its original ACK, and appends nothing.
//!
//! Each broken promise is a violation, described in one line; the tests assert there is none,
//! `tidemark-bench soak` counts and prints them. Bodies name their `client_msg_id`, so a body
//! found twice is one send committed twice.

mod history;

use std::collections::{BTreeSet, HashMap};

use anyhow::{Context, bail};
use serde_json::{Value, json};

pub use history::read_history;

/// A server's chat API: its base URL (`http://127.0.0.1:<port>`) and a tenant's key.
#[derive(Debug, Clone)]
pub struct Api {
    /// The HTTP client (keep-alive pool).
    pub client: reqwest::Client,
    /// `http://host:port`, no trailing slash.
    pub base: String,
    /// The tenant's API key (`Authorization: Bearer`).
    pub key: String,
}

/// One SEND as the client makes it, and makes it again to retry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Send {
    /// Conversation id.
    pub cid: String,
    /// The sending member.
    pub sender: String,
    /// The idempotency key.
    pub client_msg_id: String,
    /// The text.
    pub body: String,
}

/// An acknowledgement: what the server promised about a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// `conversation_seq`.
    pub seq: u64,
    /// `message_id`.
    pub message_id: String,
    /// `committed_at`, as the server wrote it.
    pub committed_at: String,
}

/// An acknowledged send.
#[derive(Debug, Clone)]
pub struct Acked {
    /// The send.
    pub send: Send,
    /// Its first ACK.
    pub ack: Ack,
}

/// How one attempt at a send ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Answered with an ACK: `201` (`retry: false`) or `200` (`retry: true`, a send already
    /// committed).
    Acked {
        /// The ACK.
        ack: Ack,
        /// The answer was `200`.
        retry: bool,
    },
    /// The request may have reached the server, but no answer came (or a `5xx`): the send may
    /// or may not be committed. The text says what happened.
    Unanswered(String),
    /// The connection was refused: nothing reached the server.
    NotSent,
    /// Another answer (`4xx`): the send itself is wrong.
    Refused(String),
}

impl Api {
    /// `POST /v1/conversations/{cid}/messages`.
    pub async fn send(&self, s: &Send) -> Outcome {
        let resp = self
            .client
            .post(format!("{}/v1/conversations/{}/messages", self.base, s.cid))
            .bearer_auth(&self.key)
            .json(&json!({"client_msg_id": s.client_msg_id, "sender": s.sender, "body": s.body}))
            .send()
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Outcome::NotSent,
            Err(e) => return Outcome::Unanswered(format!("{e:#}")),
        };
        let status = resp.status().as_u16();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Outcome::Unanswered(format!("{status}, then {e:#}")),
        };
        match status {
            200 | 201 => match parse_ack(&text) {
                Some(ack) => Outcome::Acked {
                    ack,
                    retry: status == 200,
                },
                None => Outcome::Refused(format!("{status} without an ACK: {text}")),
            },
            500.. => Outcome::Unanswered(format!("{status}: {text}")),
            _ => Outcome::Refused(format!("{status}: {text}")),
        }
    }

    /// `POST /v1/conversations`: a new conversation of `members`; its id.
    pub async fn create_conversation(&self, members: &[String]) -> anyhow::Result<String> {
        let resp = self
            .client
            .post(format!("{}/v1/conversations", self.base))
            .bearer_auth(&self.key)
            .json(&json!({ "members": members }))
            .send()
            .await
            .context("POST /v1/conversations")?;
        let status = resp.status();
        let v: Value = resp.json().await.context("POST /v1/conversations")?;
        match v["conversation_id"].as_str() {
            Some(id) if status.as_u16() == 201 => Ok(id.to_owned()),
            _ => bail!("POST /v1/conversations: {status} {v}"),
        }
    }
}

fn parse_ack(text: &str) -> Option<Ack> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(Ack {
        seq: v["conversation_seq"].as_u64()?,
        message_id: v["message_id"].as_str()?.to_owned(),
        committed_at: v["committed_at"].as_str()?.to_owned(),
    })
}

/// Which ACKed sends [`Ledger::check`] sends again: every one from index `from` on (those
/// since the last check), and of the older ones those whose index is `offset` modulo `every`.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    /// The first index retried in full.
    pub from: usize,
    /// Every how many older ones one is retried (at least 1).
    pub every: usize,
    /// Which of them.
    pub offset: usize,
}

impl Retries {
    /// Every ACKed send.
    pub const ALL: Self = Self {
        from: 0,
        every: 1,
        offset: 0,
    };

    fn wants(&self, i: usize) -> bool {
        i >= self.from || i % self.every.max(1) == self.offset % self.every.max(1)
    }
}

/// What one [`Ledger::check`] found.
#[derive(Debug, Default)]
pub struct Check {
    /// ACKs found in the history as promised (or not: see `violations`).
    pub acks_checked: usize,
    /// Unanswered sends retried.
    pub unanswered_retried: usize,
    /// ACKed sends retried.
    pub acked_retried: usize,
    /// Every broken promise, one line each.
    pub violations: Vec<String>,
}

/// The sends of a crash test and how each ended.
#[derive(Debug, Default)]
pub struct Ledger {
    acked: Vec<Acked>,
    unanswered: Vec<Send>,
    /// Answers no correct server gives (a `4xx` to a valid send): violations found while
    /// sending, reported by the next check.
    refused: Vec<String>,
}

impl Ledger {
    /// Records how an attempt at `send` ended.
    pub fn record(&mut self, send: Send, outcome: Outcome) {
        match outcome {
            Outcome::Acked { ack, .. } => self.acked.push(Acked { send, ack }),
            Outcome::Unanswered(_) => self.unanswered.push(send),
            Outcome::NotSent => {}
            Outcome::Refused(why) => self
                .refused
                .push(format!("send {} refused: {why}", send.client_msg_id)),
        }
    }

    /// The ACKed sends, in the order recorded.
    pub fn acked(&self) -> &[Acked] {
        &self.acked
    }

    /// Sends without an answer, to be retried by the next check.
    pub fn unanswered(&self) -> usize {
        self.unanswered.len()
    }

    /// The checks of the module documentation, against the (restarted) server of `api`, over
    /// the `conversations` (every conversation a send went to, each with a member who reads
    /// its history). Errors: the server did not answer a read or a retry (then it is not up,
    /// which is no finding about its data).
    pub async fn check(
        &mut self,
        api: &Api,
        conversations: &[(String, String)],
        retries: Retries,
    ) -> anyhow::Result<Check> {
        let mut out = Check {
            violations: std::mem::take(&mut self.refused),
            ..Check::default()
        };
        for send in std::mem::take(&mut self.unanswered) {
            out.unanswered_retried += 1;
            match api.send(&send).await {
                Outcome::Acked { ack, .. } => self.acked.push(Acked { send, ack }),
                Outcome::Refused(why) => out.violations.push(format!(
                    "retry of unanswered send {} refused: {why}",
                    send.client_msg_id
                )),
                other => bail!(
                    "the retry of unanswered send {} got no answer: {other:?}",
                    send.client_msg_id
                ),
            }
        }
        let mut by_cid: HashMap<&str, Vec<&Acked>> = HashMap::new();
        for a in &self.acked {
            by_cid.entry(&a.send.cid).or_default().push(a);
        }
        let known: BTreeSet<&str> = conversations.iter().map(|(c, _)| c.as_str()).collect();
        if let Some(cid) = by_cid.keys().find(|c| !known.contains(**c)) {
            bail!("ACKs name conversation {cid}, which the check was not given");
        }
        for (cid, reader) in conversations {
            let acked = by_cid.get(cid.as_str()).map_or(&[][..], Vec::as_slice);
            let history = read_history(api, cid, reader).await?;
            out.acks_checked += acked.len();
            history::check(cid, &history, acked, &mut out.violations);
        }
        for (i, a) in self.acked.iter().enumerate() {
            if !retries.wants(i) {
                continue;
            }
            out.acked_retried += 1;
            match api.send(&a.send).await {
                Outcome::Acked { ack, retry: true } if ack == a.ack => {}
                Outcome::Acked { ack, retry } => out.violations.push(format!(
                    "retry of ACKed send {} ({} seq {} {} {}) answered {} with seq {} {} {}",
                    a.send.client_msg_id,
                    a.send.cid,
                    a.ack.seq,
                    a.ack.message_id,
                    a.ack.committed_at,
                    if retry { 200 } else { 201 },
                    ack.seq,
                    ack.message_id,
                    ack.committed_at
                )),
                Outcome::Refused(why) => out.violations.push(format!(
                    "retry of ACKed send {} refused: {why}",
                    a.send.client_msg_id
                )),
                other => bail!(
                    "the retry of ACKed send {} got no answer: {other:?}",
                    a.send.client_msg_id
                ),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
