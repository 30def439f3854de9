//! The scripted provider: deterministic, offline, configurable as stateless, session-stateful and
//! resumable, or session-stateful and not resumable. It records every request it receives, keeps a
//! per-session thread of what each provider session was sent, answers with text derived from its
//! input, and can be told to fail (error, panic, hang, lose a session), to answer with a given
//! text, or to call tools ([`Fault::ToolCalls`]) on chosen turns. It records the tools each
//! request offered. With shared sessions ([`ScriptedProvider::with_shared_sessions`]) its provider
//! sessions live in a folder that several processes share, as a real provider's sessions live on
//! its servers: a session made by one legio node can be resumed by another.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use legio_core::{estimate_tokens, AgentName, ContextPlan, History, Seq, TokenUsage};

use crate::provider::{
    Capabilities, Provider, ProviderError, ProviderFuture, ProviderReply, ProviderRequest,
    StreamDelta, ToolDef,
};
use crate::render::{bootstrap_block, chat_turns, ToolCallPart};

/// How the scripted provider behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptedConfig {
    /// Stateless, or stateful and (not) resumable.
    pub history: History,
    /// Simulated latency of every call.
    pub latency: Duration,
    /// The context window it claims.
    pub context_window: u64,
}

impl ScriptedConfig {
    /// A zero-latency provider with the given history capability and a 200k window.
    pub fn new(history: History) -> Self {
        Self {
            history,
            latency: Duration::ZERO,
            context_window: 200_000,
        }
    }
}

/// What to do instead of the derived reply on a future call: a failure, a given text, or tool
/// calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Return an error.
    Error(String),
    /// Panic inside the call.
    Panic,
    /// Never answer (the runtime's turn timeout must fire).
    Hang,
    /// Answer that the session to resume is unknown.
    LoseSession,
    /// Answer with exactly this text (an empty one included) instead of the derived reply.
    Reply(String),
    /// Answer with these tool calls (and no text), as a model asking for tools would.
    ToolCalls(Vec<ToolCallPart>),
}

impl Fault {
    /// Tool calls of `(id, name, arguments)`.
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Self {
        Self::ToolCalls(
            calls
                .into_iter()
                .map(|(id, name, arguments)| ToolCallPart {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    arguments: arguments.to_owned(),
                })
                .collect(),
        )
    }
}

/// One request as the provider received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The agent.
    pub agent: AgentName,
    /// The conversation.
    pub conversation: legio_core::ConversationKey,
    /// The provider session the request ran in (stateful providers): the resumed one or the new
    /// one created for it. `None` for stateless calls and failed calls.
    pub provider_session: Option<String>,
    /// Whether it asked to resume a session.
    pub resumed: Option<String>,
    /// The plan it carried.
    pub plan: ContextPlan,
    /// The status block, if any.
    pub status: Option<String>,
    /// The system prompt.
    pub system_prompt: String,
    /// The text the model would have read (bootstrap block or chat turns), for token counting.
    pub rendered: String,
    /// Whether the call succeeded.
    pub succeeded: bool,
    /// The tools the request offered.
    pub tools: Arc<[ToolDef]>,
}

impl RecordedRequest {
    /// The names of the tools the request offered.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name.as_str()).collect()
    }
}

#[derive(Default)]
struct State {
    requests: Vec<RecordedRequest>,
    /// Provider session id -> the seqs it was sent, in order.
    sessions: HashMap<String, Vec<Seq>>,
    next_session: u64,
    /// This provider's mark in the ids of the sessions it opens, random: a provider in another
    /// process, or in this one after a restart, never gives an id this one gave (a resume of a
    /// session it does not know is then lost, as a real provider's would be, instead of landing
    /// in another conversation's session of the same number).
    mark: String,
    /// Faults to inject, by agent name (`None`: any agent), in order.
    faults: VecDeque<(Option<AgentName>, Fault)>,
}

/// The variable that gives a configured scripted provider shared sessions (its folder).
pub const SHARED_SESSIONS_ENV: &str = "LEGIO_SCRIPTED_SESSIONS_DIR";

