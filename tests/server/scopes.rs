//! Tokens with scopes (issue 16): every documented route against every kind of token, from one
//! table (`needs`); a host token limited to a conversation prefix reads and posts only there; the
//! older `token` and `operator_token` keys keep their meaning.

use reqwest::StatusCode;
use serde_json::json;

use super::Harness;

/// The tokens of the test server: (token, what it may do).
const TOKENS: &[(&str, &[&str])] = &[
    ("front-a", &["host"]),
    ("host-all", &["host"]),
    ("watcher", &["metrics"]),
    ("ops", &["operator"]),
];

const CONFIG: &str = r#"
[[server.tokens]]
name = "front"
token = "front-a"
scopes = ["host"]
conversations = "tenant-a:"
[[server.tokens]]
name = "host"
token = "host-all"
scopes = ["host"]
[[server.tokens]]
name = "watcher"
token = "watcher"
scopes = ["metrics"]
[[server.tokens]]
name = "ops"
token = "ops"
scopes = ["operator"]
"#;

/// The scope a documented route needs: the table docs/http-api.md shows.
fn needs(path: &str) -> Option<&'static str> {
    match path {
        "/healthz" | "/readyz" => None,
        "/meta"
        | "/sessions/{id}/turns"
        | "/sessions/{id}/history"
        | "/sessions/{id}/heartbeats"
        | "/sessions/{id}/tools"
        | "/sessions/{id}/tool_results" => Some("host"),
        p if p.starts_with("/v1/") => Some("host"),
        "/metrics" | "/dashboard" | "/dashboard.js" => Some("metrics"),
        "/sessions/{id}/approvals/{call_id}" => Some("operator"),
        p if p.starts_with("/operator/") => Some("operator"),
        other => panic!("{other}: a route the scope table does not know; add it to `needs` and docs/http-api.md"),
    }
}

