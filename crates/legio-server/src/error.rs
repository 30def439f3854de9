//! The server's errors, and the one place they map to HTTP statuses. Every error response has
//! OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}` (the same on the native
//! API and the OpenAI-compatible door); bad input is always a 4xx.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use legio_runtime::{ErrorCode, RuntimeError};
use thiserror::Error;

/// An API error: a stable code, a message saying what to do, and (in [`ApiError::status`]) its
/// status.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// A stable, machine-readable code (`invalid_json`, `unknown_agent`, ...): one of the
    /// runtime's list, which the API answers by its name.
    pub code: ErrorCode,
    /// What was wrong and what to do.
    pub message: String,
    /// The request field at fault, when one is (`metadata.conversation`, `messages`).
    pub param: Option<String>,
    /// For an agent's failed turn (the door answers it as an error): why it failed, as a
    /// reply's `error_kind` says it (`timeout`, `provider`).
    pub turn_error_kind: Option<legio_runtime::TurnErrorKind>,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            param: None,
            turn_error_kind: None,
        }
    }

    /// The same error, naming the request field at fault.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The same error, its message led by `prefix` (the field it is about, say).
    pub fn with_message_prefix(mut self, prefix: &str) -> Self {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    /// OpenAI's error `type` for the status: `invalid_request_error` (4xx),
    /// `authentication_error` (401), `server_error` (5xx).
    pub fn kind(&self) -> &'static str {
        let status = self.status();
        if status == StatusCode::UNAUTHORIZED {
            "authentication_error"
        } else if status.is_client_error() {
            "invalid_request_error"
        } else {
            "server_error"
        }
    }

    /// The HTTP status of the error's code: the one table of it, one arm per code.
    pub fn status(&self) -> StatusCode {
        use ErrorCode as C;
        match self.code {
            C::InvalidJson
            | C::BadRequest
            | C::ReservedConversation
            | C::BadName
            | C::BadQuery
            | C::BadPath
            | C::BadSeq
            | C::InvalidTool
            | C::InvalidIdempotencyKey
            | C::MissingField => StatusCode::BAD_REQUEST,
            C::HistoryMismatch
            | C::NoPendingToolCall
            | C::TurnTakenOver
            | C::MessageUnanswered
            | C::ApprovalAnswered => StatusCode::CONFLICT,
            C::Unauthorized => StatusCode::UNAUTHORIZED,
            C::Forbidden => StatusCode::FORBIDDEN,
            C::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            C::TooManyTurns => StatusCode::TOO_MANY_REQUESTS,
            C::UnknownAgent
            | C::UnknownConversation
            | C::UnknownModel
            | C::UnknownResponse
            | C::UnknownApproval
            | C::NotFound => StatusCode::NOT_FOUND,
            C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            C::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            C::BodyTooLarge | C::MessageTooLarge | C::ContextTooLarge => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            C::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            C::UnknownMention | C::EmptyMessage | C::InvalidBody | C::IdempotencyKeyReused => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            C::ShuttingDown
            | C::StoreLocked
            | C::StorageFull
            | C::TooManyOpenFiles
            | C::StorageFailed
            | C::ClusterUnavailable
            | C::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            C::ProviderUnavailable | C::AgentFailed => StatusCode::BAD_GATEWAY,
            C::Config | C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }});
        if let Some(kind) = self.turn_error_kind {
            body["error"]["error_kind"] = kind.as_str().into();
        }
        body
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let code = e.code();
        let error = Self::new(code, e.to_string());
        match code {
            ErrorCode::IdempotencyKeyReused => error.with_param("Idempotency-Key"),
            _ => error,
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        match e {
            JsonRejection::JsonDataError(e) => data_error(&e.body_text()),
            JsonRejection::JsonSyntaxError(e) => Self::new(ErrorCode::InvalidJson, e.body_text()),
            JsonRejection::MissingJsonContentType(_) => Self::new(
                ErrorCode::UnsupportedMediaType,
                "send the body as JSON with `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(e) => {
                if is_body_timeout(&e) {
                    Self::new(
                        ErrorCode::BodyTimeout,
                        "the request body stopped arriving (server.limits.body_read_timeout_seconds)",
                    )
                } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    Self::new(
                        ErrorCode::BodyTooLarge,
                        "the request body is over the limit (server.body_limit_bytes)",
                    )
                } else {
                    Self::new(ErrorCode::BadRequest, e.body_text())
                }
            }
            other => Self::new(ErrorCode::BadRequest, other.body_text()),
        }
    }
}

