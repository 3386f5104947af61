//! The redirector (DESIGN.md part B): `GET|HEAD /c/<id>` → 302 to the stored URL, byte for byte
//! (fragment included; the request's query string is ignored, so there is no open redirect);
//! `GET|HEAD /o/<id>` → a 1×1 GIF that is never cached. The id is validated before any storage
//! access; the lookup reads exactly one day partition; the click or open is recorded as an
//! `email_click` / `email_open` event built from that one row. HEAD requests and known
//! scanners are recorded as bot traffic (`bot = true`), not as clicks.

use tidemark_events::Event;

use crate::model::LinkRecord;

/// The transparent 1×1 GIF served by `/o/<id>` (43 bytes).
pub const PIXEL_GIF: [u8; 43] = [
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

/// Coarse user-agent class recorded with each click or open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UaClass {
    /// A crawler, link scanner, mail-security proxy or HTTP library.
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

const BOT_MARKERS: [&str; 21] = [
    "bot",
    "crawler",
    "spider",
    "slurp",
    "scanner",
    "preview",
    "headless",
    "curl/",
    "wget/",
    "python-requests",
    "python-urllib",
    "go-http-client",
    "java/",
    "okhttp",
    "libwww",
    "barracuda",
    "proofpoint",
    "mimecast",
    "safelinks",
    "symantec",
    "trendmicro",
];

/// Classifies a `User-Agent` header value.
pub fn classify_user_agent(ua: Option<&str>) -> UaClass {
    let Some(ua) = ua.map(str::trim).filter(|u| !u.is_empty()) else {
        return UaClass::Unknown;
    };
    let lower = ua.to_ascii_lowercase();
    if BOT_MARKERS.iter().any(|m| lower.contains(m)) {
        UaClass::Bot
    } else if ["mobile", "android", "iphone", "ipad"]
        .iter()
        .any(|m| lower.contains(m))
    {
        UaClass::Mobile
    } else {
        UaClass::Desktop
    }
}

/// The listing id of a URL whose path contains `<prefix><digits>` (e.g. `/item/48213`).
pub fn listing_id_of(url: &str, prefix: &str) -> Option<i64> {
    let after_scheme = url.split_once("://").map_or(url, |(_, r)| r);
    let path_start = after_scheme.find('/')?;
    let path = after_scheme[path_start..].split(['?', '#']).next()?;
    let at = path.find(prefix)? + prefix.len();
    let digits: String = path[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let rest = &path[at + digits.len()..];
    if digits.is_empty() || !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    digits.parse().ok()
}

/// The analytics event for a hit on `record` at `now_ms`.
pub fn hit_event(
    record: &LinkRecord,
    kind: &str,
    ua: UaClass,
    bot: bool,
    listing_prefix: &str,
    now_ms: i64,
) -> Event {
    let mut e = Event::new(kind, now_ms);
    e.listing_id = listing_id_of(&record.url, listing_prefix);
    let f = &mut e.fields;
    f.insert("email".into(), record.email.clone().into());
    f.insert("mailing_id".into(), record.mailing_id.clone().into());
    f.insert("link_id".into(), record.link_id.clone().into());
    if let Some(p) = record.position {
        f.insert("position".into(), p.into());
    }
    f.insert("ua_class".into(), ua.as_str().into());
    f.insert("bot".into(), bot.into());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents() {
        assert_eq!(classify_user_agent(None), UaClass::Unknown);
        assert_eq!(classify_user_agent(Some("curl/8.5.0")), UaClass::Bot);
        assert_eq!(
            classify_user_agent(Some("Mozilla/5.0 (compatible; Googlebot/2.1)")),
            UaClass::Bot
        );
        assert_eq!(
            classify_user_agent(Some(
                "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)"
            )),
            UaClass::Mobile
        );
        assert_eq!(
            classify_user_agent(Some(
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Firefox/120.0"
            )),
            UaClass::Desktop
        );
    }

    #[test]
    fn listing_ids_from_urls() {
        assert_eq!(
            listing_id_of("https://shop.ex/item/48213", "/item/"),
            Some(48213)
        );
        assert_eq!(
            listing_id_of("https://shop.ex/de/item/7/photos?x=1#y", "/item/"),
            Some(7)
        );
        assert_eq!(listing_id_of("https://shop.ex/item/abc", "/item/"), None);
        assert_eq!(listing_id_of("https://shop.ex/item/12abc", "/item/"), None);
        assert_eq!(
            listing_id_of("https://shop.ex/?next=/item/5", "/item/"),
            None
        );
        assert_eq!(listing_id_of("https://shop.ex/items", "/item/"), None);
    }
}