/// The deterministic provider. Clone it to share its record between a runtime and a test.
#[derive(Clone)]
pub struct ScriptedProvider {
    config: ScriptedConfig,
    state: Arc<Mutex<State>>,
    shared: Option<Arc<std::path::PathBuf>>,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ScriptedProvider {
    /// A provider with `config`.
    pub fn new(config: ScriptedConfig) -> Self {
        Self {
            config,
            state: Arc::new(Mutex::new(State {
                mark: format!("{:08x}", rand::random::<u32>()),
                ..State::default()
            })),
            shared: None,
        }
    }

    /// Keeps the provider sessions in `dir`, shared with every process that uses the same
    /// folder: a session is the file `dir/<session id>` (ids carry a random mark of the provider, so they
    /// are unique across processes), which
    /// exists from the session's creation and gets one line per message a successful call sent
    /// it, `<seq> <1 if marked redelivered, else 0>`, written with one append before the call
    /// returns. A resume finds a session if its file exists. [`read_shared_sessions`] reads them.
    pub fn with_shared_sessions(mut self, dir: std::path::PathBuf) -> Self {
        self.shared = Some(Arc::new(dir));
        self
    }

    /// Whether the provider knows session `id` (in its memory, or in the shared folder).
    fn knows(&self, state: &State, id: &str) -> bool {
        state.sessions.contains_key(id)
            || self
                .shared
                .as_ref()
                .is_some_and(|dir| dir.join(id).is_file())
    }

    /// Appends what a call sent to the session's shared file (if sessions are shared).
    fn share(&self, id: &str, plan: &ContextPlan) {
        let Some(dir) = &self.shared else { return };
        let lines: String = plan
            .messages()
            .map(|i| format!("{} {}\n", i.seq.0, u8::from(i.redelivered)))
            .collect();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(id))
            .and_then(|mut file| std::io::Write::write_all(&mut file, lines.as_bytes()));
        if let Err(e) = written {
            panic!("scripted provider: cannot write its shared session {id}: {e}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic injected on purpose may poison the lock: the record is still sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the next call for `agent` (or for any agent, with `None`) fail with `fault`; calls
    /// queue in order.
    pub fn inject(&self, agent: Option<&AgentName>, fault: Fault) {
        self.lock().faults.push_back((agent.cloned(), fault));
    }

    /// Drops every fault not yet injected.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Forgets the requests recorded so far (a long benchmark's record would otherwise grow with
    /// every call); sessions and faults are kept.
    pub fn clear_requests(&self) {
        self.lock().requests = Vec::new();
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// The seqs each provider session was sent, in order.
    pub fn session_threads(&self) -> HashMap<String, Vec<Seq>> {
        self.lock().sessions.clone()
    }

    /// Forgets every provider session (as a provider whose sessions expired would).
    pub fn forget_sessions(&self) {
        self.lock().sessions.clear();
    }

    fn take_fault(&self, agent: &AgentName) -> Option<Fault> {
        let mut state = self.lock();
        let index = state
            .faults
            .iter()
            .position(|(who, _)| who.as_ref().is_none_or(|w| w == agent))?;
        state.faults.remove(index).map(|(_, fault)| fault)
    }

    fn run(
        &self,
        request: ProviderRequest,
        fault: Option<Fault>,
    ) -> Result<ProviderReply, ProviderError> {
        let rendered = self.render(&request);
        let mut state = self.lock();
        let mut record = RecordedRequest {
            agent: request.agent.clone(),
            conversation: request.conversation.clone(),
            provider_session: None,
            resumed: request.resume.clone(),
            plan: request.plan.clone(),
            status: request.status.clone(),
            system_prompt: request.system_prompt.clone(),
            rendered: rendered.clone(),
            succeeded: false,
            tools: request.tools.clone(),
        };
        let lose = fault == Some(Fault::LoseSession);
        let session = match self.session_for(&mut state, &request, lose) {
            Ok(session) => session,
            Err(lost) => {
                state.requests.push(record);
                return Err(lost);
            }
        };
        record.provider_session = session.clone();
        if let Some(Fault::Error(message)) = fault {
            state.requests.push(record);
            return Err(ProviderError::Failed { message });
        }
        if let Some(id) = &session {
            let thread = state.sessions.entry(id.clone()).or_default();
            thread.extend(request.plan.messages().map(|i| i.seq));
            self.share(id, &request.plan);
        }
        record.succeeded = true;
        state.requests.push(record);
        Ok(reply(&request, fault, session, &rendered))
    }

    /// What the request's context reads as: a stateful provider's bootstrap block, else the
    /// chat turns one after the other.
    fn render(&self, request: &ProviderRequest) -> String {
        if self.config.history.is_stateful() {
            return bootstrap_block(&request.plan, request.status.as_deref());
        }
        chat_turns(&request.agent, &request.plan, request.status.as_deref())
            .into_iter()
            .map(|t| t.text)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The provider session the request runs in: the one it resumes (lost when this provider
    /// does not know it, or `lose` says so), a new one, or none for a stateless provider.
    fn session_for(
        &self,
        state: &mut State,
        request: &ProviderRequest,
        lose: bool,
    ) -> Result<Option<String>, ProviderError> {
        match (&request.resume, self.config.history.is_stateful()) {
            (Some(id), true) if lose || !self.knows(state, id) => Err(ProviderError::SessionLost {
                session: id.clone(),
            }),
            (Some(id), true) => Ok(Some(id.clone())),
            (None, true) => {
                state.next_session += 1;
                let id = format!(
                    "scripted-{}-{}-{}",
                    request.agent, state.mark, state.next_session
                );
                state.sessions.insert(id.clone(), Vec::new());
                Ok(Some(id))
            }
            (_, false) => Ok(None),
        }
    }
}

/// The reply to a request that ran: the fault's text or tool calls, else the derived text.
fn reply(
    request: &ProviderRequest,
    fault: Option<Fault>,
    session: Option<String>,
    rendered: &str,
) -> ProviderReply {
    let (text, tool_calls) = match fault {
        Some(Fault::Reply(text)) => (text, Vec::new()),
        Some(Fault::ToolCalls(calls)) => (String::new(), calls),
        _ => (derived_text(request), Vec::new()),
    };
    let input = estimate_tokens(&request.system_prompt) + estimate_tokens(rendered);
    ProviderReply {
        usage: Some(TokenUsage {
            input,
            output: estimate_tokens(&text),
            ..Default::default()
        }),
        text,
        provider_session: session,
        tool_calls,
    }
}

/// The derived reply: who read how many messages in which mode, and which message it answers.
fn derived_text(request: &ProviderRequest) -> String {
    let plan = &request.plan;
    let redelivered = plan.history.iter().filter(|i| i.redelivered).count();
    format!(
        "{} read {} message(s) ({}{}{}) and answers #{}.",
        request.agent,
        plan.history.len() + 1,
        plan.mode.as_str(),
        if plan.notice.is_some() {
            ", restored"
        } else {
            ""
        },
        if redelivered > 0 {
            format!(", {redelivered} marked redelivered")
        } else {
            String::new()
        },
        plan.new_message.seq
    )
}

impl Provider for ScriptedProvider {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: self.config.history,
            context_window: self.config.context_window,
            tools: true,
        }
    }

    fn call(&self, request: ProviderRequest) -> ProviderFuture<'_> {
        Box::pin(async move {
            if !self.config.latency.is_zero() {
                tokio::time::sleep(self.config.latency).await;
            }
            let fault = self.take_fault(&request.agent);
            match fault {
                Some(Fault::Panic) => {
                    panic!("scripted provider: injected panic for {}", request.agent)
                }
                Some(Fault::Hang) => std::future::pending().await,
                other => {
                    let deltas = request.deltas.clone();
                    let reply = self.run(request, other)?;
                    if let Some(sink) = deltas {
                        for fragment in fragments(&reply.text) {
                            let _ = sink.send(StreamDelta::Text(fragment.to_owned()));
                        }
                    }
                    Ok(reply)
                }
            }
        })
    }
}

/// The reply cut into up to four fragments at word boundaries (what a streaming provider's
/// deltas look like), so hosts and tests see progress. Concatenated, they are the text.
fn fragments(text: &str) -> Vec<&str> {
    let words: Vec<usize> = text.match_indices(' ').map(|(i, _)| i + 1).collect();
    let step = words.len().div_ceil(4).max(1);
    let mut cuts: Vec<usize> = words.iter().copied().step_by(step).skip(1).collect();
    cuts.push(text.len());
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts {
        if cut > start {
            out.push(&text[start..cut]);
            start = cut;
        }
    }
    out
}

/// The shared sessions in `dir` (see [`ScriptedProvider::with_shared_sessions`]): per session
/// id, what it was sent, in order, as `(seq, marked redelivered)`.
pub fn read_shared_sessions(
    dir: &std::path::Path,
) -> std::io::Result<HashMap<String, Vec<(Seq, bool)>>> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let id = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path())?;
        let thread = text
            .lines()
            .filter_map(|line| {
                let (seq, mark) = line.split_once(' ')?;
                Some((Seq(seq.parse().ok()?), mark == "1"))
            })
            .collect();
        out.insert(id, thread);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::fragments;

    #[test]
    fn fragments_concatenate_to_the_text() {
        for text in [
            "",
            "one",
            "a b",
            "lead read 3 message(s) (delta) and answers #7.",
        ] {
            let parts = fragments(text);
            assert_eq!(parts.concat(), text);
            assert!(parts.len() <= 5, "{parts:?}");
        }
        assert!(fragments("lead read 3 message(s) (delta) and answers #7.").len() >= 3);
    }
}