fn request(h: &Harness, method: &str, path: &str, token: &str) -> reqwest::RequestBuilder {
    let concrete = path
        .replace("{id}", "tenant-a:scopes")
        .replace("{what}", "agents")
        .replace("{call_id}", "call_1");
    let builder = match method {
        "get" => h.client.get(h.url(&concrete)),
        _ => h
            .client
            .post(h.url(&concrete))
            .json(&json!({"content": "hi"})),
    };
    builder.bearer_auth(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_against_every_scope() {
    let h = Harness::start_with(CONFIG, std::time::Duration::ZERO).await;
    let mut checked = 0;
    for (method, path) in h.api.operations() {
        for (token, scopes) in TOKENS {
            let (status, body) = h
                .call(&method, &path, request(&h, &method, &path, token))
                .await;
            let allowed =
                needs(&path).is_none_or(|s| scopes.contains(&s) || scopes.contains(&"operator"));
            if allowed {
                assert!(
                    status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
                    "{token} {method} {path}: {status} {body}"
                );
            } else {
                let scope = needs(&path).unwrap();
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{token} {method} {path}: {body}"
                );
                assert_eq!(body["error"]["code"], "forbidden");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains(&format!("`{scope}` scope")), "{message}");
            }
            checked += 1;
        }
        // No token, or an unknown one, opens nothing but the probes.
        for given in [None, Some("nobody")] {
            let mut r = match method.as_str() {
                "get" => h
                    .client
                    .get(h.url(&path.replace("{id}", "x").replace("{what}", "agents"))),
                _ => h
                    .client
                    .post(h.url(&path.replace("{id}", "x")))
                    .json(&json!({})),
            };
            if let Some(t) = given {
                r = r.bearer_auth(t);
            }
            let (status, _) = h.call(&method, &path, r).await;
            if needs(&path).is_some() {
                assert_eq!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{given:?} {method} {path}"
                );
            }
        }
    }
    assert!(checked >= 4 * 14, "only {checked} route × token cases");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_token_sees_only_its_tenant() {
    let h = Harness::start_with(CONFIG, std::time::Duration::ZERO).await;
    let post = |conversation: &str, token: &str| {
        h.client
            .post(h.url(&format!("/sessions/{conversation}/turns")))
            .bearer_auth(token)
            .json(&json!({"content": "hello"}))
    };
    let (status, _) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("tenant-b:1", "host-all"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("tenant-a:1", "front-a"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let before = h.runtime.log().last_seq();
    let (status, body) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("tenant-b:1", "front-a"),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`tenant-a:`"),
        "{body}"
    );
    assert_eq!(
        h.runtime.log().last_seq(),
        before,
        "a refused turn stores nothing"
    );
    let history = |conversation: &str, token: &str| {
        h.client
            .get(h.url(&format!("/sessions/{conversation}/history")))
            .bearer_auth(token)
    };
    let (status, _) = h
        .call(
            "get",
            "/sessions/{id}/history",
            history("tenant-b:1", "front-a"),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, own) = h
        .call(
            "get",
            "/sessions/{id}/history",
            history("tenant-a:1", "front-a"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(own.as_array().unwrap().len(), 2, "{own}");
    // It cannot reset agents, nor read the log through the operator endpoints.
    let reset = h
        .client
        .post(h.url("/operator/reset"))
        .bearer_auth("front-a")
        .json(&json!({"conversation": "tenant-b:1", "agent": "lead"}));
    let (status, _) = h.call("post", "/operator/reset", reset).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let events = h
        .client
        .get(h.url("/operator/events"))
        .bearer_auth("front-a");
    let (status, _) = h.call("get", "/operator/events", events).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_token_keys_keep_their_meaning() {
    // `token` alone opens everything: it is an operator token.
    let h = Harness::start_with("token = \"legacy\"", std::time::Duration::ZERO).await;
    for path in ["/operator/verify", "/metrics", "/meta"] {
        let r = h.client.get(h.url(path)).bearer_auth("legacy");
        let (status, _) = h.call("get", path, r).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    h.stop().await;
    // With `operator_token` beside it, `token` is the host's (and the dashboard's) only.
    let h = Harness::start_with(
        "token = \"legacy\"\noperator_token = \"ops\"",
        std::time::Duration::ZERO,
    )
    .await;
    for (path, token, want) in [
        ("/operator/verify", "legacy", StatusCode::FORBIDDEN),
        ("/operator/verify", "ops", StatusCode::OK),
        ("/metrics", "legacy", StatusCode::OK),
        ("/meta", "legacy", StatusCode::OK),
        ("/meta", "ops", StatusCode::OK),
    ] {
        let r = h.client.get(h.url(path)).bearer_auth(token);
        let (status, _) = h.call("get", path, r).await;
        assert_eq!(status, want, "{token} {path}");
    }
    h.stop().await;
}

/// One rule for `?token=` (issue 46: a correct one on /metrics was called "not valid"): it opens
/// only `GET /dashboard` (traded for the cookie); anywhere else, right or wrong, it is refused
/// with a message saying where it is taken and what to send instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_tokens_open_only_the_dashboard_and_say_so_elsewhere() {
    let h = Harness::start_with(CONFIG, std::time::Duration::ZERO).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let opened = no_redirects
        .get(h.url("/dashboard?token=watcher"))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), StatusCode::SEE_OTHER);
    for (method, path, template, token) in [
        ("get", "/metrics?token=watcher", "/metrics", "watcher"),
        ("get", "/meta?token=host-all", "/meta", "host-all"),
        (
            "get",
            "/dashboard.js?token=watcher",
            "/dashboard.js",
            "watcher",
        ),
        (
            "post",
            "/sessions/t:q/turns?token=host-all",
            "/sessions/{id}/turns",
            "host-all",
        ),
        ("get", "/metrics?token=wrong", "/metrics", "wrong"),
    ] {
        let request = match method {
            "get" => h.client.get(h.url(path)),
            _ => h.client.post(h.url(path)).json(&json!({"content": "hi"})),
        };
        let (status, body) = h.call(method, template, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("accepted only on GET /dashboard")
                && message.contains("Authorization: Bearer"),
            "{path} ({token}): {message}"
        );
    }
    // The same token as a bearer opens the route.
    let (status, _) = h
        .call(
            "get",
            "/metrics",
            h.client.get(h.url("/metrics")).bearer_auth("watcher"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    h.stop().await;
}

/// Speaking as an agent needs a scope that says so (issue 46: any host token could post with
/// `sender` set to an agent's name): a plain host token gets 403 naming `post_as_agent`, and
/// nothing is stored; a token with it (or an operator's) posts as the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posting_as_an_agent_needs_the_post_as_agent_scope() {
    let config = format!(
        "{CONFIG}\n[[server.tokens]]\nname = \"relay\"\ntoken = \"relay\"\nscopes = [\"host\", \"post_as_agent\"]\n"
    );
    let h = Harness::start_with(&config, std::time::Duration::ZERO).await;
    let post = |token: &str, body: serde_json::Value| {
        h.client
            .post(h.url("/sessions/t:as/turns"))
            .bearer_auth(token)
            .json(&body)
    };
    let before = h.runtime.log().last_seq();
    let as_agent = json!({"content": "I, agent a, approve", "sender": "a"});
    let (status, body) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("host-all", as_agent.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    assert_eq!(body["error"]["param"], "sender");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`post_as_agent` scope"), "{message}");
    assert_eq!(
        h.runtime.log().last_seq(),
        before,
        "a refused turn stores nothing"
    );
    // An unknown sender is still 404 naming the field, whatever the token.
    let (status, _) = h
        .call(
            "post",
            "/sessions/{id}/turns",
            post("host-all", json!({"content": "x", "sender": "zed"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // As the user, the plain host token posts; with the scope, or as an operator, as the agent.
    for (token, body) in [
        ("host-all", json!({"content": "hello"})),
        ("relay", as_agent.clone()),
        ("ops", as_agent),
    ] {
        let (status, answer) = h
            .call("post", "/sessions/{id}/turns", post(token, body))
            .await;
        assert_eq!(status, StatusCode::OK, "{token}: {answer}");
    }
    let history = h
        .client
        .get(h.url("/sessions/t:as/history"))
        .bearer_auth("ops");
    let (_, messages) = h.call("get", "/sessions/{id}/history", history).await;
    let from_a = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"] == "a" && m["content"] == "I, agent a, approve")
        .count();
    assert_eq!(from_a, 2, "{messages}");
    h.stop().await;
}
