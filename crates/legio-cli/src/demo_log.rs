//! `legio demo-log`: appends a sample multi-agent conversation to a durable log, closes and reopens
//! it as a restarted process would, and prints it back with what each agent may see.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use legio_core::{
    parse_mentions, AgentName, Audience, BoundaryReason, ContextDelivered, ConversationKey,
    DeliveryMode, Event, Message, MessageId, OpenReason, Participant, Seq, SessionEnded, SessionId,
    SessionOpened, SessionStart, Timestamp, TokenUsage, TurnCompleted, Viewer,
};
use legio_store::{EventLog, SledLog, StoreError};

use crate::{render, Context};

/// Arguments of `legio demo-log`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conversation to write into.
    #[arg(long, default_value = "cli:demo")]
    conversation: String,
}

const ORCHESTRATOR: &str = "legatus";
const SPECIALISTS: [&str; 2] = ["vorenus", "pullo"];

/// Reads the clock and a fresh UUID v7: the CLI is an edge, the core takes both as inputs.
fn now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    Timestamp::from_unix_micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

fn fresh_uuid() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}

struct Script<'a> {
    log: &'a SledLog,
    conversation: ConversationKey,
    known: Vec<AgentName>,
}

impl Script<'_> {
    fn append(&self, events: Vec<Event>) -> Result<Seq> {
        let range = self.log.append(events)?;
        for record in self.log.read_range(range.first, range.last, usize::MAX)? {
            println!("  {}", render::line(&record));
        }
        Ok(range.last)
    }

    /// The user posts `text`; mentions decide the audience (none: the orchestrator).
    fn user_says(&self, text: &str) -> Result<(MessageId, Vec<AgentName>)> {
        let audience = parse_mentions(text, &self.known)?;
        let orchestrator = AgentName::new(ORCHESTRATOR)?;
        let (audience, addressed) = match audience {
            None => (Audience::agent(orchestrator.clone()), vec![orchestrator]),
            Some(Audience::All) => (Audience::All, self.known.clone()),
            Some(Audience::Only(list)) => {
                let names = list.iter().filter_map(|p| p.agent().cloned()).collect();
                (Audience::Only(list), names)
            }
        };
        let id = MessageId(fresh_uuid());
        let message = Message::text(
            id,
            self.conversation.clone(),
            Participant::User,
            audience,
            text,
            now(),
        );
        self.append(vec![Event::MessagePosted(message)])?;
        Ok((id, addressed))
    }

    /// `agent` answers the user with `text`, recording its turn.
    fn agent_replies(
        &self,
        agent: &str,
        session: SessionId,
        request: MessageId,
        text: &str,
    ) -> Result<()> {
        let name = AgentName::new(agent)?;
        let id = MessageId(fresh_uuid());
        let reply = Message::text(
            id,
            self.conversation.clone(),
            Participant::Agent(name.clone()),
            Audience::user(),
            text,
            now(),
        )
        .replying_to(request);
        let up_to = self.log.last_seq();
        let tokens = (text.len() as u64 / 4).max(1);
        // A session's first turn is its bootstrap; later turns carry only the delta.
        let first_turn = self
            .log
            .session_state(&self.conversation, &name)?
            .and_then(|s| s.current)
            .is_none_or(|c| c.turns == 0);
        let mode = if first_turn {
            DeliveryMode::Bootstrap
        } else {
            DeliveryMode::Delta
        };
        self.append(vec![
            Event::ContextDelivered(ContextDelivered {
                conversation: self.conversation.clone(),
                agent: name.clone(),
                session,
                at: now(),
                up_to,
                mode,
                messages: 1,
                estimated_tokens: tokens * 3,
            }),
            Event::MessagePosted(reply),
            Event::TurnCompleted(TurnCompleted {
                conversation: self.conversation.clone(),
                agent: name,
                session,
                at: now(),
                usage: TokenUsage {
                    input: tokens * 40,
                    output: tokens,
                    ..Default::default()
                },
                provider_session: Some(format!("demo-{}", &session.to_string()[24..])),
                reply: Some(id),
            }),
        ])?;
        Ok(())
    }

    fn open_session(&self, agent: &str, why: OpenReason) -> Result<SessionId> {
        let session = SessionId(fresh_uuid());
        self.append(vec![Event::SessionOpened(SessionOpened {
            conversation: self.conversation.clone(),
            agent: AgentName::new(agent)?,
            session,
            at: now(),
            why,
            how: SessionStart::Bootstrapped {
                up_to: self.log.last_seq(),
            },
            prompt_hash: "sha256:demo".into(),
        })])?;
        Ok(session)
    }
}

