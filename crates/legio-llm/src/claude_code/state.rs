//! The provider's state directory (`ClaudeCodeSettings::state_dir`), which legio controls and
//! nobody else may read: `children/`, the pid files of running CLIs (child.rs). Folders are made
//! with mode 0700.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// Makes `path` and its missing parents, each new one with mode 0700.
pub(crate) fn private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}
