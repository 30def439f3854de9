//! `[server.limits]` (issue 16, finding 2): idle and half-sent connections are closed after the
//! header or body read timeout (300 raw TCP connections, no token needed); a connection over
//! `max_connections` is answered 503 and closed; a token over `max_turns_in_flight_per_token`
//! gets 429 with `Retry-After` while other tokens go on (its turns through the OpenAI-compatible
//! door count too).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Harness, TOKEN};

/// What a raw connection sends before it goes quiet.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sent {
    Nothing,
    HalfAHead,
    HalfABody,
}

fn bytes_of(sent: Sent) -> String {
    match sent {
        Sent::Nothing => String::new(),
        Sent::HalfAHead => "POST /sessions/t:slow/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty".into(),
        Sent::HalfABody => format!(
            "POST /sessions/t:slow/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"content\": \"x"
        ),
    }
}

/// Reads until the server closes the connection; what it read and when it closed.
async fn until_closed(mut stream: TcpStream, deadline: Duration) -> Option<(Duration, String)> {
    let start = Instant::now();
    let mut read = Vec::new();
    let outcome = tokio::time::timeout(deadline, stream.read_to_end(&mut read)).await;
    // A reset is a close too.
    outcome
        .ok()
        .map(|_| (start.elapsed(), String::from_utf8_lossy(&read).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_after_the_timeout() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\n[server.limits]\nheader_read_timeout_seconds = 1\nbody_read_timeout_seconds = 1\nmax_connections = 1000"),
        Duration::ZERO,
    )
    .await;
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut waits = Vec::new();
    for i in 0..300 {
        let sent = [Sent::Nothing, Sent::HalfAHead, Sent::HalfABody][i % 3];
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(bytes_of(sent).as_bytes()).await.unwrap();
        waits.push((
            sent,
            tokio::spawn(until_closed(stream, Duration::from_secs(30))),
        ));
    }
    let mut closed = 0;
    for (sent, wait) in waits {
        let (after, answer) = wait
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a connection that sent {sent:?} was still open after 30 s"));
        // Closed by the timeout, not at once (the last ones were opened after the first).
        assert!(
            after >= Duration::from_millis(200),
            "{sent:?} closed after {after:?}"
        );
        if sent == Sent::HalfABody {
            assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
            assert!(answer.contains("body_timeout"), "{answer}");
        }
        closed += 1;
    }
    assert_eq!(closed, 300);
    // The server still serves.
    let (status, _) = h.call("get", "/meta", h.get("/meta")).await;
    assert_eq!(status, StatusCode::OK);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_when_idle() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\n[server.limits]\nheader_read_timeout_seconds = 1"),
        Duration::ZERO,
    )
    .await;
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /meta HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (_, answer) = until_closed(stream, Duration::from_secs(30))
        .await
        .expect("the kept-alive connection was still open after 30 s");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    h.stop().await;
}

/// A declared `Content-Length` over `server.body_limit_bytes` is 413 at once (issue 46: it
/// waited the 30 s body read timeout for a body that never came, then answered 408), from the
/// headers alone: the client never sends a byte of the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_over_the_limit_is_refused_without_reading_the_body() {
    let h = Harness::start().await;
    let before = h.runtime.log().last_seq();
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let start = Instant::now();
    stream
        .write_all(
            format!(
                "POST /sessions/t:big/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Read the answer's head and its JSON body (the connection may stay open).
    let mut read = Vec::new();
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            read.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&read).into_owned();
            if n == 0 || text.contains("}}") {
                return text;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no answer 5 s after the headers (the body read timeout is 30 s): {:?}",
            String::from_utf8_lossy(&read)
        )
    });
    let waited = start.elapsed();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("body_too_large") && answer.contains("server.body_limit_bytes"),
        "{answer}"
    );
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    // The unread body is not waited for afterwards either: the connection is closed.
    let closed = until_closed(stream, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "the connection stayed open after the 413");
    // Nothing of the turn was stored.
    assert_eq!(h.runtime.log().last_seq(), before);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_until_one_closes() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\n[server.limits]\nheader_read_timeout_seconds = 2\nmax_connections = 4"),
        Duration::ZERO,
    )
    .await;
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    // The fifth is accepted only to be told 503 and closed.
    let fifth = TcpStream::connect(&addr).await.unwrap();
    let (_, answer) = until_closed(fifth, Duration::from_secs(10)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], "too_many_connections");
    // Once the idle ones time out, a client is served again.
    for stream in idle {
        until_closed(stream, Duration::from_secs(30)).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = h.get("/meta").send().await;
        if response.is_ok_and(|r| r.status() == StatusCode::OK) {
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_in_flight_are_capped_per_token() {
    let h = Harness::start_with(
        &format!("token = \"{TOKEN}\"\n[[server.tokens]]\nname = \"other\"\ntoken = \"other-token\"\nscopes = [\"host\"]\n[server.limits]\nmax_turns_in_flight_per_token = 2\nretry_after_seconds = 3"),
        Duration::from_millis(1500),
    )
    .await;
    let h = Arc::new(h);
    let post = |conversation: &str, token: &str| {
        h.client
            .post(h.url(&format!("/sessions/{conversation}/turns")))
            .bearer_auth(token)
            .json(&json!({"content": "slow"}))
    };
    let first = tokio::spawn(post("t:cap1", TOKEN).send());
    let second = tokio::spawn(post("t:cap2", TOKEN).send());
    // Both are in their agents (their user messages are stored).
    let log = Arc::clone(h.runtime.log());
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = |c: &str| {
        !crate::messages_of(log.as_ref(), &legio_core::ConversationKey::new(c).unwrap()).is_empty()
    };
    while !(started("t:cap1") && started("t:cap2")) {
        assert!(
            Instant::now() < deadline,
            "the first two turns never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = log.last_seq();
    let response = post("t:cap3", TOKEN).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "3");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_turns", "{body}");
    // The same refusal, checked against the OpenAPI document.
    let (status, _) = h
        .call("post", "/sessions/{id}/turns", post("t:cap3", TOKEN))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The OpenAI-compatible door counts against the same cap, in both its APIs.
    for (url, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "legio", "messages": [{"role": "user", "content": "slow"}],
                   "metadata": {"conversation": "t:cap3"}}),
        ),
        (
            "/v1/responses",
            json!({"model": "legio", "input": "slow", "metadata": {"conversation": "t:cap3"}}),
        ),
    ] {
        let request = h.client.post(h.url(url)).bearer_auth(TOKEN).json(&body);
        let (status, body) = h.call("post", url, request).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{url}: {body}");
        assert_eq!(body["error"]["code"], "too_many_turns", "{url}: {body}");
    }
    // Another token is not held back.
    let (status, _) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("t:cap4", "other-token"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    for turn in [first, second] {
        assert_eq!(turn.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    assert!(
        !crate::messages_of(
            log.as_ref(),
            &legio_core::ConversationKey::new("t:cap3").unwrap()
        )
        .iter()
        .any(|r| r.seq > before),
        "a refused turn stores nothing"
    );
    // The places are free again.
    let (status, _) = h
        .call("post", "/sessions/{id}/turns", post("t:cap3", TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK);
    Arc::into_inner(h).unwrap().stop().await;
}
