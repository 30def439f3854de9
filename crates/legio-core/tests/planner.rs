//! Given/when/then tables for the session lifecycle decision and the context planner.

use legio_core::*;

fn agent(n: &str) -> AgentName {
    AgentName::new(n).unwrap()
}
fn conv() -> ConversationKey {
    ConversationKey::new("t:1").unwrap()
}
fn ts(n: u64) -> Timestamp {
    Timestamp::from_unix_micros(1_700_000_000_000_000 + n as i64 * 1000)
}
fn sid(n: u8) -> SessionId {
    SessionId::from_parts(ts(1), [n; 10])
}

/// A state whose latest session has the given shape.
fn state(
    status: SessionStatus,
    turns: u64,
    input: u64,
    provider: Option<&str>,
    prompt: &str,
) -> AgentSessionState {
    let mut s = AgentSessionState::new(conv(), agent("vorenus"));
    s.current = Some(SessionInfo {
        session: sid(1),
        status,
        opened_at: Seq(1),
        why: OpenReason::FirstUse,
        how: SessionStart::Bootstrapped { up_to: Seq(0) },
        prompt_hash: prompt.into(),
        provider_session: provider.map(str::to_owned),
        checkpoint: Seq(7),
        usage: TokenUsage {
            input,
            ..Default::default()
        },
        turns,
        ended: match status {
            SessionStatus::Open => None,
            _ => Some(BoundaryReason::Idle),
        },
    });
    s
}

const RESUMABLE: History = History::Session { resumable: true };
const NOT_RESUMABLE: History = History::Session { resumable: false };

/// `expect`: "<end>|<start>|<delivery>" in a compact notation.
fn check(
    state: Option<&AgentSessionState>,
    live: bool,
    history: History,
    prompt: &str,
    expect: &str,
) {
    let d = decide_session(SessionFacts {
        state,
        live,
        history,
        prompt_hash: prompt,
        max_input_tokens: 1000,
    });
    let end = match d.end {
        None => "-".to_owned(),
        Some(e) => format!("{}:{}", if e.suspend { "suspend" } else { "close" }, e.why),
    };
    let why = |w: &OpenReason| match w {
        OpenReason::FirstUse => "first".to_owned(),
        OpenReason::After(r) => r.to_string(),
    };
    let start = match &d.start {
        Start::Continue => "continue".to_owned(),
        Start::OpenStateless { why: w } => format!("stateless:{}", why(w)),
        Start::OpenBootstrap { why: w } => format!("bootstrap:{}", why(w)),
        Start::OpenResume {
            why: w,
            provider_session,
            checkpoint,
        } => format!("resume:{}:{provider_session}@{checkpoint}", why(w)),
    };
    let delivery = match &d.delivery {
        Delivery::Full => "full".to_owned(),
        Delivery::Bootstrap { notice: None } => "bootstrap".to_owned(),
        Delivery::Bootstrap { notice: Some(n) } => {
            assert!(n.contains("restored from the log"), "{n}");
            "bootstrap+notice".to_owned()
        }
        Delivery::Delta { checkpoint } => format!("delta@{checkpoint}"),
    };
    assert_eq!(format!("{end}|{start}|{delivery}"), expect);
}

