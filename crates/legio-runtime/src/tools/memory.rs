//! The memory tools: directives, shared notes and private notebooks as tools an agent calls, with
//! the scope fixed by who calls.
//!
//! [`MemoryTools::tools_for`] describes an agent's tools (name, description, JSON schema of the
//! arguments, from each tool's argument type in `memory_calls`); [`MemoryTools::call`] runs one
//! for a calling agent: it reads the arguments into the tool's type (serde checks them), asks the
//! core whether the caller may (`check_permission`, `MemoryState::decide`), appends the
//! event through the log and answers from the projection. A specialist's notebook tools take no
//! argument naming an agent: they are bound to the caller, so no call can reach another notebook.
//! The orchestrator's notebook tools take the specialist's name and only read.
//!
//! The projection is folded from the log's `legio:memory` conversation and cached; each call
//! first folds in what the log gained since (one index read), and the whole call holds a lock, so
//! directive ids are never handed out twice. Every failure is a [`ToolError`] value meant to be
//! returned to the model as the tool's result, never a panic.

use std::collections::BTreeMap;
use std::sync::Arc;

use legio_core::{
    check_permission, AgentName, Caller, ConversationKey, Event, MemoryCommand, MemoryError,
    MemoryOperation, MemoryState, MemoryStore,
};
use legio_store::{EventLog, StoreError};
use serde_json::Value;
use thiserror::Error;

use crate::clock::now;
use crate::error::RuntimeError;
use crate::tools::memory_calls::{definitions, Call};
use legio_config::{AgentSpec, Role};
use legio_ops::{fold_memory, one_line as cut, short_time as when};

/// A tool as it is described to a model: the provider API's own description (name, description,
/// JSON schema of the arguments), so specs go into a provider request as they are.
pub use legio_llm::ToolDef as ToolSpec;

/// Why a tool call failed: returned to the model as the tool's error result.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The caller has no tool of this name.
    #[error("no tool {tool:?} for {caller}; its tools: {}", known.join(", "))]
    UnknownTool {
        /// The name asked for.
        tool: String,
        /// The caller.
        caller: String,
        /// The caller's tools.
        known: Vec<String>,
    },
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments for {tool}: {reason}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// A memory rule refused the call (permission, unknown id, bad text).
    #[error(transparent)]
    Refused(#[from] MemoryError),
    /// The caller is not an agent of this legion.
    #[error("{name:?} is not an agent of this legion")]
    UnknownCaller {
        /// The name.
        name: String,
    },
    /// The orchestrator named an agent that has no notebook.
    #[error("{name:?} has no notebook; specialists: {}", specialists.join(", "))]
    NoNotebook {
        /// The name given.
        name: String,
        /// The specialists.
        specialists: Vec<String>,
    },
    /// The log failed; the call may be retried.
    #[error("the memory store failed: {0}")]
    Store(String),
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        Self::Store(e.to_string())
    }
}

/// How many times a memory write is decided and submitted when another node wrote first.
const WRITE_ATTEMPTS: u32 = 3;

/// The memory tools' executor for one legion: the log, the roster's roles, the cached projection.
pub struct MemoryTools {
    log: Arc<dyn EventLog>,
    roles: BTreeMap<AgentName, Role>,
    state: tokio::sync::Mutex<MemoryState>,
}

impl std::fmt::Debug for MemoryTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTools")
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

impl MemoryTools {
    /// The executor for the agents of `roster`, on `log`.
    pub fn new(log: Arc<dyn EventLog>, roster: &[AgentSpec]) -> Self {
        Self::with_roles(log, roster.iter().map(|a| (a.name.clone(), a.role)))
    }

    /// The executor for agents given by name and role, on `log`.
    pub fn with_roles(
        log: Arc<dyn EventLog>,
        roles: impl IntoIterator<Item = (AgentName, Role)>,
    ) -> Self {
        Self {
            log,
            roles: roles.into_iter().collect(),
            state: tokio::sync::Mutex::new(MemoryState::new()),
        }
    }

    /// The memory tools of `agent`, as described to its model. The orchestrator's can publish
    /// and revoke directives and read any specialist's notebook (naming it); a specialist's read
    /// directives and reach only its own notebook (no argument names an agent).
    pub fn tools_for(agent: &AgentSpec) -> Vec<ToolSpec> {
        Self::tools_for_role(agent.role)
    }

