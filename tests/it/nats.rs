//! The JetStream backend against real nats-server processes: leases, fencing of a writer that
//! lost a conversation, a three-server cluster that loses a server and gets it back, and the node
//! bus (requests between nodes). (The
//! `EventLog` contract and the model test run on `NatsLog` in contract.rs and model.rs.)

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use legio_core::Seq;
use legio_store::{
    BusError, EventLog, LeaseError, Leases, NatsLog, NatsOptions, NodeBus, StoreError,
};
use legio_tests::nats::NatsCluster;
use legio_tests::proxy::Proxy;
use legio_tests::*;

fn leases(cluster: &NatsCluster, ttl: Duration) -> Leases {
    let options = legio_store::NatsOptions {
        lease_ttl: ttl,
        ..cluster.options(1)
    };
    Leases::open(&options).unwrap()
}

#[test]
fn of_two_racing_clients_exactly_one_gets_the_lease() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let (a, b) = (
        leases(&cluster, Duration::from_secs(30)),
        leases(&cluster, Duration::from_secs(30)),
    );
    for round in 0..20 {
        let name = format!("race:{round}");
        let barrier = Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                barrier.wait();
                a.acquire(&name, "node-a")
            });
            let tb = s.spawn(|| {
                barrier.wait();
                b.acquire(&name, "node-b")
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            other => panic!("round {round}: exactly one must win, got {other:?}"),
        };
        assert_eq!(
            loser,
            LeaseError::Held {
                name: name.clone(),
                holder: winner.holder.clone(),
                revision: winner.revision,
            }
        );
    }
    assert_eq!(a.list().unwrap().len(), 20);
}

#[test]
fn a_stale_revision_can_neither_renew_nor_release() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let leases = leases(&cluster, Duration::from_secs(30));
    let first = leases.acquire("t:1", "node-a").unwrap();
    let renewed = leases.renew(&first).unwrap();
    assert!(
        renewed.revision > first.revision,
        "a renewal is a new revision"
    );
    assert_eq!(
        leases.renew(&first).unwrap_err(),
        LeaseError::Lost {
            name: "t:1".into(),
            revision: first.revision
        }
    );
    assert!(matches!(
        leases.release(first.clone()),
        Err(LeaseError::Lost { .. })
    ));
    assert_eq!(leases.list().unwrap(), vec![renewed.clone()]);
    leases.renew(&renewed).unwrap();
}

#[test]
fn a_lease_nobody_renews_expires_after_its_ttl() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let (a, b) = (leases(&cluster, ttl), leases(&cluster, ttl));
    let held = a.acquire("t:expiring", "node-a").unwrap();
    let started = Instant::now();
    assert!(matches!(
        b.acquire("t:expiring", "node-b"),
        Err(LeaseError::Held { .. })
    ));
    let taken = loop {
        match b.acquire("t:expiring", "node-b") {
            Ok(lease) => break lease,
            Err(LeaseError::Held { .. }) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the lease never expired"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        started.elapsed() >= ttl / 2,
        "taken after {:?}, before the TTL could pass",
        started.elapsed()
    );
    assert_eq!(taken.holder, "node-b");
    assert!(matches!(a.renew(&held), Err(LeaseError::Lost { .. })));
}

#[test]
fn a_released_lease_is_free_at_once() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let (a, b) = (
        leases(&cluster, Duration::from_secs(60)),
        leases(&cluster, Duration::from_secs(60)),
    );
    let held = a.acquire("t:handover", "node-a").unwrap();
    assert!(matches!(
        b.acquire("t:handover", "node-b"),
        Err(LeaseError::Held { .. })
    ));
    a.release(held).unwrap();
    let taken = b.acquire("t:handover", "node-b").unwrap();
    assert_eq!(a.list().unwrap(), vec![taken]);
}

/// A server that asks for a token (`authorization { token }`): with `NatsAuth::Token` the log,
/// the leases and the node bus open and work; without a token, or with a wrong one, opening
/// fails at once as `Refused` (a configuration error), with the server's refusal as the reason.
#[test]
fn a_server_that_asks_for_a_token_admits_only_a_client_that_gives_it() {
    const TOKEN: &str = "s3cret-token";
    let settings = format!("authorization {{ token: \"{TOKEN}\" }}\n");
    let Some(cluster) = NatsCluster::start_with_settings(1, &settings) else {
        return;
    };
    let options = NatsOptions {
        auth: legio_store::NatsAuth::Token(TOKEN.into()),
        ..cluster.options(1)
    };
    let log = NatsLog::open(&options).unwrap();
    let range = log
        .append(vec![text_message(1, "t:token", "user", "lead", "let in")])
        .unwrap();
    assert_eq!(range.first, Seq(1));
    assert_eq!(all_seqs_and_texts(&log), vec![(1, "let in".to_owned())]);
    let leases = Leases::open(&options).unwrap();
    leases.acquire("t:token", "node-a").unwrap();
    NodeBus::open(&options, Duration::from_millis(500)).unwrap();
    for (auth, what) in [
        (legio_store::NatsAuth::None, "no token"),
        (
            legio_store::NatsAuth::Token("wrong".into()),
            "a wrong token",
        ),
    ] {
        let refused = NatsOptions {
            auth,
            ..options.clone()
        };
        let started = Instant::now();
        match NatsLog::open(&refused) {
            Err(StoreError::Refused { servers, reason }) => {
                println!("{what}: {reason}");
                assert!(
                    reason.contains("authorization violation"),
                    "{what}: {reason}"
                );
                // A configuration error for the runtime and the server, not "retry later".
                let e = legio_runtime::RuntimeError::from(StoreError::Refused { servers, reason });
                assert_eq!(e.code(), legio_runtime::ErrorCode::Config, "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: refused only after {:?}",
            started.elapsed()
        );
    }
}

/// Runs `openssl` with `args`; `None` (the test is skipped, with a line) when there is no
/// `openssl` command outside CI.
fn openssl(args: &[&str]) -> Option<()> {
    let out = match std::process::Command::new("openssl").args(args).output() {
        Ok(out) => out,
        Err(e) => {
            let what = format!("the TLS tests make their certificates with `openssl`: {e}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{what}");
            println!("skipped: {what}");
            return None;
        }
    };
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
    Some(())
}

/// A test CA in `dir`, and certificates it signs: `(ca.pem, ca-key.pem)`.
fn test_ca(dir: &std::path::Path) -> Option<(PathBuf, PathBuf)> {
    let (ca, key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    openssl(&[
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=legio test CA",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        key.to_str()?,
        "-out",
        ca.to_str()?,
    ])?;
    Some((ca, key))
}

/// A certificate `name` signed by the CA `(ca, ca_key)` with the extension `ext` (a subject
/// alternative name, an extended key usage): `(cert, key)`.
fn signed(
    dir: &std::path::Path,
    name: &str,
    ext: &str,
    ca: &(PathBuf, PathBuf),
) -> Option<(PathBuf, PathBuf)> {
    let (cert, key, csr, extfile) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
        dir.join(format!("{name}.csr")),
        dir.join(format!("{name}.cnf")),
    );
    std::fs::write(&extfile, format!("{ext}\n")).unwrap();
    openssl(&[
        "req",
        "-subj",
        &format!("/CN={name}"),
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        key.to_str()?,
        "-out",
        csr.to_str()?,
    ])?;
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-CAcreateserial",
        "-in",
        csr.to_str()?,
        "-CA",
        ca.0.to_str()?,
        "-CAkey",
        ca.1.to_str()?,
        "-out",
        cert.to_str()?,
        "-extfile",
        extfile.to_str()?,
    ])?;
    Some((cert, key))
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with the `openssl` command in `dir`:
/// the paths of the CA's certificate, the server's certificate and its key.
fn test_certificates(dir: &std::path::Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let ca = test_ca(dir)?;
    let (cert, key) = signed(dir, "server", "subjectAltName=IP:127.0.0.1", &ca)?;
    Some((ca.0, cert, key))
}

/// A server that requires TLS (`tls { cert_file, key_file }`, its certificate signed by a CA of
/// the test's): with `NatsTls { ca_file }` the log opens, appends and reads over TLS; without
/// TLS settings, or trusting another CA, opening fails.
#[test]
fn a_server_that_requires_tls_is_reached_with_the_ca_that_signed_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = test_certificates(dir.path()) else {
        return;
    };
    let settings = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
        cert.display(),
        key.display()
    );
    let Some(cluster) = NatsCluster::start_with_settings(1, &settings) else {
        return;
    };
    let options = NatsOptions {
        tls: Some(legio_store::NatsTls {
            ca_file: Some(ca),
            client_cert: None,
        }),
        ..cluster.options(1)
    };
    let log = NatsLog::open(&options).unwrap();
    log.append(vec![text_message(1, "t:tls", "user", "lead", "over tls")])
        .unwrap();
    assert_eq!(all_seqs_and_texts(&log), vec![(1, "over tls".to_owned())]);
    Leases::open(&options).unwrap();
    let other = tempfile::tempdir().unwrap();
    let (other_ca, _, _) = test_certificates(other.path()).unwrap();
    for (tls, what) in [
        (None, "no TLS settings"),
        (
            Some(legio_store::NatsTls {
                ca_file: Some(other_ca),
                client_cert: None,
            }),
            "another CA",
        ),
    ] {
        let refused = NatsOptions {
            tls,
            ..options.clone()
        };
        open_fails_over_tls(&refused, what, "certificate");
    }
}

