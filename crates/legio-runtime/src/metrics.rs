//! The runtime's metrics, through the `metrics` facade.

/// Turns, labelled by `agent` and `outcome` (ok, error, timeout, crashed, failed_agent).
pub const TURNS: &str = "legio_turns_total";
/// Counter: heartbeats run (host, operator or schedule), labels `agent` and `outcome` (`ok`,
/// `failed`).
pub const HEARTBEATS: &str = "legio_heartbeats_total";
/// Turn latency in seconds (histogram), labelled by `agent`.
pub const TURN_LATENCY: &str = "legio_turn_latency_seconds";
/// Estimated tokens sent, labelled by `mode` (full, bootstrap, delta).
pub const TOKENS_SENT: &str = "legio_context_tokens_sent_total";
/// Estimated tokens not sent thanks to delta delivery (the window minus the delta).
pub const TOKENS_AVOIDED: &str = "legio_context_tokens_avoided_total";
/// Input tokens the providers reported (fresh, read from and written to their caches: every
/// call's context size), labelled by `agent`. Counted when a turn's step completes.
pub const INPUT_TOKENS: &str = "legio_input_tokens_total";
/// Sessions opened, labelled by `reason`.
pub const SESSIONS_OPENED: &str = "legio_sessions_opened_total";
/// Sessions suspended, labelled by `reason`.
pub const SESSIONS_SUSPENDED: &str = "legio_sessions_suspended_total";
/// Sessions closed, labelled by `reason`.
pub const SESSIONS_CLOSED: &str = "legio_sessions_closed_total";
/// Agent actor restarts.
pub const RESTARTS: &str = "legio_agent_restarts_total";
/// Agents marked failed.
pub const FAILED_AGENTS: &str = "legio_agents_failed_total";
/// Live agent actors (gauge).
pub const LIVE_ACTORS: &str = "legio_live_actors";
/// Actors stopped by the idle reaper.
pub const REAPED: &str = "legio_reaped_actors_total";

/// Compactions, labelled by `agent` and `outcome` (ok, failed, empty): a failed or empty one
/// keeps the uncompacted context.
pub const COMPACTIONS: &str = "legio_compactions_total";

/// Tool calls that paused their turn for a person's answer (`runtime.approval`).
pub const APPROVALS_REQUESTED: &str = "legio_approvals_requested_total";
/// Answers to approvals, labelled by `decision` (approved, denied, timed_out).
pub const APPROVALS_ANSWERED: &str = "legio_approvals_answered_total";
/// Tool calls run in agent loops, labelled by `tool` and `outcome` (ok, error).
pub const TOOL_CALLS: &str = "legio_tool_calls_total";
/// Requests whose oldest messages were left out to fit the model's window, by agent.
pub const CONTEXT_LEFT_OUT: &str = "legio_context_left_out_total";

/// Conversation leases taken by this node (on a cluster): new ones, and its own taken back
/// after a restart within the TTL.
pub const LEASES_ACQUIRED: &str = "legio_cluster_leases_acquired_total";
/// Conversations this node stood down from, labelled by `why` (lost, unrenewed, fenced).
pub const LEASES_LOST: &str = "legio_cluster_leases_lost_total";
/// Leases of idle conversations (actors reaped) this node gave up.
pub const LEASES_RELEASED: &str = "legio_cluster_leases_released_total";
/// Conversation leases this node owns now (gauge).
pub const LEASES_HELD: &str = "legio_cluster_leases_held";
/// Conversations this node keeps a copy of because it read them without owning them (gauge):
/// dropped once unread for the idle timeout.
pub const READ_COPIES: &str = "legio_cluster_read_copies";
/// Seconds a lease renewal took (histogram).
pub const LEASE_RENEW_LATENCY: &str = "legio_cluster_lease_renew_seconds";
/// Posts sent to the owning node, labelled by `outcome` (ok, error).
pub const FORWARDED_POSTS: &str = "legio_cluster_forwarded_posts_total";
/// Posts this node served for another node.
pub const SERVED_POSTS: &str = "legio_cluster_served_posts_total";

/// Explicit buckets for [`TURN_LATENCY`], in seconds.
pub const TURN_LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Registers descriptions of the runtime's metrics.
pub fn describe() {
    metrics::describe_counter!(TURNS, "Agent turns by agent and outcome");
    metrics::describe_counter!(HEARTBEATS, "Heartbeats run, by agent and outcome");
    metrics::describe_histogram!(TURN_LATENCY, metrics::Unit::Seconds, "Agent turn latency");
    metrics::describe_counter!(
        TOKENS_SENT,
        "Estimated context tokens sent, by delivery mode"
    );
    metrics::describe_counter!(
        TOKENS_AVOIDED,
        "Estimated tokens not re-sent thanks to delta delivery"
    );
    metrics::describe_counter!(
        INPUT_TOKENS,
        "Input tokens reported by providers (fresh, cache read and cache written), by agent"
    );
    metrics::describe_counter!(SESSIONS_OPENED, "Sessions opened, by reason");
    metrics::describe_counter!(SESSIONS_SUSPENDED, "Sessions suspended, by reason");
    metrics::describe_counter!(SESSIONS_CLOSED, "Sessions closed, by reason");
    metrics::describe_counter!(RESTARTS, "Agent actor restarts");
    metrics::describe_counter!(
        FAILED_AGENTS,
        "Agents marked failed after too many restarts"
    );
    metrics::describe_gauge!(LIVE_ACTORS, "Live agent actors");
    metrics::describe_counter!(REAPED, "Agent actors stopped by the idle reaper");
    metrics::describe_counter!(
        COMPACTIONS,
        "Context compactions by agent and outcome (after a failed one the turn goes on without a summary, cut to fit the window)"
    );
    metrics::describe_counter!(
        CONTEXT_LEFT_OUT,
        "Requests whose oldest messages were left out to fit the model's window"
    );
    metrics::describe_counter!(
        TOOL_CALLS,
        "Tool calls run in agent loops, by tool and outcome"
    );
    metrics::describe_counter!(LEASES_ACQUIRED, "Conversation leases taken by this node");
    metrics::describe_counter!(
        LEASES_LOST,
        "Conversations this node stood down from, by why"
    );
    metrics::describe_counter!(
        LEASES_RELEASED,
        "Leases of idle conversations (actors reaped) this node gave up"
    );
    metrics::describe_gauge!(LEASES_HELD, "Conversation leases this node owns");
    metrics::describe_histogram!(
        LEASE_RENEW_LATENCY,
        metrics::Unit::Seconds,
        "Time a conversation lease renewal took"
    );
    metrics::describe_counter!(
        FORWARDED_POSTS,
        "Posts sent to the node that owns the conversation, by outcome"
    );
    metrics::describe_counter!(SERVED_POSTS, "Posts served for another node");
}
