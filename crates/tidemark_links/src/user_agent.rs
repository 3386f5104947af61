//! Who made a click or open: the class of its `User-Agent` and whether the hit is bot traffic
//! (DESIGN.md part B: "HEAD requests and known scanners are flagged as bots"; "bots, scanners
//! and machine opens (image proxies) are counted apart, never as opens or clicks").
//!
//! Crawlers, link previewers and HTTP libraries are recognised by the `isbot` crate: its
//! default list of about 340 patterns, checked by its authors against 12,000 bot and 180,000
//! browser user agents so that browsers and mail clients (Chrome, Safari, Firefox, Outlook)
//! are not taken for bots. It flags search crawlers (Googlebot), previewers (Slackbot, Skype),
//! headless browsers and HTTP libraries and tools (curl, wget, python-requests, Go, Java,
//! okhttp): a person reading a newsletter clicks with a browser or a mail app, so a click from
//! a script is not counted as one. The list is the crate's (0.1.3, of 2022); generic words
//! (`bot`, `crawler`, `spider`) catch most crawlers named since.
//!
//! Tidemark adds on top:
//! - mail-security link scanners, which follow every link of a message before (or instead of)
//!   the recipient: Microsoft Safe Links, Proofpoint, Mimecast, Barracuda, Symantec, Trend
//!   Micro, and any agent calling itself a scanner or a preview — the crate's list is made for
//!   web crawlers and misses them;
//! - the mail providers' image proxies (Gmail's GoogleImageProxy, YahooMailProxy): they fetch
//!   the open pixel for the recipient, so the open is a machine open, counted apart whatever
//!   the crate's list says about them;
//! - a HEAD request is bot traffic whatever its user agent ([`is_bot_hit`]): a person's
//!   browser follows a link with GET, link checkers and scanners probe with HEAD;
//! - the split of people into mobile and desktop, and `unknown` when there is no user agent.

use std::sync::LazyLock;

/// Coarse user-agent class recorded with each click or open (`ua_class` of the event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UaClass {
    /// A crawler, link scanner, mail-security or image proxy, or HTTP library.
    Bot,
    /// A phone or tablet browser / mail app.
    Mobile,
    /// Anything else that looks like a browser or mail client.
    Desktop,
    /// No user agent.
    Unknown,
}

impl UaClass {
    /// The name stored in events.
    pub fn as_str(self) -> &'static str {
        match self {
            UaClass::Bot => "bot",
            UaClass::Mobile => "mobile",
            UaClass::Desktop => "desktop",
            UaClass::Unknown => "unknown",
        }
    }
}

/// Mail-security scanners and image proxies, matched in the lowercased user agent.
const MAIL_MACHINES: [&str; 10] = [
    "safelinks",
    "proofpoint",
    "mimecast",
    "barracuda",
    "symantec",
    "trendmicro",
    "scanner",
    "preview",
    "googleimageproxy",
    "yahoomailproxy",
];

/// Lowercased markers of phones and tablets.
const MOBILE_MARKERS: [&str; 4] = ["mobile", "android", "iphone", "ipad"];

/// The crate's default patterns, compiled once (one regular expression).
static BOTS: LazyLock<isbot::Bots> = LazyLock::new(isbot::Bots::default);

/// Classifies a `User-Agent` header value; `None` or blank is [`UaClass::Unknown`].
pub fn classify_user_agent(ua: Option<&str>) -> UaClass {
    let Some(ua) = ua.map(str::trim).filter(|u| !u.is_empty()) else {
        return UaClass::Unknown;
    };
    let lower = ua.to_ascii_lowercase();
    if MAIL_MACHINES.iter().any(|m| lower.contains(m)) || BOTS.is_bot(ua) {
        UaClass::Bot
    } else if MOBILE_MARKERS.iter().any(|m| lower.contains(m)) {
        UaClass::Mobile
    } else {
        UaClass::Desktop
    }
}

/// Whether a hit is bot traffic (`bot = true` in its event, counted apart from opens and
/// clicks): any HEAD request, and any hit whose user agent is [`UaClass::Bot`].
pub fn is_bot_hit(head: bool, class: UaClass) -> bool {
    head || class == UaClass::Bot
}

#[cfg(test)]
mod tests;
