//! `GET /ui`: the live page — one self-contained HTML document (its CSS and script
//! inline; nothing fetched from elsewhere) that polls `GET /bulkheads` every second and
//! listens to `GET /events`, both relative to the page, so it works under any
//! mount prefix and behind the same guards as those routes.
//!
//! # Invariants
//!
//! * The page is assembled once from the files beside this module; it names no bulkhead
//!   and carries no data: everything it shows it reads from the other read routes, with
//!   the read token the user gives it (`#token=…` or its form), if the router wants one.
//! * Its `Content-Security-Policy` lets it talk to this origin only.

use std::sync::OnceLock;

use axum::response::{IntoResponse, Response};
use http::header;

const HTML: &str = include_str!("ui/page.html");
const CSS: &str = include_str!("ui/page.css");
const SCRIPT: &str = include_str!("ui/page.js");

/// The page: the HTML with its style and script in place.
fn page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        HTML.replacen("/*CSS*/", CSS, 1)
            .replacen("/*JS*/", SCRIPT, 1)
    })
}

pub(super) async fn serve() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; connect-src 'self'; script-src 'unsafe-inline'; \
                 style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; \
                 form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        page(),
    )
        .into_response()
}
