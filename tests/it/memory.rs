//! Property: over random sequences of memory tool calls by random agents (an orchestrator and three
//! specialists), against a simple model of the permissions, no agent reads or changes what its
//! permissions forbid and every permitted write is visible to the permitted readers.
//!
//! Checked after every call: the call succeeded exactly when the model says it may; no output
//! (result or error) given to a specialist contains another specialist's notebook entry; the
//! projection equals the model (so a refused call changed nothing and notebooks only grew); what a
//! read returned holds what the model says the caller may see, and leaves out what it must not
//! show: revoked directives in the default list, earlier revisions of a note, other directives,
//! notes and notebook entries than the one read. Every text ends in `-end`, so no text is a
//! substring of another (`directive-1` used to match inside `directive-12`). At the end, a fresh
//! fold of the log equals the executor's cached projection.

use std::collections::BTreeMap;
use std::sync::Arc;

use legio_core::{AgentName, MemoryError, MemoryState};
use legio_runtime::{read_memory, MemoryTools, Role, ToolError};
use legio_store::{EventLog, MemoryLog};
use proptest::prelude::*;
use serde_json::{json, Value};

/// `lead` is the orchestrator; the others are specialists.
const AGENTS: [&str; 4] = ["lead", "ann", "bob", "cat"];
const KEYS: [&str; 3] = ["plan", "api", "risks"];

#[derive(Clone, Debug)]
enum Op {
    Publish,
    Revoke(usize),
    ListDirectives(bool),
    ReadDirective(usize),
    WriteNote(usize),
    ListNotes,
    ReadNote(usize),
    /// The notebook of `AGENTS[i]`; a specialist passes `agent` only when the flag is set.
    ListNotebook(usize, bool),
    ReadNotebook(usize, u64, bool),
    Append,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Publish),
        1 => (1..5usize).prop_map(Op::Revoke),
        1 => any::<bool>().prop_map(Op::ListDirectives),
        1 => (1..5usize).prop_map(Op::ReadDirective),
        2 => (0..KEYS.len()).prop_map(Op::WriteNote),
        1 => Just(Op::ListNotes),
        1 => (0..KEYS.len()).prop_map(Op::ReadNote),
        2 => (0..AGENTS.len(), any::<bool>()).prop_map(|(a, f)| Op::ListNotebook(a, f)),
        2 => (0..AGENTS.len(), 1..4u64, any::<bool>()).prop_map(|(a, n, f)| Op::ReadNotebook(a, n, f)),
        3 => Just(Op::Append),
    ]
}

/// The model: what each store holds.
#[derive(Default, Debug)]
struct Model {
    /// (id, text, revoked)
    directives: Vec<(String, String, bool)>,
    /// key -> (text, author, revisions)
    notes: BTreeMap<String, (String, String, u64)>,
    notebooks: BTreeMap<String, Vec<String>>,
    /// Texts of notes rewritten since (no read may show them).
    old_notes: Vec<String>,
}

fn role(name: &str) -> (AgentName, Role) {
    let role = if name == AGENTS[0] {
        Role::Orchestrator
    } else {
        Role::Specialist
    };
    (AgentName::new(name).unwrap(), role)
}

/// What a successful call must show, and what the model becomes.
enum Expect {
    /// The call must fail.
    Refused,
    /// The call must succeed and its output contain each of `shown` and none of `hidden`.
    Shows {
        shown: Vec<String>,
        hidden: Vec<String>,
    },
}

/// A successful call showing `shown`.
fn shows(shown: Vec<String>) -> Expect {
    Expect::Shows {
        shown,
        hidden: Vec::new(),
    }
}

