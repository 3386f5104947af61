//! The sending pool (DESIGN.md part B, step 4): rendered messages are handed to a bounded queue
//! and delivered by a fixed set of worker tasks.
//!
//! * **Transports** ([`MailTransport`]): [`EmlDir`] writes one RFC 5322 `.eml` file per message
//!   (the embedded default, under `./data/mail-out/`); [`SmtpRelay`] speaks SMTP to a relay
//!   through a small pool of kept-open connections (lettre).
//! * **One message builder** ([`build_message`]) serves both transports, so a `.eml` file is
//!   byte for byte what a relay would have received (apart from `Date` and `Message-ID`).
//! * **Headers**: `From`, `To`, `Subject`, `Date`, `Message-ID`, MIME headers, and
//!   `List-Unsubscribe` with the URIs exactly as given (never rewritten to a tracking URL), plus
//!   `List-Unsubscribe-Post: List-Unsubscribe=One-Click` (RFC 8058) when one of them is https.
//! * **Delivery** ([`SendingPool`]): messages are spread round-robin over the configured
//!   transport and relays; each relay has `connections` workers (so at most that many SMTP
//!   sessions at once); a [`SendError::Transient`] failure is retried with exponential back-off,
//!   a [`SendError::Permanent`] one is given up at once. [`SendingPool::shutdown`] drains the
//!   queue before it returns, so nothing queued is lost on a clean stop.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lettre::Message;
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, SinglePart};
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

mod eml;
mod smtp;

pub use eml::EmlDir;
pub use smtp::{SMTP_COMMAND_TIMEOUT, SmtpRelay};

/// Where the embedded default writes its `.eml` files, relative to the working directory.
pub const DEFAULT_EML_DIR: &str = "data/mail-out";

/// Longest `List-Unsubscribe` URI accepted, in bytes: a header line must stay under the
/// 998-byte limit of RFC 5322, and URIs cannot be folded.
pub const MAX_UNSUBSCRIBE_URI_LEN: usize = 900;

/// Longest back-off between two attempts, whatever the configured doubling gives.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(60);

/// One rendered message for one recipient, ready to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutgoingMail {
    /// The mailing it belongs to (also the sub-directory of [`EmlDir`]).
    pub mailing_id: String,
    /// `From:` mailbox, `addr@host` or `Name <addr@host>`.
    pub from: String,
    /// `To:` mailbox (one recipient), same syntax as `from`.
    pub to: String,
    /// Subject, any UTF-8 (encoded per RFC 2047 when needed).
    pub subject: String,
    /// The personalised HTML (tracking links and pixel already in place).
    pub html: String,
    /// `List-Unsubscribe` URIs (`mailto:…`, `https://…`), emitted as given, in order, as
    /// `List-Unsubscribe: <a>, <b>`. Empty → no header.
    pub list_unsubscribe: Vec<String>,
}

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Will fail again: invalid address or header, SMTP 5xx, bad configuration. Not retried.
    #[error("permanent send failure: {0}")]
    Permanent(String),
    /// May succeed later: SMTP 4xx, connection or I/O error, timeout. Retried with back-off.
    #[error("transient send failure: {0}")]
    Transient(String),
}

impl SendError {
    /// True for [`SendError::Transient`].
    pub fn is_transient(&self) -> bool {
        matches!(self, SendError::Transient(_))
    }
}

/// Sending-pool configuration (the `[mail]` table of the config file).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct MailConfig {
    /// `"eml"` (default: `.eml` files under the pool's eml directory), or an SMTP URL in lettre
    /// syntax: `smtp://host:port` (plain), `smtp://host:port?tls=required` (STARTTLS),
    /// `smtps://host:port` (implicit TLS), with optional `user:password@` credentials.
    pub transport: String,
    /// More SMTP URLs (same syntax); messages are spread round-robin over `transport` and
    /// these. Only allowed when `transport` is SMTP too.
    pub relays: Vec<String>,
    /// Concurrent deliveries per relay (= pooled SMTP connections per relay; for `eml`, the
    /// number of concurrent file writers). Default 4, at least 1.
    pub connections: usize,
    /// Retries of a transiently failed message after its first attempt. Default 3.
    pub retries: u32,
    /// Back-off before the first retry; it doubles on each further retry (capped at
    /// [`MAX_RETRY_BACKOFF`]). Humantime syntax (`"500ms"`, `"2s"`). Default 500 ms.
    #[serde(with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// Messages the queue holds before [`SendingPool::enqueue`] waits, in total over all
    /// relays. Default 10,000, at least 1.
    pub queue: usize,
}

