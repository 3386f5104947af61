//! Link records, mailings and lookups.

use serde::{Deserialize, Serialize};

use crate::rewrite::LinkKind;

/// One tracked link of one recipient's message, denormalised so that a click needs only this
/// row (seed 001: one read gives everything the statistics need).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// The 32-character tracking id (carries its creation time, hence its day partition).
    pub link_id: String,
    /// The original URL, exactly as stored (entities decoded, never re-encoded). Empty for the
    /// open pixel.
    pub url: String,
    /// Recipient email.
    pub email: String,
    /// The mailing.
    pub mailing_id: String,
    /// Position of the link in the message (0-based, document order); the pixel has none.
    pub position: Option<u32>,
    /// Link, image or open pixel.
    pub kind: LinkKind,
    /// Creation time (Unix ms) — the same instant the id carries.
    pub created_ms: i64,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The record.
    Found(LinkRecord),
    /// No such id in its partition.
    Unknown,
    /// The id's day partition is past retention (dropped): send the fallback.
    Expired,
}

/// A campaign: subject, sender and the HTML template with `{{ field }}` merge fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mailing {
    /// Id.
    pub mailing_id: String,
    /// Tenant that owns it.
    pub tenant: String,
    /// Subject (may hold merge fields too).
    pub subject: String,
    /// `From:` address.
    pub from: String,
    /// The HTML template.
    pub html: String,
    /// Creation time (Unix ms).
    pub created_ms: i64,
}