#[test]
fn lifecycle_table() {
    use SessionStatus::*;
    // First use.
    check(None, false, RESUMABLE, "p", "-|bootstrap:first|bootstrap");
    check(
        None,
        false,
        History::Stateless,
        "p",
        "-|stateless:first|full",
    );
    // A live session carries on with the delta; before its first completed turn it re-bootstraps.
    check(
        Some(&state(Open, 3, 10, Some("r1"), "p")),
        true,
        RESUMABLE,
        "p",
        "-|continue|delta@7",
    );
    check(
        Some(&state(Open, 0, 0, None, "p")),
        true,
        RESUMABLE,
        "p",
        "-|continue|bootstrap",
    );
    // Regression (found by the exactly-once property test): a resumed session whose first turn
    // failed continues with the delta; its provider thread already holds the history.
    let mut resumed = state(Open, 0, 0, Some("r1"), "p");
    resumed.current.as_mut().unwrap().how = SessionStart::Resumed {
        provider_session: "r1".into(),
        checkpoint: Seq(7),
    };
    check(Some(&resumed), true, RESUMABLE, "p", "-|continue|delta@7");
    check(
        Some(&state(Open, 3, 10, None, "p")),
        true,
        History::Stateless,
        "p",
        "-|continue|full",
    );
    // Prompt change and token ceiling rotate the session.
    check(
        Some(&state(Open, 3, 10, Some("r1"), "old")),
        true,
        RESUMABLE,
        "p",
        "close:prompt_changed|bootstrap:prompt_changed|bootstrap+notice",
    );
    check(
        Some(&state(Open, 3, 5000, Some("r1"), "p")),
        true,
        RESUMABLE,
        "p",
        "close:token_ceiling|bootstrap:token_ceiling|bootstrap+notice",
    );
    check(
        Some(&state(Open, 3, 5000, None, "p")),
        true,
        History::Stateless,
        "p",
        "-|continue|full",
    );
    check(
        Some(&state(Open, 3, 10, None, "old")),
        true,
        History::Stateless,
        "p",
        "close:prompt_changed|stateless:prompt_changed|full",
    );
    // An open session nobody holds was left by a crash.
    check(
        Some(&state(Open, 3, 10, Some("r1"), "p")),
        false,
        RESUMABLE,
        "p",
        "suspend:crashed|resume:crashed:r1@7|delta@7",
    );
    check(
        Some(&state(Open, 3, 10, Some("r1"), "p")),
        false,
        NOT_RESUMABLE,
        "p",
        "close:crashed|bootstrap:crashed|bootstrap+notice",
    );
    check(
        Some(&state(Open, 0, 0, None, "p")),
        false,
        RESUMABLE,
        "p",
        "close:crashed|bootstrap:crashed|bootstrap+notice",
    );
    check(
        Some(&state(Open, 3, 10, Some("r1"), "old")),
        false,
        RESUMABLE,
        "p",
        "close:crashed|bootstrap:prompt_changed|bootstrap+notice",
    );
    // Suspended sessions resume when they can; otherwise they are closed for good.
    check(
        Some(&state(Suspended, 3, 10, Some("r1"), "p")),
        false,
        RESUMABLE,
        "p",
        "-|resume:idle:r1@7|delta@7",
    );
    check(
        Some(&state(Suspended, 3, 10, Some("r1"), "old")),
        false,
        RESUMABLE,
        "p",
        "close:prompt_changed|bootstrap:prompt_changed|bootstrap+notice",
    );
    check(
        Some(&state(Suspended, 3, 5000, Some("r1"), "p")),
        false,
        RESUMABLE,
        "p",
        "close:token_ceiling|bootstrap:token_ceiling|bootstrap+notice",
    );
    check(
        Some(&state(Suspended, 3, 10, Some("r1"), "p")),
        false,
        NOT_RESUMABLE,
        "p",
        "close:idle|bootstrap:idle|bootstrap+notice",
    );
    // Closed sessions are followed by a new, restored one.
    check(
        Some(&state(Closed, 3, 10, Some("r1"), "p")),
        false,
        RESUMABLE,
        "p",
        "-|bootstrap:idle|bootstrap+notice",
    );
    check(
        Some(&state(Closed, 3, 10, None, "p")),
        false,
        History::Stateless,
        "p",
        "-|stateless:idle|full",
    );
}

#[test]
fn crash_cleanup_table() {
    use SessionStatus::*;
    let c = |s: &AgentSessionState, h| crash_cleanup(Some(s), h).map(|e| (e.suspend, e.why));
    assert_eq!(
        c(&state(Open, 3, 10, Some("r1"), "p"), RESUMABLE),
        Some((true, BoundaryReason::Crashed))
    );
    assert_eq!(
        c(&state(Open, 3, 10, Some("r1"), "p"), NOT_RESUMABLE),
        Some((false, BoundaryReason::Crashed))
    );
    assert_eq!(
        c(&state(Open, 0, 0, None, "p"), RESUMABLE),
        Some((false, BoundaryReason::Crashed))
    );
    assert_eq!(
        c(&state(Suspended, 3, 10, Some("r1"), "p"), RESUMABLE),
        None
    );
    assert_eq!(crash_cleanup(None, RESUMABLE), None);
}

fn msg(seq: u64, sender: &str, audience: &str) -> Record {
    let audience = if audience == "all" {
        Audience::All
    } else {
        Audience::only(audience.split(',').map(|p| Participant::parse(p).unwrap()))
    };
    let m = Message::text(
        MessageId::from_parts(ts(seq), [seq as u8; 10]),
        conv(),
        Participant::parse(sender).unwrap(),
        audience,
        format!("message {seq}"),
        ts(seq),
    );
    Record {
        seq: Seq(seq),
        event: Event::MessagePosted(m),
    }
}