impl Default for MailConfig {
    fn default() -> Self {
        MailConfig {
            transport: "eml".to_owned(),
            relays: Vec::new(),
            connections: 4,
            retries: 3,
            retry_backoff: Duration::from_millis(500),
            queue: 10_000,
        }
    }
}

/// A way to deliver one message.
#[async_trait::async_trait]
pub trait MailTransport: Send + Sync + fmt::Debug {
    /// Delivers `mail` once (no retries here); `Ok` means it was accepted (written to disk, or
    /// the relay answered 250 to the end of DATA).
    async fn deliver(&self, mail: &OutgoingMail) -> Result<(), SendError>;

    /// Releases what the transport keeps open (e.g. pooled SMTP connections). Called once by
    /// [`SendingPool::shutdown`] after the last delivery. Default: nothing.
    async fn close(&self) {}
}

/// Builds the RFC 5322 message of `mail`: `From`, `To`, `Subject`, `Date`, `Message-ID`,
/// `MIME-Version`, `List-Unsubscribe` (+ `List-Unsubscribe-Post` when an https URI is present)
/// and one `text/html; charset=utf-8` part whose transfer encoding (7bit, quoted-printable or
/// base64) lettre picks so that every line stays within the limits of RFC 5322.
///
/// Invalid `from`/`to` addresses and unusable unsubscribe URIs are [`SendError::Permanent`].
pub fn build_message(mail: &OutgoingMail) -> Result<Message, SendError> {
    let from: Mailbox = mail
        .from
        .parse()
        .map_err(|e| SendError::Permanent(format!("invalid from address {:?}: {e}", mail.from)))?;
    let to: Mailbox = mail
        .to
        .parse()
        .map_err(|e| SendError::Permanent(format!("invalid to address {:?}: {e}", mail.to)))?;
    let mut builder = Message::builder()
        .from(from)
        .to(to)
        .subject(mail.subject.as_str())
        .date_now()
        .message_id(None);
    if !mail.list_unsubscribe.is_empty() {
        let mut one_click = false;
        for uri in &mail.list_unsubscribe {
            one_click |= check_unsubscribe_uri(uri)?;
        }
        let value = mail
            .list_unsubscribe
            .iter()
            .map(|u| format!("<{u}>"))
            .collect::<Vec<_>>()
            .join(", ");
        builder = builder.raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("List-Unsubscribe"),
            value,
        ));
        if one_click {
            builder = builder.raw_header(HeaderValue::new(
                HeaderName::new_from_ascii_str("List-Unsubscribe-Post"),
                "List-Unsubscribe=One-Click".to_owned(),
            ));
        }
    }
    builder
        .singlepart(SinglePart::html(mail.html.clone()))
        .map_err(|e| SendError::Permanent(format!("cannot build message: {e}")))
}

/// Checks one `List-Unsubscribe` URI; returns whether it is https (one-click capable).
fn check_unsubscribe_uri(uri: &str) -> Result<bool, SendError> {
    let bad = |why: &str| SendError::Permanent(format!("List-Unsubscribe URI {uri:?} {why}"));
    if uri.len() > MAX_UNSUBSCRIBE_URI_LEN {
        return Err(bad("is too long"));
    }
    if !uri
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'<' && b != b'>')
    {
        return Err(bad(
            "must be printable ASCII without spaces or angle brackets (percent-encode it)",
        ));
    }
    let scheme = uri.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("https") => Ok(true),
        Some("mailto" | "http") => Ok(false),
        _ => Err(bad("must be a mailto:, https: or http: URI")),
    }
}

