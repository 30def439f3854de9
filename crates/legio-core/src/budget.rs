//! The window budget: token estimates calibrated against what a provider reports, and the check
//! every request passes before it is sent, so that no request is ever over the model's window.
//!
//! Estimates are the heuristic of [`crate::estimate_tokens`] (what plans carry). A provider's
//! tokenizer differs (code, digits and ids take more tokens a character than prose), so each
//! provider's **ratio** of reported prompt tokens to estimated ones is learned as turns go
//! ([`Calibration`]), from the pairs the log records (`ContextDelivered::estimated_tokens`, then
//! `TurnCompleted::usage.input`), so it survives restarts without state of its own. A request is
//! checked at estimate × ratio × [`SAFETY_MARGIN`], plus the reply's output limit.
//!
//! When a request does not fit, [`fit_to_window`] leaves out the oldest messages (in clean cuts:
//! a tool call and its result go together) and says how many in the plan's notice. The message
//! being answered and the current tool loop (every message from the turn's question on) are
//! never left out; when they alone do not fit, the request is refused with an error naming the
//! sizes.
//!
//! Where the model's own vocabulary is known ([`Budget::vocabulary`]: OpenAI models), the check
//! counts exactly instead: every message with that vocabulary plus the chat format's overhead,
//! and the calibration does not apply. Calibration is for models whose tokenizer legio does not
//! have.

use crate::compaction::clean_cut;
use crate::compaction::{summary_tokens, ContextSummary};
use crate::context::ContextPlan;
use crate::message::Message;
use crate::seq::Seq;
use crate::tokens::{
    estimate_message_tokens, estimate_tokens, Vocabulary, CHAT_MESSAGE_OVERHEAD, CHAT_REPLY_PRIMING,
};

/// Headroom over the calibrated estimate: calibration is an average, single requests vary.
pub const SAFETY_MARGIN: f64 = 1.15;

/// The ratio assumed before a provider has reported anything: chars/4 ran 1.3 times under on
/// code and digits with SmolLM2's tokenizer, more on ids and timestamps.
pub const PRIOR_RATIO: f64 = 1.5;

/// Reported-to-estimated token ratios below this or above [`MAX_RATIO`] are not measurements
/// and are ignored. Low ratios are real: a chat template that drops the tools' schemas (which
/// the estimate counts) gave 0.3 with llama-cpp-python's default template.
pub const MIN_RATIO: f64 = 0.2;
/// See [`MIN_RATIO`].
pub const MAX_RATIO: f64 = 6.0;

/// How much one new sample moves the learned ratio (an exponential moving average).
const WEIGHT: f64 = 0.3;

/// Requests smaller than this many estimated tokens teach nothing (fixed overheads dominate).
const MIN_SAMPLE_TOKENS: u64 = 64;

/// A provider's learned ratio of reported prompt tokens to estimated ones.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Calibration {
    /// The learned ratio ([`PRIOR_RATIO`] until the first sample).
    pub ratio: f64,
    /// How many samples it was learned from.
    pub samples: u32,
    /// The headroom multiplied in ([`SAFETY_MARGIN`]; 1 for [`Calibration::exact`]).
    pub margin: f64,
}

impl Default for Calibration {
    fn default() -> Self {
        Self {
            ratio: PRIOR_RATIO,
            samples: 0,
            margin: SAFETY_MARGIN,
        }
    }
}

impl Calibration {
    /// For a provider that counts with the estimate itself (the scripted provider): ratio 1,
    /// no margin, learns nothing.
    pub fn exact() -> Self {
        Self {
            ratio: 1.0,
            samples: 0,
            margin: 1.0,
        }
    }

    fn is_exact(&self) -> bool {
        self.margin == 1.0 && self.ratio == 1.0 && self.samples == 0
    }

    /// Learns from one request: `estimated` tokens by the heuristic, `reported` by the provider.
    /// Returns whether the sample was used. The first sample replaces the prior; a sample above
    /// the current ratio moves it at once (underestimating overflows, overestimating only
    /// compacts early), one below moves it by a weighted average.
    pub fn observe(&mut self, estimated: u64, reported: u64) -> bool {
        if estimated < MIN_SAMPLE_TOKENS || self.is_exact() {
            return false;
        }
        let sample = reported as f64 / estimated as f64;
        if !(MIN_RATIO..=MAX_RATIO).contains(&sample) {
            return false;
        }
        self.ratio = if self.samples == 0 || sample > self.ratio {
            sample
        } else {
            self.ratio * (1.0 - WEIGHT) + sample * WEIGHT
        };
        self.samples = self.samples.saturating_add(1);
        true
    }

