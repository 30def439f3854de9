//! Test hooks (`#[doc(hidden)]`, for legio's own tests): ways a test makes a race happen on
//! purpose. [`hold_append`] stops the next append to a conversation after this node's
//! ownership check passed and before the log publishes it, so that a test can make the node
//! stale meanwhile (another writer appends) and see what the cluster does with the append.
//! With no hold set, an append pays one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use legio_core::ConversationKey;
use tokio::sync::watch;

/// Whether any hold is set (the fast path of [`before_publish`]).
static ANY: AtomicBool = AtomicBool::new(false);

/// The holds set, by conversation.
fn holds() -> &'static Mutex<HashMap<String, Hold>> {
    static HOLDS: OnceLock<Mutex<HashMap<String, Hold>>> = OnceLock::new();
    HOLDS.get_or_init(Mutex::default)
}

#[derive(Debug)]
struct Hold {
    reached: watch::Sender<bool>,
    released: watch::Receiver<bool>,
}

/// A hold on the next append to one conversation, from [`hold_append`]. Dropped, it releases
/// the append (and a hold no append reached is removed).
#[derive(Debug)]
pub struct AppendHold {
    conversation: String,
    reached: watch::Receiver<bool>,
    release: watch::Sender<bool>,
}

/// Holds the next append to `conversation` (of any process-wide runtime) between its ownership
/// check and its publish, until [`AppendHold::release`].
pub fn hold_append(conversation: &str) -> AppendHold {
    let (reached_tx, reached) = watch::channel(false);
    let (release, released) = watch::channel(false);
    let hold = Hold {
        reached: reached_tx,
        released,
    };
    holds()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(conversation.to_owned(), hold);
    ANY.store(true, Ordering::SeqCst);
    AppendHold {
        conversation: conversation.to_owned(),
        reached,
        release,
    }
}

impl AppendHold {
    /// Waits until an append to the conversation passed its ownership check and is held.
    pub async fn reached(&mut self) {
        let _ = self.reached.wait_for(|reached| *reached).await;
    }

    /// Lets the held append go on to the log.
    pub fn release(self) {}
}

impl Drop for AppendHold {
    fn drop(&mut self) {
        let _ = self.release.send(true);
        holds()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.conversation);
    }
}

/// Called by every append after its ownership check: waits while a hold is on `conversation`
/// (once: the hold is taken by the first append that reaches it).
pub(crate) async fn before_publish(conversation: &ConversationKey) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let hold = holds()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(conversation.as_str());
    if let Some(mut hold) = hold {
        let _ = hold.reached.send(true);
        let _ = hold.released.wait_for(|released| *released).await;
    }
}
