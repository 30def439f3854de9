//! `[server.limits]` at work: the connection loop (hyper's HTTP/1 connection with its header read
//! timeout, which also ends idle keep-alive connections; a cap on open connections; graceful
//! shutdown by hyper-util's watcher) and the cap on turns in flight per token (429 with
//! `Retry-After`). The body read timeout is tower-http's layer, set on the router (server.rs);
//! a body whose declared `Content-Length` is over `server.body_limit_bytes` is refused here at
//! once ([`refuse_declared_overlong`]), without waiting for it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::server_limits::ServerLimits;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use legio_runtime::ErrorCode;

/// What a client over the connection cap reads before its connection is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 107\r\n\r\n{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server is at server.limits.max_connections; retry\"}}";

/// Accepts connections until `stop` resolves, then stops accepting; returns the watcher that
/// tracks the connections still open (to drain them within the grace period).
pub(crate) async fn accept(
    listener: TcpListener,
    app: Router,
    limits: &ServerLimits,
    stop: impl Future<Output = ()>,
) -> GracefulShutdown {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors (EMFILE) and the like: wait a little, do not spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    graceful
}

/// 413 at once for a request whose `Content-Length` is over `limit` (the state): its body is
/// never read (the connection is closed after the answer), so a client that declares a huge body
/// and sends none is not kept waiting for the body read timeout. A chunked body over the limit
/// is refused as it arrives (axum's `DefaultBodyLimit`).
pub(crate) async fn refuse_declared_overlong(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => ApiError::new(
            ErrorCode::BodyTooLarge,
            format!(
                "the body declares {length} bytes (Content-Length), over server.body_limit_bytes ({limit}); send less"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Turns in flight, counted per token.
#[derive(Debug)]
pub(crate) struct TurnSlots {
    in_flight: Mutex<HashMap<String, usize>>,
    cap: usize,
    retry_after_seconds: u64,
}

/// One turn's place; released when dropped.
#[derive(Debug)]
pub(crate) struct TurnSlot {
    slots: Arc<TurnSlots>,
    token: String,
}

impl TurnSlots {
    pub(crate) fn new(limits: &ServerLimits) -> Arc<Self> {
        Arc::new(Self {
            in_flight: Mutex::default(),
            cap: limits.max_turns_in_flight_per_token,
            retry_after_seconds: limits.retry_after_seconds,
        })
    }

    /// A place for one more turn of `token`, or the 429 to answer.
    pub(crate) fn acquire(self: &Arc<Self>, token: &str) -> Result<TurnSlot, TooManyTurns> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let count = in_flight.entry(token.to_owned()).or_default();
        if *count >= self.cap {
            return Err(self.too_many(token));
        }
        *count += 1;
        Ok(TurnSlot {
            slots: Arc::clone(self),
            token: token.to_owned(),
        })
    }

    fn too_many(&self, token: &str) -> TooManyTurns {
        TooManyTurns {
            error: ApiError::new(
                ErrorCode::TooManyTurns,
                format!(
                    "token `{token}` already has {} turns in flight (server.limits.max_turns_in_flight_per_token); retry after {} s",
                    self.cap, self.retry_after_seconds
                ),
            ),
            retry_after_seconds: self.retry_after_seconds,
        }
    }
}

/// A turn refused for the token's cap: 429 with `Retry-After`.
#[derive(Debug)]
pub(crate) struct TooManyTurns {
    error: ApiError,
    retry_after_seconds: u64,
}

impl IntoResponse for TooManyTurns {
    fn into_response(self) -> Response {
        let mut response = self.error.into_response();
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(self.retry_after_seconds),
        );
        response
    }
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        let mut in_flight = self
            .slots
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(count) = in_flight.get_mut(&self.token) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_per_token_and_released() {
        let limits = ServerLimits {
            max_turns_in_flight_per_token: 2,
            retry_after_seconds: 3,
            ..ServerLimits::default()
        };
        let slots = TurnSlots::new(&limits);
        let a1 = slots.acquire("a").unwrap();
        let _a2 = slots.acquire("a").unwrap();
        let refused = slots.acquire("a").unwrap_err().into_response();
        assert_eq!(refused.status().as_u16(), 429);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "3");
        let _b = slots.acquire("b").expect("another token has its own count");
        drop(a1);
        let _a3 = slots.acquire("a").expect("a released place is free again");
    }
}