/// Asserts that opening the log with `options` fails in the TLS handshake, `cause` in the reason.
fn open_fails_over_tls(options: &NatsOptions, what: &str, cause: &str) {
    match NatsLog::open(options) {
        Err(StoreError::Unreachable { reason, .. }) => {
            println!("{what}: {reason}");
            assert!(reason.contains(cause), "{what}: {reason}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// A server that verifies its clients (`tls { ..., ca_file, verify: true }`): with a client
/// certificate signed by the CA it trusts (`NatsTls::client_cert`) the log opens and appends;
/// without one the handshake fails and so does the open.
#[test]
fn a_server_that_verifies_clients_admits_the_log_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let Some(ca) = test_ca(dir.path()) else {
        return;
    };
    let server = signed(dir.path(), "server", "subjectAltName=IP:127.0.0.1", &ca).unwrap();
    let client = signed(dir.path(), "client", "extendedKeyUsage=clientAuth", &ca).unwrap();
    let settings = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true }}\n",
        server.0.display(),
        server.1.display(),
        ca.0.display()
    );
    let Some(cluster) = NatsCluster::start_with_settings(1, &settings) else {
        return;
    };
    let tls = |client_cert| {
        Some(legio_store::NatsTls {
            ca_file: Some(ca.0.clone()),
            client_cert,
        })
    };
    let options = NatsOptions {
        tls: tls(Some(client)),
        ..cluster.options(1)
    };
    let log = NatsLog::open(&options).unwrap();
    log.append(vec![text_message(1, "t:mtls", "user", "lead", "verified")])
        .unwrap();
    assert_eq!(all_seqs_and_texts(&log), vec![(1, "verified".to_owned())]);
    let without = NatsOptions {
        tls: tls(None),
        ..options.clone()
    };
    open_fails_over_tls(&without, "no client certificate", "CertificateRequired");
}

/// `release_latest` gives a lease up even when its holder renewed it since the revision it
/// presents, and leaves alone a lease that passed to another holder.
#[test]
fn release_latest_frees_a_lease_renewed_meanwhile_and_no_one_elses() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let (a, b) = (leases(&cluster, ttl), leases(&cluster, ttl));
    let old = a.acquire("t:latest", "node-a").unwrap();
    a.renew(&old).unwrap();
    assert!(matches!(
        a.release(old.clone()),
        Err(LeaseError::Lost { .. })
    ));
    a.release_latest(old).unwrap();
    assert_eq!(a.list().unwrap(), vec![]);
    // Expired and taken by another: the old holder's release leaves it.
    let mine = a.acquire("t:latest", "node-a").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let theirs = loop {
        match b.acquire("t:latest", "node-b") {
            Ok(lease) => break lease,
            Err(LeaseError::Held { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    };
    a.release_latest(mine).unwrap();
    assert_eq!(a.list().unwrap(), vec![theirs]);
}

/// Reads every event of the log.
pub(crate) fn all_seqs_and_texts(log: &dyn EventLog) -> Vec<(u64, String)> {
    log.read_range(Seq(1), Seq(u64::MAX), 100_000)
        .unwrap()
        .into_iter()
        .map(|r| {
            let text = r
                .event
                .as_message()
                .map(|m| m.text_content())
                .unwrap_or_default();
            (r.seq.0, text)
        })
        .collect()
}

#[test]
fn a_writer_that_lost_the_conversation_is_refused_and_stores_nothing() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let old_owner = NatsLog::open(&cluster.options(1)).unwrap();
    let new_owner = NatsLog::open(&cluster.options(1)).unwrap();
    old_owner
        .append(vec![text_message(1, "t:f", "user", "lead", "old 1")])
        .unwrap();
    // The new owner takes over: it reads the conversation, then appends.
    new_owner.refresh(&conv("t:f")).unwrap();
    new_owner
        .append(vec![text_message(2, "t:f", "user", "lead", "new 1")])
        .unwrap();
    // The old owner still believes seq 1 is the last: its batch (and a single event) is refused.
    let refused = old_owner
        .append(vec![
            text_message(3, "t:f", "user", "lead", "stale a"),
            text_message(4, "t:f", "user", "lead", "stale b"),
            text_message(5, "t:other", "user", "lead", "stale c"),
        ])
        .unwrap_err();
    assert_eq!(
        refused,
        StoreError::Fenced {
            conversation: "t:f".into(),
            expected: 1
        }
    );
    // The stale conversation second in a batch, after a conversation whose expectation holds.
    let refused = old_owner
        .append(vec![
            text_message(9, "t:fresh", "user", "lead", "stale e"),
            text_message(10, "t:f", "user", "lead", "stale f"),
        ])
        .unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { .. }), "{refused}");
    let again = old_owner
        .append(vec![text_message(6, "t:f", "user", "lead", "stale d")])
        .unwrap_err();
    assert!(matches!(again, StoreError::Fenced { .. }), "{again}");
    assert_eq!(
        all_seqs_and_texts(&new_owner),
        vec![(1, "old 1".to_owned()), (2, "new 1".to_owned())],
        "nothing of a refused append is stored"
    );
    // The new owner goes on; the old one only after it takes the conversation back.
    new_owner
        .append(vec![text_message(7, "t:f", "user", "lead", "new 2")])
        .unwrap();
    old_owner.refresh(&conv("t:f")).unwrap();
    let r = old_owner
        .append(vec![text_message(8, "t:f", "user", "lead", "old again")])
        .unwrap();
    assert_eq!(r.first, Seq(4));
    assert!(old_owner.verify(&mut |_| {}).unwrap().is_clean());
}