    /// Real tokens expected for `estimated` heuristic tokens, with the safety margin.
    pub fn scale(&self, estimated: u64) -> u64 {
        (estimated as f64 * self.ratio * self.margin).ceil() as u64
    }

    /// The window as heuristic tokens: what `window` real tokens hold by this calibration.
    pub fn unscale(&self, window: u64) -> u64 {
        (window as f64 / (self.ratio * self.margin)).floor() as u64
    }
}

/// What a request may hold: the model's window less the reply's output limit.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Budget {
    /// The model's context window, in real tokens.
    pub context_window: u64,
    /// The reply's output limit, reserved out of the window.
    pub max_output_tokens: u64,
    /// The provider's calibration (used only without a vocabulary).
    pub calibration: Calibration,
    /// The model's own vocabulary, when known: requests are counted exactly with it.
    pub vocabulary: Option<Vocabulary>,
}

/// Room kept, when counting exactly, for the notice a cut adds (exact counts have no margin).
const NOTICE_ALLOWANCE: u64 = 48;

impl Budget {
    /// Real tokens a request may have.
    pub fn request_limit(&self) -> u64 {
        self.context_window.saturating_sub(self.max_output_tokens)
    }

    /// `text` in this budget's units: exact tokens with a vocabulary, else the estimate.
    pub fn count_text(&self, text: &str) -> u64 {
        match self.vocabulary {
            Some(v) => v.count(text),
            None => estimate_tokens(text),
        }
    }

    /// A message in this budget's units (exact: with the chat format's overhead).
    pub fn count_message(&self, message: &Message) -> u64 {
        match self.vocabulary {
            Some(v) => v.count_message(message),
            None => estimate_message_tokens(message),
        }
    }

    /// A summary in this budget's units (exact: its text, tags and the message overhead).
    fn count_summary(&self, summary: &ContextSummary) -> u64 {
        match self.vocabulary {
            Some(v) => v.count(&summary.text) + 8 + CHAT_MESSAGE_OVERHEAD,
            None => summary_tokens(summary),
        }
    }

    /// The plan in this budget's units: the planner's estimate, or exactly its messages, summary,
    /// notice and the reply's priming.
    pub fn count_plan(&self, plan: &ContextPlan) -> u64 {
        let Some(v) = self.vocabulary else {
            return plan.estimated_tokens;
        };
        plan.messages()
            .map(|i| v.count_message(&i.message))
            .sum::<u64>()
            + plan.summary.as_ref().map_or(0, |s| self.count_summary(s))
            + plan.notice.as_deref().map_or(0, |n| v.count(n))
            + CHAT_REPLY_PRIMING
    }

    /// Real tokens of `units`: as counted with a vocabulary, else calibrated.
    pub fn real_tokens(&self, units: u64) -> u64 {
        match self.vocabulary {
            Some(_) => units,
            None => self.calibration.scale(units),
        }
    }
}

/// Why a request cannot be sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BudgetError {
    /// One message alone is larger than the window allows a request.
    #[error(
        "message #{seq} is about {tokens} tokens, larger than the {limit} tokens a request to this model may hold (context_window {window} less max_output_tokens {output}); it cannot be sent to this model"
    )]
    MessageTooLarge {
        /// Its seq.
        seq: Seq,
        /// Its calibrated size.
        tokens: u64,
        /// The request limit.
        limit: u64,
        /// The window.
        window: u64,
        /// The output limit.
        output: u64,
    },
    /// What can never be left out (system prompt, tools, the message answered, the current tool
    /// loop) is larger than the window allows.
    #[error(
        "the request needs about {tokens} tokens even with every older message left out (system prompt, tools, the message answered and the current tool loop), over the {limit} a request to this model may hold (context_window {window} less max_output_tokens {output})"
    )]
    RequestTooLarge {
        /// The calibrated size of what must be sent.
        tokens: u64,
        /// The request limit.
        limit: u64,
        /// The window.
        window: u64,
        /// The output limit.
        output: u64,
    },
}

/// What [`fit_to_window`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fitted {
    /// Calibrated tokens of the request as it will be sent.
    pub tokens: u64,
    /// Older messages left out.
    pub left_out: usize,
    /// Whether the summary was left out too.
    pub summary_left_out: bool,
}

