//! The provider's state directory (`ClaudeCodeSettings::state_dir`), which legio controls and
//! nobody else may read: `work/CONVERSATION/AGENT`, the CLI's working directory for an agent in
//! a conversation (the CLI keys its sessions by directory, so `--resume` finds the session
//! wherever legio was started); `mcp/OWNER-START-RANDOM.json`, a turn's `--mcp-config` with its
//! bearer token (mode 0600, removed after the turn); `children/`, the pid files of running CLIs
//! (child.rs). Folders are made with mode 0700.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use legio_core::{AgentName, ConversationKey};

/// The folder of working directories under the state directory.
const WORK: &str = "work";
/// The folder of MCP configuration files under the state directory.
const MCP: &str = "mcp";

/// Makes `path` and its missing parents, each new one with mode 0700.
pub(crate) fn private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// A name as one path component: ASCII letters, digits, `_` and `-` as they are, every other
/// byte as `%XX` (so `.` and `..` cannot be a component, and two names never share one).
fn component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The CLI's working directory for `agent` in `conversation`, made if missing. Every CLI
/// session of that agent there (one per legio session) lives in the same directory.
pub(crate) fn work_dir(
    state_dir: &Path,
    conversation: &ConversationKey,
    agent: &AgentName,
) -> io::Result<PathBuf> {
    let dir = state_dir
        .join(WORK)
        .join(component(conversation.as_str()))
        .join(component(agent.as_str()));
    private_dir(&dir)?;
    Ok(dir)
}

/// A turn's `--mcp-config` file: written with mode 0600 and removed when dropped (when the
/// turn ends, however it ends). One a killed process left behind is removed by
/// [`remove_stale_mcp_files`]; its token expires anyway.
#[derive(Debug)]
pub(crate) struct McpConfigFile {
    path: PathBuf,
}

impl McpConfigFile {
    /// Writes `contents` to a new file under `state_dir/mcp`, named after this process (its pid
    /// and start time) and a random part.
    pub(crate) fn write(state_dir: &Path, owner: (i32, u64), contents: &str) -> io::Result<Self> {
        let folder = state_dir.join(MCP);
        private_dir(&folder)?;
        let (pid, start) = owner;
        let path = folder.join(format!("{pid}-{start}-{:016x}.json", rand::random::<u64>()));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let this = Self { path };
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        Ok(this)
    }

    /// Its path, for `--mcp-config`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for McpConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes the MCP configuration files of processes for which `is_running(pid, start)` is
/// false (a legio process that was killed during a turn).
pub(crate) fn remove_stale_mcp_files(state_dir: &Path, is_running: impl Fn(i32, u64) -> bool) {
    let Ok(entries) = std::fs::read_dir(state_dir.join(MCP)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let mut parts = name.to_str().unwrap_or("").split('-');
        let owner = parts.next().and_then(|p| p.parse::<i32>().ok());
        let start = parts.next().and_then(|p| p.parse::<u64>().ok());
        if let (Some(owner), Some(start)) = (owner, start) {
            if !is_running(owner, start) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn components_keep_plain_names_and_escape_the_rest() {
        assert_eq!(component("vorenus"), "vorenus");
        assert_eq!(component("telegram:42"), "telegram%3A42");
        assert_eq!(component(".."), "%2E%2E");
        assert_eq!(component("a%b"), "a%25b");
        assert_ne!(component("a.b"), component("a_b"));
    }

    #[test]
    fn a_config_file_is_private_removed_on_drop_and_a_dead_owners_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let file = McpConfigFile::write(dir.path(), (7, 70), "{}").unwrap();
        let path = file.path().to_owned();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let folder = std::fs::metadata(dir.path().join(MCP)).unwrap();
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        drop(file);
        assert!(!path.exists());

        let live = McpConfigFile::write(dir.path(), (7, 70), "{}").unwrap();
        let dead = McpConfigFile::write(dir.path(), (8, 80), "{}").unwrap();
        let (live_path, dead_path) = (live.path().to_owned(), dead.path().to_owned());
        std::mem::forget((live, dead));
        remove_stale_mcp_files(dir.path(), |pid, start| (pid, start) == (7, 70));
        assert!(live_path.exists());
        assert!(!dead_path.exists());
    }
}
