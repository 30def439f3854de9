//! `legio completions SHELL`: shell completions on standard output.

use std::io::Write;
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
    // Generated into memory first: clap_complete panics when its writer fails, and a reader that
    // stops early (`| head`) must end the command quietly (see output.rs).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "legio", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}
