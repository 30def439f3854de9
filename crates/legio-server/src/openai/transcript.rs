//! The check of the earlier messages a door request carries: they must be the end of the
//! conversation as the user sees it in the log (its `user` messages and the agents' text replies
//! to the user, in log order), compared by role and exact text. Tool traffic (assistant messages
//! with `tool_calls`, `tool` messages) and `system` / `developer` messages are not compared: the
//! log holds the tool traffic itself, and an agent's instructions are its configured prompt.
//! Nothing of it is stored again.

use std::sync::Arc;

use legio_core::{
    Audience, ConversationKey, IdempotencyKey, Message, MessageId, Part, Participant, Seq,
};

use crate::error::ApiError;
use crate::state::AppState;
use legio_runtime::ErrorCode;

/// An earlier message of a request: its index in the request's list, its role and its text.
pub(crate) struct Earlier {
    pub(crate) index: usize,
    pub(crate) role: &'static str,
    pub(crate) text: String,
}

/// How many events one read takes.
const CHUNK: usize = 10_000;

/// The user's transcript of the conversation: (seq, role, text).
fn said(message: &Message) -> Option<(&'static str, String)> {
    let text_only = message.parts.iter().all(|p| matches!(p, Part::Text { .. }));
    match &message.sender {
        Participant::User if text_only => Some(("user", message.text_content())),
        Participant::Agent(_) if text_only && to_user(&message.audience) => {
            Some(("assistant", message.text_content()))
        }
        _ => None,
    }
}

fn to_user(audience: &Audience) -> bool {
    match audience {
        Audience::All => true,
        Audience::Only(list) => list.contains(&Participant::User),
    }
}

/// The transcript up to the end, or up to the message `stop_at` (not included).
async fn transcript(
    state: &AppState,
    key: &ConversationKey,
    stop_at: Option<MessageId>,
) -> Result<Vec<(Seq, &'static str, String)>, ApiError> {
    // On a cluster node that does not own the conversation: what its owner appended first.
    state.runtime.catch_up(key).await?;
    let log = Arc::clone(state.runtime.log());
    let key = key.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut after = Seq::ZERO;
        loop {
            let chunk = log.conversation_events(&key, after, CHUNK)?;
            let Some(last) = chunk.last().map(|r| r.seq) else {
                return Ok(out);
            };
            for record in &chunk {
                let message = record.event.as_message();
                if message.is_some_and(|m| Some(m.id) == stop_at) {
                    return Ok(out);
                }
                if let Some((role, text)) = message.and_then(said) {
                    out.push((record.seq, role, text));
                }
            }
            after = last;
        }
    })
    .await
    .map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("reading the history failed: {e}"),
        )
    })?
    .map_err(|e: legio_store::StoreError| legio_runtime::RuntimeError::from(e).into())
}

fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(60).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// Checks `earlier` against the end of the conversation's transcript; for a retry with an
/// idempotency key, the transcript before the message its first attempt stored.
pub(crate) async fn check(
    state: &AppState,
    key: &ConversationKey,
    earlier: &[Earlier],
    idempotency: Option<&IdempotencyKey>,
) -> Result<(), ApiError> {
    if earlier.is_empty() {
        return Ok(());
    }
    let stop_at = idempotency.map(|k| MessageId::keyed(key, k));
    let log = transcript(state, key, stop_at).await?;
    let mismatch = |message: String| {
        ApiError::new(
            ErrorCode::HistoryMismatch,
            format!("{message}; send only the new message, or the earlier ones exactly as the conversation holds them"),
        )
        .with_param("messages")
    };
    if earlier.len() > log.len() {
        return Err(mismatch(format!(
            "the request carries {} earlier user and assistant messages but conversation {} holds {}",
            earlier.len(),
            key.as_str(),
            log.len()
        )));
    }
    let start = log.len() - earlier.len();
    for (mine, (seq, role, text)) in earlier.iter().zip(&log[start..]) {
        if mine.role != *role || mine.text != *text {
            return Err(mismatch(format!(
                "messages[{}] ({} {:?}) differs from the log at seq {seq} ({role} {:?})",
                mine.index,
                mine.role,
                cut(&mine.text),
                cut(text)
            )));
        }
    }
    Ok(())
}
