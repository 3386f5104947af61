//! Self-contained HTML pages for people (the dashboards): one page with inline CSS and
//! vanilla JS, nothing loaded from elsewhere, served with a policy that holds it to that.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// Only inline script and style, fetches to this origin: a page loads nothing from
/// elsewhere, and an API key in its `?key=` never leaves in a `Referer`.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
                            style-src 'unsafe-inline'; connect-src 'self'; img-src data:; \
                            base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `html` as a page: `text/html`, revalidated on each load, under [`PAGE_CSP`], no referrer,
/// no content sniffing.
pub fn page(html: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, PAGE_CSP),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        html,
    )
        .into_response()
}

/// What in `html` would load something from elsewhere (an external URL, a stylesheet link,
/// a `src=`, an `@import` or `url(`); empty for a self-contained page. The SVG namespace
/// (`'http://www.w3.org/2000/svg'`) is a name, not a load.
pub fn external_references(html: &str) -> Vec<&'static str> {
    let html = html
        .to_ascii_lowercase()
        .replace("'http://www.w3.org/2000/svg'", "");
    [
        "http://", "https://", "//cdn", "<link", "src=", "@import", "url(",
    ]
    .into_iter()
    .filter(|e| html.contains(e))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_loads_are_found() {
        assert!(external_references("<p>x</p><svg xmlns='http://www.w3.org/2000/svg'>").is_empty());
        assert_eq!(
            external_references("<script src=\"https://cdn.x/a.js\"></script>"),
            ["https://", "//cdn", "src="]
        );
    }
}
