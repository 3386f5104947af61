//! Campaign statistics: what a sender reads of one mailing (recipients rendered and skipped,
//! messages handed, delivered and failed, opens, clicks, per-link figures, an hourly
//! timeline), kept as a per-mailing summary while renders, deliveries and hits happen. The
//! summary never reads link records or raw events, so it outlives both: a mailing's figures
//! stay after its day partitions and its raw days are dropped.
//!
//! The counting rules are here, once; the stores ([`crate::store::MailingStore`]) only add
//! what [`tally`] computes:
//! - **Bots** — a HEAD request, a crawler, link scanner or HTTP library
//!   ([`crate::user_agent`]) — add to `bot_hits`, never to opens or clicks.
//! - **Machine opens** add to `opens.machine`, never to opens: an open whose user agent is a
//!   mail provider's image proxy ([`is_image_proxy`]: Gmail's `GoogleImageProxy`,
//!   `YahooMailProxy`, and Apple Mail Privacy Protection's bare `Mozilla/5.0`), or any open
//!   within [`MACHINE_OPEN_WINDOW_MS`] of its message's delivery (a proxy prefetching the
//!   images as the message arrives; a person takes longer).
//! - **Opens and clicks** of people count in `total` every time and in `unique` once per
//!   recipient (exact: one row per recipient, not an estimate). A person's click also marks
//!   the recipient as having opened, as their mail client may block images: a click proves
//!   the open, so `unique` opens are never fewer than `unique` clicks.
//! - **Per link position** (0-based, document order): clicks and unique clicking recipients.
//! - **Timeline**: opens and clicks per UTC hour.
//! - **Unsubscribes** (`POST /u/<id>`, RFC 8058 one-click): once per recipient.
//! - **Idempotence**: hits are applied in groups, each with a fresh group id that the store
//!   records in the same transaction; a group tried again after a failure whose outcome was
//!   unknown is applied once. Group ids are kept [`HIT_GROUPS_KEPT_MS`].

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::model::{LinkRecord, Mailing};
use crate::rewrite::LinkKind;

/// An open this soon after its message's delivery (ms) is a machine open: image proxies
/// fetch the pixel as the message arrives.
pub const MACHINE_OPEN_WINDOW_MS: i64 = 10_000;

/// How long a recipient's delivery time is kept (ms): only opens within
/// [`MACHINE_OPEN_WINDOW_MS`] of it need it, so an hour is ample.
pub const DELIVERIES_KEPT_MS: i64 = 3_600_000;

/// How long an applied hit group's id is kept (ms): longer than any retry of the group.
pub const HIT_GROUPS_KEPT_MS: i64 = 86_400_000;

/// Milliseconds in an hour: the timeline's step.
pub const HOUR_MS: i64 = 3_600_000;

/// Names of the summary's counters (rows of `mailing_count`).
pub mod counter {
    /// Messages rendered (link records stored).
    pub const RENDERED: &str = "rendered";
    /// Messages handed to the sending pool.
    pub const HANDED: &str = "handed";
    /// Messages the transport accepted (SMTP `250`, or the `.eml` file written).
    pub const DELIVERED: &str = "delivered";
    /// Messages given up (a permanent error, or transient ones past the retries).
    pub const FAILED: &str = "failed";
    /// Opens by people.
    pub const OPENS: &str = "opens";
    /// Recipients who opened (or clicked).
    pub const OPENS_UNIQUE: &str = "opens_unique";
    /// Machine opens (image proxies, opens at delivery).
    pub const OPENS_MACHINE: &str = "opens_machine";
    /// Clicks by people.
    pub const CLICKS: &str = "clicks";
    /// Recipients who clicked.
    pub const CLICKS_UNIQUE: &str = "clicks_unique";
    /// Hits of bots, scanners and HEAD requests.
    pub const BOT_HITS: &str = "bot_hits";
    /// Recipients who unsubscribed through the message.
    pub const UNSUBSCRIBED: &str = "unsubscribed";

