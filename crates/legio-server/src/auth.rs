//! Bearer tokens. Without a configured token (a loopback server) every request passes. With one,
//! every endpoint but `/healthz` and `/readyz` needs `Authorization: Bearer TOKEN`; the operator
//! endpoints need the operator token when one is set. A browser opening the dashboard passes
//! `?token=` once: the server answers with an HttpOnly, same-site cookie and a redirect to the
//! bare URL, and accepts that cookie on GET requests only (so a cookie can never post a turn).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// The dashboard's cookie.
const COOKIE: &str = "legio_token";

/// Guards the host API, the metrics and the dashboard.
pub(crate) async fn require_api_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let token = state.settings.token.clone();
    guard(token.as_deref(), request, next).await
}

/// Guards the operator endpoints: the operator token if one is set, else the API token.
pub(crate) async fn require_operator_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let token = state
        .settings
        .operator_token
        .clone()
        .or_else(|| state.settings.token.clone());
    guard(token.as_deref(), request, next).await
}

async fn guard(expected: Option<&str>, request: Request, next: Next) -> Response {
    let Some(expected) = expected else {
        return next.run(request).await;
    };
    if let Some(given) = bearer(&request) {
        if same(given, expected) {
            return next.run(request).await;
        }
        return ApiError::new("unauthorized", "the bearer token is not valid").into_response();
    }
    if request.method() == Method::GET {
        if let Some(given) = query_token(&request) {
            if same(&given, expected) && request.uri().path() == "/dashboard" {
                return cookie_redirect(expected);
            }
            return ApiError::new("unauthorized", "the token is not valid").into_response();
        }
        if cookie(&request).is_some_and(|c| same(c, expected)) {
            return next.run(request).await;
        }
    }
    ApiError::new(
        "unauthorized",
        "send `Authorization: Bearer TOKEN` (the server's [server] token or LEGIO_API_TOKEN); a browser opens /dashboard?token=TOKEN",
    )
    .into_response()
}

pub(crate) fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

fn query_token(request: &Request) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "token").then(|| percent_decode(value))
    })
}

fn cookie(request: &Request) -> Option<&str> {
    request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == COOKIE).then_some(value)
        })
}

fn cookie_redirect(token: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/dashboard"));
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
    )) {
        headers.insert(header::SET_COOKIE, value);
    }
    response
}

/// Decodes `%XX` escapes and `+` (a token is ASCII; anything else is kept as it is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Compares in time that depends only on the lengths, not on where the first difference is.
fn same(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in b.iter().enumerate() {
        diff |= x ^ a.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
        assert!(!same("abcd", "abc"));
        assert!(!same("", "abc"));
    }

    #[test]
    fn query_tokens_are_decoded() {
        assert_eq!(percent_decode("a%2Bb+c"), "a+b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