/// `expect`: history seqs with `*` for redelivered, then `| new`.
fn check_plan(delivery: Delivery, visible: &[Record], new: &Record, window: usize, expect: &str) {
    let plan = plan_context(&agent("vorenus"), &delivery, visible, new, window);
    let history: Vec<String> = plan
        .history
        .iter()
        .map(|i| format!("{}{}", i.seq, if i.redelivered { "*" } else { "" }))
        .collect();
    assert_eq!(
        format!("{} | {}", history.join(" "), plan.new_message.seq),
        expect
    );
    assert_eq!(plan.up_to, new.seq);
    let mut seqs: Vec<Seq> = plan.messages().map(|i| i.seq).collect();
    let n = seqs.len();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "no message twice in one plan");
    assert!(plan.estimated_tokens > 0);
}

#[test]
fn plan_table() {
    let visible = vec![
        msg(1, "user", "vorenus"),
        msg(2, "vorenus", "user"),
        msg(4, "user", "all"),
        msg(6, "pullo", "vorenus"),
        msg(8, "user", "vorenus"),
        msg(9, "vorenus", "user"),
        msg(11, "user", "vorenus,pullo"),
    ];
    let new = &visible[6];
    // Full and bootstrap: the window before the new message, never the new message twice.
    check_plan(Delivery::Full, &visible, new, 50, "1 2 4 6 8 9 | 11");
    check_plan(Delivery::Full, &visible, new, 3, "6 8 9 | 11");
    check_plan(
        Delivery::Bootstrap {
            notice: Some("n".into()),
        },
        &visible,
        new,
        2,
        "8 9 | 11",
    );
    // Delta after the checkpoint of the last completed turn (8): the own reply 9 is in the
    // session's thread already.
    check_plan(
        Delivery::Delta { checkpoint: Seq(8) },
        &visible,
        new,
        50,
        " | 11",
    );
    // Delta after checkpoint 2: 4 (all) and 6 and 8 (naming vorenus) would each have triggered a
    // turn that never recorded its checkpoint, so everything up to 8 may have been delivered.
    check_plan(
        Delivery::Delta { checkpoint: Seq(2) },
        &visible,
        new,
        50,
        "4* 6* 8* | 11",
    );
    // Messages that only the orchestrator sees are not triggers: nothing is marked.
    let orchestrator_view = vec![
        msg(3, "pullo", "user"),
        msg(5, "user", "legatus"),
        msg(7, "user", "vorenus"),
    ];
    check_plan(
        Delivery::Delta { checkpoint: Seq(2) },
        &orchestrator_view,
        &orchestrator_view[2],
        50,
        "3 5 | 7",
    );
}

#[test]
fn triggers() {
    let v = agent("vorenus");
    let m = |r: Record| r.event.as_message().unwrap().clone();
    assert!(triggers_turn(&v, &m(msg(1, "user", "vorenus"))));
    assert!(triggers_turn(&v, &m(msg(1, "user", "all"))));
    assert!(triggers_turn(&v, &m(msg(1, "legatus", "vorenus,pullo"))));
    assert!(!triggers_turn(&v, &m(msg(1, "vorenus", "all"))));
    assert!(!triggers_turn(&v, &m(msg(1, "user", "pullo"))));
}

/// Regression (issue 11, defect 3): Anthropic and Claude Code report cache reads and writes apart
/// from `input_tokens`; a session's context size counts them all, so the ceiling fires.
#[test]
fn the_token_ceiling_counts_cached_input() {
    let mut cached = state(SessionStatus::Open, 3, 10, Some("r1"), "p");
    let current = cached.current.as_mut().unwrap();
    current.usage.cache_read = 900;
    current.usage.cache_write = 200;
    check(
        Some(&cached),
        true,
        RESUMABLE,
        "p",
        "close:token_ceiling|bootstrap:token_ceiling|bootstrap+notice",
    );
}

/// Regression (issue 11, defect 2): a crash during the first turn of a resumed session leaves
/// it resumable: it is suspended, not closed, so the next turn resumes the provider session.
#[test]
fn a_resumed_session_without_a_completed_turn_is_suspended_by_a_crash() {
    let mut resumed = state(SessionStatus::Open, 0, 0, Some("r1"), "p");
    resumed.current.as_mut().unwrap().how = SessionStart::Resumed {
        provider_session: "r1".into(),
        checkpoint: Seq(7),
    };
    let end = crash_cleanup(Some(&resumed), RESUMABLE).unwrap();
    assert!(end.suspend, "a resumed session can be resumed again");
    assert_eq!(end.why, BoundaryReason::Crashed);
}

/// vorenus's message `seq` with `parts`, addressed to `audience`, replying to message `to`.
fn own(seq: u64, audience: &str, parts: Vec<Part>, to: Option<u64>) -> Record {
    let mut r = msg(seq, "vorenus", audience);
    if let Event::MessagePosted(m) = &mut r.event {
        if !parts.is_empty() {
            m.parts = parts;
        }
        m.reply_to = to.map(|s| MessageId::from_parts(ts(s), [s as u8; 10]));
    }
    r
}