    /// Recipients skipped for `reason` ([`super::skip_reason`]).
    pub fn skipped(reason: &str) -> String {
        format!("skipped:{reason}")
    }
    /// Clicks on link `position`.
    pub fn link_clicks(position: u32) -> String {
        format!("link:{position}:clicks")
    }
    /// Recipients who clicked link `position`.
    pub fn link_unique(position: u32) -> String {
        format!("link:{position}:unique")
    }
}

/// The reason a skipped recipient is counted under: `suppressed`, `too_many_links`, or
/// `render_failed` (a missing merge field, a template error).
pub fn skip_reason(reason: &str) -> &'static str {
    if reason == "suppressed" {
        "suppressed"
    } else if reason.starts_with("too many links") {
        "too_many_links"
    } else {
        "render_failed"
    }
}

/// Open pixel, link or unsubscribe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitKind {
    /// `/o/<id>`.
    Open,
    /// `/c/<id>` of a link (tracked images are not counted).
    Click,
    /// `POST /u/<id>`: the recipient unsubscribed (counted once per recipient, whoever
    /// sent it: only a POST unsubscribes, and scanners only fetch).
    Unsubscribe,
}

/// Who made a hit, as far as its request tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitSource {
    /// A browser or mail client.
    Person,
    /// A crawler, scanner, HTTP library, or a HEAD request.
    Bot,
    /// A mail provider's image proxy ([`is_image_proxy`]).
    ImageProxy,
}

/// Whether a `User-Agent` is a mail provider's image proxy: Gmail's `GoogleImageProxy`,
/// `YahooMailProxy`, or exactly `Mozilla/5.0`, which Apple Mail Privacy Protection's
/// prefetches send and no browser does.
pub fn is_image_proxy(user_agent: Option<&str>) -> bool {
    let Some(ua) = user_agent.map(str::trim) else {
        return false;
    };
    let lower = ua.to_ascii_lowercase();
    ua == "Mozilla/5.0" || lower.contains("googleimageproxy") || lower.contains("yahoomailproxy")
}

/// One tracking hit, as the summary needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsHit {
    /// The mailing.
    pub mailing_id: String,
    /// The recipient, as the link record holds it (compared lower case).
    pub email: String,
    /// The link's position; `None` for the pixel.
    pub position: Option<u32>,
    /// Open or click.
    pub kind: HitKind,
    /// Who made it.
    pub source: HitSource,
    /// When (Unix ms).
    pub at_ms: i64,
}

/// The sending pool's outcome for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The mailing.
    pub mailing_id: String,
    /// The recipient (compared lower case).
    pub email: String,
    /// Delivered (`true`) or given up.
    pub delivered: bool,
    /// When the outcome was known (Unix ms).
    pub at_ms: i64,
}

/// Tries of one write to the statistics (a group of hits, or of delivery outcomes) before
/// its figures are counted as lost.
pub const WRITE_ATTEMPTS: u32 = 3;