/// Where a [`SendingPool`] reports each message's outcome ([`SendingPool::report_to`]): the
/// campaign statistics' `delivered` and `failed`.
pub trait DeliveryLog: Send + Sync + fmt::Debug {
    /// `mail` was delivered (`true`) or given up; called once per message, from a worker,
    /// so it must not block.
    fn record(&self, mail: &OutgoingMail, delivered: bool);
}

/// The pool's [`DeliveryLog`], once one is set.
type SharedLog = Arc<OnceLock<Arc<dyn DeliveryLog>>>;

/// Counters of a [`SendingPool`], cumulative since [`SendingPool::start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PoolStats {
    /// Messages accepted by [`SendingPool::enqueue`].
    pub queued: u64,
    /// Messages delivered (first attempt or a retry).
    pub sent: u64,
    /// Retry attempts made (one message may count several times).
    pub retried: u64,
    /// Messages given up: a permanent error, or a transient one after the last retry.
    pub failed: u64,
}

impl PoolStats {
    /// Messages queued or in delivery: neither sent nor failed yet.
    pub fn pending(&self) -> u64 {
        self.queued.saturating_sub(self.sent + self.failed)
    }
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    sent: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> PoolStats {
        PoolStats {
            queued: self.queued.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// Bounded queue + worker tasks delivering [`OutgoingMail`] through the configured transports.
#[derive(Debug)]
pub struct SendingPool {
    /// One queue per transport (round-robin target).
    senders: Vec<mpsc::Sender<OutgoingMail>>,
    transports: Vec<Arc<dyn MailTransport>>,
    workers: Vec<JoinHandle<()>>,
    next: AtomicUsize,
    counters: Arc<Counters>,
    log: SharedLog,
}

impl SendingPool {
    /// Starts the pool described by `cfg` on the current tokio runtime: one transport for
    /// `cfg.transport` (`"eml"` writes under `eml_dir`) and one per relay, each with its own
    /// share of the queue (`cfg.queue` split evenly) and `cfg.connections` worker tasks.
    ///
    /// Errors ([`SendError::Permanent`]): no tokio runtime, `connections` or `queue` of 0, an
    /// unknown transport or bad SMTP URL, relays next to the `eml` transport.
    pub fn start(cfg: &MailConfig, eml_dir: PathBuf) -> Result<Self, SendError> {
        current_runtime()?;
        let mut transports: Vec<Arc<dyn MailTransport>> = Vec::new();
        if cfg.transport == "eml" {
            if !cfg.relays.is_empty() {
                return Err(SendError::Permanent(
                    "mail.relays need an smtp:// or smtps:// mail.transport, not eml".into(),
                ));
            }
            transports.push(Arc::new(EmlDir::new(eml_dir)));
        } else {
            for url in std::iter::once(&cfg.transport).chain(&cfg.relays) {
                transports.push(Arc::new(SmtpRelay::new(url, cfg.connections)?));
            }
        }
        Self::with_transports(transports, cfg)
    }

    /// Like [`SendingPool::start`] but with ready-made transports (e.g. a test double);
    /// `cfg.transport` and `cfg.relays` are ignored, the other fields apply.
    pub fn with_transports(
        transports: Vec<Arc<dyn MailTransport>>,
        cfg: &MailConfig,
    ) -> Result<Self, SendError> {
        let runtime = current_runtime()?;
        if transports.is_empty() {
            return Err(SendError::Permanent(
                "the sending pool needs a transport".into(),
            ));
        }
        if cfg.connections == 0 {
            return Err(SendError::Permanent(
                "mail.connections must be at least 1".into(),
            ));
        }
        if cfg.queue == 0 {
            return Err(SendError::Permanent("mail.queue must be at least 1".into()));
        }
        let per_queue = cfg.queue.div_ceil(transports.len()).max(1);
        let counters = Arc::new(Counters::default());
        let log = SharedLog::default();
        let mut senders = Vec::with_capacity(transports.len());
        let mut workers = Vec::with_capacity(transports.len() * cfg.connections);
        for transport in &transports {
            let (tx, rx) = mpsc::channel::<OutgoingMail>(per_queue);
            let rx = Arc::new(Mutex::new(rx));
            senders.push(tx);
            for _ in 0..cfg.connections {
                workers.push(runtime.spawn(worker(
                    Arc::clone(&rx),
                    Arc::clone(transport),
                    Arc::clone(&counters),
                    Arc::clone(&log),
                    cfg.retries,
                    cfg.retry_backoff,
                )));
            }
        }
        tracing::info!(
            transports = ?transports,
            workers = workers.len(),
            queue = cfg.queue,
            "sending pool started"
        );
        Ok(SendingPool {
            senders,
            transports,
            workers,
            next: AtomicUsize::new(0),
            counters,
            log,
        })
    }

    /// Queues `mails` (round-robin over the transports), waiting while the queue is full;
    /// returns once all are queued, with their number. Delivery happens in the background:
    /// watch [`SendingPool::stats`].
    ///
    /// Fails ([`SendError::Transient`]) only if the workers are gone; the messages before the
    /// failing one stay queued. Likewise, if this future is dropped while waiting for room, the
    /// messages queued so far stay queued and the rest are not: a caller that must not lose
    /// part of a batch to a cancelled request should run this in its own task.
    pub async fn enqueue(&self, mails: Vec<OutgoingMail>) -> Result<usize, SendError> {
        let n = mails.len();
        for mail in mails {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.senders.len();
            let permit = self.senders[i]
                .reserve()
                .await
                .map_err(|_| SendError::Transient("the sending pool is stopped".into()))?;
            // Counted before a worker can see it, so `sent + failed <= queued` always holds.
            self.counters.queued.fetch_add(1, Ordering::Relaxed);
            permit.send(mail);
        }
        Ok(n)
    }

    /// Reports every outcome from now on to `log`; the first log set stays (a pool serves
    /// one links service).
    pub fn report_to(&self, log: Arc<dyn DeliveryLog>) {
        let _ = self.log.set(log);
    }

    /// Current counters.
    pub fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    /// Graceful stop: closes the queue, lets the workers deliver everything already queued
    /// (retries and back-offs included), joins them, then closes the transports (SMTP `QUIT`).
    /// Returns the final counters (`sent + failed == queued`). Dropping the pool without this
    /// also lets the workers drain, but nobody waits for them.
    pub async fn shutdown(self) -> PoolStats {
        let SendingPool {
            senders,
            transports,
            workers,
            counters,
            ..
        } = self;
        drop(senders);
        for handle in workers {
            if let Err(e) = handle.await {
                tracing::error!(error = %e, "sending worker ended abnormally");
            }
        }
        for transport in &transports {
            transport.close().await;
        }
        let stats = counters.snapshot();
        tracing::info!(?stats, "sending pool stopped");
        stats
    }
}

/// The tokio runtime the pool (and lettre's connection pool) spawns its tasks on.
fn current_runtime() -> Result<tokio::runtime::Handle, SendError> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| SendError::Permanent("the sending pool needs a tokio runtime".into()))
}

/// Back-off before retry number `retry` (1-based): `base · 2^(retry-1)`, capped.
fn backoff(base: Duration, retry: u32) -> Duration {
    let factor = 1u32
        .checked_shl(retry.saturating_sub(1))
        .unwrap_or(u32::MAX);
    base.checked_mul(factor)
        .unwrap_or(MAX_RETRY_BACKOFF)
        .min(MAX_RETRY_BACKOFF)
}

async fn worker(
    rx: Arc<Mutex<mpsc::Receiver<OutgoingMail>>>,
    transport: Arc<dyn MailTransport>,
    counters: Arc<Counters>,
    log: SharedLog,
    retries: u32,
    base_backoff: Duration,
) {
    let report = |mail: &OutgoingMail, delivered: bool| {
        if let Some(log) = log.get() {
            log.record(mail, delivered);
        }
    };
    loop {
        // Only one worker waits on the receiver at a time; the lock is released before the
        // delivery, so the others pick up the next messages meanwhile.
        let next = rx.lock().await.recv().await;
        let Some(mail) = next else { return };
        let mut attempt = 0u32;
        loop {
            match transport.deliver(&mail).await {
                Ok(()) => {
                    counters.sent.fetch_add(1, Ordering::Relaxed);
                    report(&mail, true);
                    tracing::debug!(mailing = %mail.mailing_id, to = %mail.to, attempt, "mail sent");
                    break;
                }
                Err(SendError::Transient(e)) if attempt < retries => {
                    attempt += 1;
                    let wait = backoff(base_backoff, attempt);
                    tracing::warn!(
                        mailing = %mail.mailing_id, to = %mail.to, error = %e, retry = attempt,
                        wait_ms = wait.as_millis() as u64, "mail delivery failed, retrying"
                    );
                    counters.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    report(&mail, false);
                    tracing::warn!(
                        mailing = %mail.mailing_id, to = %mail.to, error = %e, attempts = attempt + 1,
                        "mail delivery given up"
                    );
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mail() -> OutgoingMail {
        OutgoingMail {
            mailing_id: "m1".into(),
            from: "News <news@ex.com>".into(),
            to: "ann@ex.com".into(),
            subject: "Hallo".into(),
            html: "<p>hi</p>".into(),
            list_unsubscribe: vec![],
        }
    }

    fn header(msg: &Message, name: &str) -> Option<String> {
        msg.headers().get_raw(name).map(str::to_owned)
    }

    #[test]
    fn list_unsubscribe_as_given_and_one_click_only_with_https() {
        let mut m = mail();
        m.list_unsubscribe = vec!["mailto:u@ex.com?subject=unsub".into()];
        let msg = build_message(&m).unwrap();
        assert_eq!(
            header(&msg, "List-Unsubscribe").as_deref(),
            Some("<mailto:u@ex.com?subject=unsub>")
        );
        assert_eq!(header(&msg, "List-Unsubscribe-Post"), None);

        m.list_unsubscribe
            .push("https://ex.com/u/Ab_9?x=1&y=%C3%A9".into());
        let msg = build_message(&m).unwrap();
        assert_eq!(
            header(&msg, "List-Unsubscribe").as_deref(),
            Some("<mailto:u@ex.com?subject=unsub>, <https://ex.com/u/Ab_9?x=1&y=%C3%A9>")
        );
        assert_eq!(
            header(&msg, "List-Unsubscribe-Post").as_deref(),
            Some("List-Unsubscribe=One-Click")
        );

        m.list_unsubscribe.clear();
        let msg = build_message(&m).unwrap();
        assert_eq!(header(&msg, "List-Unsubscribe"), None);
    }

    #[test]
    fn bad_input_is_permanent() {
        for (field, value) in [
            ("to", "not an address"),
            ("from", "a@"),
            ("unsub", "https://ex.com/a b"),
            ("unsub", "javascript:alert(1)"),
            ("unsub", "https://ex.com/>\r\nBcc: x@ex.com"),
        ] {
            let mut m = mail();
            match field {
                "to" => m.to = value.into(),
                "from" => m.from = value.into(),
                _ => m.list_unsubscribe = vec![value.into()],
            }
            let err = build_message(&m).unwrap_err();
            assert!(
                matches!(err, SendError::Permanent(_)),
                "{field}={value:?}: {err}"
            );
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let b = Duration::from_millis(500);
        assert_eq!(backoff(b, 1), Duration::from_millis(500));
        assert_eq!(backoff(b, 2), Duration::from_millis(1000));
        assert_eq!(backoff(b, 3), Duration::from_millis(2000));
        assert_eq!(backoff(b, 40), MAX_RETRY_BACKOFF);
    }

    #[test]
    fn config_defaults_and_humantime() {
        let cfg: MailConfig = serde_json::from_str(
            r#"{"transport": "smtp://127.0.0.1:2525", "retry_backoff": "2s"}"#,
        )
        .unwrap();
        assert_eq!(cfg.transport, "smtp://127.0.0.1:2525");
        assert_eq!(cfg.retry_backoff, Duration::from_secs(2));
        assert_eq!(cfg.connections, 4);
        assert_eq!(cfg.retries, 3);
        assert_eq!(cfg.queue, 10_000);
        assert_eq!(
            serde_json::from_str::<MailConfig>("{}").unwrap(),
            MailConfig::default()
        );
        assert!(serde_json::from_str::<MailConfig>(r#"{"relay": "x"}"#).is_err());
    }
}
