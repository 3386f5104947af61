//! How the three subsystems feed each other: chat's first contact about a listing
//! becomes a `contact` event in the events subsystem. (Links → events — `email_click` /
//! `email_open`, with the listing taken from an `/item/<id>` target — is wired inside
//! `tidemark_links`, which records through the same [`Ingest`].)
//!
//! Analytics belong to one tenant per deployment (`analytics_tenant`, default the first
//! tenant): raw events, listings and reports are the marketplace's, not keyed by tenant. So
//! [`require_analytics_owner`] answers 403 to any other tenant on the analytics routes, and
//! [`ContactEvents`] records only the owner's contacts — no tenant reads or feeds another's
//! analytics. (Link hits carry no tenant and are recorded as they come.)

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tidemark_chat::contact::{ContactSink, FirstContact};
use tidemark_core::http::{ApiError, Tenant};
use tidemark_events::Ingest;
use tidemark_events::model::Event;

/// Stores each [`FirstContact`] of the analytics owner as one `contact` event: time = the
/// first message's commit time, `listing_id`, `user_id` = the sender, field `conversation_id`.
/// Other tenants' contacts are not recorded.
#[derive(Debug, Clone)]
pub struct ContactEvents {
    /// The events subsystem's ingest (validates against the schema, appends durably).
    pub ingest: Ingest,
    /// The tenant owning the analytics.
    pub owner: String,
}

/// Middleware on the analytics routes (after [`tidemark_core::http::require_tenant`]): 403
/// `forbidden` unless the request's tenant owns the analytics (and for any user token).
pub async fn require_analytics_owner(
    State(owner): State<Arc<str>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Tenant(t) = Tenant::of(req.extensions())?;
    if *t != *owner {
        return Err(ApiError::forbidden(format!(
            "the analytics of this server belong to tenant {owner:?}; tenant {t:?} has none"
        )));
    }
    Ok(next.run(req).await)
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
        if contact.tenant != self.owner {
            return Ok(());
        }
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
    use tidemark_core::day::Day;
    use tidemark_events::{EventsConfig, RawStore, SqliteRaw};

    #[tokio::test]
    async fn only_the_analytics_owners_contacts_become_events() {
        let dir = tempfile::tempdir().unwrap();
        let raw = Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap());
        let sink = ContactEvents {
            ingest: Ingest::new(Arc::clone(&raw) as _, EventsConfig::default()),
            owner: "demo".into(),
        };
        let at = 1_796_000_000_000;
        let contact = |tenant: &str, cid: &str| FirstContact {
            tenant: tenant.into(),
            conversation_id: cid.into(),
            listing_id: 7,
            sender: "b".into(),
            committed_at_ms: at,
        };
        sink.record(contact("other", "c-other")).await.unwrap();
        sink.record(contact("demo", "c-demo")).await.unwrap();
        let events = raw.day_events(Day::of_utc_ms(at)).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].fields["conversation_id"], "c-demo");
    }

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
