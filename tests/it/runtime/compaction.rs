//! Compaction through the runtime with the scripted provider: the count trigger, keep-recent,
//! the compacted view in later requests, multi-part summaries and the merge, the oversized-message
//! guard, a failed or empty summarization keeping the uncompacted context, a stateful session
//! rotated at its token ceiling and bootstrapped with the summary, and `preview_turn` (what
//! `legio context` shows) equal to what the provider received. Nothing is ever deleted from the log.

use legio_core::{Event, History, Record, SUMMARIZER_PROMPT};
use legio_llm::{Fault, RecordedRequest};

use super::Legion;

const POLICY: &str = "compact_after_messages = 6\nkeep_recent = 2";

fn summaries(legion: &Legion, agent: &str) -> Vec<(Record, legio_core::SummaryRecorded)> {
    legion
        .events()
        .into_iter()
        .filter_map(|r| match &r.event {
            Event::SummaryRecorded(e) if e.agent.as_str() == agent => {
                let e = e.clone();
                Some((r, e))
            }
            _ => None,
        })
        .collect()
}

fn ann() -> legio_core::AgentName {
    legio_core::AgentName::new("ann").unwrap()
}

fn is_summarizer(r: &RecordedRequest) -> bool {
    r.system_prompt == SUMMARIZER_PROMPT
}