fn reply(seq: u64, sender: &str, audience: &str, to: u64) -> Record {
    let mut r = msg(seq, sender, audience);
    if let Event::MessagePosted(m) = &mut r.event {
        m.reply_to = Some(MessageId::from_parts(ts(to), [to as u8; 10]));
    }
    r
}

/// A turn that called `dispatch` over MCP (the session made the call and got its result as it
/// ran), then replied: the next delta resends neither the result nor the reply it carried. A
/// tool loop that died before sending its results (no reply after them) still sends them.
#[test]
fn a_delta_leaves_out_tool_results_of_a_turn_that_replied() {
    let call = Part::ToolCall {
        id: "mcp_1".into(),
        name: "dispatch".into(),
        arguments: "{}".into(),
    };
    let result = Part::ToolResult {
        call_id: "mcp_1".into(),
        content: "pullo: done".into(),
        is_error: false,
    };
    let mcp_turn = vec![
        msg(1, "user", "vorenus"),
        own(2, "vorenus", vec![call.clone()], None),
        own(3, "pullo", vec![], Some(2)),
        reply(4, "pullo", "vorenus", 3),
        own(5, "vorenus", vec![result.clone()], Some(2)),
        own(6, "user", vec![], Some(1)),
        msg(7, "user", "vorenus"),
    ];
    let delta = || Delivery::Delta { checkpoint: Seq(1) };
    check_plan(delta(), &mcp_turn, &mcp_turn[6], 50, " | 7");
    // The same calls without the turn's reply (the turn died with them): the results are sent.
    let died = vec![
        msg(1, "user", "vorenus"),
        own(2, "vorenus", vec![call], Some(1)),
        own(3, "pullo", vec![], Some(2)),
        reply(4, "pullo", "vorenus", 3),
        own(5, "vorenus", vec![result], Some(2)),
        msg(7, "user", "vorenus"),
    ];
    check_plan(delta(), &died, &died[5], 50, "5 | 7");
    // A step's results after the checkpoint with a later reply of a turn that answered an earlier
    // message (queued while the loop ran, so its context stopped before them): still sent.
    let step = Part::ToolCall {
        id: "t1".into(),
        name: "get_history".into(),
        arguments: "{}".into(),
    };
    let step_result = Part::ToolResult {
        call_id: "t1".into(),
        content: "[]".into(),
        is_error: false,
    };
    let queued = vec![
        msg(1, "user", "vorenus"),
        msg(2, "user", "vorenus"),
        own(3, "vorenus", vec![step], Some(1)),
        own(5, "vorenus", vec![step_result], Some(3)),
        own(6, "user", vec![], Some(2)),
        msg(7, "user", "vorenus"),
    ];
    let delta = Delivery::Delta { checkpoint: Seq(2) };
    check_plan(delta, &queued, &queued[5], 50, "5 | 7");
}

/// A rebuilt (full or bootstrap) context shows a `dispatch` as a provider session saw it: the
/// call and its result, never the dispatched message again after the call, nor the reply the
/// result carried as a message of its own. A reply no result carried stays.
#[test]
fn a_rebuilt_context_holds_a_dispatched_reply_once() {
    let call = Part::ToolCall {
        id: "call_1".into(),
        name: "dispatch".into(),
        arguments: "{\"to\":\"pullo\",\"text\":\"check\"}".into(),
    };
    let result = Part::ToolResult {
        call_id: "call_1".into(),
        content: "pullo: done".into(),
        is_error: false,
    };
    let log = vec![
        msg(1, "user", "vorenus"),
        own(2, "vorenus", vec![call], Some(1)),
        own(3, "pullo", vec![], Some(2)),
        reply(4, "pullo", "vorenus", 3),
        own(5, "vorenus", vec![result], Some(2)),
        own(6, "user", vec![], Some(1)),
        reply(7, "pullo", "vorenus", 3),
        msg(8, "user", "vorenus"),
    ];
    let bootstrap = Delivery::Bootstrap { notice: None };
    check_plan(Delivery::Full, &log, &log[7], 50, "1 2 5 6 7 | 8");
    check_plan(bootstrap, &log, &log[7], 50, "1 2 5 6 7 | 8");
    // The call cut by the window (and with it its result): the dispatched message and the
    // reply are all that is left of it.
    check_plan(Delivery::Full, &log, &log[7], 5, "3 4 6 7 | 8");
}
