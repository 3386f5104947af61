//! What the demo does, decided before it sends anything: pure functions of the inputs (the
//! corpus files and the counts asked for), with simple arithmetic rules so that a test can
//! recompute every expected figure with its own code.
//!
//! The rules:
//! - **Listings**: the distinct `aid`s of `events/otto-sample.jsonl`, ascending; the listing at
//!   index `i` belongs to account `i % 3 + 1`.
//! - **Events**: every OTTO event becomes one event (`clicks` → `view`, `carts` → `click`,
//!   `orders` → `contact`; `listing_id = aid`, `session_id = "otto-<session>"`,
//!   `page_url = "/item/<aid>"`), its time scaled from the file's 28-day span into the demo day
//!   (from 00:00 UTC to the moment the demo starts), order kept.
//! - **Campaigns**: one per `emails/*.html`, in file-name order (`c` = index). Each template
//!   gets a "recommended listing" block before `</body>` with a merge-field link to
//!   `https://shop.example/item/<listing>`.
//! - **Recipients** `r = 0..N`: `user<r>@demo.example`; suppressed when `r % 97 == 0`;
//!   recommended listing `listings[(c·7919 + r·31) % n]`; opens the pixel when
//!   `(r + c) % 3 == 0`; clicks the listing link in a browser when `(r + c) % 5 == 0`; a link
//!   scanner (a bot: `HEAD`) hits the listing link when `(r + c) % 11 == 0`.
//! - **Conversations** `k = 0..K`: about `listings[(k·13) % n]`, between `buyer<k>` and
//!   `seller<account>`; `2 + k % 4` messages, alternating buyer/seller from the buyer;
//!   conversation `k % 4 == 0` retries its first message with the same `client_msg_id`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Accounts owning the listings.
pub const ACCOUNTS: u64 = 3;
/// Where recommended-listing links point (the `/item/<id>` pattern links recognise).
pub const SHOP: &str = "https://shop.example";
/// The anchor the demo finds its recommended-listing link by, in the rendered HTML.
pub const LISTING_MARK: &str = r#"data-demo="listing" href=""#;

/// One OTTO event as the file says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OttoEvent {
    /// Session number.
    pub session: i64,
    /// Article id: the listing.
    pub aid: i64,
    /// Unix ms.
    pub ts: i64,
    /// Tidemark kind (`view`, `click`, `contact`).
    pub kind: &'static str,
}

/// The inputs read from the corpus.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// OTTO events in file order.
    pub events: Vec<OttoEvent>,
    /// `(file name, HTML)` of each template, by file name.
    pub templates: Vec<(String, String)>,
}

impl Corpus {
    /// Reads `<dir>/events/otto-sample.jsonl` and `<dir>/emails/*.html`.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let otto = dir.join("events/otto-sample.jsonl");
        let text = std::fs::read_to_string(&otto)
            .with_context(|| format!("reading {} (is --corpus right?)", otto.display()))?;
        let mut events = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{} line {}", otto.display(), n + 1))?;
            let session = v["session"].as_i64().context("session")?;
            for e in v["events"].as_array().context("events")? {
                let kind = match e["type"].as_str() {
                    Some("clicks") => "view",
                    Some("carts") => "click",
                    Some("orders") => "contact",
                    other => bail!("{} line {}: unknown type {other:?}", otto.display(), n + 1),
                };
                events.push(OttoEvent {
                    session,
                    aid: e["aid"].as_i64().context("aid")?,
                    ts: e["ts"].as_i64().context("ts")?,
                    kind,
                });
            }
        }
        let emails = dir.join("emails");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&emails)
            .with_context(|| format!("reading {}", emails.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "html"))
            .collect();
        paths.sort();
        let templates = paths
            .iter()
            .map(|p| {
                let name = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))
                    .map(|html| (name, html))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if events.is_empty() || templates.is_empty() {
            bail!(
                "the corpus in {} has no events or no templates",
                dir.display()
            );
        }
        Ok(Self { events, templates })
    }

    /// Distinct listings, ascending.
    pub fn listings(&self) -> Vec<i64> {
        let set: BTreeSet<i64> = self.events.iter().map(|e| e.aid).collect();
        set.into_iter().collect()
    }
}

/// The account owning the listing at `index` of [`Corpus::listings`].
pub fn account_of(index: usize) -> u64 {
    index as u64 % ACCOUNTS + 1
}

/// The event's time in the demo day: the file's span scaled into `[day_start, now]`.
pub fn event_time(ts: i64, min_ts: i64, max_ts: i64, day_start_ms: i64, now_ms: i64) -> i64 {
    let span = (max_ts - min_ts).max(1) as i128;
    let room = (now_ms - day_start_ms).max(0) as i128;
    day_start_ms + ((ts - min_ts) as i128 * room / span) as i64
}

/// The JSON body of one OTTO event for `POST /v1/events`.
pub fn event_json(e: &OttoEvent, time_ms: i64) -> Value {
    json!({
        "time": time_ms,
        "kind": e.kind,
        "listing_id": e.aid,
        "session_id": format!("otto-{}", e.session),
        "page_url": format!("/item/{}", e.aid),
    })
}