/// A body of the wrong shape, in the client's words: the field at fault as `param` (a missing or
/// unknown field, or the path serde reports), and no Rust type name (`expected struct TurnBody
/// with 3 elements` reads `expected a JSON object`).
fn data_error(text: &str) -> ApiError {
    let text = text
        .strip_prefix("Failed to deserialize the JSON body into the target type: ")
        .unwrap_or(text);
    let error = ApiError::new(ErrorCode::InvalidBody, without_type_names(text));
    match param_of(text) {
        Some(param) => error.with_param(param),
        None => error,
    }
}

/// The field a data error is about: serde_path_to_error's path of the value at fault
/// (`messages[0]`, before ": "), with a missing field's name after it (the path of a missing
/// field is its object's; an unknown field's path is the field's own).
fn param_of(text: &str) -> Option<String> {
    let quoted = |after: &str| {
        let rest = text.split_once(after)?.1;
        Some(rest.split('`').next()?.to_owned())
    };
    let path = text
        .split_once(": ")
        .map(|(path, _)| path)
        .filter(|p| *p != "." && !p.is_empty())
        .filter(|p| p.chars().all(|c| c.is_alphanumeric() || "_.[]".contains(c)));
    match (path, quoted("missing field `")) {
        (Some(path), Some(field)) => Some(format!("{path}.{field}")),
        (None, Some(field)) => Some(field),
        (path, None) => path
            .map(str::to_owned)
            .or_else(|| quoted("unknown field `")),
    }
}

/// `text` with serde's Rust type names in words: `expected struct TurnBody with 3 elements`
/// reads `expected a JSON object`.
fn without_type_names(text: &str) -> String {
    let mut words = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((before, after)) = rest.split_once("expected struct ") {
        words.push_str(before);
        words.push_str("expected a JSON object");
        let name_end = after
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(after.len());
        rest = &after[name_end..];
        if let Some(tail) = rest.strip_prefix(" with ") {
            let count_end = tail.find(" element").map_or(0, |i| i + " element".len());
            rest = tail[count_end..]
                .strip_prefix('s')
                .unwrap_or(&tail[count_end..]);
        }
    }
    words.push_str(rest);
    words
}

/// Whether reading the body failed on tower-http's body read timeout (anywhere in the chain).
fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = e.source();
    }
    false
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::new(ErrorCode::BadQuery, e.body_text())
    }
}

impl From<PathRejection> for ApiError {
    /// A path segment that cannot be read (not UTF-8 once percent-decoded): a JSON 400 like
    /// every other error, never axum's plain-text one.
    fn from(e: PathRejection) -> Self {
        Self::new(ErrorCode::BadPath, e.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(code = self.code.as_str(), message = %self.message, "request failed");
        }
        let mut response = (status, axum::Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"legio\""),
            );
        }
        response
    }
}