/// Wait before the second try of such a write; it doubles for each further one.
const WRITE_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `write` up to [`WRITE_ATTEMPTS`] times, pausing between tries; returns the last error
/// if every try failed. `what` names the write in the debug log of a retry.
pub(crate) async fn with_tries<T, F, Fut>(what: &str, mut write: F) -> crate::error::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::error::Result<T>>,
{
    let mut wait = WRITE_RETRY;
    let mut attempt = 1;
    loop {
        match write().await {
            Err(error) if attempt < WRITE_ATTEMPTS => {
                tracing::debug!(%error, attempt, "{what}: trying again");
                tokio::time::sleep(wait).await;
                wait *= 2;
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// What a group of the sending pool's outcomes adds to the summaries, for a store to write.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeliveryTally {
    /// `(mailing, counter)` (`delivered` or `failed`) → amount to add.
    pub counts: BTreeMap<(String, String), i64>,
    /// `(mailing, recipient key)` → when its message was delivered (the group's last).
    pub delivered_at: BTreeMap<(String, String), i64>,
}

/// Counts a group of outcomes ([`DeliveryTally`]).
pub fn tally_deliveries(deliveries: &[Delivery]) -> DeliveryTally {
    let mut t = DeliveryTally::default();
    for d in deliveries {
        let name = if d.delivered {
            t.delivered_at
                .insert((d.mailing_id.clone(), recipient_key(&d.email)), d.at_ms);
            counter::DELIVERED
        } else {
            counter::FAILED
        };
        *t.counts
            .entry((d.mailing_id.clone(), name.to_owned()))
            .or_default() += 1;
    }
    t
}

/// What a recipient did, in the uniques of a mailing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unique {
    /// Opened (or clicked).
    Opened,
    /// Clicked any link.
    Clicked,
    /// Clicked the link at this position.
    ClickedLink(u32),
    /// Unsubscribed.
    Unsubscribed,
}

impl Unique {
    /// Its code in the stores' `mailing_unique.what`: -1, -2, -3, or the position.
    pub fn code(self) -> i64 {
        match self {
            Unique::Opened => -1,
            Unique::Clicked => -2,
            Unique::Unsubscribed => -3,
            Unique::ClickedLink(p) => i64::from(p),
        }
    }

    /// The counter that counts its recipients.
    pub fn counter(self) -> String {
        match self {
            Unique::Opened => counter::OPENS_UNIQUE.to_owned(),
            Unique::Clicked => counter::CLICKS_UNIQUE.to_owned(),
            Unique::ClickedLink(p) => counter::link_unique(p),
            Unique::Unsubscribed => counter::UNSUBSCRIBED.to_owned(),
        }
    }
}

/// What one group of hits adds to the summaries, for a store to write.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// `(mailing, counter)` → amount to add.
    pub counts: BTreeMap<(String, String), i64>,
    /// `(mailing, hour start in Unix ms)` → (opens, clicks) to add.
    pub hours: BTreeMap<(String, i64), (i64, i64)>,
    /// `(mailing, what)` → recipients (lower case) who did it in this group; the store adds
    /// to [`Unique::counter`] the number of them it had not seen before.
    pub uniques: BTreeMap<(String, Unique), Vec<String>>,
}

impl Tally {
    fn add(&mut self, mailing: &str, counter: impl Into<String>, n: i64) {
        *self
            .counts
            .entry((mailing.to_owned(), counter.into()))
            .or_default() += n;
    }

    fn saw(&mut self, mailing: &str, what: Unique, email: &str) {
        self.uniques
            .entry((mailing.to_owned(), what))
            .or_default()
            .push(email.to_owned());
    }
}

/// Most unique keys [`SeenUniques`] remembers before it starts afresh (16 bytes each).
pub const SEEN_UNIQUES_MAX: usize = 1 << 20;

/// The unique keys `(mailing, what, recipient)` this process knows the store holds: a
/// recipient clicking again is then counted without touching its unique rows (rows of
/// `mailing_unique` are never deleted, so a key once stored stays stored). Keys are 128-bit
/// SipHash digests under a random key of the process; at most [`SEEN_UNIQUES_MAX`], then it
/// starts afresh. A store adds a group's keys only after the group committed.
#[derive(Debug)]
pub struct SeenUniques {
    hasher: siphasher::sip128::SipHasher13,
    keys: std::sync::Mutex<std::collections::HashSet<u128>>,
}

impl Default for SeenUniques {
    fn default() -> Self {
        Self {
            hasher: siphasher::sip128::SipHasher13::new_with_keys(rand::random(), rand::random()),
            keys: std::sync::Mutex::default(),
        }
    }
}

impl SeenUniques {
    fn key(&self, mailing: &str, what: Unique, email: &str) -> u128 {
        use siphasher::sip128::Hasher128;
        use std::hash::Hasher;
        let mut h = self.hasher;
        h.write(mailing.as_bytes());
        h.write_u8(0);
        h.write_i64(what.code());
        h.write(email.as_bytes());
        h.finish128().as_u128()
    }

    /// Drops from `t` the uniques already known stored; returns the keys of those left, for
    /// [`SeenUniques::remember`] once they are committed.
    pub fn filter(&self, t: &mut Tally) -> Vec<u128> {
        let known = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut fresh = Vec::new();
        for ((mailing, what), emails) in &mut t.uniques {
            emails.retain(|e| {
                let k = self.key(mailing, *what, e);
                let keep = !known.contains(&k);
                if keep {
                    fresh.push(k);
                }
                keep
            });
        }
        t.uniques.retain(|_, emails| !emails.is_empty());
        fresh
    }

    /// Remembers committed keys.
    pub fn remember(&self, keys: Vec<u128>) {
        let mut known = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if known.len() + keys.len() > SEEN_UNIQUES_MAX {
            known.clear();
        }
        known.extend(keys);
    }
}

/// The recipient key of the uniques and deliveries: trimmed, lower case.
pub fn recipient_key(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Applies the counting rules (module docs) to a group of hits. `delivered_at` gives the
/// delivery time of `(mailing, recipient key)` if the store still holds it.
pub fn tally(hits: &[StatsHit], mut delivered_at: impl FnMut(&str, &str) -> Option<i64>) -> Tally {
    let mut t = Tally::default();
    for h in hits {
        let m = h.mailing_id.as_str();
        let email = recipient_key(&h.email);
        let hour = h.at_ms.div_euclid(HOUR_MS) * HOUR_MS;
        match (h.kind, h.source) {
            (HitKind::Unsubscribe, _) => t.saw(m, Unique::Unsubscribed, &email),
            (_, HitSource::Bot) | (HitKind::Click, HitSource::ImageProxy) => {
                t.add(m, counter::BOT_HITS, 1);
            }
            (HitKind::Open, HitSource::ImageProxy) => t.add(m, counter::OPENS_MACHINE, 1),
            (HitKind::Open, HitSource::Person)
                if delivered_at(m, &email)
                    .is_some_and(|d| (0..MACHINE_OPEN_WINDOW_MS).contains(&(h.at_ms - d))) =>
            {
                t.add(m, counter::OPENS_MACHINE, 1);
            }
            (HitKind::Open, HitSource::Person) => {
                t.add(m, counter::OPENS, 1);
                t.hours.entry((m.to_owned(), hour)).or_default().0 += 1;
                t.saw(m, Unique::Opened, &email);
            }
            (HitKind::Click, HitSource::Person) => {
                t.add(m, counter::CLICKS, 1);
                t.hours.entry((m.to_owned(), hour)).or_default().1 += 1;
                t.saw(m, Unique::Opened, &email);
                t.saw(m, Unique::Clicked, &email);
                if let Some(p) = h.position {
                    t.add(m, counter::link_clicks(p), 1);
                    t.saw(m, Unique::ClickedLink(p), &email);
                }
            }
        }
    }
    for emails in t.uniques.values_mut() {
        emails.sort_unstable();
        emails.dedup();
    }
    t
}

/// What a store holds of one mailing's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredStats {
    /// Counter → value (absent counters are 0).
    pub counts: BTreeMap<String, i64>,
    /// Link position → its URL as first rendered, ascending.
    pub links: Vec<(u32, String)>,
    /// Hour start (Unix ms) → (opens, clicks), ascending.
    pub hours: Vec<(i64, i64, i64)>,
}

impl StoredStats {
    fn get(&self, counter: &str) -> u64 {
        self.counts.get(counter).copied().unwrap_or_default().max(0) as u64
    }
}

/// `GET /v1/mailings/{id}/stats`: a mailing's campaign statistics.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MailingStats {
    /// The mailing.
    pub mailing_id: String,
    /// Recipients rendered and skipped.
    pub recipients: RecipientStats,
    /// The sending pool's outcomes.
    pub sending: SendingStats,
    /// Opens by people, and machine opens apart.
    pub opens: OpenStats,
    /// Clicks by people.
    pub clicks: ClickStats,
    /// Unique clicking recipients ÷ unique opening ones; `null` before any open.
    pub click_to_open: Option<f64>,
    /// Hits of bots, scanners and HEAD requests (in neither opens nor clicks).
    pub bot_hits: u64,
    /// Recipients who unsubscribed through this mailing.
    pub unsubscribed: u64,
    /// Per link position of the template, in document order.
    pub links: Vec<LinkStats>,
    /// Opens and clicks per UTC hour, ascending, hours without any left out.
    pub timeline: Vec<HourStats>,
}

