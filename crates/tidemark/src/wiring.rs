//! How the three subsystems feed each other (issue 5): chat's first contact about a listing
//! becomes a `contact` event in the events subsystem. (Links → events — `email_click` /
//! `email_open`, with the listing taken from an `/item/<id>` target — is wired inside
//! `tidemark_links`, which records through the same [`Ingest`].)

use async_trait::async_trait;
use tidemark_chat::contact::{ContactSink, FirstContact};
use tidemark_events::Ingest;
use tidemark_events::model::Event;

/// Stores each [`FirstContact`] as one `contact` event: time = the first message's commit time,
/// `listing_id`, `user_id` = the sender, field `conversation_id`.
#[derive(Debug, Clone)]
pub struct ContactEvents {
    /// The events subsystem's ingest (validates against the schema, appends durably).
    pub ingest: Ingest,
}

/// The `contact` event for a first contact.
pub fn contact_event(contact: &FirstContact) -> Result<Event, String> {
    let listing_id = i64::try_from(contact.listing_id)
        .map_err(|_| format!("listing_id {} is out of range", contact.listing_id))?;
    let mut event = Event::new("contact", contact.committed_at_ms);
    event.listing_id = Some(listing_id);
    event.user_id = Some(contact.sender.clone());
    event.fields.insert(
        "conversation_id".into(),
        contact.conversation_id.clone().into(),
    );
    Ok(event)
}

#[async_trait]
impl ContactSink for ContactEvents {
    async fn record(&self, contact: FirstContact) -> Result<(), String> {
        let event = contact_event(&contact)?;
        self.ingest
            .record(vec![event], contact.committed_at_ms)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_contact_is_one_contact_event_for_its_listing() {
        let e = contact_event(&FirstContact {
            tenant: "demo".into(),
            conversation_id: "c1".into(),
            listing_id: 42,
            sender: "buyer".into(),
            committed_at_ms: 1_700_000_000_123,
        })
        .unwrap();
        assert_eq!(e.kind, "contact");
        assert_eq!(e.time_ms, 1_700_000_000_123);
        assert_eq!(e.listing_id, Some(42));
        assert_eq!(e.user_id.as_deref(), Some("buyer"));
        assert_eq!(e.fields["conversation_id"], "c1");
        assert_eq!(e.count, 1);
    }
}