fn turns(legion: &Legion, agent: &str) -> Vec<RecordedRequest> {
    legion
        .requests(agent)
        .into_iter()
        .filter(|r| !is_summarizer(r))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_context_past_the_count_is_summarized_and_later_turns_use_the_compacted_view() {
    let legion = Legion::new(History::Stateless, POLICY).await;
    // Each post adds the question and ann's reply: 3 posts = 5 messages before the 4th question.
    for i in 0..3 {
        legion.post(&format!("@ann question {i}")).await;
    }
    assert!(
        summaries(&legion, "ann").is_empty(),
        "6 messages is the limit"
    );
    legion.post("@ann question 3").await;
    let recorded = summaries(&legion, "ann");
    assert_eq!(recorded.len(), 1);
    let (_, summary) = &recorded[0];
    // 6 messages of history, 2 kept: the summary covers the 4 oldest.
    let messages: Vec<Record> = legion
        .events()
        .into_iter()
        .filter(|r| r.event.as_message().is_some())
        .collect();
    assert_eq!(summary.covers_up_to, messages[3].seq);
    assert!(summary.tokens_after < summary.tokens_before);

    let summarizer: Vec<RecordedRequest> = legion
        .requests("ann")
        .into_iter()
        .filter(is_summarizer)
        .collect();
    assert_eq!(summarizer.len(), 1);
    assert!(summarizer[0].resumed.is_none() && summarizer[0].plan.history.is_empty());
    let asked = summarizer[0].plan.new_message.message.text_content();
    assert!(asked.contains("question 0") && asked.contains("question 1"));
    assert!(
        !asked.contains("question 3"),
        "the kept messages are not summarized"
    );

    let last = turns(&legion, "ann").pop().unwrap();
    let plan = &last.plan;
    assert_eq!(
        plan.summary.as_ref().unwrap().covers_up_to,
        summary.covers_up_to
    );
    let seqs: Vec<_> = plan.history.iter().map(|i| i.seq).collect();
    assert_eq!(seqs, [messages[4].seq, messages[5].seq], "keep_recent = 2");
    assert!(last.rendered.contains("<conversation_summary"));

    // The next turn reuses the summary (no new one until the policy is crossed again).
    legion.post("@ann question 4").await;
    assert_eq!(summaries(&legion, "ann").len(), 1);
    let last = turns(&legion, "ann").pop().unwrap();
    assert_eq!(last.plan.history.len(), 4);
    assert!(last.plan.summary.is_some());
    // Nothing left the log.
    let messages = legion
        .events()
        .iter()
        .filter(|r| r.event.as_message().is_some())
        .count();
    assert_eq!(messages, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_empty_summarization_keeps_the_uncompacted_context() {
    let legion = Legion::new(History::Stateless, POLICY).await;
    for i in 0..3 {
        legion.post(&format!("@ann question {i}")).await;
    }
    // The summarizer call comes first, before the turn.
    legion
        .provider
        .inject(Some(&ann()), Fault::Error("summarizer down".into()));
    let replies = legion.post("@ann question 3").await;
    assert_eq!(replies[0].error(), None, "the turn itself succeeds");
    assert!(summaries(&legion, "ann").is_empty());
    let last = turns(&legion, "ann").pop().unwrap();
    assert!(last.plan.summary.is_none());
    assert_eq!(last.plan.history.len(), 6, "every message, uncompacted");

    legion
        .provider
        .inject(Some(&ann()), Fault::Reply("   ".into()));
    legion.post("@ann question 4").await;
    assert!(
        summaries(&legion, "ann").is_empty(),
        "an empty summary is not recorded"
    );
    let last = turns(&legion, "ann").pop().unwrap();
    assert!(last.plan.summary.is_none());
    assert_eq!(last.plan.history.len(), 8);

    // Once the summarizer works again, the next turn compacts everything not yet covered.
    legion.post("@ann question 5").await;
    let recorded = summaries(&legion, "ann");
    assert_eq!(recorded.len(), 1);
    let summarizer = legion
        .requests("ann")
        .into_iter()
        .rfind(|r| is_summarizer(r) && r.succeeded)
        .unwrap();
    let asked = summarizer.plan.new_message.message.text_content();
    for i in 0..4 {
        assert!(
            asked.contains(&format!("question {i}")),
            "question {i} missing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_input_is_summarized_in_parts_then_merged_and_oversized_messages_are_named() {
    // A 1000-token window: the token trigger at 750, summarizer parts of at most 500 tokens.
    let legion = Legion::with_provider(
        History::Stateless,
        "compact_after_messages = 6\nkeep_recent = 1",
        "context_window = 1000",
    )
    .await;
    let long = "word ".repeat(230); // ~300 tokens
                                    // ~760 tokens: more than half the window, yet under it (a message over the window is never
                                    // sent: the turn fails naming its size, see the test below).
    let huge = "word ".repeat(600);
    legion.post(&format!("@ann {long} first")).await;
    legion.post(&format!("@ann {huge} second")).await;
    for word in ["third", "fourth", "fifth", "sixth", "seventh"] {
        legion.post(&format!("@ann {long} {word}")).await;
    }
    // The small window also trips the token trigger early: several summaries, each extending
    // the previous one.
    let recorded = summaries(&legion, "ann");
    assert!(!recorded.is_empty());
    let summarizer: Vec<RecordedRequest> = legion
        .requests("ann")
        .into_iter()
        .filter(is_summarizer)
        .collect();
    let texts: Vec<String> = summarizer
        .iter()
        .map(|r| r.plan.new_message.message.text_content())
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("<partial_summary part=\"2\">")),
        "a multi-part summary was merged: {texts:#?}"
    );
    for text in &texts {
        assert!(
            !text.contains("second"),
            "the oversized message never reaches the summarizer"
        );
    }
    let huge_seq = legion
        .events()
        .into_iter()
        .find(|r| {
            r.event
                .as_message()
                .is_some_and(|m| m.text_content().ends_with("second"))
        })
        .unwrap()
        .seq;
    let covering = recorded
        .iter()
        .find(|(_, s)| s.covers_up_to >= huge_seq)
        .expect("a summary covers the oversized message");
    assert!(
        covering
            .1
            .text
            .contains(&format!("message #{huge_seq} from user")),
        "{}",
        covering.1.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_session_rotated_at_its_ceiling_is_bootstrapped_with_the_summary() {
    let legion = Legion::new(
        History::Session { resumable: true },
        &format!("{POLICY}\nmax_input_tokens = 40"),
    )
    .await;
    for i in 0..8 {
        legion.post(&format!("@ann question {i}")).await;
    }
    let boundaries = legion.boundaries("ann");
    assert!(
        boundaries.iter().any(|b| b.contains("token_ceiling")),
        "{boundaries:?}"
    );
    assert!(!summaries(&legion, "ann").is_empty());
    let bootstrap = turns(&legion, "ann")
        .into_iter()
        .rfind(|r| r.plan.notice.is_some())
        .expect("a bootstrap after the rotation");
    let covered = bootstrap.plan.summary.as_ref().unwrap().covers_up_to;
    assert!(bootstrap.plan.history.iter().all(|i| i.seq > covered));
    assert!(bootstrap.plan.history.len() < 6, "under the policy's count");
    assert!(bootstrap.rendered.contains("<conversation_summary"));
    assert!(bootstrap.rendered.contains("<context_notice>"));
    // Deltas carry no summary.
    for request in turns(&legion, "ann") {
        if request.plan.mode == legio_core::DeliveryMode::Delta {
            assert!(request.plan.summary.is_none());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_shows_the_compacted_view_the_provider_received() {
    let legion = Legion::new(History::Stateless, POLICY).await;
    for i in 0..5 {
        legion.post(&format!("@ann question {i}")).await;
    }
    let last = turns(&legion, "ann").pop().unwrap();
    assert!(last.plan.summary.is_some());
    let log = legion.rt().log().clone();
    let spec = legion.config.agent_named("ann").unwrap().clone();
    let conversation = legio_core::ConversationKey::new(super::CONV).unwrap();
    let preview = legio_runtime::preview_turn(
        log.as_ref(),
        legio_runtime::TurnInputs {
            spec: &spec,
            conversation: &conversation,
            history: History::Stateless,
            settings: &legion.config.runtime,
            prompt_hash: "",
            live_session: None,
            new_message: last.plan.new_message.seq,
        },
        last.plan.new_message.seq,
        Some(legio_core::Seq::ZERO),
    )
    .unwrap();
    assert_eq!(preview.turn.plan, last.plan);
}

/// Issue 17: a compaction that fails is reported as progress (the CLI's warning line, SSE's
/// `compaction_failed`), and the turn's request is cut to fit the window instead of being sent
/// over it: the oldest messages left out with a notice that says how many, the question kept.
/// A question larger than the window is an error naming its size, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compaction_is_reported_and_the_request_is_cut_to_fit_the_window() {
    let legion = Legion::with_provider(
        History::Stateless,
        "compact_after_messages = 100\nkeep_recent = 2",
        "context_window = 1000",
    )
    .await;
    let long = "word ".repeat(230); // ~300 tokens a message
    legion.post(&format!("@ann {long} first")).await;
    legion.post(&format!("@ann {long} second")).await;
    legion
        .provider
        .inject(Some(&ann()), Fault::Error("summarizer down".into()));
    let (sink, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let replies = legion
        .rt()
        .post_streaming(super::CONV, "user", &format!("@ann {long} third"), sink)
        .await
        .unwrap();
    assert_eq!(replies[0].error(), None, "the turn itself succeeds");
    let mut reported = Vec::new();
    while let Ok(step) = progress.try_recv() {
        if let legio_runtime::Progress::CompactionFailed { agent, reason } = step {
            reported.push((agent.to_string(), reason));
        }
    }
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].1.contains("summarizer down"), "{reported:?}");
    let last = turns(&legion, "ann").pop().unwrap();
    assert!(last.plan.summary.is_none());
    assert!(
        last.plan.estimated_tokens <= 1000,
        "{}",
        last.plan.estimated_tokens
    );
    let notice = last.plan.notice.clone().unwrap_or_default();
    assert!(
        notice.contains("older message") && notice.contains("left out of this context"),
        "{notice}"
    );
    assert!(last
        .plan
        .new_message
        .message
        .text_content()
        .ends_with("third"));
    assert!(last.rendered.contains("left out of this context"));

    let huge = "word ".repeat(1000); // ~1250 tokens
    let replies = legion.post(&format!("@ann {huge} fourth")).await;
    let error = replies[0].error().unwrap().to_owned();
    assert!(
        error.contains("is about") && error.contains("1000"),
        "{error}"
    );
    assert!(
        !turns(&legion, "ann").iter().any(|r| r
            .plan
            .new_message
            .message
            .text_content()
            .ends_with("fourth")),
        "nothing was sent"
    );
}
