//! The memory stores as operators see them: the projection folded from the log's `legio:memory`
//! conversation, and one table of every directive, note and notebook entry. Reads only; blocks.

use legio_core::{ConversationKey, MemoryState, Timestamp};
use legio_store::{EventLog, StoreError};

use crate::operator::Table;

/// How many memory events a catch-up reads from the log at a time.
const CHUNK: usize = 10_000;
/// How many characters of a text a listing shows.
const LIST_CUT: usize = 100;

/// `text` on one line, cut to a listing's width with an ellipsis.
pub fn one_line(text: &str) -> String {
    let flat = text.replace('\n', " ");
    if flat.chars().count() <= LIST_CUT {
        flat
    } else {
        let head: String = flat.chars().take(LIST_CUT - 1).collect();
        format!("{head}…")
    }
}

/// `at` to the second, as a listing shows it (`2026-01-01T12:00:00Z`).
pub fn short_time(at: Timestamp) -> String {
    let text = at.to_rfc3339();
    text.get(..19).map_or(text.clone(), |t| format!("{t}Z"))
}

/// Folds every memory event of `log` after `state.last_seq` into `state`. Blocks (log reads).
pub fn fold_memory(log: &dyn EventLog, state: &mut MemoryState) -> Result<(), StoreError> {
    loop {
        let chunk = log.conversation_events(ConversationKey::memory(), state.last_seq, CHUNK)?;
        for record in &chunk {
            state.apply(record.seq, &record.event);
        }
        if chunk.len() < CHUNK {
            return Ok(());
        }
    }
}

/// The memory stores as they stand in `log`: the operator's view (everything). Blocks.
pub fn read_memory(log: &dyn EventLog) -> Result<MemoryState, StoreError> {
    let mut state = MemoryState::new();
    fold_memory(log, &mut state)?;
    Ok(state)
}

/// The memory stores as one table for operators: one row per directive, note and notebook entry.
pub fn memory_table(state: &MemoryState) -> Table {
    let mut rows = Vec::new();
    for d in &state.directives {
        let status = match &d.revoked {
            Some(r) => format!(
                "revoked by {}{}",
                r.by,
                r.reason
                    .as_deref()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            ),
            None => "in force".to_owned(),
        };
        rows.push(vec![
            "directive".into(),
            d.id.clone(),
            d.by.to_string(),
            short_time(d.at),
            status,
            one_line(&d.text),
        ]);
    }
    for n in state.notes.values() {
        rows.push(vec![
            "note".into(),
            n.key.clone(),
            n.author.to_string(),
            short_time(n.at),
            format!("revision {} (created by {})", n.revisions, n.created_by),
            one_line(&n.text),
        ]);
    }
    for (owner, entries) in &state.notebooks {
        for e in entries {
            rows.push(vec![
                "notebook".into(),
                format!("{owner}#{}", e.number),
                owner.to_string(),
                short_time(e.at),
                "-".into(),
                one_line(&e.text),
            ]);
        }
    }
    Table {
        header: ["store", "id", "by", "at", "state", "text"]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        rows,
    }
}
