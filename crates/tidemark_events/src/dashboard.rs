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
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// The page.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// Only inline script and style, fetches to this origin: the page loads nothing from
/// elsewhere, and the key in `?key=` never leaves in a `Referer`.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// The public route `GET /dashboard` (no API key: the page asks for it).
pub fn public_router() -> Router {
    Router::new().route("/dashboard", get(page))
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
        DASHBOARD_HTML,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained() {
        // The SVG namespace is a name, not something loaded.
        let html = DASHBOARD_HTML
            .to_ascii_lowercase()
            .replace("'http://www.w3.org/2000/svg'", "");
        for external in [
            "http://", "https://", "//cdn", "<link", "src=", "@import", "url(",
        ] {
            assert!(!html.contains(external), "page references {external}");
        }
        for hook in [
            "id=\"chart\"",
            "id=\"total\"",
            "id=\"legend\"",
            "id=\"top\"",
            "id=\"status\"",
            "/v1/events/recent",
            "/v1/events/top",
            "authorization",
            "localstorage",
        ] {
            assert!(html.contains(hook), "page lacks {hook}");
        }
    }
}
