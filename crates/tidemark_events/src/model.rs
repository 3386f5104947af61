//! An analytics event: a time, a kind (the only tag) and fields.

use serde::{Deserialize, Serialize};

/// One event (DESIGN.md part C "Schema"). Identifiers are fields, never tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened (Unix ms, UTC).
    pub time_ms: i64,
    /// The kind: the `event` tag, one of the configured closed set.
    pub kind: String,
    /// The listing it concerns.
    pub listing_id: Option<i64>,
    /// The user (for email events: none; the email is in `fields`).
    pub user_id: Option<String>,
    /// The device.
    pub device_id: Option<String>,
    /// The session.
    pub session_id: Option<String>,
    /// The page.
    pub page_url: Option<String>,
    /// The `count` field as the producer sent it (default 1; the seed's writer sends `1i`).
    /// Stored and archived as is; the daily rollup counts rows, as seed 002's job does, not
    /// this value.
    pub count: i64,
    /// Other declared fields (e.g. `email`, `mailing_id`, `position`, `ua_class`, `bot`).
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl Event {
    /// An event of `kind` at `time_ms` with no fields set and `count = 1`.
    pub fn new(kind: &str, time_ms: i64) -> Self {
        Self {
            time_ms,
            kind: kind.to_owned(),
            listing_id: None,
            user_id: None,
            device_id: None,
            session_id: None,
            page_url: None,
            count: 1,
            fields: serde_json::Map::new(),
        }
    }

    /// Whether the event was flagged as bot traffic (`bot = true`).
    pub fn is_bot(&self) -> bool {
        self.fields.get("bot").and_then(serde_json::Value::as_bool) == Some(true)
    }
}

/// [`Event::is_bot`] of an event whose `fields` are stored as this JSON object text, without
/// building the map for the usual `{}`. Text that is not a JSON object is not flagged.
pub fn fields_flag_bot(fields: &str) -> bool {
    if fields == "{}" {
        return false;
    }
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(fields)
        .is_ok_and(|m| m.get("bot").and_then(serde_json::Value::as_bool) == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_fields_flag_a_bot_as_the_event_does() {
        for (fields, bot) in [
            ("{}", false),
            (r#"{"bot":true}"#, true),
            (r#"{"ua_class":"scanner","bot":true}"#, true),
            (r#"{"bot":false}"#, false),
            (r#"{"bot":"true"}"#, false),
            (r#"{"email":"a@b.example"}"#, false),
            ("not json", false),
        ] {
            assert_eq!(fields_flag_bot(fields), bot, "{fields}");
            if let Ok(map) = serde_json::from_str(fields) {
                let mut e = Event::new("view", 0);
                e.fields = map;
                assert_eq!(e.is_bot(), bot, "{fields}");
            }
        }
    }
}
