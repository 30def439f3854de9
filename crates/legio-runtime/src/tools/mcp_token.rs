//! Credentials for legio's MCP server: a bearer token names one conversation and one agent and
//! expires; it is an HMAC-SHA-256 over those with a key only legio holds, so a client can neither
//! forge nor widen its scope (the scope never comes from an argument the model fills in).
//!
//! The key is 32 random bytes in hex in a file beside the database (`<store.path>.mcp-key`, mode
//! 0600, created on first use; `LEGIO_MCP_KEY_FILE` names another file). Deleting it revokes
//! every token. On a NATS cluster the nodes share one key, kept in the cluster
//! (`legio_store::shared_secret`, made by the first node that needs it), so a token made on any
//! node is accepted by all; `LEGIO_MCP_KEY_FILE` still names a file instead. A token: `lgm1.<hex of "conversation\nagent\nexpiry (unix seconds)">.<hex of the
//! HMAC>`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use legio_core::{AgentName, ConversationKey};
use sha2::Sha256;
use thiserror::Error;

use legio_config::{StoreBackend, StoreSettings};

/// Whose tools an MCP session serves: one agent in one conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpScope {
    /// The conversation the calls are recorded in.
    pub conversation: ConversationKey,
    /// The agent whose tools are served and who makes the calls.
    pub agent: AgentName,
}

/// How long a token lives unless `--ttl` says otherwise: one hour.
pub const MCP_TOKEN_DEFAULT_TTL: Duration = Duration::from_secs(3600);

const PREFIX: &str = "lgm1";

/// Why a token is refused or a key cannot be had.
#[derive(Debug, Error)]
pub enum McpTokenError {
    /// The token is not of the form legio issues.
    #[error("not a legio MCP token; get one with `legio mcp token --conversation C --agent A`")]
    Malformed,
    /// The signature does not match (another key, or an altered token).
    #[error("the MCP token's signature does not match this server's key; issue a new token")]
    BadSignature,
    /// The token is past its expiry.
    #[error("the MCP token expired {ago} s ago; issue a new one")]
    Expired {
        /// Seconds since it expired.
        ago: u64,
    },
    /// The key file cannot be read or created.
    #[error("cannot use the MCP key file {}: {reason}", path.display())]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The key the cluster's nodes share cannot be read or kept.
    #[error("cannot use the MCP key of the NATS cluster (bucket {bucket}, key {MCP_KEY_NAME}): {reason}")]
    SharedKey {
        /// The bucket that keeps it.
        bucket: String,
        /// Why.
        reason: String,
    },
}

/// The name of the MCP key among the cluster's shared secrets.
const MCP_KEY_NAME: &str = "mcp-token-key";

/// The key that signs and checks tokens.
#[derive(Clone)]
pub struct McpTokenKey([u8; 32]);

impl std::fmt::Debug for McpTokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpTokenKey(<redacted>)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl McpTokenKey {
    /// The key file for `store`: `LEGIO_MCP_KEY_FILE`, else `<store.path>.mcp-key`.
    pub fn path_for(store: &StoreSettings) -> PathBuf {
        if let Some(path) = std::env::var_os("LEGIO_MCP_KEY_FILE") {
            return PathBuf::from(path);
        }
        let mut name = store.path.as_os_str().to_owned();
        name.push(".mcp-key");
        PathBuf::from(name)
    }

    /// The key for `store`: the file `LEGIO_MCP_KEY_FILE` when set; on the NATS backend, the
    /// key the cluster's nodes share (made by the first node that needs it); else the file
    /// beside the database ([`McpTokenKey::path_for`]). Blocks while it reads the cluster.
    pub fn for_store(store: &StoreSettings) -> Result<Self, McpTokenError> {
        match &store.backend {
            StoreBackend::Nats(options) if std::env::var_os("LEGIO_MCP_KEY_FILE").is_none() => {
                Self::shared(options)
            }
            _ => Self::load_or_create(&Self::path_for(store)),
        }
    }

    /// The key kept in the cluster `options` reaches, made now if it has none.
    fn shared(options: &legio_store::NatsOptions) -> Result<Self, McpTokenError> {
        let failed = |reason: String| McpTokenError::SharedKey {
            bucket: format!("{}_secrets", options.stream),
            reason,
        };
        let fresh: [u8; 32] = rand::random();
        let kept = legio_store::shared_secret(options, MCP_KEY_NAME, fresh.to_vec())
            .map_err(|e| failed(e.to_string()))?;
        let key: [u8; 32] = kept.try_into().map_err(|kept: Vec<u8>| {
            failed(format!(
                "{} bytes, not 32; delete it from the bucket to make a new key",
                kept.len()
            ))
        })?;
        Ok(Self(key))
    }