fn expect(model: &mut Model, caller: usize, op: &Op, n: usize) -> (String, Value, Expect) {
    let me = AGENTS[caller];
    let orchestrator = caller == 0;
    let specialist = |i: usize| i != 0;
    match op {
        Op::Publish => {
            let text = format!("directive-{n}-end");
            let args = json!({ "text": text });
            if !orchestrator {
                return ("publish_directive".into(), args, Expect::Refused);
            }
            let id = format!("d{}", model.directives.len() + 1);
            model.directives.push((id.clone(), text, false));
            ("publish_directive".into(), args, shows(vec![id]))
        }
        Op::Revoke(i) => {
            let id = format!("d{i}");
            let args = json!({ "id": id, "reason": format!("reason-{n}") });
            let found = model.directives.iter_mut().find(|d| d.0 == id);
            match found {
                Some(d) if orchestrator && !d.2 => {
                    d.2 = true;
                    ("revoke_directive".into(), args, shows(vec![id]))
                }
                _ => ("revoke_directive".into(), args, Expect::Refused),
            }
        }
        Op::ListDirectives(all) => {
            let (shown, hidden) = model
                .directives
                .iter()
                .partition::<Vec<_>, _>(|d| *all || !d.2);
            let texts = |list: Vec<&(String, String, bool)>| {
                list.into_iter().map(|d| d.1.clone()).collect()
            };
            (
                "list_directives".into(),
                json!({ "include_revoked": all }),
                Expect::Shows {
                    shown: texts(shown),
                    hidden: texts(hidden),
                },
            )
        }
        Op::ReadDirective(i) => {
            let id = format!("d{i}");
            let expect = match model.directives.iter().find(|d| d.0 == id) {
                Some(d) => Expect::Shows {
                    shown: vec![d.1.clone()],
                    hidden: model
                        .directives
                        .iter()
                        .filter(|o| o.0 != id)
                        .map(|o| o.1.clone())
                        .collect(),
                },
                None => Expect::Refused,
            };
            ("read_directive".into(), json!({ "id": id }), expect)
        }
        Op::WriteNote(k) => {
            let text = format!("note-{n}-end");
            let note =
                model
                    .notes
                    .entry(KEYS[*k].to_owned())
                    .or_insert((String::new(), String::new(), 0));
            let old = std::mem::replace(&mut note.0, text.clone());
            note.1 = me.to_owned();
            note.2 += 1;
            let revision = note.2;
            if !old.is_empty() {
                model.old_notes.push(old);
            }
            (
                "write_note".into(),
                json!({ "key": KEYS[*k], "text": text }),
                shows(vec![format!("revision {revision}")]),
            )
        }
        Op::ListNotes => {
            let shown = model.notes.values().map(|n| n.0.clone()).collect();
            let hidden = model.old_notes.clone();
            (
                "list_notes".into(),
                json!({}),
                Expect::Shows { shown, hidden },
            )
        }
        Op::ReadNote(k) => {
            let expect = match model.notes.get(KEYS[*k]) {
                Some((text, author, _)) => Expect::Shows {
                    shown: vec![text.clone(), author.clone()],
                    hidden: (model.notes.values().map(|n| n.0.clone()))
                        .filter(|t| t != text)
                        .chain(model.old_notes.iter().cloned())
                        .collect(),
                },
                None => Expect::Refused,
            };
            ("read_note".into(), json!({ "key": KEYS[*k] }), expect)
        }
        Op::ListNotebook(target, name_it) | Op::ReadNotebook(target, _, name_it) => {
            let entry = match op {
                Op::ReadNotebook(_, entry, _) => Some(*entry),
                _ => None,
            };
            let tool = if entry.is_some() {
                "read_notebook"
            } else {
                "list_notebook"
            };
            // The orchestrator must name a specialist; a specialist may name nobody.
            let (args, owner) = if orchestrator {
                (
                    json!({ "agent": AGENTS[*target] }),
                    Some(*target).filter(|t| specialist(*t)),
                )
            } else if *name_it {
                (json!({ "agent": AGENTS[*target] }), None)
            } else {
                (json!({}), Some(caller))
            };
            let mut args = args;
            if let Some(entry) = entry {
                args["entry"] = json!(entry);
            }
            let Some(owner) = owner else {
                return (tool.into(), args, Expect::Refused);
            };
            let entries = model
                .notebooks
                .get(AGENTS[owner])
                .cloned()
                .unwrap_or_default();
            let expect = match entry {
                None => shows(entries),
                Some(e) => match entries.get(e as usize - 1) {
                    Some(text) => Expect::Shows {
                        shown: vec![text.clone()],
                        hidden: entries.iter().filter(|t| *t != text).cloned().collect(),
                    },
                    None => Expect::Refused,
                },
            };
            (tool.into(), args, expect)
        }
        Op::Append => {
            let text = format!("nb-{me}-{n}-end");
            let args = json!({ "text": text });
            if orchestrator {
                return ("append_notebook".into(), args, Expect::Refused);
            }
            model.notebooks.entry(me.to_owned()).or_default().push(text);
            ("append_notebook".into(), args, shows(vec![]))
        }
    }
}

/// The projection as the model's shapes.
fn observed(state: &MemoryState) -> Model {
    Model {
        directives: state
            .directives
            .iter()
            .map(|d| (d.id.clone(), d.text.clone(), d.revoked.is_some()))
            .collect(),
        notes: state
            .notes
            .values()
            .map(|n| {
                (
                    n.key.clone(),
                    (n.text.clone(), n.author.to_string(), n.revisions),
                )
            })
            .collect(),
        notebooks: state
            .notebooks
            .iter()
            .map(|(o, e)| (o.to_string(), e.iter().map(|e| e.text.clone()).collect()))
            .collect(),
        old_notes: Vec::new(),
    }
}

fn same(model: &Model, state: &MemoryState) -> bool {
    let seen = observed(state);
    seen.directives == model.directives
        && seen.notes == model.notes
        && seen.notebooks == model.notebooks
}

