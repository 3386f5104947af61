//! The redirector (DESIGN.md part B): `GET|HEAD /c/<id>` → 302 to the stored URL, byte for byte
//! (fragment included; the request's query string is ignored, so there is no open redirect);
//! `GET|HEAD /o/<id>` → a 1×1 GIF that is never cached. The id is validated before any storage
//! access; the lookup reads exactly one day partition; the click or open is recorded as an
//! `email_click` / `email_open` event built from that one row. HEAD requests, known bots,
//! scanners and image proxies are recorded as bot traffic (`bot = true`), not as clicks or
//! opens ([`crate::user_agent`]).

use tidemark_events::Event;

use crate::model::LinkRecord;
/// The class [`hit_event`] records.
pub use crate::user_agent::UaClass;

/// The transparent 1×1 GIF served by `/o/<id>` (43 bytes).
pub const PIXEL_GIF: [u8; 43] = [
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

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
