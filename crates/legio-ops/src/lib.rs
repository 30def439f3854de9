//! legio-ops: what needs the log and the configuration but no actor: preparing and previewing a
//! turn (the same decision and plan the runtime's turn uses), and the operator views (inspect
//! tables, the tools table, the context report, the memory table) the offline CLI and the server
//! render.

mod approvals_view;
mod error;
mod memory_view;
mod operator;
mod prepare;
mod roster_view;
mod tools_table;
mod window;
mod window_report;
mod window_tally;

pub use approvals_view::{approvals_table, read_approvals, ConversationApprovals};
pub use error::OpsError;
pub use memory_view::{fold_memory, memory_table, one_line, read_memory, short_time};
pub use operator::{
    context_report, inspect, latest_declaration, require_conversation, ContextReport, InspectKind,
    ReportItem, Table,
};
pub use prepare::{
    compaction_job, prepare_turn, preview_turn, CompactionJob, PreparedTurn, TurnInputs,
    TurnPreview, MAX_DELTA,
};
pub use roster_view::{agents_with_roster, NO_SESSION};
pub use tools_table::{declared_tool_rows, tool_row, tools_header, HOST_TURNS};
pub use window::{
    check_window, fit_preview, preview_calibration, provider_budget, seed_calibration,
    status_block, tool_tokens, Fixed,
};
pub use window_report::WindowReport;
pub use window_tally::{window_tokens, WindowTally};