async fn run(calls: Vec<(usize, Op)>) {
    let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
    let tools = MemoryTools::with_roles(Arc::clone(&log), AGENTS.map(role));
    let mut model = Model::default();
    for (n, (caller, op)) in calls.into_iter().enumerate() {
        let name = AgentName::new(AGENTS[caller]).unwrap();
        let (tool, args, expect) = expect(&mut model, caller, &op, n);
        let result = tools.call(&name, &tool, args.clone()).await;
        let output = match &result {
            Ok(text) => text.clone(),
            Err(e) => e.to_string(),
        };
        // No specialist ever sees another's notebook entry, in a result or an error.
        if caller != 0 {
            for other in AGENTS.iter().skip(1).filter(|o| **o != AGENTS[caller]) {
                assert!(
                    !output.contains(&format!("nb-{other}-")),
                    "{} saw {other}'s notebook via {tool} {args}: {output}",
                    AGENTS[caller]
                );
            }
        }
        match expect {
            Expect::Refused => {
                let error = result.expect_err(&format!(
                    "{} {tool} {args} should be refused, got {output:?}",
                    AGENTS[caller]
                ));
                // Forbidden calls are refused for the right reason.
                if tool == "publish_directive" && caller != 0 {
                    assert!(
                        matches!(error, ToolError::Refused(MemoryError::Forbidden { .. })),
                        "{error}"
                    );
                }
                if tool == "append_notebook" {
                    assert!(
                        matches!(error, ToolError::Refused(MemoryError::Forbidden { .. })),
                        "{error}"
                    );
                }
            }
            Expect::Shows { shown, hidden } => {
                let text = result.unwrap_or_else(|e| {
                    panic!("{} {tool} {args} should succeed: {e}", AGENTS[caller])
                });
                for part in shown {
                    assert!(
                        text.contains(&part),
                        "{} {tool} {args}: {part:?} missing from {text:?}",
                        AGENTS[caller]
                    );
                }
                for part in hidden {
                    assert!(
                        !text.contains(&part),
                        "{} {tool} {args}: {part:?} must not be in {text:?}",
                        AGENTS[caller]
                    );
                }
            }
        }
        let snapshot = tools.snapshot().await.unwrap();
        assert!(
            same(&model, &snapshot),
            "after {} {tool} {args}: model {model:?}, projection {:?}",
            AGENTS[caller],
            observed(&snapshot)
        );
    }
    let fresh = tokio::task::spawn_blocking(move || read_memory(log.as_ref()).unwrap())
        .await
        .unwrap();
    assert_eq!(fresh, tools.snapshot().await.unwrap());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_agent_reads_or_changes_what_its_permissions_forbid(
        calls in proptest::collection::vec((0..AGENTS.len(), op()), 1..60)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(calls));
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn a_specialists_notebook_tools_name_no_agent() {
    {
        let tools = MemoryTools::tools_for_role(Role::Specialist);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert!(!names.contains(&"publish_directive") && !names.contains(&"revoke_directive"));
        for tool in tools.iter().filter(|t| t.name.contains("notebook")) {
            let properties = tool.parameters["properties"].as_object().unwrap();
            assert!(
                !properties.contains_key("agent"),
                "{} takes an agent: {}",
                tool.name,
                tool.parameters
            );
            assert_eq!(tool.parameters["additionalProperties"], json!(false));
        }
    }
    let lead = MemoryTools::tools_for_role(Role::Orchestrator);
    let read = lead.iter().find(|t| t.name == "read_notebook").unwrap();
    assert_eq!(read.parameters["required"], json!(["agent", "entry"]));
    assert!(!lead.iter().any(|t| t.name == "append_notebook"));
}

#[test]
fn bad_calls_are_error_values() {
    block_on(async {
        let log: Arc<dyn EventLog> = Arc::new(MemoryLog::new());
        let tools = MemoryTools::with_roles(log, ["lead", "ann"].map(role));
        let ann = AgentName::new("ann").unwrap();
        let lead = AgentName::new("lead").unwrap();
        let err = |r: Result<String, ToolError>| r.unwrap_err().to_string();
        assert_eq!(
            err(tools
                .call(&ann, "publish_directive", json!({"text": "x"}))
                .await),
            "ann may not publish directives: only the orchestrator publishes directives"
        );
        assert!(
            err(tools.call(&ann, "fly", json!({})).await).starts_with("no tool \"fly\" for ann")
        );
        assert!(err(tools.call(&ann, "write_note", json!("text")).await)
            .contains("expected a JSON object"));
        assert!(
            err(tools.call(&ann, "write_note", json!({"key": "k"})).await)
                .contains("missing argument \"text\"")
        );
        assert!(
            err(tools.call(&ann, "read_notebook", json!({"entry": 0})).await)
                .contains("must be an integer from 1")
        );
        assert!(err(tools
            .call(&ann, "list_notebook", json!({"agent": "ann"}))
            .await)
        .contains("unexpected argument \"agent\""));
        assert!(err(tools
            .call(&lead, "list_notebook", json!({"agent": "lead"}))
            .await)
        .contains("\"lead\" has no notebook; specialists: ann"));
        let zed = AgentName::new("zed").unwrap();
        assert!(err(tools.call(&zed, "list_notes", json!({})).await).contains("not an agent"));
        assert_eq!(
            tools.call(&ann, "list_notes", Value::Null).await.unwrap(),
            "no notes"
        );
        assert!(tools.snapshot().await.unwrap() == MemoryState::new());
    });
}
