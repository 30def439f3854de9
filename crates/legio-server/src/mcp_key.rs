//! The key `/mcp` checks tokens with (`McpTokenKey::for_store`: beside the database, or on a
//! cluster the one the nodes share), read when the server starts and, should that fail, read
//! again by the next request (mcp.rs).

use legio_runtime::{McpTokenKey, StoreSettings};

/// The MCP key, read once it could be: read when the server starts, and should that fail (a
/// key file that cannot be made, a cluster out of reach), read again by the next request.
pub(crate) struct McpKey {
    store: StoreSettings,
    key: tokio::sync::OnceCell<McpTokenKey>,
}

impl McpKey {
    /// The key of `store`, read now; `Err` says why it is not (yet) had. On a cluster that is a
    /// round trip (seconds when the cluster is slow), so on a multi-threaded runtime the read
    /// tells tokio it blocks, and the thread's other tasks (the runtime's lease renewals among
    /// them) move to another worker meanwhile.
    pub(crate) fn read(store: &StoreSettings) -> (Self, Result<McpTokenKey, String>) {
        let read = || McpTokenKey::for_store(store).map_err(|e| e.to_string());
        let first = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(read),
            _ => read(),
        };
        let key = tokio::sync::OnceCell::new_with(first.clone().ok());
        let this = Self {
            store: store.clone(),
            key,
        };
        (this, first)
    }

    /// The key, read again (off the async threads) if it was not had yet.
    pub(crate) async fn get(&self) -> Result<&McpTokenKey, String> {
        self.key
            .get_or_try_init(|| async {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || McpTokenKey::for_store(&store))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_runtime::McpScope;

    /// A key that cannot be had when the server starts (here its file's folder cannot be made)
    /// is read again by the next request, and kept once had.
    #[tokio::test]
    async fn a_key_missing_at_start_is_read_again_later() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("data");
        std::fs::write(&blocker, "a file where the key's folder should be").unwrap();
        let store = StoreSettings {
            path: blocker.join("db"),
            options: Default::default(),
            backend: legio_runtime::StoreBackend::Sled,
        };
        let (key, first) = McpKey::read(&store);
        assert!(first.is_err(), "no folder for the key file");
        assert!(key.get().await.is_err(), "still none");
        std::fs::remove_file(&blocker).unwrap();
        let had = key.get().await.expect("read again").clone();
        std::fs::remove_file(blocker.join("db.mcp-key")).unwrap();
        let kept = key.get().await.expect("kept");
        let scope = McpScope {
            conversation: legio_core::ConversationKey::new("m:1").unwrap(),
            agent: legio_core::AgentName::new("ann").unwrap(),
        };
        let token = had.issue(&scope, std::time::Duration::from_secs(60));
        assert_eq!(
            kept.verify(&token).unwrap(),
            scope,
            "the same key, not read again"
        );
    }
}