/// Recipients of a mailing's renders and sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RecipientStats {
    /// Messages rendered.
    pub rendered: u64,
    /// Recipients skipped, by reason (`suppressed`, `render_failed`, `too_many_links`).
    pub skipped: BTreeMap<String, u64>,
}

/// The sending pool's outcomes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SendingStats {
    /// Messages handed to the pool.
    pub handed: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages given up.
    pub failed: u64,
}

/// Opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct OpenStats {
    /// Opens by people.
    pub total: u64,
    /// Recipients who opened (or clicked).
    pub unique: u64,
    /// Machine opens: image proxies and opens at delivery.
    pub machine: u64,
}

/// Clicks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ClickStats {
    /// Clicks by people.
    pub total: u64,
    /// Recipients who clicked.
    pub unique: u64,
}

/// One link position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LinkStats {
    /// 0-based, in document order of the rendered message (tracked images count too).
    pub position: u32,
    /// The link's URL as rendered for the mailing's first recipient (merge fields filled
    /// in); `null` if the store has none (a click counted before its render was).
    pub url: Option<String>,
    /// Clicks by people.
    pub clicks: u64,
    /// Recipients who clicked it.
    pub unique_clicks: u64,
}

/// One hour of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct HourStats {
    /// Start of the hour, RFC 3339 UTC.
    pub hour: String,
    /// Opens by people.
    pub opens: u64,
    /// Clicks by people.
    pub clicks: u64,
}

