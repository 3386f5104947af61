//! `GET /dashboard/mailings/{mid}`: a mailing's campaign page, one self-contained HTML page
//! (inline CSS and vanilla JS, the timeline drawn as inline SVG; nothing loaded from
//! elsewhere), beside the events dashboard (`/dashboard`) and keeping its API key in the same
//! `localStorage` entry.
//!
//! The page is public; the data is not. It takes the key as the events dashboard does
//! (`?key=`, then removed from the address bar, or the one remembered), and every 10 s
//! fetches `GET /v1/mailings/{mid}/stats` ([`crate::stats::MailingStats`]) with
//! `Authorization: Bearer <key>`: the figures (rendered, skipped, delivered, failed, unique
//! opens and clicks with their rates, click-to-open, machine opens, bot hits,
//! unsubscribed), opens and clicks per UTC hour, and the per-link table. A refused key or an
//! unknown mailing shows a clear message.
//!
//! Stable hooks for tests: `#fig-<name>[data-value]` (`rendered`, `skipped`, `delivered`,
//! `failed`, `unique-opens`, `unique-clicks`, `click-to-open`, `machine-opens`, `bot-hits`,
//! `unsubscribed`), `#links tbody tr[data-position][data-clicks][data-unique]`,
//! `#timeline[data-hours][data-opens][data-clicks]`, `#status[data-state]` (`loading`,
//! `ok`, `unauthorized`, `not-found`, `no-key`, `error`) and `body[data-refreshes]`.

use axum::Router;
use axum::response::Response;
use axum::routing::get;

/// The page.
pub const CAMPAIGN_HTML: &str = include_str!("campaign.html");

/// The public route `GET /dashboard/mailings/{mid}` (no API key: the page asks for it).
pub fn public_router() -> Router {
    Router::new().route("/dashboard/mailings/{mid}", get(page))
}

async fn page() -> Response {
    tidemark_core::page::page(CAMPAIGN_HTML)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained() {
        assert!(
            tidemark_core::page::external_references(CAMPAIGN_HTML).is_empty(),
            "the page loads something from elsewhere"
        );
    }
}
