//! What the window check did to a preview ([`WindowReport`]): vocabulary shared by the preview
//! (prepare.rs), the check (window.rs) and the operator's context report (operator.rs).

use serde::{Deserialize, Serialize};

/// What the window check did to a preview, as the operator reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowReport {
    /// Tokens of the request as it would be sent: system prompt, status block, tools and the
    /// plan (exact with the model's vocabulary, else the calibrated estimate).
    pub request_tokens: u64,
    /// What a request to the model may hold: its window less its output limit.
    pub limit: u64,
    /// How it was counted: `exact (<vocabulary>)` or `calibrated (ratio R from N turns)`.
    pub counted: String,
    /// Older messages left out to fit.
    pub left_out: usize,
    /// Whether the summary was left out too.
    pub summary_left_out: bool,
    /// Why the request could not be sent at all (the turn would fail with this error).
    pub error: Option<String>,
}