/// Makes `plan` fit `budget`: `fixed_tokens` (estimated: system prompt, tools) plus the plan's
/// estimate, calibrated, within the window less the output limit. Leaves out the oldest history
/// messages (clean cuts only), then the summary, never a message at or after `protect_from` (the
/// turn's question: the message answered and the current tool loop). The notice says how many
/// were left out.
pub fn fit_to_window(
    plan: &mut ContextPlan,
    fixed_tokens: u64,
    protect_from: Seq,
    budget: &Budget,
) -> Result<Fitted, BudgetError> {
    let real = |units| budget.real_tokens(units);
    let limit = budget.request_limit();
    let total = fixed_tokens + budget.count_plan(plan);
    if real(total) <= limit {
        return Ok(Fitted {
            tokens: real(total),
            left_out: 0,
            summary_left_out: false,
        });
    }
    // Only a message that cannot be left out makes the request impossible.
    if let Some(item) = plan
        .messages()
        .filter(|i| i.seq >= protect_from || i.seq == plan.new_message.seq)
        .find(|i| real(budget.count_message(&i.message)) > limit)
    {
        return Err(BudgetError::MessageTooLarge {
            seq: item.seq,
            tokens: real(budget.count_message(&item.message)),
            limit,
            window: budget.context_window,
            output: budget.max_output_tokens,
        });
    }
    let cut = find_cut(plan, total, protect_from, budget)?;
    Ok(leave_out(plan, cut, fixed_tokens, budget))
}

/// Where to cut: the fewest oldest messages (a clean cut) that make the request fit, or every
/// one that may go and the summary too (`Cut::summary`).
fn find_cut(
    plan: &ContextPlan,
    total: u64,
    protect_from: Seq,
    budget: &Budget,
) -> Result<Cut, BudgetError> {
    let limit = budget.request_limit();
    // Exact counts have no margin: keep room for the notice the cut adds.
    let notice = budget.vocabulary.map_or(0, |_| NOTICE_ALLOWANCE);
    let fits = |dropped: u64| budget.real_tokens(total + notice - dropped) <= limit;
    let droppable = plan
        .history
        .iter()
        .position(|i| i.seq >= protect_from)
        .unwrap_or(plan.history.len());
    let mut dropped = 0;
    for cut in 1..=droppable {
        dropped += budget.count_message(&plan.history[cut - 1].message);
        if clean_cut(&plan.history, cut) && fits(dropped) {
            return Ok(Cut {
                messages: cut,
                summary: false,
            });
        }
    }
    let messages = (0..=droppable)
        .rev()
        .find(|&c| clean_cut(&plan.history, c))
        .unwrap_or(0);
    let dropped: u64 = plan.history[..messages]
        .iter()
        .map(|i| budget.count_message(&i.message))
        .sum::<u64>()
        + plan.summary.as_ref().map_or(0, |s| budget.count_summary(s));
    if plan.summary.is_some() && fits(dropped) {
        return Ok(Cut {
            messages,
            summary: true,
        });
    }
    Err(BudgetError::RequestTooLarge {
        tokens: budget.real_tokens(total - dropped),
        limit,
        window: budget.context_window,
        output: budget.max_output_tokens,
    })
}

/// What a cut leaves out: the oldest `messages`, and the summary when `summary`.
#[derive(Clone, Copy)]
struct Cut {
    messages: usize,
    summary: bool,
}

fn leave_out(plan: &mut ContextPlan, cut: Cut, fixed_tokens: u64, budget: &Budget) -> Fitted {
    let Cut { messages, summary } = cut;
    // The plan's estimate stays in estimated tokens, whatever the budget counts in.
    let dropped = plan
        .history
        .drain(..messages)
        .map(|i| estimate_message_tokens(&i.message))
        .sum::<u64>();
    let summary_estimate = match summary {
        true => plan.summary.take().as_ref().map_or(0, summary_tokens),
        false => 0,
    };
    plan.estimated_tokens -= dropped + summary_estimate;
    let what = match (messages, summary) {
        (0, _) => "the summary of the earlier conversation is".to_owned(),
        (1, false) => "1 older message is".to_owned(),
        (n, false) => format!("{n} older messages are"),
        (1, true) => "1 older message and the summary before it are".to_owned(),
        (n, true) => format!("{n} older messages and the summary before them are"),
    };
    let line = format!(
        "{what} left out of this context to fit the model's window; the log keeps them all."
    );
    plan.notice = Some(match plan.notice.take() {
        Some(notice) => format!("{notice} {line}"),
        None => line,
    });
    Fitted {
        tokens: budget.real_tokens(fixed_tokens + budget.count_plan(plan)),
        left_out: messages,
        summary_left_out: summary,
    }
}

