//! A `.creds` file against a real nats-server in operator mode (decentralized JWT auth): the
//! operator, account and user JWTs are made here with nkeys (what `nsc` does), the server
//! trusts the operator and has the account preloaded, and the log, the leases and the node bus
//! open with `NatsAuth::CredentialsFile`; without it, or with a user of an account the server
//! does not know, opening is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use legio_store::{EventLog, Leases, NatsAuth, NatsLog, NatsOptions, NodeBus, StoreError};
use legio_tests::nats::NatsCluster;
use legio_tests::*;
use nkeys::KeyPair;
use serde_json::{json, Value};

/// A NATS JWT (v2) of `claims` about `subject`, issued and signed by `issuer`.
fn jwt(issuer: &KeyPair, subject: &KeyPair, name: &str, nats: Value) -> String {
    let header = json!({ "typ": "JWT", "alg": "ed25519-nkey" });
    let claims = json!({
        "jti": format!("{}-{name}", subject.public_key()),
        "iat": 1_771_156_800,
        "iss": issuer.public_key(),
        "sub": subject.public_key(),
        "name": name,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = issuer.sign(signed.as_bytes()).expect("an nkey signs");
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An account's claims: no limits, JetStream on.
fn account_claims() -> Value {
    json!({
        "type": "account",
        "version": 2,
        "limits": {
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
            "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1
        },
        "default_permissions": { "pub": {}, "sub": {} }
    })
}

/// A `.creds` file for a user of `account`, as `nsc generate creds` writes it.
fn creds(dir: &Path, file: &str, account: &KeyPair) -> PathBuf {
    let user = KeyPair::new_user();
    let claims = json!({
        "type": "user", "version": 2,
        "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1
    });
    let text = format!(
        "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        jwt(account, &user, file, claims),
        user.seed().unwrap()
    );
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_server_in_operator_mode_admits_the_log_with_a_creds_file_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let (operator, account) = (KeyPair::new_operator(), KeyPair::new_account());
    let operator_jwt = dir.path().join("operator.jwt");
    let operator_claims = json!({ "type": "operator", "version": 2 });
    std::fs::write(
        &operator_jwt,
        jwt(&operator, &operator, "op", operator_claims),
    )
    .unwrap();
    // JetStream in operator mode needs a system account, without JetStream of its own.
    let system = KeyPair::new_account();
    let system_claims = json!({ "type": "account", "version": 2 });
    let settings = format!(
        "operator: \"{}\"\nsystem_account: {}\nresolver: MEMORY\n\
         resolver_preload: {{\n  {}: \"{}\"\n  {}: \"{}\"\n}}\n",
        operator_jwt.display(),
        system.public_key(),
        system.public_key(),
        jwt(&operator, &system, "SYS", system_claims),
        account.public_key(),
        jwt(&operator, &account, "legio", account_claims())
    );
    let Some(cluster) = NatsCluster::start_with_settings(1, &settings) else {
        return;
    };
    let options = NatsOptions {
        auth: NatsAuth::CredentialsFile(creds(dir.path(), "legio.creds", &account)),
        ..cluster.options(1)
    };
    let log = NatsLog::open(&options).unwrap();
    log.append(vec![text_message(
        1,
        "t:creds",
        "user",
        "lead",
        "signed in",
    )])
    .unwrap();
    assert_eq!(
        super::nats::all_seqs_and_texts(&log),
        vec![(1, "signed in".to_owned())]
    );
    Leases::open(&options)
        .unwrap()
        .acquire("t:creds", "node-a")
        .unwrap();
    NodeBus::open(&options, Duration::from_millis(500)).unwrap();

    // A user whose account the server was never given, and no credentials at all.
    let stranger = creds(dir.path(), "stranger.creds", &KeyPair::new_account());
    for (auth, what) in [
        (
            NatsAuth::CredentialsFile(stranger),
            "an unknown account's user",
        ),
        (NatsAuth::None, "no credentials"),
    ] {
        let refused = NatsOptions {
            auth,
            ..options.clone()
        };
        match NatsLog::open(&refused) {
            Err(StoreError::Refused { reason, .. }) => {
                println!("{what}: {reason}");
                assert!(
                    reason.contains("authorization violation"),
                    "{what}: {reason}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}