/// Why `legio serve` could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum ServeError {
    /// A non-loopback address without a token.
    #[error("refusing to listen on {bind} without a token: set [server] token in the configuration or LEGIO_API_TOKEN, or bind a loopback address such as 127.0.0.1:7878")]
    NoTokenForPublicBind {
        /// The address.
        bind: std::net::SocketAddr,
    },
    /// The address cannot be bound.
    #[error("cannot listen on {bind}: {reason}")]
    Bind {
        /// The address.
        bind: std::net::SocketAddr,
        /// Why.
        reason: String,
    },
    /// The runtime failed to start or stop.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Serving failed.
    #[error("serving failed: {0}")]
    Io(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_store::{IoCause, StoreError};

    #[test]
    fn input_errors_are_4xx() {
        for code in [
            "invalid_json",
            "bad_name",
            "unknown_agent",
            "unknown_conversation",
            "unknown_mention",
            "empty_message",
            "body_too_large",
            "message_too_large",
            "bad_query",
            "unauthorized",
            "invalid_body",
            "unsupported_media_type",
        ] {
            let status = ApiError::new(ErrorCode::from_name(code), "x").status();
            assert_eq!(ErrorCode::from_name(code).as_str(), code);
            assert!(status.is_client_error(), "{code}: {status}");
        }
        assert_eq!(
            ApiError::new(ErrorCode::Internal, "x").status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn runtime_errors_map_by_their_typed_code() {
        let failed = |cause, kind| -> ApiError {
            RuntimeError::Store(StoreError::Io {
                during: "committing",
                kind,
                cause,
                source: legio_store::ErrorSource::new("what the system said"),
            })
            .into()
        };
        use std::io::ErrorKind;
        let full = failed(IoCause::DiskFull, ErrorKind::StorageFull);
        assert_eq!(
            (full.code.as_str(), full.status().as_u16()),
            ("storage_full", 503)
        );
        assert!(
            full.message.contains("the disk is full"),
            "{}",
            full.message
        );
        let files = failed(IoCause::TooManyOpenFiles, ErrorKind::Other);
        assert_eq!(
            (files.code.as_str(), files.status().as_u16()),
            ("too_many_open_files", 503)
        );
        assert!(files.message.contains("what the system said"));
        let other = failed(IoCause::Other, ErrorKind::Other);
        assert_eq!(
            (other.code.as_str(), other.status().as_u16()),
            ("storage_failed", 503)
        );
        let damaged: ApiError = RuntimeError::Store(StoreError::Corrupt {
            what: "seq 3".into(),
            reason: "bad bytes".into(),
        })
        .into();
        assert_eq!(
            (damaged.code.as_str(), damaged.status().as_u16()),
            ("internal", 500)
        );
        // The cluster out of reach (appending, or taking a lease) is a 503 to retry.
        let cluster = || StoreError::Cluster {
            during: "appending",
            source: legio_store::ErrorSource::new("gave up after 6 attempts"),
        };
        let unreachable: ApiError = RuntimeError::Store(cluster()).into();
        let no_lease: ApiError = RuntimeError::Lease(cluster().into()).into();
        for e in [unreachable, no_lease] {
            assert_eq!(
                (e.code.as_str(), e.status().as_u16()),
                ("cluster_unavailable", 503)
            );
        }
        let bad_key: ApiError =
            RuntimeError::Lease(legio_store::LeaseError::BadKey { key: "k".into() }).into();
        assert_eq!(bad_key.code.as_str(), "internal");
        let restarting: ApiError = RuntimeError::AgentRestarting {
            agent: "ann".into(),
        }
        .into();
        assert_eq!(restarting.status().as_u16(), 503);
        let provider: ApiError = RuntimeError::ProviderUnavailable {
            agent: "ann".into(),
            provider: "openai".into(),
        }
        .into();
        assert_eq!(provider.status().as_u16(), 502);
    }

    /// Every refusal caused by ownership is the retryable answer (503 `agent_unavailable`, as
    /// a conversation that moved): an append the log refused as fenced (another writer
    /// appended since, or this node stood down), a lease held by another node or lost. Before,
    /// the fenced append and the lease refusals were 500 `internal`, which a host does not retry.
    #[test]
    fn refusals_caused_by_ownership_are_retryable() {
        let fenced: ApiError = RuntimeError::Store(StoreError::Fenced {
            conversation: "c:1".into(),
            expected: 7,
        })
        .into();
        let moved: ApiError = RuntimeError::Moved {
            conversation: "c:1".into(),
            reason: "node n2 owns it now".into(),
        }
        .into();
        let held: ApiError = RuntimeError::Lease(legio_store::LeaseError::Held {
            name: "c:1".into(),
            holder: "n2".into(),
            revision: 3,
        })
        .into();
        let lost: ApiError = RuntimeError::Lease(legio_store::LeaseError::Lost {
            name: "c:1".into(),
            revision: 3,
        })
        .into();
        for (path, e) in [
            ("fenced", fenced),
            ("moved", moved),
            ("held", held),
            ("lost", lost),
        ] {
            assert_eq!(
                (e.code.as_str(), e.status().as_u16()),
                ("agent_unavailable", 503),
                "{path}: {}",
                e.message
            );
        }
    }

    #[test]
    fn runtime_errors_map_by_kind() {
        let e: ApiError = RuntimeError::EmptyMessage.into();
        assert_eq!(e.code.as_str(), "empty_message");
        let e: ApiError = RuntimeError::UnknownAgent {
            name: "zed".into(),
            known: vec!["lead".into()],
        }
        .into();
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert!(e.message.contains("zed"));
        let e: ApiError = RuntimeError::ReservedConversation {
            key: "legio:memory".into(),
        }
        .into();
        assert_eq!(
            e.status(),
            StatusCode::BAD_REQUEST,
            "a reserved key is the client's error"
        );
    }
}
