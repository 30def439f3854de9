//! `legio chat`: the user's side of a conversation. Each line is posted; replies print under the
//! agent's name. `/history`, `/status`, `/reset NAME`, `/quit`. With piped input: one message per
//! line, no prompts, exit at the end of input.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use anyhow::Result;
use legio_runtime::Runtime;

use crate::post::{print_replies, unknown_mentions_warning};
use crate::{agents, common};
use crate::{invocation::Context, render};

/// Arguments of `legio chat`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation key.
    #[arg(long, default_value = "cli:local")]
    conversation: String,
}

const HELP: &str = "type a message (@name for a specialist, @all for everyone); /history, /status, /reset NAME, /quit";

/// Runs the command.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let tokio = common::tokio()?;
    let interactive = std::io::stdin().is_terminal();
    let colour = common::colour();
    tokio.block_on(async {
        let runtime = agents::open_runtime(context).await?;
        let conversation = args.conversation.as_str();
        if interactive {
            greet(&runtime, conversation);
        }
        let mut failed = false;
        let mut stdin = std::io::stdin().lock();
        let mut number = 0u64;
        loop {
            if interactive {
                out!("you> ");
            }
            let Some(line) = next_line(&mut stdin, &mut number)? else {
                break;
            };
            match handle(&runtime, conversation, line.trim(), colour).await? {
                Handled::Quit => break,
                Handled::Ok => {}
                Handled::Failed => failed = true,
            }
        }
        runtime.shutdown().await?;
        Ok(if failed && !interactive {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// What one line of input did.
enum Handled {
    Quit,
    Ok,
    /// A message whose turn failed (a piped chat then exits 1).
    Failed,
}

/// The conversation and its roster, and the commands.
fn greet(runtime: &Runtime, conversation: &str) {
    let roster: Vec<String> = runtime
        .config()
        .agents
        .iter()
        .map(|a| format!("{} ({})", a.name, a.role.as_str()))
        .collect();
    outln!("legio chat in {conversation}: {}", roster.join(", "));
    outln!("{HELP}");
}

/// Runs one line: a command, or a message posted to the conversation.
async fn handle(
    runtime: &Runtime,
    conversation: &str,
    line: &str,
    colour: bool,
) -> Result<Handled> {
    if line.is_empty() {
        return Ok(Handled::Ok);
    }
    match line
        .split_once(' ')
        .map_or((line, ""), |(a, b)| (a, b.trim()))
    {
        ("/quit" | "/exit", _) => return Ok(Handled::Quit),
        ("/help", _) => outln!("{HELP}"),
        ("/history", _) => {
            for record in runtime.history(conversation, None, 50).await? {
                outln!("{}", render::line(&record));
            }
        }
        ("/status", _) => status(runtime, conversation).await?,
        ("/reset", name) if !name.is_empty() => match runtime.reset(conversation, name).await {
            Ok(()) => {
                outln!("reset {name}: its next turn starts a new session restored from the log")
            }
            Err(e) => outln!("(error) {e}"),
        },
        (command, _) if command.starts_with('/') => outln!("unknown command {command}; {HELP}"),
        _ => return post(runtime, conversation, line, colour).await,
    }
    Ok(Handled::Ok)
}

/// Posts `line` and prints the replies.
async fn post(runtime: &Runtime, conversation: &str, line: &str, colour: bool) -> Result<Handled> {
    match agents::post_with_status(runtime, conversation, line, None).await {
        Ok(replies) => {
            if let Some(warning) = unknown_mentions_warning(&replies) {
                outln!("{warning}");
            }
            print_replies(&replies, colour);
            Ok(if replies.iter().any(|r| r.outcome.is_err()) {
                Handled::Failed
            } else {
                Handled::Ok
            })
        }
        Err(e) => {
            outln!("(error) {e}");
            Ok(Handled::Failed)
        }
    }
}

/// `/status`: each agent's role, activity and current session.
async fn status(runtime: &Runtime, conversation: &str) -> Result<()> {
    for s in runtime.status(conversation).await? {
        let session = s
            .session
            .as_ref()
            .and_then(|st| st.current.as_ref())
            .map_or("no session".to_owned(), |c| {
                format!(
                    "session {} ({}), {} turns, {} input tokens",
                    &c.session.to_string()[24..],
                    c.status.as_str(),
                    c.turns,
                    c.usage.context_tokens()
                )
            });
        outln!(
            "{:<10} {:<12} {:<10} {session}",
            s.agent.as_str(),
            s.role.as_str(),
            s.activity.as_str()
        );
    }
    Ok(())
}

/// The next line of input (`None` at its end). A line that is not UTF-8 is not the end of a piped
/// chat: it is read with each bad byte replaced by U+FFFD, and a warning names the line.
fn next_line(input: &mut impl BufRead, number: &mut u64) -> Result<Option<String>> {
    let mut bytes = Vec::new();
    if input.read_until(b'\n', &mut bytes)? == 0 {
        return Ok(None);
    }
    *number += 1;
    Ok(Some(match String::from_utf8(bytes) {
        Ok(line) => line,
        Err(e) => {
            eprintln!(
                "warning: line {number} of the input is not UTF-8; its bad bytes are replaced by U+FFFD"
            );
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    }))
}