/// Runs the demo.
pub fn run(context: &Context, args: Args) -> Result<ExitCode> {
    let conversation = ConversationKey::new(args.conversation)?;
    let temp;
    let path = match &context.db {
        Some(db) => db.clone(),
        None => {
            temp = tempfile::tempdir().context("creating a temporary folder for the demo log")?;
            temp.path().join("legio-demo")
        }
    };
    let options = context.store()?.options;
    println!(
        "legio demo-log: a conversation between the user, an orchestrator ({ORCHESTRATOR}) and two"
    );
    println!(
        "specialists ({}), written to a durable event log at {}",
        SPECIALISTS.join(", "),
        path.display()
    );
    println!(
        "({}; every append below was on disk before it was printed)\n",
        if context.db.is_some() {
            "kept"
        } else {
            "temporary, pass --db PATH to keep it"
        }
    );

    let mut known: Vec<AgentName> = Vec::new();
    for name in std::iter::once(ORCHESTRATOR).chain(SPECIALISTS) {
        known.push(AgentName::new(name)?);
    }
    {
        let log = SledLog::open(&path, &options)?;
        let script = Script {
            log: &log,
            conversation: conversation.clone(),
            known: known.clone(),
        };
        let start = log.last_seq();

        println!("1. The user writes without a mention: it goes to the orchestrator.");
        let legatus = script.open_session(ORCHESTRATOR, OpenReason::FirstUse)?;
        let (q, _) = script.user_says("Good morning. What is on the agenda today?")?;
        script.agent_replies(
            ORCHESTRATOR,
            legatus,
            q,
            "The deploy script needs a review, then we compare rollout plans.",
        )?;

        println!("\n2. @mentions address specialists; each sees only what is addressed to it, to all, or sent by it.");
        let vorenus = script.open_session("vorenus", OpenReason::FirstUse)?;
        let (q, _) =
            script.user_says("@vorenus review deploy.sh, mail ops@example.com if it is urgent")?;
        script.agent_replies(
            "vorenus",
            vorenus,
            q,
            "Two issues: no set -e, and the rollback path is untested.",
        )?;
        let pullo = script.open_session("pullo", OpenReason::FirstUse)?;
        let (q, _) =
            script.user_says("@vorenus @pullo compare a blue-green and a canary rollout")?;
        script.agent_replies(
            "pullo",
            pullo,
            q,
            "Canary: smaller blast radius, slower to finish.",
        )?;
        script.agent_replies(
            "vorenus",
            vorenus,
            q,
            "Blue-green: instant rollback, double the capacity.",
        )?;
        script.user_says("@all we ship the canary at noon")?;

        println!("\n3. A mention of an unknown agent, and a message over the size limit, are refused whole:");
        match parse_mentions("@brutus take over", &known) {
            Err(e) => println!("  refused: {e}"),
            Ok(_) => println!("  (unexpectedly accepted)"),
        }
        let huge = "x".repeat(options.max_message_bytes + 1);
        let too_big = Message::text(
            MessageId(fresh_uuid()),
            conversation.clone(),
            Participant::User,
            Audience::All,
            huge,
            now(),
        );
        match log.append(vec![Event::MessagePosted(too_big)]) {
            Err(e @ StoreError::MessageTooLarge { .. }) => println!("  refused: {e}"),
            other => println!("  (unexpected: {other:?})"),
        }

        println!("\n4. Shutdown: every open session is suspended, the log is flushed and closed.");
        let mut events = Vec::new();
        for (agent, session) in [
            (ORCHESTRATOR, legatus),
            ("vorenus", vorenus),
            ("pullo", pullo),
        ] {
            events.push(Event::SessionSuspended(SessionEnded {
                conversation: conversation.clone(),
                agent: AgentName::new(agent)?,
                session,
                at: now(),
                why: BoundaryReason::Shutdown,
            }));
        }
        script.append(events)?;
        println!(
            "  {} events appended in this run",
            log.last_seq().get() - start.get()
        );
        log.close()?;
    }

    println!("\n5. A new process opens the same log: everything is there, and each agent's session state");
    println!("   says how it will resume (the runtime uses this to send only what a session has not seen).");
    let log = SledLog::open(&path, &options)?;
    println!("  reopened at seq {}", log.last_seq());
    for state in log.session_states(&conversation)? {
        if let Some(current) = &state.current {
            println!(
                "  {:<8} session ...{} {}: delivered up to #{}, {} turns, {} input tokens, provider session {}",
                state.agent.as_str(),
                &current.session.to_string()[28..],
                current.status.as_str(),
                current.checkpoint,
                current.turns,
                current.usage.input,
                current.provider_session.as_deref().unwrap_or("-")
            );
        }
    }

    println!("\n6. What each agent may see (its visibility window, last 50):");
    for name in &known {
        let viewer = if name.as_str() == ORCHESTRATOR {
            Viewer::Everything
        } else {
            Viewer::Specialist(name)
        };
        let window = log.visible_window(&conversation, viewer, 50)?;
        let seqs: Vec<String> = window.iter().map(|r| format!("#{}", r.seq)).collect();
        println!(
            "  {:<8} sees {} messages: {}",
            name.as_str(),
            window.len(),
            seqs.join(" ")
        );
    }

    let report = log.verify(&mut |_| {})?;
    println!(
        "\n7. verify: {} events, {}",
        report.events,
        if report.is_clean() {
            "clean (no gaps, every record decodes, indexes agree)".to_owned()
        } else {
            format!("{} problems", report.total_findings())
        }
    );
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