/// A node that stood down from a conversation (its lease lost) appends nothing more to it, even
/// when nobody else wrote meanwhile (its expectation would still hold), until it takes it again.
#[test]
fn a_stood_down_conversation_is_refused_until_taken_again() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let node = NatsLog::open(&cluster.options(1)).unwrap();
    node.append(vec![text_message(1, "t:d", "user", "lead", "before")])
        .unwrap();
    node.stand_down(&conv("t:d"));
    let refused = node
        .append(vec![text_message(2, "t:d", "user", "lead", "after")])
        .unwrap_err();
    assert_eq!(
        refused,
        StoreError::Fenced {
            conversation: "t:d".into(),
            expected: 1
        }
    );
    // Other conversations are not held up, and a read reloads the conversation from the stream.
    node.append(vec![text_message(3, "t:other", "user", "lead", "other")])
        .unwrap();
    let events = node
        .conversation_events(&conv("t:d"), Seq::ZERO, 100)
        .unwrap();
    assert_eq!(events.len(), 1);
    assert!(matches!(
        node.append(vec![text_message(4, "t:d", "user", "lead", "still")]),
        Err(StoreError::Fenced { .. })
    ));
    node.refresh(&conv("t:d")).unwrap();
    let r = node
        .append(vec![text_message(5, "t:d", "user", "lead", "taken again")])
        .unwrap();
    assert_eq!(r.first, Seq(3));
    assert_eq!(
        all_seqs_and_texts(&node),
        vec![
            (1, "before".to_owned()),
            (2, "other".to_owned()),
            (3, "taken again".to_owned())
        ]
    );
}

/// The shared memory (`legio:memory`) has no owner: every node writes it. A node whose copy is
/// behind another's write is refused once (its expectation is stale), then, its copy read again
/// (`EventLog::catch_up`, or the append itself), writes after it: never refused for good, as an
/// owned conversation is until it is taken again (it once was, so a node that lost one race for
/// memory could write no memory until it restarted).
#[test]
fn a_refused_memory_write_is_refused_once_not_for_good() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let note = |text: &str| {
        legio_core::Event::NoteWritten(legio_core::NoteWritten {
            key: "plan".into(),
            author: legio_core::AgentName::new("lead").unwrap(),
            at: ts(1),
            text: text.into(),
        })
    };
    let memory = legio_core::ConversationKey::memory();
    let a = NatsLog::open(&cluster.options(1)).unwrap();
    let b = NatsLog::open(&cluster.options(1)).unwrap();
    a.append(vec![note("a1")]).unwrap();
    assert_eq!(
        b.conversation_events(memory, Seq::ZERO, 10).unwrap().len(),
        1
    );
    a.append(vec![note("a2")]).unwrap();
    let refused = b.append(vec![note("b stale")]).unwrap_err();
    assert!(matches!(refused, StoreError::Fenced { .. }), "{refused}");
    let r = b
        .append(vec![note("b1")])
        .expect("the next write is not refused");
    assert_eq!(r.first, Seq(3));
    a.append(vec![note("a3")]).unwrap_err();
    EventLog::catch_up(&a, memory).unwrap();
    assert_eq!(
        a.conversation_events(memory, Seq::ZERO, 10).unwrap().len(),
        3
    );
    a.append(vec![note("a3")])
        .expect("a caught up writes after b");
    let texts: Vec<String> = b
        .read_range(Seq::FIRST, Seq(10), 10)
        .unwrap()
        .into_iter()
        .map(|r| match r.event {
            legio_core::Event::NoteWritten(n) => n.text,
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["a1", "a2", "b1", "a3"], "nothing refused is stored");
}

#[test]
fn a_single_event_from_a_stale_writer_is_refused_too() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let a = NatsLog::open(&cluster.options(1)).unwrap();
    let b = NatsLog::open(&cluster.options(1)).unwrap();
    // Both load the empty conversation; b appends first, so a's expectation (empty) fails.
    assert!(a.session_states(&conv("t:s")).unwrap().is_empty());
    assert!(b.session_states(&conv("t:s")).unwrap().is_empty());
    b.append(vec![text_message(1, "t:s", "user", "lead", "b wins")])
        .unwrap();
    let refused = a
        .append(vec![text_message(2, "t:s", "user", "lead", "a loses")])
        .unwrap_err();
    assert_eq!(
        refused,
        StoreError::Fenced {
            conversation: "t:s".into(),
            expected: 0
        }
    );
    assert_eq!(all_seqs_and_texts(&b), vec![(1, "b wins".to_owned())]);
}

/// Thousands of quick reads (a follower's, an operator's, a non-owner's catch-up) leave no
/// JetStream consumer behind: a read once made a consumer that lingered 30 s, and after about
/// 2,300 quick reads the server refused more (maximum consumers, error 10026).
#[test]
fn thousands_of_quick_reads_leave_no_consumer_behind() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let writer = NatsLog::open(&cluster.options(1)).unwrap();
    for n in 0..200u64 {
        let conversation = format!("q:{}", n % 4);
        writer
            .append(vec![text_message(n, &conversation, "user", "lead", "hi")])
            .unwrap();
    }
    let reader = NatsLog::open_read_only(&cluster.options(1)).unwrap();
    let started = Instant::now();
    for i in 0..4000u64 {
        let from = i % 190 + 1;
        let short = writer.read_range(Seq(from), Seq(from + 2), 10).unwrap();
        assert_eq!(short.first().map(|r| r.seq), Some(Seq(from)), "read {i}");
        assert_eq!(short.len(), 3, "read {i}");
        if i % 100 == 0 {
            // A long read (through a consumer) and a conversation read from its subject.
            assert_eq!(
                writer.read_range(Seq(1), Seq(200), 1000).unwrap().len(),
                200
            );
            let events = reader
                .conversation_events(&conv("q:1"), Seq::ZERO, 1000)
                .unwrap();
            assert_eq!(events.len(), 50, "read {i}");
        }
    }
    println!("4,000 quick reads in {:?}", started.elapsed());
    assert_eq!(cluster.consumers(0), 0, "every read's consumer is gone");
}

/// With replicas 3, appends of many conversations queued together leave as one atomic batch. A
/// stale writer's append in such a batch makes the server refuse the whole batch: the stale
/// append is refused as fenced, and every other append of the batch is stored all the same.
#[test]
fn a_fenced_append_grouped_with_others_refuses_only_itself() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    fenced_append_grouped_with_others(&cluster, 3);
}

/// With replicas 1 only appends of several events are grouped (nats/grouping.rs).
#[test]
fn on_one_server_a_fenced_append_grouped_with_others_refuses_only_itself() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    fenced_append_grouped_with_others(&cluster, 1);
}

/// Replicas 1: a batch that would carry fewer appends than the last one waits for more, but only
/// for its linger (nats/grouping.rs `Linger`): after a burst that left as a batch of several, a
/// lone append of two events is acknowledged within the linger and its own batch, not held until
/// something else wakes the log (its next leader check, 5 s on).
#[test]
fn on_one_server_a_lone_batch_after_a_burst_leaves_within_its_linger() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let log = NatsLog::open(&cluster.options(1)).unwrap();
    let mut n = 0;
    let mut two = |conversation: &str| {
        (0..2)
            .map(|_| {
                n += 1;
                text_message(n, conversation, "user", "lead", &format!("m{n}"))
            })
            .collect::<Vec<_>>()
    };
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        // Twelve appends at once: the first leaves, the others queue behind it and leave as one.
        let burst: Vec<_> = (0..12)
            .map(|i| log.submit(two(&format!("l:{i}"))).unwrap())
            .collect();
        for handle in burst {
            handle.wait().unwrap();
        }
        let started = Instant::now();
        log.submit(two("l:alone")).unwrap().wait().unwrap();
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a lone append waited {slowest:?}"
    );
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

