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
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// The page.
pub const CAMPAIGN_HTML: &str = include_str!("campaign.html");

/// Only inline script and style, fetches to this origin: the page loads nothing from
/// elsewhere, and the key in `?key=` never leaves in a `Referer`.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// The public route `GET /dashboard/mailings/{mid}` (no API key: the page asks for it).
pub fn public_router() -> Router {
    Router::new().route("/dashboard/mailings/{mid}", get(page))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        CAMPAIGN_HTML,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained() {
        // The SVG namespace is a name, not something loaded.
        let html = CAMPAIGN_HTML
            .to_ascii_lowercase()
            .replace("'http://www.w3.org/2000/svg'", "");
        for external in [
            "http://", "https://", "//cdn", "<link", "src=", "@import", "url(",
        ] {
            assert!(!html.contains(external), "page references {external}");
        }
    }
}