/// The template with the recommended-listing block before `</body>` (appended if none).
pub fn with_listing_block(html: &str) -> String {
    let block = format!(
        "<p style=\"text-align:center\"><a {LISTING_MARK}{{{{ listing_url }}}}\">{{{{ listing_title }}}}</a></p>\n"
    );
    match html.rfind("</body>") {
        Some(at) => format!("{}{block}{}", &html[..at], &html[at..]),
        None => format!("{html}{block}"),
    }
}

/// Recipient `r`'s address.
pub fn email(r: usize) -> String {
    format!("user{r}@demo.example")
}

/// Whether recipient `r` is on the suppression list.
pub fn suppressed(r: usize) -> bool {
    r.is_multiple_of(97)
}

/// Index (into the listings) of the listing recommended to recipient `r` in campaign `c`.
pub fn recommended(c: usize, r: usize, listings: usize) -> usize {
    (c * 7919 + r * 31) % listings
}

/// What recipient `r` of campaign `c` does with the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// Loads the pixel in a mail client.
    pub opens: bool,
    /// Clicks the listing link in a browser.
    pub clicks: bool,
    /// A link scanner sends `HEAD` to the listing link.
    pub scanned: bool,
}

/// The rules of the module doc.
pub fn behaviour(c: usize, r: usize) -> Behaviour {
    let x = r + c;
    Behaviour {
        opens: x.is_multiple_of(3),
        clicks: x.is_multiple_of(5),
        scanned: x.is_multiple_of(11),
    }
}

/// The merge fields of recipient `r`: every field the corpus templates use, plus the listing.
pub fn fields(r: usize, listing_id: i64) -> Value {
    json!({
        "first_name": format!("Reader{r}"),
        "name": format!("Reader {r}"),
        "username": format!("reader{r}"),
        "action_url": format!("{SHOP}/welcome?u={r}"),
        "login_url": format!("{SHOP}/login"),
        "live_chat_url": format!("{SHOP}/chat"),
        "help_url": format!("{SHOP}/help"),
        "support_email": "support@shop.example",
        "trial_start_date": "today",
        "trial_length": "30 days",
        "trial_end_date": "in 30 days",
        "user": { "w_deal": [] },
        "listing_url": format!("{SHOP}/item/{listing_id}"),
        "listing_title": format!("Listing {listing_id}"),
    })
}

/// One planned conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedConversation {
    /// The listing it is about.
    pub listing_id: i64,
    /// The buyer (writes first).
    pub buyer: String,
    /// The listing's account's seller.
    pub seller: String,
    /// Messages to send, in order: `(sender, client_msg_id, body)`.
    pub messages: Vec<(String, String, String)>,
    /// Whether the first message is sent a second time with the same `client_msg_id`.
    pub retry_first: bool,
}

const LINES: [&str; 6] = [
    "Hi, is this still available?",
    "Yes, it is.",
    "Would you take a lower price?",
    "I can do a small discount.",
    "Can I pick it up tomorrow?",
    "Sure, after 5 pm.",
];

/// Conversation `k` over `listings`.
pub fn conversation(k: usize, listings: &[i64]) -> PlannedConversation {
    let index = (k * 13) % listings.len();
    let buyer = format!("buyer{k}");
    let seller = format!("seller{}", account_of(index));
    let messages = (0..2 + k % 4)
        .map(|m| {
            let sender = if m % 2 == 0 { &buyer } else { &seller };
            (
                sender.clone(),
                format!("c{k}-m{m}"),
                LINES[m % LINES.len()].to_owned(),
            )
        })
        .collect();
    PlannedConversation {
        listing_id: listings[index],
        buyer: buyer.clone(),
        seller,
        messages,
        retry_first: k.is_multiple_of(4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_times_keep_order_inside_the_demo_day() {
        let (day, now) = (1_000_000, 1_050_000);
        assert_eq!(event_time(10, 10, 110, day, now), day);
        assert_eq!(event_time(110, 10, 110, day, now), now);
        assert_eq!(event_time(60, 10, 110, day, now), day + 25_000);
    }

    #[test]
    fn the_listing_block_goes_before_the_body_end() {
        assert_eq!(
            with_listing_block("<html><body><p>x</p></body></html>"),
            "<html><body><p>x</p><p style=\"text-align:center\"><a data-demo=\"listing\" href=\"{{ listing_url }}\">{{ listing_title }}</a></p>\n</body></html>"
        );
    }

    #[test]
    fn conversations_alternate_from_the_buyer() {
        let c = conversation(5, &[10, 20, 30]);
        assert_eq!(c.listing_id, 30); // 65 % 3 = 2
        assert_eq!((c.buyer.as_str(), c.seller.as_str()), ("buyer5", "seller3"));
        let senders: Vec<&str> = c.messages.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(senders, ["buyer5", "seller3", "buyer5"]);
        assert!(!c.retry_first);
        assert!(conversation(8, &[10, 20, 30]).retry_first);
    }
}