    /// The memory tools of any agent with `role` (see [`MemoryTools::tools_for`]).
    pub fn tools_for_role(role: Role) -> Vec<ToolSpec> {
        definitions(role).iter().map(|d| d.spec()).collect()
    }

    /// Whether `tool` is a memory tool of some role (so a tool loop can route calls here).
    pub fn is_memory_tool(tool: &str) -> bool {
        [Role::Orchestrator, Role::Specialist]
            .into_iter()
            .any(|r| definitions(r).iter().any(|d| d.name == tool))
    }

    /// The projection as it stands in the log now (everything: the operator's view).
    pub async fn snapshot(&self) -> Result<MemoryState, RuntimeError> {
        let mut state = self.state.lock().await;
        self.catch_up(&mut state).await?;
        Ok(state.clone())
    }

    /// Folds in what the log gained since the cached state (off the async workers), other
    /// nodes' writes included on a cluster (`EventLog::catch_up`). The state
    /// moves to the blocking thread and back; if it is lost on the way, the empty state left in
    /// its place is folded again from the start next time (the fold is idempotent).
    async fn catch_up(&self, state: &mut MemoryState) -> Result<(), RuntimeError> {
        let log = Arc::clone(&self.log);
        let mut moved = std::mem::take(state);
        let (result, moved) = tokio::task::spawn_blocking(move || {
            let result = log
                .catch_up(ConversationKey::memory())
                .and_then(|()| fold_memory(log.as_ref(), &mut moved));
            (result, moved)
        })
        .await
        .map_err(|e| RuntimeError::Cancelled {
            what: "reading memory",
            source: legio_store::ErrorSource::new(e),
        })?;
        *state = moved;
        Ok(result?)
    }

    fn caller(&self, name: &AgentName) -> Result<(Caller, Role), ToolError> {
        match self.roles.get(name) {
            Some(Role::Orchestrator) => {
                Ok((Caller::Orchestrator(name.clone()), Role::Orchestrator))
            }
            Some(Role::Specialist) => Ok((Caller::Specialist(name.clone()), Role::Specialist)),
            None => Err(ToolError::UnknownCaller {
                name: name.to_string(),
            }),
        }
    }

    /// The specialist named `name` (whose notebook the orchestrator asks for).
    fn specialist(&self, name: &str) -> Result<AgentName, ToolError> {
        let specialists = || {
            self.roles
                .iter()
                .filter(|(_, r)| **r == Role::Specialist)
                .map(|(n, _)| n.to_string())
                .collect()
        };
        match AgentName::new(name) {
            Ok(agent) if self.roles.get(&agent) == Some(&Role::Specialist) => Ok(agent),
            _ => Err(ToolError::NoNotebook {
                name: name.to_owned(),
                specialists: specialists(),
            }),
        }
    }

