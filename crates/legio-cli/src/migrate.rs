//! `legio migrate`: rewrites a log in an older stored layout (v1) to the current one (v2), with a
//! progress bar. Opening a v1 log with any command migrates it too; this command does only that,
//! and says what it did.

use std::process::ExitCode;

use anyhow::Result;
use legio_store::SledLog;

use crate::common;
use crate::Context;

/// Arguments of `legio migrate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(context: &Context, _args: Args) -> Result<ExitCode> {
    let store = context.store()?;
    let mut options = store.options.clone();
    options.create_if_missing = false;
    let bar = common::progress(0, "migrating", true);
    let log = SledLog::open_with_progress(&store.path, &options, &mut |p| {
        bar.set_length(p.total);
        bar.set_position(p.done);
    })?;
    bar.finish_and_clear();
    let migration = log.migration();
    if migration.from == migration.to {
        outln!(
            "{} is already in layout v{}: nothing to do",
            store.path.display(),
            migration.to
        );
    } else {
        outln!(
            "migrated {} events in {} from layout v{} to v{}",
            migration.events,
            store.path.display(),
            migration.from,
            migration.to
        );
    }
    log.close()?;
    Ok(ExitCode::SUCCESS)
}