    /// Reads the key at `path`, creating it (32 random bytes, mode 0600) when missing.
    pub fn load_or_create(path: &Path) -> Result<Self, McpTokenError> {
        let failed = |reason: String| McpTokenError::KeyFile {
            path: path.to_owned(),
            reason,
        };
        if !path.exists() {
            let key: [u8; 32] = rand::random();
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| failed(e.to_string()))?;
            }
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(path) {
                Ok(mut file) => std::io::Write::write_all(&mut file, hex(&key).as_bytes())
                    .map_err(|e| failed(e.to_string()))?,
                // Another process created it first: read theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(failed(e.to_string())),
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
        let bytes = unhex(text.trim())
            .filter(|b| b.len() == 32)
            .ok_or_else(|| failed("not 64 hex digits; delete it to make a new key".to_owned()))?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(Self(key))
    }

    fn mac(&self, payload: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any size");
        mac.update(payload);
        mac
    }

    /// A token for `scope` that expires `ttl` from now.
    pub fn issue(&self, scope: &McpScope, ttl: Duration) -> String {
        let expires = unix_now().saturating_add(ttl.as_secs().max(1));
        self.issue_until(scope, expires)
    }

    fn issue_until(&self, scope: &McpScope, expires_unix: u64) -> String {
        let payload = format!("{}\n{}\n{expires_unix}", scope.conversation, scope.agent);
        let signature = self.mac(payload.as_bytes()).finalize().into_bytes();
        format!("{PREFIX}.{}.{}", hex(payload.as_bytes()), hex(&signature))
    }

    /// The scope `token` grants, if it is this key's, unaltered and not expired.
    pub fn verify(&self, token: &str) -> Result<McpScope, McpTokenError> {
        let mut pieces = token.trim().split('.');
        let (Some(PREFIX), Some(payload), Some(signature), None) =
            (pieces.next(), pieces.next(), pieces.next(), pieces.next())
        else {
            return Err(McpTokenError::Malformed);
        };
        let payload = unhex(payload).ok_or(McpTokenError::Malformed)?;
        let signature = unhex(signature).ok_or(McpTokenError::Malformed)?;
        self.mac(&payload)
            .verify_slice(&signature)
            .map_err(|_| McpTokenError::BadSignature)?;
        let text = String::from_utf8(payload).map_err(|_| McpTokenError::Malformed)?;
        let mut fields = text.split('\n');
        let (Some(conversation), Some(agent), Some(expires), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(McpTokenError::Malformed);
        };
        let expires: u64 = expires.parse().map_err(|_| McpTokenError::Malformed)?;
        let now = unix_now();
        if now >= expires {
            return Err(McpTokenError::Expired { ago: now - expires });
        }
        Ok(McpScope {
            conversation: ConversationKey::new(conversation)
                .map_err(|_| McpTokenError::Malformed)?,
            agent: AgentName::new(agent).map_err(|_| McpTokenError::Malformed)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> McpScope {
        McpScope {
            conversation: ConversationKey::new("c.1").unwrap(),
            agent: AgentName::new("ann").unwrap(),
        }
    }

    #[test]
    fn a_token_grants_its_scope_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.mcp-key");
        let key = McpTokenKey::load_or_create(&path).unwrap();
        let again = McpTokenKey::load_or_create(&path).unwrap();
        let token = key.issue(&scope(), Duration::from_secs(60));
        assert_eq!(
            again.verify(&token).unwrap(),
            scope(),
            "the key file is reused"
        );

        let expired = key.issue_until(&scope(), unix_now() - 5);
        assert!(matches!(
            key.verify(&expired),
            Err(McpTokenError::Expired { .. })
        ));

        let other = McpTokenKey::load_or_create(&dir.path().join("other")).unwrap();
        assert!(matches!(
            other.verify(&token),
            Err(McpTokenError::BadSignature)
        ));

        // Widening the scope (another agent) breaks the signature.
        let pieces: Vec<&str> = token.split('.').collect();
        let forged_payload = hex(format!("c.1\nlead\n{}", unix_now() + 60).as_bytes());
        let forged = format!("{}.{forged_payload}.{}", pieces[0], pieces[2]);
        assert!(matches!(
            key.verify(&forged),
            Err(McpTokenError::BadSignature)
        ));
        for junk in ["", "Bearer x", "lgm1.zz.00", "lgm1.00"] {
            assert!(
                matches!(key.verify(junk), Err(McpTokenError::Malformed)),
                "{junk}"
            );
        }
    }
}