/// Heuristic tokens a summarizer part may hold: at most half the summarizer's window, and never
/// more than its window less its output limit, its instructions and the part's framing
/// (`overhead_tokens`, estimated) hold by its calibration.
pub fn summarizer_part_budget(
    context_window: u64,
    max_output_tokens: u64,
    overhead_tokens: u64,
    calibration: &Calibration,
) -> u64 {
    let room = calibration.unscale(context_window.saturating_sub(max_output_tokens));
    room.saturating_sub(overhead_tokens)
        .min(context_window / 2)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ContextItem;
    use crate::event::DeliveryMode;
    use crate::message::Part;
    use crate::test_support::message;

    fn item(seq: u8, words: usize) -> ContextItem {
        ContextItem {
            seq: Seq(seq.into()),
            message: message(seq, "user", "all", &"word ".repeat(words)),
            redelivered: false,
        }
    }

    fn with_part(seq: u8, part: Part) -> ContextItem {
        let mut i = item(seq, 0);
        i.message.parts = vec![part];
        i
    }

    fn plan(history: Vec<ContextItem>, new: ContextItem) -> ContextPlan {
        let estimated_tokens = history
            .iter()
            .chain(std::iter::once(&new))
            .map(|i| estimate_message_tokens(&i.message))
            .sum();
        ContextPlan {
            mode: DeliveryMode::Full,
            notice: None,
            up_to: new.seq,
            history,
            new_message: new,
            estimated_tokens,
            summary: None,
        }
    }

    fn exact(window: u64, output: u64) -> Budget {
        Budget {
            context_window: window,
            max_output_tokens: output,
            calibration: Calibration::exact(),
            vocabulary: None,
        }
    }

    #[test]
    fn with_a_vocabulary_the_check_counts_exactly_and_ignores_the_calibration() {
        let v = Vocabulary::O200kBase;
        let mut p = plan((1..=4).map(|s| item(s, 50)).collect(), item(5, 10));
        let exact = p
            .messages()
            .map(|i| v.count_message(&i.message))
            .sum::<u64>()
            + CHAT_REPLY_PRIMING;
        assert_ne!(
            exact, p.estimated_tokens,
            "the estimate differs from the count"
        );
        let mut b = Budget {
            context_window: 10_000,
            max_output_tokens: 0,
            // A calibration this high would overflow the window: it must not be applied.
            calibration: Calibration {
                ratio: 6.0,
                samples: 1,
                margin: SAFETY_MARGIN,
            },
            vocabulary: Some(v),
        };
        assert_eq!(b.count_plan(&p), exact);
        assert_eq!(
            fit_to_window(&mut p.clone(), 100, Seq(5), &b),
            Ok(Fitted {
                tokens: 100 + exact,
                left_out: 0,
                summary_left_out: false
            })
        );
        // Room for all but two of the older messages (and the notice): exactly two go.
        let per = v.count_message(&p.history[0].message);
        b.context_window = 100 + exact - 2 * per + NOTICE_ALLOWANCE;
        let fitted = fit_to_window(&mut p, 100, Seq(5), &b).unwrap();
        assert_eq!((fitted.left_out, p.history.len()), (2, 2));
        assert!(fitted.tokens <= b.request_limit(), "{fitted:?}");
        assert_eq!(fitted.tokens, 100 + b.count_plan(&p));
    }

    #[test]
    fn calibration_learns_up_at_once_down_slowly_and_ignores_non_measurements() {
        let mut c = Calibration::default();
        assert_eq!(c.ratio, PRIOR_RATIO);
        assert!(!c.observe(10, 30), "too small to teach");
        assert!(!c.observe(1000, 100), "0.1 is no measurement");
        assert!(!c.observe(1000, 7000), "nor is 7");
        assert!(c.observe(1000, 1300));
        assert!(
            (c.ratio - 1.3).abs() < 1e-9,
            "the first sample replaces the prior"
        );
        assert!(c.observe(1000, 2000));
        assert!(
            (c.ratio - 2.0).abs() < 1e-9,
            "a higher sample moves it at once"
        );
        assert!(c.observe(1000, 1000));
        assert!(
            (c.ratio - 1.7).abs() < 1e-9,
            "a lower one by a weighted average"
        );
        assert_eq!(c.samples, 3);
        assert_eq!(c.scale(100), (100.0 * 1.7 * SAFETY_MARGIN).ceil() as u64);
        assert!(c.scale(c.unscale(2048)) <= 2048);
        let mut exact = Calibration::exact();
        assert!(!exact.observe(1000, 3000), "an exact count learns nothing");
        assert_eq!(exact.scale(1234), 1234);
    }

    #[test]
    fn a_request_that_fits_is_untouched() {
        let mut p = plan(vec![item(1, 40), item(2, 40)], item(3, 40));
        let before = p.clone();
        let fitted = fit_to_window(&mut p, 100, Seq(3), &exact(2048, 512)).unwrap();
        assert_eq!(fitted.left_out, 0);
        assert_eq!(p, before);
    }

    #[test]
    fn the_oldest_messages_are_left_out_with_a_notice_never_the_question_or_the_loop() {
        // Each item 71 tokens (50 words * 5 chars / 4 + framing): 7 items and 20 fixed are
        // 517 against 300 (window 400, output 100): four must go.
        let history: Vec<ContextItem> = (1..=6).map(|s| item(s, 50)).collect();
        let mut p = plan(history, item(7, 50));
        let fitted = fit_to_window(&mut p, 20, Seq(7), &exact(400, 100)).unwrap();
        assert!(fitted.tokens <= 300, "{fitted:?}");
        assert_eq!(fitted.left_out, 4);
        assert_eq!(p.history.first().map(|i| i.seq), Some(Seq(5)));
        assert!(p
            .notice
            .unwrap()
            .starts_with("4 older messages are left out"));
        assert_eq!(p.new_message.seq, Seq(7));

        // A tool loop: the question (seq 4) and the loop after it stay, whatever it costs.
        let mut history: Vec<ContextItem> = (1..=4).map(|s| item(s, 50)).collect();
        history.push(with_part(
            5,
            Part::ToolCall {
                id: "c".into(),
                name: "search".into(),
                arguments: "x ".repeat(100),
            },
        ));
        let new = with_part(
            6,
            Part::ToolResult {
                call_id: "c".into(),
                content: "y ".repeat(100),
                is_error: false,
            },
        );
        let mut p = plan(history.clone(), new.clone());
        // 4 * 71 + call 64 + result 62 + 20 = 430 against 250: three must go, only three may.
        let fitted = fit_to_window(&mut p, 20, Seq(4), &exact(350, 100)).unwrap();
        assert_eq!(fitted.left_out, 3);
        assert_eq!(p.history[0].seq, Seq(4), "the question is kept");
        let mut p = plan(history, new);
        let e = fit_to_window(&mut p, 20, Seq(2), &exact(300, 100)).unwrap_err();
        assert!(
            matches!(e, BudgetError::RequestTooLarge { limit: 200, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_call_and_its_result_are_left_out_together() {
        let call = with_part(
            1,
            Part::ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: "{}".into(),
            },
        );
        let result = with_part(
            2,
            Part::ToolResult {
                call_id: "c".into(),
                content: "z ".repeat(200),
                is_error: false,
            },
        );
        let mut p = plan(vec![call, result, item(3, 50)], item(4, 50));
        let fitted = fit_to_window(&mut p, 10, Seq(4), &exact(300, 100)).unwrap();
        assert_eq!(fitted.left_out, 2, "never the call without its result");
        assert_eq!(p.history[0].seq, Seq(3));
    }

    #[test]
    fn a_single_message_over_the_window_is_an_error_naming_its_size() {
        // An older one is left out like any other.
        let mut p = plan(vec![item(1, 2_000), item(2, 10)], item(3, 10));
        let fitted = fit_to_window(&mut p, 10, Seq(3), &exact(2048, 512)).unwrap();
        assert_eq!(fitted.left_out, 1);
        let mut p = plan(vec![item(1, 10)], item(2, 2_000));
        let e = fit_to_window(&mut p, 10, Seq(2), &exact(2048, 512)).unwrap_err();
        let BudgetError::MessageTooLarge { seq, tokens, .. } = e else {
            panic!("{e}")
        };
        assert_eq!(seq, Seq(2));
        assert!(tokens > 1536);
        assert!(e.to_string().contains("message #2 is about"));
    }

    #[test]
    fn summarizer_parts_leave_room_for_instructions_and_output() {
        let c = Calibration {
            ratio: 2.0,
            samples: 3,
            ..Calibration::default()
        };
        let budget = summarizer_part_budget(2048, 512, 100, &c);
        assert!(c.scale(budget + 100) + 512 <= 2048, "{budget}");
        assert_eq!(
            summarizer_part_budget(1000, 0, 100, &Calibration::exact()),
            500,
            "never more than half the window"
        );
        assert_eq!(summarizer_part_budget(100, 200, 5, &c), 1);
    }
}
