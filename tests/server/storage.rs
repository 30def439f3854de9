//! A failed event log under the server (issue 16): on a full disk (a small tmpfs; mounting needs
//! root, the test says it is skipped without it) a turn is refused with 503 `storage_full` and
//! `/readyz` answers 503 `storage_full`, both as `proto/openapi.yaml` documents them; `/healthz`
//! stays 200; a read works or is refused with the same 503. (`tests/cli/storage.rs` runs the same under a real `legio serve`:
//! too many open files, the exit and the restart.)

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Harness, TOKEN};

#[path = "../support/small_disk.rs"]
mod small_disk;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_is_503_naming_the_cause_on_writes_and_on_readyz() {
    let Some(disk) = small_disk::SmallDisk::mount(24) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(disk.path().join("db")).unwrap();
    std::os::unix::fs::symlink(disk.path().join("db"), dir.path().join("db")).unwrap();
    let server = format!("token = \"{TOKEN}\"\nbody_limit_bytes = 1048576");
    let h = Harness::start_in(dir, &server, "history_window = 4", "", Duration::ZERO).await;
    h.turn("full:first", "before the disk fills").await;
    let filler = disk.fill_leaving(2 * 1024 * 1024);
    let big = "x".repeat(200 * 1024);
    let refused = tokio::time::timeout(Duration::from_secs(120), async {
        for n in 0..60 {
            let url = h.url(&format!("/sessions/full:{n}/turns"));
            let request = h.client.post(url).bearer_auth(TOKEN);
            let (status, body) = h
                .call(
                    "post",
                    "/sessions/{id}/turns",
                    request.json(&json!({"content": big})),
                )
                .await;
            if status != StatusCode::OK {
                return Some((status, body));
            }
        }
        None
    })
    .await
    .expect("a turn on the full disk neither failed nor finished within 120 s");
    let (status, body) = refused.expect("the disk never filled");
    let cause = |body: &Value| {
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        (status, cause(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "storage_full".into()),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("the disk is full"), "{message}");
    let (status, body) = h
        .call("get", "/readyz", h.client.get(h.url("/readyz")))
        .await;
    assert_eq!(
        (status, cause(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "storage_full".into()),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("storage_failure_exit_seconds"),
        "{message}"
    );
    let (status, _) = h
        .call("get", "/healthz", h.client.get(h.url("/healthz")))
        .await;
    assert_eq!(status, StatusCode::OK, "/healthz stays alive");
    let (status, body) = h
        .call(
            "get",
            "/sessions/{id}/history",
            h.get("/sessions/full:first/history"),
        )
        .await;
    // sled may refuse reads too once a write failed (its error is global): then with the same
    // 503 and cause.
    if status == StatusCode::OK {
        assert!(body.to_string().contains("before the disk fills"));
    } else {
        assert_eq!(
            (status, cause(&body)),
            (StatusCode::SERVICE_UNAVAILABLE, "storage_full".into()),
            "{body}"
        );
    }
    std::fs::remove_file(filler).unwrap();
}