/// Bursts of two-event appends to six conversations and, in each burst, one from a writer that
/// lost its conversation; see the two tests above.
fn fenced_append_grouped_with_others(cluster: &NatsCluster, replicas: usize) {
    let stale = NatsLog::open(&cluster.options(replicas)).unwrap();
    let owner = NatsLog::open(&cluster.options(replicas)).unwrap();
    stale
        .append(vec![text_message(1, "g:f", "user", "lead", "first")])
        .unwrap();
    owner.refresh(&conv("g:f")).unwrap();
    owner
        .append(vec![text_message(2, "g:f", "user", "lead", "taken over")])
        .unwrap();
    let mut n = 10;
    let mut stored = Vec::new();
    for burst in 0..20 {
        let mut handles = Vec::new();
        for i in 0..12u64 {
            let (conversation, text) = match i {
                5 => ("g:f".to_owned(), format!("stale {burst}")),
                _ => (format!("g:{}", i % 6), format!("fresh {burst}.{i}")),
            };
            let texts = [text.clone(), format!("{text} (2)")];
            let events = texts
                .iter()
                .map(|t| {
                    n += 1;
                    text_message(n, &conversation, "user", "lead", t)
                })
                .collect();
            handles.push((texts, stale.submit(events).unwrap()));
        }
        for (texts, handle) in handles {
            let outcome = handle.wait();
            if texts[0].starts_with("stale") {
                assert!(
                    matches!(outcome, Err(StoreError::Fenced { .. })),
                    "{texts:?}: {outcome:?}"
                );
            } else {
                outcome.unwrap_or_else(|e| panic!("{texts:?} refused: {e}"));
                stored.extend(texts);
            }
        }
    }
    let texts: Vec<String> = all_seqs_and_texts(&owner)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert!(!texts.iter().any(|t| t.starts_with("stale")), "{texts:?}");
    let mut fresh: Vec<String> = texts
        .into_iter()
        .filter(|t| t.starts_with("fresh"))
        .collect();
    fresh.sort();
    stored.sort();
    assert_eq!(fresh, stored, "every acknowledged append, once");
    assert!(owner.verify(&mut |_| {}).unwrap().is_clean());
}

/// A writer's log talks to the server that leads its stream (a follower would forward every
/// publish over a route): each of six opens lands there, whichever server the client reached
/// first, and the probes that asked the servers' names are gone after.
#[test]
fn a_writer_connects_to_the_server_that_leads_the_stream() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let options = cluster.options(3);
    let _first = NatsLog::open(&options).unwrap();
    // The stream was just created: its leader may take a moment to show.
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        match cluster.leader_of(&options.stream) {
            Some(leader) => break leader,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => panic!(
                "the stream has no leader: {}",
                cluster.placement(&options.stream)
            ),
        }
    };
    let settled = |want: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let counts = cluster.connections();
            let total: u64 = counts.iter().map(|(_, n)| n).sum();
            if total == want || Instant::now() > deadline {
                return counts;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let before = settled(1);
    let logs: Vec<NatsLog> = (0..6).map(|_| NatsLog::open(&options).unwrap()).collect();
    let after = settled(1 + logs.len() as u64);
    assert_eq!(
        cluster.leader_of(&options.stream).as_deref(),
        Some(leader.as_str()),
        "the leader moved while the logs opened: the counts below would mean nothing"
    );
    for ((name, was), (_, is)) in before.iter().zip(&after) {
        let want = if *name == leader { was + 6 } else { *was };
        assert_eq!(
            *is, want,
            "{name} (the leader is {leader}): {before:?} then {after:?}"
        );
    }
}

/// Asks the stream's leader to step down (a JetStream API request, as `nats stream cluster
/// step-down` sends); the cluster then elects another server.
fn step_down(cluster: &NatsCluster, stream: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(cluster.urls())
            .await
            .map_err(|e| e.to_string())?;
        let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
        let reply = client
            .request(subject, "".into())
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&reply.payload).into_owned();
        match text.contains("\"success\":true") {
            true => Ok(()),
            false => Err(text),
        }
    })
}

