//! The memory tools as a model is offered and calls them: one argument type per tool, whose doc
//! comment is the tool's description and whose fields' doc comments are the arguments'
//! (`tool_arguments`), and [`Call`], a call whose arguments were read into its tool's type.
//!
//! A specialist's notebook tools (`ListOwnNotebook`, `ReadOwnNotebook`) have no argument naming
//! an agent: they are bound to the caller. The orchestrator's (`ListNotebook`, `ReadNotebook`,
//! under the same names) name the specialist and only read.

use std::num::NonZeroU64;

use legio_config::Role;
use legio_llm::ToolDef as ToolSpec;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::tools::arguments::{offered, read};

/// List the directives in force (standing instructions from the orchestrator): id, author and the start of each.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListDirectives {
    /// also list revoked directives
    pub include_revoked: Option<bool>,
}

/// Read one directive in full.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadDirective {
    /// the directive's id, e.g. d1
    pub id: String,
}

/// Publish a directive: a standing instruction every agent reads. Returns its id.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishDirective {
    /// the directive
    pub text: String,
}

/// Revoke a directive; it stays readable, marked revoked.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RevokeDirective {
    /// the directive's id
    pub id: String,
    /// why it is revoked
    pub reason: Option<String>,
}

/// List the shared notes every agent can read and write: key, last author and the start of each.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListNotes {}

/// Read one shared note in full.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadNote {
    /// the note's key
    pub key: String,
}

/// Write a shared note every agent can read. Writing an existing key replaces its text (you are recorded as the author).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteNote {
    /// the note's key: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' or '-'
    pub key: String,
    /// the note's text
    pub text: String,
}

/// List the entries of your private notebook (only you and the orchestrator read it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListOwnNotebook {}

/// Read one entry of your private notebook in full.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadOwnNotebook {
    /// the entry's number, from 1
    pub entry: NonZeroU64,
}

/// Append an entry to your private notebook (append-only; only you and the orchestrator read it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendNotebook {
    /// the entry
    pub text: String,
}

/// List the entries of a specialist's private notebook.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListNotebook {
    /// the specialist's name
    pub agent: String,
}

/// Read one entry of a specialist's private notebook in full.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadNotebook {
    /// the specialist's name
    pub agent: String,
    /// the entry's number, from 1
    pub entry: NonZeroU64,
}

/// A memory tool call, its arguments read into its tool's type.
pub(crate) enum Call {
    ListDirectives(ListDirectives),
    ReadDirective(ReadDirective),
    PublishDirective(PublishDirective),
    RevokeDirective(RevokeDirective),
    ListNotes(ListNotes),
    ReadNote(ReadNote),
    WriteNote(WriteNote),
    ListOwnNotebook(ListOwnNotebook),
    ReadOwnNotebook(ReadOwnNotebook),
    AppendNotebook(AppendNotebook),
    ListNotebook(ListNotebook),
    ReadNotebook(ReadNotebook),
}

/// One tool: its name, what the model is offered and how a call's arguments are read (both from
/// its argument type).
pub(crate) struct ToolDef {
    pub name: &'static str,
    offered: fn() -> (String, Value),
    read: fn(Value) -> Result<Call, String>,
}

impl ToolDef {
    /// The tool as it is described to a model.
    pub fn spec(&self) -> ToolSpec {
        let (description, parameters) = (self.offered)();
        ToolSpec {
            name: self.name.to_owned(),
            description,
            parameters,
        }
    }

    /// A call's `arguments` read into the tool's type, or why they do not fit.
    pub fn read(&self, arguments: Value) -> Result<Call, String> {
        (self.read)(arguments)
    }
}

/// The tool `name` whose arguments are the type `$Args`, a call of it `Call::$Args`.
macro_rules! tool {
    ($name:literal, $Args:ident) => {
        ToolDef {
            name: $name,
            offered: offered::<$Args>,
            read: |arguments| read(arguments).map(Call::$Args),
        }
    };
}

const LIST_DIRECTIVES: ToolDef = tool!("list_directives", ListDirectives);
const READ_DIRECTIVE: ToolDef = tool!("read_directive", ReadDirective);
const PUBLISH_DIRECTIVE: ToolDef = tool!("publish_directive", PublishDirective);
const REVOKE_DIRECTIVE: ToolDef = tool!("revoke_directive", RevokeDirective);
const LIST_NOTES: ToolDef = tool!("list_notes", ListNotes);
const READ_NOTE: ToolDef = tool!("read_note", ReadNote);
const WRITE_NOTE: ToolDef = tool!("write_note", WriteNote);
const LIST_OWN_NOTEBOOK: ToolDef = tool!("list_notebook", ListOwnNotebook);
const READ_OWN_NOTEBOOK: ToolDef = tool!("read_notebook", ReadOwnNotebook);
const APPEND_NOTEBOOK: ToolDef = tool!("append_notebook", AppendNotebook);
const LIST_NOTEBOOK: ToolDef = tool!("list_notebook", ListNotebook);
const READ_NOTEBOOK: ToolDef = tool!("read_notebook", ReadNotebook);

/// The tools of a role, in the order they are described.
pub(crate) fn definitions(role: Role) -> &'static [ToolDef] {
    match role {
        Role::Orchestrator => &[
            LIST_DIRECTIVES,
            READ_DIRECTIVE,
            PUBLISH_DIRECTIVE,
            REVOKE_DIRECTIVE,
            LIST_NOTES,
            READ_NOTE,
            WRITE_NOTE,
            LIST_NOTEBOOK,
            READ_NOTEBOOK,
        ],
        Role::Specialist => &[
            LIST_DIRECTIVES,
            READ_DIRECTIVE,
            LIST_NOTES,
            READ_NOTE,
            WRITE_NOTE,
            LIST_OWN_NOTEBOOK,
            READ_OWN_NOTEBOOK,
            APPEND_NOTEBOOK,
        ],
    }
}