/// The links of a render to keep in the summary: position → URL of each link (not images,
/// not the pixel), first recipient's wins.
pub fn rendered_links(records: &[LinkRecord]) -> Vec<(u32, String)> {
    let mut links = BTreeMap::new();
    for r in records {
        if let (LinkKind::Link, Some(p)) = (r.kind, r.position) {
            links.entry(p).or_insert_with(|| r.url.clone());
        }
    }
    links.into_iter().collect()
}

/// The statistics of `mailing` from its stored summary.
pub fn mailing_stats(mailing: &Mailing, stored: &StoredStats) -> MailingStats {
    let get = |c: &str| stored.get(c);
    let mut positions: BTreeMap<u32, Option<String>> = stored
        .links
        .iter()
        .map(|(p, url)| (*p, Some(url.clone())))
        .collect();
    let mut skipped = BTreeMap::new();
    for (name, n) in &stored.counts {
        if let Some(reason) = name.strip_prefix("skipped:") {
            skipped.insert(reason.to_owned(), (*n).max(0) as u64);
        } else if let Some(p) = name
            .strip_prefix("link:")
            .and_then(|r| r.split_once(':'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        {
            positions.entry(p).or_insert(None);
        }
    }
    let (opens_unique, clicks_unique) = (get(counter::OPENS_UNIQUE), get(counter::CLICKS_UNIQUE));
    MailingStats {
        mailing_id: mailing.mailing_id.clone(),
        recipients: RecipientStats {
            rendered: get(counter::RENDERED),
            skipped,
        },
        sending: SendingStats {
            handed: get(counter::HANDED),
            delivered: get(counter::DELIVERED),
            failed: get(counter::FAILED),
        },
        opens: OpenStats {
            total: get(counter::OPENS),
            unique: opens_unique,
            machine: get(counter::OPENS_MACHINE),
        },
        clicks: ClickStats {
            total: get(counter::CLICKS),
            unique: clicks_unique,
        },
        click_to_open: (opens_unique > 0).then(|| clicks_unique as f64 / opens_unique as f64),
        bot_hits: get(counter::BOT_HITS),
        unsubscribed: get(counter::UNSUBSCRIBED),
        links: positions
            .into_iter()
            .map(|(position, url)| LinkStats {
                position,
                url,
                clicks: get(&counter::link_clicks(position)),
                unique_clicks: get(&counter::link_unique(position)),
            })
            .collect(),
        timeline: stored
            .hours
            .iter()
            .map(|&(hour, opens, clicks)| HourStats {
                hour: tidemark_core::timefmt::rfc3339_ms(hour),
                opens: opens.max(0) as u64,
                clicks: clicks.max(0) as u64,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