/// Waits up to `within` for the server named `name` to hold the only client connection.
fn only_connection_on(cluster: &NatsCluster, name: &str, within: Duration) -> Vec<(String, u64)> {
    let deadline = Instant::now() + within;
    loop {
        let counts = cluster.connections();
        let there = counts.iter().all(|(n, c)| *c == u64::from(n == name));
        if there || Instant::now() > deadline {
            return counts;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the test's appending threads share: when to stop, when to pause, and how many of
/// them have an append in flight.
#[derive(Default)]
struct Appending {
    stop: AtomicBool,
    paused: AtomicBool,
    in_flight: AtomicUsize,
}

impl Appending {
    /// Appends one event at a time to conversation `c:{thread}` until told to stop, waiting
    /// while paused; every append must be acknowledged. Returns how many, and the longest.
    fn run(&self, log: &NatsLog, thread: usize) -> (u64, Duration) {
        let (mut n, mut longest) = (0u64, Duration::ZERO);
        let conversation = format!("c:{thread}");
        while !self.stop.load(Ordering::SeqCst) {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            if self.paused.load(Ordering::SeqCst) {
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            n += 1;
            // Message ids are unique over the threads (verify checks they are).
            let id = n * 4 + thread as u64;
            let event = text_message(id, &conversation, "user", "lead", "through the move");
            let started = Instant::now();
            log.append(vec![event]).unwrap();
            longest = longest.max(started.elapsed());
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        (n, longest)
    }

    /// Runs `step` while `threads` threads append to `log` (each as [`Appending::run`]), then
    /// stops them; returns how many appends they made, the longest, and what `step` returned.
    /// The threads stop also when `step` panics.
    fn during<T>(
        &self,
        log: &NatsLog,
        threads: usize,
        step: impl FnOnce() -> T,
    ) -> (u64, Duration, T) {
        std::thread::scope(|s| {
            let _stopping = StopOnDrop(&self.stop);
            let appenders: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || self.run(log, t)))
                .collect();
            let stepped = step();
            self.stop.store(true, Ordering::SeqCst);
            let done: Vec<(u64, Duration)> =
                appenders.into_iter().map(|t| t.join().unwrap()).collect();
            let longest = done.iter().map(|(_, l)| *l).max().unwrap_or_default();
            (done.iter().map(|(n, _)| n).sum::<u64>(), longest, stepped)
        })
    }

    /// Runs `step` with no append in flight.
    fn paused_for<T>(&self, step: impl FnOnce() -> T) -> T {
        self.paused.store(true, Ordering::SeqCst);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = step();
        self.paused.store(false, Ordering::SeqCst);
        result
    }
}

/// Sets its flag when dropped: the appenders stop also when the test panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Steps the stream's leader `first` down and waits for another to lead; returns its name. A
/// step-down can be refused while the stream settles: it is asked again, up to 3 times.
fn step_down_until_moved(cluster: &NatsCluster, stream: &str, first: &str) -> String {
    let moved = || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match cluster.leader_of(stream) {
                Some(leader) if leader != first => return Some(leader),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        None
    };
    let mut answers = Vec::new();
    loop {
        let asked = step_down(cluster, stream);
        let next = asked.as_ref().ok().and_then(|()| moved());
        answers.push(asked);
        match next {
            Some(next) => return next,
            None if answers.len() < 3 => continue,
            None => panic!("the leader did not move from {first}: {answers:?}"),
        }
    }
}

/// The name of the server that leads `stream`, once it shows one (a stream just created).
fn leader_shown(cluster: &NatsCluster, stream: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cluster.leader_of(stream) {
            Some(leader) => return leader,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => panic!("no leader: {}", cluster.placement(stream)),
        }
    }
}

#[test]
fn a_writer_follows_the_stream_leader_when_it_moves() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let options = cluster.options(3);
    let log = NatsLog::open(&options).unwrap();
    let first = leader_shown(&cluster, &options.stream);
    let at_first = only_connection_on(&cluster, &first, Duration::from_secs(20));
    assert!(
        at_first.iter().all(|(n, c)| *c == u64::from(*n == first)),
        "the writer should start on the leader {first}: {at_first:?}"
    );
    // Four threads append all through the move. They pause for the step-down itself: an
    // append in flight then may wait `request_timeout` for an ack that never comes
    // (docs/cluster.md), which would hide the same wait caused by a move.
    let appending = Appending::default();
    let (appended, longest, (moved_to, counts)) = appending.during(&log, 4, || {
        std::thread::sleep(Duration::from_millis(300));
        let next =
            appending.paused_for(|| step_down_until_moved(&cluster, &options.stream, &first));
        let counts = only_connection_on(&cluster, &next, Duration::from_secs(40));
        // More appends on the new connection.
        std::thread::sleep(Duration::from_secs(1));
        (next, counts)
    });
    assert_eq!(
        cluster.leader_of(&options.stream).as_deref(),
        Some(moved_to.as_str()),
        "the leader moved again: the counts below would mean nothing"
    );
    assert!(
        counts.iter().all(|(n, c)| *c == u64::from(*n == moved_to)),
        "the writer stayed off the new leader {moved_to} (was {first}): {counts:?}"
    );
    // A reply the move cut off would have waited `request_timeout` (5 s).
    assert!(
        longest < Duration::from_secs(4),
        "an append waited {longest:?}: the move cut off its reply"
    );
    eprintln!("{appended} appends, the longest {longest:?}");
    assert_eq!(log.last_seq(), Seq(appended));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

/// A leader change can leave an append in flight waiting `request_timeout` for an ack that never
/// comes (docs/cluster.md); `store.nats.request_timeout_seconds` bounds that stall. Four threads
/// append without pause through `STEP_DOWNS` step-downs with a 1 s `request_timeout`: no
/// append waits 4 s (a few retries of 1 s on a loaded machine), where the default 5 s lets one
/// wait 5 s.
#[test]
fn a_short_request_timeout_bounds_the_stall_of_a_leader_change() {
    const STEP_DOWNS: usize = 6;
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let options = NatsOptions {
        request_timeout: Duration::from_secs(1),
        ..cluster.options(3)
    };
    let log = NatsLog::open(&options).unwrap();
    let mut leader = leader_shown(&cluster, &options.stream);
    let appending = Appending::default();
    let (appended, longest, ()) = appending.during(&log, 4, || {
        for _ in 0..STEP_DOWNS {
            std::thread::sleep(Duration::from_millis(500));
            leader = step_down_until_moved(&cluster, &options.stream, &leader);
        }
        std::thread::sleep(Duration::from_millis(500));
    });
    eprintln!("{appended} appends through {STEP_DOWNS} step-downs, the longest {longest:?}");
    assert!(
        longest < Duration::from_secs(4),
        "an append waited {longest:?} through a leader change, with a 1 s request timeout"
    );
    assert_eq!(log.last_seq(), Seq(appended));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

#[test]
fn a_three_server_cluster_keeps_appending_through_the_loss_of_a_server() {
    let Some(mut cluster) = NatsCluster::start(3) else {
        return;
    };
    let log = NatsLog::open(&cluster.options(3)).unwrap();
    let mut n = 0u64;
    let mut append_round = |log: &NatsLog, round: &str| {
        for i in 0..30u64 {
            n += 1;
            let conversation = format!("c:{}", i % 5);
            let events = if i % 3 == 0 {
                vec![
                    text_message(n * 2, &conversation, "user", "lead", round),
                    text_message(n * 2 + 1, &conversation, "lead", "user", round),
                ]
            } else {
                vec![text_message(n * 2, &conversation, "user", "lead", round)]
            };
            log.append(events).unwrap();
        }
    };
    append_round(&log, "all three");
    cluster.kill(0);
    append_round(&log, "n1 down");
    cluster.restart(0);
    cluster.kill(1);
    append_round(&log, "n2 down");
    cluster.restart(1);
    append_round(&log, "all back");
    let events = 4 * 40;
    assert_eq!(log.last_seq(), Seq(events));
    let all = log.read_range(Seq(1), Seq(u64::MAX), 10_000).unwrap();
    assert!(all.iter().enumerate().all(|(i, r)| r.seq.0 == i as u64 + 1));
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
    // A fresh reader sees each conversation's events from the stream, in order.
    let reader = NatsLog::open_read_only(&cluster.options(3)).unwrap();
    let per_conversation: u64 = (0..5)
        .map(|c| {
            let events = reader
                .conversation_events(&conv(&format!("c:{c}")), Seq::ZERO, 10_000)
                .unwrap();
            assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
            events.len() as u64
        })
        .sum();
    assert_eq!(per_conversation, events);
}

/// Two servers of three lost (no quorum): an append fails after its deadline, stored or not (its
/// outcome is unknown: the leader may commit it once a server returns); once one server is
/// back, appends go on. Nothing acknowledged is lost or stored twice, and verify is clean.
#[test]
fn losing_two_servers_of_three_stops_appends_until_one_returns() {
    let Some(mut cluster) = NatsCluster::start(3) else {
        return;
    };
    let options = NatsOptions {
        append_deadline: Duration::from_secs(3),
        request_timeout: Duration::from_secs(1),
        ..cluster.options(3)
    };
    let log = NatsLog::open(&options).unwrap();
    for i in 0..5 {
        log.append(vec![text_message(
            i,
            "q:1",
            "user",
            "lead",
            &format!("before {i}"),
        )])
        .unwrap();
    }
    cluster.kill(1);
    cluster.kill(2);
    let started = Instant::now();
    let failed = log.append(vec![text_message(10, "q:1", "user", "lead", "no quorum")]);
    assert!(
        failed.is_err(),
        "an append without a quorum is not acknowledged: {failed:?}"
    );
    println!(
        "refused after {:?}: {}",
        started.elapsed(),
        failed.unwrap_err()
    );
    cluster.restart(1);
    // The conversation's next append reads it again (the failed one's outcome was unknown).
    // A leader election on a loaded machine can take a while: up to 60 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let back = loop {
        match log.append(vec![text_message(11, "q:1", "user", "lead", "quorum back")]) {
            Ok(range) => break range,
            Err(e) => {
                assert!(Instant::now() < deadline, "appends never resumed: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let texts: Vec<String> = all_seqs_and_texts(&log)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    for i in 0..5 {
        assert_eq!(
            texts
                .iter()
                .filter(|t| **t == format!("before {i}"))
                .count(),
            1
        );
    }
    assert_eq!(texts.iter().filter(|t| *t == "quorum back").count(), 1);
    assert!(texts.iter().filter(|t| *t == "no quorum").count() <= 1);
    assert_eq!(back.last, log.last_seq());
    assert!(log.verify(&mut |_| {}).unwrap().is_clean());
}

/// The message ids of [`append_until_acknowledged`]'s messages, each its own.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000);

/// Appends `text` to `conversation` through `log` until one is acknowledged (a leader election
/// after a partition or a loss can take a while on a loaded machine: up to 60 s); every text
/// tried, the last one acknowledged.
fn append_until_acknowledged(log: &NatsLog, conversation: &str, text: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tried = Vec::new();
    loop {
        let attempt = format!("{text} ({})", tried.len());
        tried.push(attempt.clone());
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match log.append(vec![text_message(
            id,
            conversation,
            "user",
            "lead",
            &attempt,
        )]) {
            Ok(_) => return tried,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{text:?} never acknowledged: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Waits until `what` holds of the cluster, for up to 30 s.
fn wait_for(cluster: &NatsCluster, what: &str, holds: impl Fn(&NatsCluster) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds(cluster) {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A partition between the servers (the third cut off from the other two, every process
/// running): appends through the majority go on; an append through the cut-off server finds no
/// quorum and fails (its outcome unknown). Once healed, the cut-off server catches up: read
/// through it, the log holds every acknowledged event once, gap-free, and verify is clean.
#[test]
fn a_partition_between_servers_stops_the_minority_and_the_majority_goes_on() {
    let Some(cluster) = NatsCluster::start_partitionable(3, 2) else {
        return;
    };
    // The premise: the cut-off server's routes all go through the proxy, and it has both peers.
    wait_for(&cluster, "n3 routed to n1 and n2", |c| {
        c.route_peers(2) == ["n1", "n2"]
    });
    let urls = cluster.urls();
    let through = |servers: &[String]| NatsOptions {
        append_deadline: Duration::from_secs(3),
        request_timeout: Duration::from_secs(1),
        ..NatsOptions {
            servers: servers.to_vec(),
            ..cluster.options(3)
        }
    };
    let majority = NatsLog::open(&through(&urls[..2])).unwrap();
    let minority = NatsLog::open(&through(&urls[2..])).unwrap();
    let mut acked = Vec::new();
    for i in 0..3 {
        acked.extend(append_until_acknowledged(&majority, "maj:1", &format!("majority {i}")).pop());
        acked.extend(append_until_acknowledged(&minority, "min:1", &format!("minority {i}")).pop());
    }

    cluster.cut_off();
    wait_for(&cluster, "n3 without routes", |c| c.routes(2) == Some(0));
    wait_for(&cluster, "n1 routed to n2 only", |c| {
        c.route_peers(0) == ["n2"]
    });
    let started = Instant::now();
    let mut tried = append_until_acknowledged(&majority, "maj:1", "majority while cut");
    println!(
        "the majority appended {:?} after the cut",
        started.elapsed()
    );
    acked.extend(tried.pop());
    let failed = minority.append(vec![text_message(1, "min:1", "user", "lead", "cut off")]);
    println!("the cut-off server: {failed:?}");
    assert!(
        matches!(failed, Err(StoreError::Cluster { .. })),
        "an append without a quorum is not acknowledged: {failed:?}"
    );

    cluster.heal();
    wait_for(&cluster, "n3 routed again", |c| {
        c.route_peers(2) == ["n1", "n2"]
    });
    wait_for(&cluster, "n3 healthy", |c| c.is_healthy(2));
    acked.extend(append_until_acknowledged(&minority, "min:1", "minority healed").pop());
    tried.push("cut off".into());
    let texts: Vec<String> = all_seqs_and_texts(&minority)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    for text in &acked {
        let count = texts.iter().filter(|t| *t == text).count();
        assert_eq!(count, 1, "{text:?} is in the log {count} times");
    }
    for text in &tried {
        assert!(texts.iter().filter(|t| *t == text).count() <= 1, "{text:?}");
    }
    assert_eq!(minority.last_seq(), majority.last_seq());
    for log in [&minority, &majority] {
        let report = log.verify(&mut |_| {}).unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
}

/// A connection whose frames are dropped without a close (a silent partition between a node
/// and one server; the server itself stays in its cluster) is given up after two unanswered
/// pings, and the client goes on through another server: the log appends again, and a lease is
/// renewed again, within a bound. Without the client's ping (async-nats's default interval is
/// 60 s, three of them before it gives up) both stayed on the dead link: every request timed
/// out until the append's deadline.
#[test]
fn a_silently_cut_server_is_given_up_and_the_log_and_leases_go_on_through_another() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let proxies: Vec<Proxy> = cluster
        .urls()
        .iter()
        .map(|url| Proxy::start(url.trim_start_matches("nats://").to_owned()))
        .collect();
    let options = NatsOptions {
        servers: proxies.iter().map(Proxy::url).collect(),
        ping_interval: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        lease_ttl: Duration::from_secs(60),
        ..cluster.options(3)
    };
    let log = NatsLog::open(&options).unwrap();
    let leases = Leases::open(&options).unwrap();
    append_until_acknowledged(&log, "cut:1", "before the cut");
    let lease = acquire_through_hiccups(&leases, "cut:lease", "n1");
    // The log's connection (on the stream's leader) and the leases' are on one or two servers:
    // each of them is cut silently, and one server at least stays reachable.
    let carrying: Vec<usize> = (0..3)
        .filter(|&i| proxies[i].live_connections() > 0)
        .collect();
    assert!(
        (1..=2).contains(&carrying.len()),
        "the log and the leases hold one connection each: {carrying:?}"
    );
    for &i in &carrying {
        proxies[i].silence();
    }
    let cut = Instant::now();
    let bound = Duration::from_secs(20);
    append_until_acknowledged_within(&log, "cut:1", "after the cut", bound);
    let appended = cut.elapsed();
    let renewed = loop {
        match leases.renew(&lease) {
            Ok(renewed) => break renewed,
            Err(LeaseError::Store(e)) => {
                assert!(cut.elapsed() < bound, "not renewed within {bound:?}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("renewing after the cut: {e:?}"),
        }
    };
    println!(
        "after a silent cut of {carrying:?}: appended {appended:?}, renewed {:?} after it",
        cut.elapsed()
    );
    assert!(renewed.revision > lease.revision);
    for &i in &carrying {
        assert_eq!(
            proxies[i].live_connections(),
            0,
            "the dead link was given up"
        );
    }
    let texts: Vec<String> = all_seqs_and_texts(&log)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert!(
        texts.iter().any(|t| t.starts_with("after the cut")),
        "{texts:?}"
    );
}

/// [`append_until_acknowledged`] that fails once `bound` has passed.
fn append_until_acknowledged_within(
    log: &NatsLog,
    conversation: &str,
    text: &str,
    bound: Duration,
) {
    let deadline = Instant::now() + bound;
    for attempt in 0.. {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let event = text_message(
            id,
            conversation,
            "user",
            "lead",
            &format!("{text} ({attempt})"),
        );
        match log.append(vec![event]) {
            Ok(_) => return,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{text:?} not acknowledged within {bound:?}: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[test]
fn a_read_only_log_refuses_appends_and_needs_an_existing_stream() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let missing = NatsLog::open_read_only(&cluster.options(1)).unwrap_err();
    assert_eq!(
        missing,
        StoreError::StreamNotFound {
            stream: "legio".into()
        }
    );
    let writer = NatsLog::open(&cluster.options(1)).unwrap();
    writer
        .append(vec![text_message(1, "t:r", "user", "lead", "hello")])
        .unwrap();
    let reader = NatsLog::open_read_only(&cluster.options(1)).unwrap();
    assert_eq!(
        reader
            .append(vec![text_message(2, "t:r", "user", "lead", "no")])
            .unwrap_err(),
        StoreError::ReadOnly
    );
    assert_eq!(reader.conversations().unwrap(), vec![conv("t:r")]);
    // Read-only reads catch up with appends made after the first read.
    assert_eq!(
        reader
            .conversation_events(&conv("t:r"), Seq::ZERO, 10)
            .unwrap()
            .len(),
        1
    );
    writer
        .append(vec![text_message(3, "t:r", "lead", "user", "again")])
        .unwrap();
    assert_eq!(
        reader
            .conversation_events(&conv("t:r"), Seq::ZERO, 10)
            .unwrap()
            .len(),
        2
    );
}

/// The node bus: a request to a node nobody serves is answered at once; a served one gets its
/// progress frames in order, then the answer; a node that takes a request and falls silent is
/// given up after the silence.
#[test]
fn the_node_bus_answers_in_order_and_reports_absent_and_silent_nodes() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let options = cluster.options(1);
    let bus = NodeBus::open(&options, Duration::from_millis(100)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (frames, _) = tokio::sync::mpsc::unbounded_channel();
        let started = Instant::now();
        let absent = bus
            .request("nobody", b"hi".to_vec(), frames, Duration::from_secs(5))
            .await;
        assert_eq!(
            absent,
            Err(BusError::NoResponder {
                node: "nobody".into()
            })
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered at once"
        );

        let server = NodeBus::open(&options, Duration::from_millis(100)).unwrap();
        let mut incoming = server.serve("n1").unwrap();
        let (took_hang, hang_taken) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut took_hang = Some(took_hang);
            while let Some(request) = incoming.recv().await {
                if request.payload == b"hang" {
                    // Keep the request open and let the test stop the serving node.
                    if let Some(signal) = took_hang.take() {
                        let _ = signal.send(request.reply);
                    }
                    continue;
                }
                for i in 0..20u8 {
                    request.reply.progress(vec![i]);
                }
                tokio::time::sleep(Duration::from_millis(300)).await; // alive frames meanwhile
                let mut answer = request.payload.clone();
                answer.reverse();
                request.reply.finish(answer);
            }
        });
        let (frames, mut progress) = tokio::sync::mpsc::unbounded_channel();
        let answer = bus
            .request("n1", b"abc".to_vec(), frames, Duration::from_millis(3000))
            .await
            .unwrap();
        assert_eq!(answer, b"cba");
        let mut steps = Vec::new();
        while let Ok(step) = progress.try_recv() {
            steps.extend(step);
        }
        assert_eq!(steps, (0..20u8).collect::<Vec<_>>());

        // The serving node dies while it holds a request: the caller gives up after the silence.
        let (frames, _) = tokio::sync::mpsc::unbounded_channel();
        let request = bus.request("n1", b"hang".to_vec(), frames, Duration::from_millis(500));
        let stop = async {
            let reply = hang_taken.await.unwrap();
            drop(server);
            reply
        };
        let (silent, _reply) = tokio::join!(request, stop);
        assert!(matches!(silent, Err(BusError::Silent { .. })), "{silent:?}");
    });
}

/// A listing is one look at a bucket others write to: on three servers (replicas 3), a lease just
/// taken, or renewed while another client lists, is always in the listing (no lease is missed
/// because a key was rewritten mid-listing or a lagging replica answered).
/// `leases.acquire(name, holder)`, tried again for up to 10 s while the cluster fails it (a
/// just-started cluster once answered one of 150 takes with "503 no responders"); the
/// ownership layer retries a take the same way.
fn acquire_through_hiccups(leases: &Leases, name: &str, holder: &str) -> legio_store::Lease {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut failed = false;
    loop {
        match leases.acquire(name, holder) {
            Ok(lease) => return lease,
            Err(LeaseError::Store(e)) if Instant::now() < deadline => {
                println!("taking {name} failed ({e}); trying again");
                failed = true;
                std::thread::sleep(Duration::from_millis(100));
            }
            // The failed try was stored after all: the lease is this holder's.
            Err(LeaseError::Held {
                holder: found,
                revision,
                ..
            }) if failed && found == holder => {
                return legio_store::Lease {
                    name: name.to_owned(),
                    holder: found,
                    revision,
                }
            }
            Err(e) => panic!("taking {name}: {e:?}"),
        }
    }
}

#[test]
fn every_listing_shows_a_lease_taken_or_renewed_meanwhile() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let open = || {
        let options = legio_store::NatsOptions {
            lease_ttl: Duration::from_secs(30),
            ..cluster.options(3)
        };
        Leases::open(&options).unwrap()
    };
    let (writer, reader) = (open(), open());
    let busy = writer.acquire("t:renewed", "node-a").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewing = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut lease = busy;
            let mut renewals = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match writer.renew(&lease) {
                    Ok(renewed) => {
                        lease = renewed;
                        renewals += 1;
                    }
                    // A publish retried after a lost ack finds its own write: go on from the
                    // lease as it is now.
                    Err(e) => {
                        println!("a renewal failed ({e}); reading the lease again");
                        let listed = writer.list().unwrap();
                        lease = listed.into_iter().find(|l| l.name == lease.name).unwrap();
                    }
                }
            }
            (writer, renewals)
        })
    };
    let other = open();
    for i in 0..150 {
        let name = format!("t:new{i}");
        let taken = acquire_through_hiccups(&other, &name, "node-b");
        let listed = reader.list().unwrap();
        let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        assert!(
            names.contains(&"t:renewed"),
            "listing {i} missed the renewed lease: {names:?}"
        );
        assert!(
            listed.contains(&taken),
            "listing {i} missed {taken:?}: {listed:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (_, renewals) = renewing.join().unwrap();
    assert!(
        renewals > 10,
        "the lease was renewed while listing ({renewals} times)"
    );
}

/// The MCP key on a cluster: nodes share one secret kept in the cluster (create-if-absent, so two
/// nodes asking at once get the same), whatever fresh value each brings; another stream has its
/// own; and a token one node's key signs, another node's key (its database elsewhere) accepts.
#[test]
fn nodes_of_a_cluster_share_one_mcp_key() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let options = cluster.options(1);
    for round in 0..5 {
        let name = format!("secret-{round}");
        let barrier = Barrier::new(2);
        let ask = |fresh: u8| {
            barrier.wait();
            legio_store::shared_secret(&options, &name, vec![fresh; 8]).unwrap()
        };
        let (a, b) = std::thread::scope(|s| {
            let (ta, tb) = (s.spawn(|| ask(1)), s.spawn(|| ask(2)));
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert_eq!(a, b, "round {round}: both asked at once, one secret");
        assert!(a == vec![1; 8] || a == vec![2; 8], "{a:?}");
        let later = legio_store::shared_secret(&options, &name, vec![3; 8]).unwrap();
        assert_eq!(later, a, "kept");
    }
    let other = NatsOptions {
        stream: "other".into(),
        ..options.clone()
    };
    let theirs = legio_store::shared_secret(&other, "secret-0", vec![4; 8]).unwrap();
    assert_eq!(theirs, vec![4; 8], "another stream keeps its own");

    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = |dir: &tempfile::TempDir| legio_runtime::StoreSettings {
        path: dir.path().join("db"),
        options: Default::default(),
        backend: legio_runtime::StoreBackend::Nats(Box::new(options.clone())),
    };
    let n1 = legio_runtime::McpTokenKey::for_store(&store(&dirs.0)).unwrap();
    let n2 = legio_runtime::McpTokenKey::for_store(&store(&dirs.1)).unwrap();
    let scope = legio_runtime::McpScope {
        conversation: legio_core::ConversationKey::new("m:1").unwrap(),
        agent: legio_core::AgentName::new("ann").unwrap(),
    };
    let token = n1.issue(&scope, Duration::from_secs(60));
    assert_eq!(n2.verify(&token).unwrap(), scope, "n2 accepts n1's token");
    assert!(!dirs.0.path().join("db.mcp-key").exists(), "no key file");
}

/// A stream's configured max age and replica count, as its leader reports them.
fn stream_config(cluster: &NatsCluster, stream: &str) -> (Duration, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(cluster.urls()).await.unwrap();
        let mut stream = async_nats::jetstream::new(client)
            .get_stream(stream)
            .await
            .unwrap();
        let config = &stream.info().await.unwrap().config;
        (config.max_age, config.num_replicas)
    })
}

/// Every node must use the lease TTL the bucket keeps, or one that believed in a longer TTL would
/// serve a conversation another node had taken. A node asking for another TTL is refused, naming
/// both and who holds leases, while a lease is held; once none is, it changes the bucket, and
/// leases then live for the new TTL. A reader (`legio inspect nodes`) opens the bucket as it is.
#[test]
fn a_lease_ttl_other_than_the_buckets_is_refused_while_leases_are_held_and_taken_when_none_are() {
    let Some(cluster) = NatsCluster::start(1) else {
        return;
    };
    let with_ttl = |seconds| NatsOptions {
        lease_ttl: Duration::from_secs(seconds),
        ..cluster.options(1)
    };
    let two = Leases::open(&with_ttl(2)).unwrap();
    let held = two.acquire("t:ttl", "node-a").unwrap();
    let refused = Leases::open(&with_ttl(5)).unwrap_err();
    assert!(
        matches!(refused, LeaseError::TtlDiffers { .. }),
        "{refused:?}"
    );
    let said = refused.to_string();
    for part in ["keeps leases for 2 s", "(node-a)", "asks for 5 s"] {
        assert!(said.contains(part), "{part:?} not in: {said}");
    }
    assert_eq!(
        stream_config(&cluster, "KV_legio_leases").0,
        Duration::from_secs(2)
    );
    let reader = Leases::open_to_read(&with_ttl(5))
        .unwrap()
        .expect("a bucket");
    assert_eq!(
        reader.ttl(),
        Duration::from_secs(2),
        "as the bucket keeps it"
    );
    assert_eq!(reader.list().unwrap(), vec![held.clone()]);

    two.release(held).unwrap();
    let five = Leases::open(&with_ttl(5)).unwrap();
    assert_eq!(five.ttl(), Duration::from_secs(5));
    assert_eq!(
        stream_config(&cluster, "KV_legio_leases").0,
        Duration::from_secs(5)
    );
    let taken = five.acquire("t:ttl", "node-b").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        matches!(two.acquire("t:ttl", "node-a"), Err(LeaseError::Held { .. })),
        "past the old TTL the lease still lives"
    );
    assert_eq!(five.list().unwrap(), vec![taken.clone()]);
    // Nodes that start at once with different TTLs can both pass the check (here `five`, whose
    // TTL the bucket keeps, then one asking for 2 s while nobody holds a lease): the node with
    // the longer TTL trusts the bucket's shorter one from its next round on.
    five.release(taken).unwrap();
    let short = Leases::open(&with_ttl(2)).unwrap();
    assert_eq!(short.ttl(), Duration::from_secs(2));
    assert_eq!(five.follow_bucket_ttl().unwrap(), Duration::from_secs(2));
    assert_eq!(five.ttl(), Duration::from_secs(2), "trusts the shorter TTL");
    let other = NatsOptions {
        stream: "other".into(),
        ..with_ttl(5)
    };
    assert!(
        Leases::open_to_read(&other).unwrap().is_none(),
        "no bucket made"
    );
}

/// The key-value buckets a node uses (leases, secrets) take the replica count it asks for, even
/// when an earlier configuration made them with another, keeping what they hold.
#[test]
fn buckets_made_with_one_replica_are_brought_to_three() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    let secret = legio_store::shared_secret(&cluster.options(1), "k", vec![1; 8]).unwrap();
    drop(Leases::open(&cluster.options(1)).unwrap());
    assert_eq!(stream_config(&cluster, "KV_legio_secrets").1, 1);
    assert_eq!(stream_config(&cluster, "KV_legio_leases").1, 1);

    let kept = legio_store::shared_secret(&cluster.options(3), "k", vec![2; 8]).unwrap();
    assert_eq!(kept, secret, "the secret is kept");
    let leases = Leases::open(&cluster.options(3)).unwrap();
    assert_eq!(stream_config(&cluster, "KV_legio_secrets").1, 3);
    assert_eq!(stream_config(&cluster, "KV_legio_leases").1, 3);
    leases.acquire("t:r3", "node-a").unwrap();
}

/// A runtime that is node `node` of the one-server cluster at `url`, stream `stream`: one
/// agent, lead, on a scripted provider.
async fn node_on(
    dir: &std::path::Path,
    url: &str,
    stream: &str,
    node: &str,
) -> legio_runtime::Runtime {
    std::fs::write(dir.join("lead.md"), "You lead.").unwrap();
    let file = dir.join("legio.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\npath = \"db\"\nbackend = \"nats\"\n[store.nats]\nservers = [\"{url}\"]\nstream = \"{stream}\"\nlease_ttl_seconds = 10\n[runtime]\ncompaction = false\n[agents.lead]\nrole = \"orchestrator\"\nprompt = \"lead.md\"\nprovider = \"local\"\n[providers.local]\nkind = \"scripted\"\nhistory = \"stateless\"\n"
        ),
    )
    .unwrap();
    let config = legio_runtime::RuntimeConfig::load(&file).unwrap();
    legio_runtime::Runtime::builder(config)
        .node(node)
        .open()
        .await
        .unwrap()
}

/// A stale owner's append that the node-side gate let through is refused by JetStream: n1
/// owns the conversation, its next post passes n1's ownership check and is held there (a test
/// hook) while another writer appends to the conversation on the stream; released, n1's
/// publish expects the conversation's old last seq, JetStream refuses it, nothing of it is
/// stored, and the post answers the retryable 503 code (`agent_unavailable`), not
/// `internal`. The next post goes on from the log. (The node's gate had stopped every zombie
/// of the issue's runs, so this refusal had never been exercised.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owners_append_that_passed_its_gate_is_refused_by_jetstream() {
    let Some(cluster) = tokio::task::spawn_blocking(|| NatsCluster::start(1))
        .await
        .unwrap()
    else {
        return;
    };
    let url = cluster.urls()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let n1 = node_on(dir.path(), &url, "stale", "n1").await;
    let conversation = "stale:1";
    n1.posting(conversation, "@lead first")
        .send()
        .await
        .unwrap();
    let before = n1
        .posting(conversation, "@lead second")
        .send()
        .await
        .unwrap();
    assert!(before.replies.iter().all(|r| r.outcome.is_ok()));

    let mut hold = legio_runtime::testing::hold_append(conversation);
    let post = {
        let text = "@lead held between its gate and its publish";
        let n1 = &n1;
        async move { n1.posting(conversation, text).send().await }
    };
    let (refused, ()) = tokio::join!(post, async {
        hold.reached().await;
        // Another writer (a node that took the conversation over) appends meanwhile.
        let options = NatsOptions {
            stream: "stale".into(),
            ..NatsOptions::for_servers([url.clone()])
        };
        tokio::task::spawn_blocking(move || {
            let other = NatsLog::open(&options).unwrap();
            other
                .append(vec![text_message(
                    1,
                    conversation,
                    "user",
                    "lead",
                    "from the new owner",
                )])
                .unwrap();
        })
        .await
        .unwrap();
        hold.release();
    });
    let error = refused.expect_err("a stale expectation is refused by JetStream");
    println!("the stale append: {error}");
    assert!(
        matches!(
            error,
            legio_runtime::RuntimeError::Store(StoreError::Fenced { .. })
        ),
        "refused by the expected sequence: {error:?}"
    );
    assert_eq!(
        error.code(),
        legio_runtime::ErrorCode::Unavailable,
        "{error}"
    );

    let texts = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            let log = NatsLog::open(&NatsOptions {
                stream: "stale".into(),
                ..NatsOptions::for_servers([url])
            })
            .unwrap();
            all_seqs_and_texts(&log)
                .into_iter()
                .map(|(_, t)| t)
                .collect::<Vec<_>>()
        }
    })
    .await
    .unwrap();
    assert!(texts.iter().any(|t| t == "from the new owner"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("held between")),
        "nothing of the refused append was stored: {texts:?}"
    );
    // The conversation goes on from the log (taken again by its refreshed reading).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match n1.posting(conversation, "@lead after").send().await {
            Ok(posted) if posted.replies.iter().all(|r| r.outcome.is_ok()) => break,
            other => {
                assert!(Instant::now() < deadline, "not served again: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    n1.shutdown().await.unwrap();
}