    /// Runs `tool` for `caller` with `arguments` (a JSON object). Returns the text for the model,
    /// or the error to give it instead.
    pub async fn call(
        &self,
        caller: &AgentName,
        tool: &str,
        arguments: Value,
    ) -> Result<String, ToolError> {
        let (who, role) = self.caller(caller)?;
        let Some(def) = definitions(role).iter().find(|d| d.name == tool) else {
            return Err(other_roles_tool(&who, caller, role, tool));
        };
        let call = def
            .read(arguments)
            .map_err(|reason| ToolError::InvalidArguments {
                tool: def.name.to_owned(),
                reason,
            })?;
        let mut state = self.state.lock().await;
        let mut attempt = 1;
        loop {
            self.catch_up(&mut state)
                .await
                .map_err(|e| ToolError::Store(e.to_string()))?;
            if let Some(read) = self.read(&state, &who, caller, &call) {
                return read;
            }
            let Some(command) = command_of(&call) else {
                return Err(unknown_tool(caller, role, def.name));
            };
            let event = state.decide(&who, command, now())?;
            match self.log.submit(vec![event.clone()])?.await {
                Ok(range) => {
                    state.apply(range.first, &event);
                    return Ok(written(&state, &event));
                }
                // On a cluster another node wrote memory first: read it again and decide anew
                // (the write may now be refused, e.g. a directive revoked meanwhile).
                Err(StoreError::Fenced { .. }) if attempt < WRITE_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The answer of a reading tool (`None` for a writing one).
    fn read(
        &self,
        state: &MemoryState,
        who: &Caller,
        caller: &AgentName,
        call: &Call,
    ) -> Option<Result<String, ToolError>> {
        let permitted = |store: &MemoryStore| {
            check_permission(who, MemoryOperation::Read, store).map_err(ToolError::from)
        };
        Some(match call {
            Call::ListDirectives(a) => permitted(&MemoryStore::Directives)
                .map(|()| list_directives(state, a.include_revoked.unwrap_or(false))),
            Call::ReadDirective(a) => {
                permitted(&MemoryStore::Directives).and_then(|()| read_directive(state, &a.id))
            }
            Call::ListNotes(_) => permitted(&MemoryStore::Notes).map(|()| list_notes(state)),
            Call::ReadNote(a) => {
                permitted(&MemoryStore::Notes).and_then(|()| read_note(state, &a.key))
            }
            Call::ListOwnNotebook(_) => list_notebook(state, who, caller),
            Call::ReadOwnNotebook(a) => read_notebook(state, who, caller, a.entry.get()),
            Call::ListNotebook(a) => self
                .specialist(&a.agent)
                .and_then(|owner| list_notebook(state, who, &owner)),
            Call::ReadNotebook(a) => self
                .specialist(&a.agent)
                .and_then(|owner| read_notebook(state, who, &owner, a.entry.get())),
            _ => return None,
        })
    }
}

/// The error for a tool `caller`'s role does not have: the rule that forbids it, where one does
/// (a specialist asking to publish a directive), else the tools it has.
fn other_roles_tool(who: &Caller, caller: &AgentName, role: Role, tool: &str) -> ToolError {
    let denied = match tool {
        "publish_directive" => Some((MemoryOperation::Write, MemoryStore::Directives)),
        "revoke_directive" => Some((MemoryOperation::Revoke, MemoryStore::Directives)),
        "append_notebook" => Some((
            MemoryOperation::Write,
            MemoryStore::Notebook(caller.clone()),
        )),
        _ => None,
    };
    if let Some((operation, store)) = denied {
        if let Err(e) = check_permission(who, operation, &store) {
            return e.into();
        }
    }
    unknown_tool(caller, role, tool)
}

fn unknown_tool(caller: &AgentName, role: Role, tool: &str) -> ToolError {
    ToolError::UnknownTool {
        tool: tool.to_owned(),
        caller: caller.to_string(),
        known: definitions(role)
            .iter()
            .map(|d| d.name.to_owned())
            .collect(),
    }
}

/// The command a writing tool asks for (`None` for any other tool).
fn command_of(call: &Call) -> Option<MemoryCommand> {
    Some(match call {
        Call::PublishDirective(a) => MemoryCommand::PublishDirective {
            text: a.text.clone(),
        },
        Call::RevokeDirective(a) => MemoryCommand::RevokeDirective {
            id: a.id.clone(),
            reason: a.reason.clone(),
        },
        Call::WriteNote(a) => MemoryCommand::WriteNote {
            key: a.key.clone(),
            text: a.text.clone(),
        },
        Call::AppendNotebook(a) => MemoryCommand::AppendNotebook {
            text: a.text.clone(),
        },
        _ => return None,
    })
}

/// What the model is told once `event` is stored.
fn written(state: &MemoryState, event: &Event) -> String {
    match event {
        Event::DirectivePublished(e) => format!("published directive {}", e.id),
        Event::DirectiveRevoked(e) => format!("revoked directive {}", e.id),
        Event::NoteWritten(e) => {
            let revisions = state.notes.get(&e.key).map_or(1, |n| n.revisions);
            format!("wrote note {} (revision {revisions})", e.key)
        }
        Event::NotebookEntryAppended(e) => {
            let n = state.notebooks.get(&e.owner).map_or(0, Vec::len);
            format!("appended entry {n} to your notebook")
        }
        _ => "done".to_owned(),
    }
}

fn read_directive(state: &MemoryState, id: &str) -> Result<String, ToolError> {
    let d = state.directive(id)?;
    let mut out = format!("directive {} (by {}, {})", d.id, d.by, when(d.at));
    if let Some(r) = &d.revoked {
        out.push_str(&format!(" REVOKED by {} ({})", r.by, when(r.at)));
        if let Some(reason) = &r.reason {
            out.push_str(&format!(": {reason}"));
        }
    }
    Ok(format!("{out}\n{}", d.text))
}

fn list_notes(state: &MemoryState) -> String {
    if state.notes.is_empty() {
        return "no notes".into();
    }
    let lines: Vec<String> = state
        .notes
        .values()
        .map(|n| {
            format!(
                "{} (by {}, {}): {}",
                n.key,
                n.author,
                when(n.at),
                cut(&n.text)
            )
        })
        .collect();
    lines.join("\n")
}

fn read_note(state: &MemoryState, key: &str) -> Result<String, ToolError> {
    let n = state.note(key)?;
    Ok(format!(
        "note {} (revision {} by {}, {}; created by {})\n{}",
        n.key,
        n.revisions,
        n.author,
        when(n.at),
        n.created_by,
        n.text
    ))
}

fn list_notebook(
    state: &MemoryState,
    who: &Caller,
    owner: &AgentName,
) -> Result<String, ToolError> {
    let entries = state.notebook(who, owner)?;
    if entries.is_empty() {
        return Ok(format!("the notebook of {owner} is empty"));
    }
    let lines: Vec<String> = entries
        .iter()
        .map(|e| format!("{} ({}): {}", e.number, when(e.at), cut(&e.text)))
        .collect();
    Ok(lines.join("\n"))
}

fn read_notebook(
    state: &MemoryState,
    who: &Caller,
    owner: &AgentName,
    entry: u64,
) -> Result<String, ToolError> {
    let e = state.notebook_entry(who, owner, entry)?;
    Ok(format!(
        "entry {} of the notebook of {owner} ({})\n{}",
        e.number,
        when(e.at),
        e.text
    ))
}

fn list_directives(state: &MemoryState, include_revoked: bool) -> String {
    let lines: Vec<String> = state
        .directives
        .iter()
        .filter(|d| include_revoked || d.revoked.is_none())
        .map(|d| {
            let revoked = if d.revoked.is_some() {
                " [revoked]"
            } else {
                ""
            };
            format!(
                "{} (by {}, {}){revoked}: {}",
                d.id,
                d.by,
                when(d.at),
                cut(&d.text)
            )
        })
        .collect();
    if lines.is_empty() {
        "no directives in force".to_owned()
    } else {
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legio_store::MemoryLog;
    use serde_json::json;

    /// The tools of `role` as offered to its model: names, descriptions and argument schemas.
    fn check_offered(role: Role, expected: Value) {
        let offered = serde_json::to_value(MemoryTools::tools_for_role(role)).unwrap();
        assert_eq!(
            serde_json::to_string_pretty(&offered).unwrap(),
            serde_json::to_string_pretty(&expected).unwrap(),
            "the {role:?}'s memory tools"
        );
    }

    /// Each tool a model has been offered since the first version: the schemas stay as they were.
    #[test]
    fn the_tools_offered_to_models_are_unchanged() {
        check_offered(
            Role::Orchestrator,
            json!([
                {"name": "list_directives", "description": "List the directives in force (standing instructions from the orchestrator): id, author and the start of each.",
                 "parameters": {"type": "object", "properties": {"include_revoked": {"description": "also list revoked directives", "type": "boolean"}},
                                "required": [], "additionalProperties": false}},
                {"name": "read_directive", "description": "Read one directive in full.",
                 "parameters": {"type": "object", "properties": {"id": {"description": "the directive's id, e.g. d1", "type": "string"}},
                                "required": ["id"], "additionalProperties": false}},
                {"name": "publish_directive", "description": "Publish a directive: a standing instruction every agent reads. Returns its id.",
                 "parameters": {"type": "object", "properties": {"text": {"description": "the directive", "type": "string"}},
                                "required": ["text"], "additionalProperties": false}},
                {"name": "revoke_directive", "description": "Revoke a directive; it stays readable, marked revoked.",
                 "parameters": {"type": "object", "properties": {"id": {"description": "the directive's id", "type": "string"}, "reason": {"description": "why it is revoked", "type": "string"}},
                                "required": ["id"], "additionalProperties": false}},
                {"name": "list_notes", "description": "List the shared notes every agent can read and write: key, last author and the start of each.",
                 "parameters": {"type": "object", "properties": {},
                                "required": [], "additionalProperties": false}},
                {"name": "read_note", "description": "Read one shared note in full.",
                 "parameters": {"type": "object", "properties": {"key": {"description": "the note's key", "type": "string"}},
                                "required": ["key"], "additionalProperties": false}},
                {"name": "write_note", "description": "Write a shared note every agent can read. Writing an existing key replaces its text (you are recorded as the author).",
                 "parameters": {"type": "object", "properties": {"key": {"description": "the note's key: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-'", "type": "string"}, "text": {"description": "the note's text", "type": "string"}},
                                "required": ["key", "text"], "additionalProperties": false}},
                {"name": "list_notebook", "description": "List the entries of a specialist's private notebook.",
                 "parameters": {"type": "object", "properties": {"agent": {"description": "the specialist's name", "type": "string"}},
                                "required": ["agent"], "additionalProperties": false}},
                {"name": "read_notebook", "description": "Read one entry of a specialist's private notebook in full.",
                 "parameters": {"type": "object", "properties": {"agent": {"description": "the specialist's name", "type": "string"}, "entry": {"description": "the entry's number, from 1", "minimum": 1, "type": "integer"}},
                                "required": ["agent", "entry"], "additionalProperties": false}},
            ]),
        );
        check_offered(
            Role::Specialist,
            json!([
                {"name": "list_directives", "description": "List the directives in force (standing instructions from the orchestrator): id, author and the start of each.",
                 "parameters": {"type": "object", "properties": {"include_revoked": {"description": "also list revoked directives", "type": "boolean"}},
                                "required": [], "additionalProperties": false}},
                {"name": "read_directive", "description": "Read one directive in full.",
                 "parameters": {"type": "object", "properties": {"id": {"description": "the directive's id, e.g. d1", "type": "string"}},
                                "required": ["id"], "additionalProperties": false}},
                {"name": "list_notes", "description": "List the shared notes every agent can read and write: key, last author and the start of each.",
                 "parameters": {"type": "object", "properties": {},
                                "required": [], "additionalProperties": false}},
                {"name": "read_note", "description": "Read one shared note in full.",
                 "parameters": {"type": "object", "properties": {"key": {"description": "the note's key", "type": "string"}},
                                "required": ["key"], "additionalProperties": false}},
                {"name": "write_note", "description": "Write a shared note every agent can read. Writing an existing key replaces its text (you are recorded as the author).",
                 "parameters": {"type": "object", "properties": {"key": {"description": "the note's key: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-'", "type": "string"}, "text": {"description": "the note's text", "type": "string"}},
                                "required": ["key", "text"], "additionalProperties": false}},
                {"name": "list_notebook", "description": "List the entries of your private notebook (only you and the orchestrator read it).",
                 "parameters": {"type": "object", "properties": {},
                                "required": [], "additionalProperties": false}},
                {"name": "read_notebook", "description": "Read one entry of your private notebook in full.",
                 "parameters": {"type": "object", "properties": {"entry": {"description": "the entry's number, from 1", "minimum": 1, "type": "integer"}},
                                "required": ["entry"], "additionalProperties": false}},
                {"name": "append_notebook", "description": "Append an entry to your private notebook (append-only; only you and the orchestrator read it).",
                 "parameters": {"type": "object", "properties": {"text": {"description": "the entry", "type": "string"}},
                                "required": ["text"], "additionalProperties": false}},
            ]),
        );
    }

    /// A call's answer, or its error in the words the model is told.
    fn check_calls(cases: &[(&str, &str, Value, Result<&str, &str>)]) {
        let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
        let tools = MemoryTools::with_roles(
            log,
            [("lead", Role::Orchestrator), ("ann", Role::Specialist)]
                .map(|(name, role)| (AgentName::new(name).unwrap(), role)),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (caller, tool, arguments, expected) in cases {
            let caller = AgentName::new(*caller).unwrap();
            let answer = runtime.block_on(tools.call(&caller, tool, arguments.clone()));
            assert_eq!(
                answer.map_err(|e| e.to_string()),
                expected.map(str::to_owned).map_err(str::to_owned),
                "{caller} calling {tool} with {arguments}"
            );
        }
    }

    /// Arguments that do not fit a tool are refused in words that say which and why.
    #[test]
    fn arguments_that_do_not_fit_are_refused_with_the_reason() {
        check_calls(&[
            ("ann", "write_note", json!("text"), Err("invalid arguments for write_note: expected a JSON object, got \"text\"")),
            ("ann", "write_note", json!([1]), Err("invalid arguments for write_note: expected a JSON object, got [1]")),
            ("ann", "write_note", json!({"key":"k"}), Err("invalid arguments for write_note: missing argument \"text\"")),
            ("ann", "write_note", json!({"key":"k","text":null}), Err("invalid arguments for write_note: missing argument \"text\"")),
            ("ann", "write_note", json!({"key":5,"text":"t"}), Err("invalid arguments for write_note: argument \"key\" must be a string, got 5")),
            ("ann", "write_note", json!({"key":["k"],"text":"t"}), Err("invalid arguments for write_note: argument \"key\" must be a string, got [\"k\"]")),
            ("ann", "write_note", json!({"key":"k","text":"t","zzz":null}), Err("invalid arguments for write_note: unexpected argument \"zzz\"; arguments: key, text")),
            ("ann", "read_notebook", json!({"entry":0}), Err("invalid arguments for read_notebook: argument \"entry\" must be an integer from 1, got 0")),
            ("ann", "read_notebook", json!({"entry":-1}), Err("invalid arguments for read_notebook: argument \"entry\" must be an integer from 1, got -1")),
            ("ann", "read_notebook", json!({"entry":1.5}), Err("invalid arguments for read_notebook: argument \"entry\" must be an integer from 1, got 1.5")),
            ("ann", "read_notebook", json!({"entry":"1"}), Err("invalid arguments for read_notebook: argument \"entry\" must be an integer from 1, got \"1\"")),
            ("ann", "read_notebook", json!({"entry":null}), Err("invalid arguments for read_notebook: missing argument \"entry\"")),
            ("ann", "read_notebook", json!({}), Err("invalid arguments for read_notebook: missing argument \"entry\"")),
            ("ann", "read_notebook", json!({"entry":1}), Err("the notebook of ann has no entry 1 (it has 0)")),
            ("ann", "list_directives", json!({"include_revoked":"yes"}), Err("invalid arguments for list_directives: argument \"include_revoked\" must be true or false, got \"yes\"")),
            ("ann", "list_directives", json!({"include_revoked":1}), Err("invalid arguments for list_directives: argument \"include_revoked\" must be true or false, got 1")),
            ("ann", "list_directives", json!({"include_revoked":null}), Ok("no directives in force")),
            ("ann", "list_directives", json!({"include_revoked":true}), Ok("no directives in force")),
            ("ann", "read_directive", json!({"id":5}), Err("invalid arguments for read_directive: argument \"id\" must be a string, got 5")),
            ("ann", "read_directive", json!({"id":"d1"}), Err("no directive \"d1\"; directives: none")),
            ("ann", "list_notebook", json!({"agent":"ann"}), Err("invalid arguments for list_notebook: unexpected argument \"agent\"; arguments: none")),
            ("ann", "list_notebook", json!(null), Ok("the notebook of ann is empty")),
            ("ann", "list_notes", json!({"all":true}), Err("invalid arguments for list_notes: unexpected argument \"all\"; arguments: none")),
            ("lead", "revoke_directive", json!({"id":"d1","why":"x"}), Err("invalid arguments for revoke_directive: unexpected argument \"why\"; arguments: id, reason")),
            ("lead", "revoke_directive", json!({"reason":"x"}), Err("invalid arguments for revoke_directive: missing argument \"id\"")),
            ("lead", "revoke_directive", json!({"id":"d1","reason":3}), Err("invalid arguments for revoke_directive: argument \"reason\" must be a string, got 3")),
            ("lead", "revoke_directive", json!({"id":"d1","reason":null}), Err("no directive \"d1\"; directives: none")),
            ("lead", "publish_directive", json!({"text":true}), Err("invalid arguments for publish_directive: argument \"text\" must be a string, got true")),
            ("lead", "list_notebook", json!({}), Err("invalid arguments for list_notebook: missing argument \"agent\"")),
            ("lead", "list_notebook", json!({"agent":7}), Err("invalid arguments for list_notebook: argument \"agent\" must be a string, got 7")),
            ("lead", "read_notebook", json!({"agent":"ann"}), Err("invalid arguments for read_notebook: missing argument \"entry\"")),
            ("lead", "read_notebook", json!({"agent":"ann","entry":2}), Err("the notebook of ann has no entry 2 (it has 0)")),
            ("lead", "append_notebook", json!({"text":"t"}), Err("lead may not write to the notebook of lead: only a specialist writes, and only in its own notebook")),
        ]);
    }
}
