//! DNS rebinding and cross-site requests (issue 46): real HTTP requests with a foreign `Host` and
//! `Origin` against a started server. On the default loopback server with no token, a page of
//! `evil.example.com` rebound to 127.0.0.1 (its `Host` and `Origin` are its own) is refused on
//! every route, `/mcp` included, and nothing is stored; the server's own origin (the dashboard
//! where it is served) and the names of `server.allowed_hosts` and `server.allowed_origins` pass;
//! on a `0.0.0.0` bind any `Host` passes but a foreign `Origin` does not.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::{Harness, TOKEN};

const EVIL: &str = "http://evil.example.com";

/// The port of the harness's server.
fn port(h: &Harness) -> u16 {
    h.base.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_page_is_refused_on_every_route_of_an_open_loopback_server() {
    let h = Harness::start_with("", Duration::ZERO).await;
    let before = h.runtime.log().last_seq();
    let evil_host = format!("evil.example.com:{}", port(&h));
    // Every documented route, with the rebinding page's Host (and then its Origin).
    for (method, path) in h.api.operations() {
        let concrete = path
            .replace("{id}", "t:rebind")
            .replace("{what}", "agents")
            .replace("{model}", "lead")
            .replace("{call_id}", "call_1");
        for (host, origin) in [
            (evil_host.clone(), format!("http://{evil_host}")),
            (h.base[7..].to_owned(), EVIL.to_owned()),
        ] {
            let request = match method.as_str() {
                "get" => h.client.get(h.url(&concrete)),
                _ => h
                    .client
                    .post(h.url(&concrete))
                    .json(&json!({"content": "steal", "conversation": "t:rebind"})),
            };
            let request = request.header("host", &host).header("origin", &origin);
            let (status, body) = h.call(&method, &path, request).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {path} Host {host} Origin {origin}: {body}"
            );
            assert_eq!(body["error"]["code"], "forbidden");
            let message = body["error"]["message"].as_str().unwrap();
            let setting = if host.starts_with("evil") {
                "server.allowed_hosts"
            } else {
                "server.allowed_origins"
            };
            assert!(message.contains(setting), "{method} {path}: {message}");
        }
    }
    // /mcp validates Origin as the MCP specification asks: 403 before its own token check.
    let mcp = h
        .client
        .post(h.url("/mcp"))
        .header("origin", EVIL)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::FORBIDDEN);
    let body: serde_json::Value = mcp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.allowed_origins"),
        "{body}"
    );
    // Nothing the page posted was stored.
    assert_eq!(
        h.runtime.log().last_seq(),
        before,
        "a refused request stored"
    );
    // The server's own origin still works: the dashboard where it is served, and a turn.
    for host in [h.base[7..].to_owned(), format!("localhost:{}", port(&h))] {
        for path in ["/dashboard", "/metrics", "/meta"] {
            let request = h
                .client
                .get(h.url(path))
                .header("host", &host)
                .header("origin", format!("http://{host}"));
            let (status, body) = h.call("get", path, request).await;
            assert_eq!(status, StatusCode::OK, "{path} from http://{host}: {body}");
        }
    }
    let request = h
        .client
        .post(h.url("/sessions/t:own/turns"))
        .header("origin", &h.base)
        .json(&json!({"content": "hello"}));
    let (status, body) = h.call("post", "/sessions/{id}/turns", request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A client that is not a browser sends no Origin: it passes.
    let (status, _) = h.call("get", "/meta", h.client.get(h.url("/meta"))).await;
    assert_eq!(status, StatusCode::OK);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_hosts_and_origins_pass_and_others_do_not() {
    let h = Harness::start_with(
        "allowed_hosts = [\"legio.lan\"]\nallowed_origins = [\"https://app.example.com\"]",
        Duration::ZERO,
    )
    .await;
    let get = |host: &str, origin: Option<&str>| {
        let request = h.client.get(h.url("/meta")).header("host", host);
        match origin {
            Some(origin) => request.header("origin", origin),
            None => request,
        }
    };
    let lan = format!("legio.lan:{}", port(&h));
    for (host, origin, want) in [
        (lan.as_str(), None, StatusCode::OK),
        (lan.as_str(), Some(format!("http://{lan}")), StatusCode::OK),
        (
            "127.0.0.1",
            Some("https://app.example.com".to_owned()),
            StatusCode::OK,
        ),
        (lan.as_str(), Some(EVIL.to_owned()), StatusCode::FORBIDDEN),
        ("evil.example.com", None, StatusCode::FORBIDDEN),
    ] {
        let (status, body) = h.call("get", "/meta", get(host, origin.as_deref())).await;
        assert_eq!(status, want, "Host {host} Origin {origin:?}: {body}");
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_bind_takes_any_host_but_not_a_foreign_origin() {
    let h = Harness::start_bound(
        tempfile::tempdir().unwrap(),
        &format!("token = \"{TOKEN}\""),
        "history_window = 4",
        "",
        Duration::ZERO,
        None,
        "0.0.0.0:0".parse().unwrap(),
    )
    .await;
    let host = format!("10.1.2.3:{}", port(&h));
    let request = h.get("/meta").header("host", &host);
    let (status, body) = h.call("get", "/meta", request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let request = h
        .get("/meta")
        .header("host", &host)
        .header("origin", format!("http://{host}"));
    let (status, body) = h.call("get", "/meta", request).await;
    assert_eq!(status, StatusCode::OK, "its own origin: {body}");
    let request = h.get("/meta").header("host", &host).header("origin", EVIL);
    let (status, body) = h.call("get", "/meta", request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    h.stop().await;
}
