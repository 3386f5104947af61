//! `GET /dashboard`: the live dashboard, one self-contained HTML page (inline CSS and vanilla
//! JS, the chart drawn as inline SVG; nothing loaded from elsewhere).
//!
//! The page is public; the data is not. It asks for the API key (remembered in
//! `localStorage`; `?key=` in the URL is taken too, for bookmarks and tests, then removed from
//! the address bar) and every 5 s fetches `GET /v1/events/recent` and `GET /v1/events/top`
//! with `Authorization: Bearer <key>`, showing a clear message on 401. `?minutes=` sets the
//! window (default 60).
//!
//! Stable hooks for tests: `#chart` carries `data-minutes` (points per kind), `data-points`
//! (minute × kind points with events) and `data-total`; `#total` is the window's total;
//! `#legend li[data-kind]`, `#top tbody tr[data-listing]`, `#status[data-state]`
//! (`loading`, `ok`, `unauthorized`, `no-key`, `error`) and `body[data-refreshes]`.

use axum::Router;
use axum::response::Response;
use axum::routing::get;

/// The page.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// The public route `GET /dashboard` (no API key: the page asks for it).
pub fn public_router() -> Router {
    Router::new().route("/dashboard", get(page))
}

async fn page() -> Response {
    tidemark_core::page::page(DASHBOARD_HTML)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained() {
        assert!(
            tidemark_core::page::external_references(DASHBOARD_HTML).is_empty(),
            "the page loads something from elsewhere"
        );
    }
}
