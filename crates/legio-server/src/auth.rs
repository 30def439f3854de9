//! Bearer tokens and their scopes: who may call what. Every endpoint but `/healthz` and
//! `/readyz` names the scope it needs (`host`, `metrics` or `operator`, see [`Scope`]); a request
//! without a known token is 401, one whose token lacks the scope (or, for a token limited to a
//! conversation prefix, names another conversation) is 403 with a JSON error naming what is
//! missing. Tokens come from `[[server.tokens]]` and from the older keys: `token` alone is an
//! operator token (it opened everything before scopes existed); with `operator_token` beside it,
//! `token` is a host and metrics token and `operator_token` the operator's. Without any token (a
//! loopback server) every request passes as an operator. A browser opening the dashboard passes
//! `?token=` once: the server answers with an HttpOnly, same-site cookie and a redirect to the
//! bare URL, and accepts that cookie on GET requests only (so a cookie can never post a turn).
//! A query token anywhere else is refused (401) with a message saying where it is taken.

use std::sync::Arc;

use crate::server_tokens::{Scope, ScopedToken};
use crate::settings::ServerSettings;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;
use legio_runtime::ErrorCode;

/// The dashboard's cookie.
const COOKIE: &str = "legio_token";

/// Who is calling: the token that matched (in the request's extensions for the handlers).
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) Arc<ScopedToken>);

impl Caller {
    /// The key its turns in flight are counted under (the token's name, never the token).
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// 403 unless the token may post to and read `conversation`.
    pub(crate) fn check_conversation(&self, conversation: &str) -> Result<(), ApiError> {
        if self.0.may_access(conversation) {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "token `{}` is limited to conversations starting with `{}`",
                self.0.name,
                self.0.conversations.as_deref().unwrap_or_default()
            ),
        ))
    }
}

/// Every token the server accepts: `[[server.tokens]]` and the older `token` and
/// `operator_token`, mapped onto scopes. Empty means an open (loopback) server.
pub(crate) fn tokens(settings: &ServerSettings) -> Vec<Arc<ScopedToken>> {
    let legacy = |name: &str, token: &Option<String>, scopes: Vec<Scope>| {
        token.clone().map(|token| ScopedToken {
            name: name.to_owned(),
            token,
            scopes,
            conversations: None,
        })
    };
    let api_scopes = if settings.operator_token.is_some() {
        vec![Scope::Host, Scope::Metrics]
    } else {
        vec![Scope::Operator]
    };
    legacy(
        "operator_token",
        &settings.operator_token,
        vec![Scope::Operator],
    )
    .into_iter()
    .chain(legacy("token", &settings.token, api_scopes))
    .chain(settings.tokens.iter().cloned())
    .map(Arc::new)
    .collect()
}

/// The open server's caller: an operator.
fn anonymous() -> Arc<ScopedToken> {
    Arc::new(ScopedToken {
        name: "anonymous".into(),
        token: String::new(),
        scopes: vec![Scope::Operator],
        conversations: None,
    })
}

/// Guards a group of routes that needs `scope`.
pub(crate) async fn require(
    State((state, scope)): State<(Arc<AppState>, Scope)>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = match identify(&state.tokens, &request) {
        Ok(token) => token,
        Err(Refusal::Redirect(token)) => return cookie_redirect(&token),
        Err(Refusal::Unauthorized(message)) => {
            return ApiError::new(ErrorCode::Unauthorized, message).into_response()
        }
    };
    if !token.allows(scope) {
        return ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "token `{}` lacks the `{}` scope that {} {} needs; see docs/http-api.md (Tokens and scopes)",
                token.name,
                scope.as_str(),
                request.method(),
                request.uri().path()
            ),
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller(token));
    next.run(request).await
}

/// Why a request has no caller.
enum Refusal {
    Unauthorized(&'static str),
    /// `/dashboard?token=` with a good token: set the cookie.
    Redirect(String),
}

fn identify(tokens: &[Arc<ScopedToken>], request: &Request) -> Result<Arc<ScopedToken>, Refusal> {
    if tokens.is_empty() {
        return Ok(anonymous());
    }
    let find = |given: &str| tokens.iter().find(|t| same(given, &t.token)).cloned();
    if let Some(given) = bearer(request) {
        return find(given).ok_or(Refusal::Unauthorized("the bearer token is not valid"));
    }
    // One rule for `?token=`: it is how a browser opens the dashboard (exchanged at once for
    // the cookie), and nothing else; elsewhere it is refused whether it is right or wrong, so
    // a token is never left in a URL that proxies and logs keep.
    if let Some(given) = query_token(request) {
        let opens_dashboard =
            request.method() == Method::GET && request.uri().path() == "/dashboard";
        return match find(&given) {
            Some(t) if opens_dashboard => Err(Refusal::Redirect(t.token.clone())),
            None if opens_dashboard => Err(Refusal::Unauthorized("the token is not valid")),
            _ => Err(Refusal::Unauthorized(
                "query tokens (`?token=`) are accepted only on GET /dashboard, which trades them for a cookie; send `Authorization: Bearer TOKEN`",
            )),
        };
    }
    if request.method() == Method::GET {
        if let Some(token) = cookie(request).and_then(find) {
            return Ok(token);
        }
    }
    Err(Refusal::Unauthorized(
        "send `Authorization: Bearer TOKEN` (a token of [[server.tokens]], [server] token or LEGIO_API_TOKEN); a browser opens /dashboard?token=TOKEN",
    ))
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
