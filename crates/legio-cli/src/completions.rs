//! `legio completions SHELL`: shell completions on standard output.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

/// Arguments of `legio completions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell (bash, zsh, fish, elvish, powershell).
    shell: clap_complete::Shell,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut command = crate::Cli::command();
    clap_complete::generate(args.shell, &mut command, "legio", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
