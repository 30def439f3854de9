//! `GET /dashboard`: one self-contained page (no CDN: the page and its script are compiled into
//! the binary) that polls `/metrics` every second and draws live charts.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../assets/dashboard.html");
const SCRIPT: &str = include_str!("../assets/dashboard.js");

pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        SCRIPT,
    )
}
