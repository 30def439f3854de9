//! The tokens re-sending an agent's window would cost, for the tokens-avoided metric, kept as a
//! running tally between turns: the estimated tokens of the last `history_window` messages the
//! agent can see, up to the message its last turn answered. A delta turn then counts only the
//! messages that arrived since (which it reads anyway) instead of reading the whole window again:
//! that read was a seventh of a turn's CPU.

use std::collections::VecDeque;

use legio_core::{estimate_message_tokens, Delivery, Seq};
use legio_store::EventLog;

use crate::error::OpsError;
use crate::prepare::{PreparedTurn, TurnInputs, MAX_DELTA};

/// The estimated tokens of the last messages an agent can see, through one seq. Starts empty;
/// any turn that is not a delta from the tallied seq counts from the log again.
#[derive(Clone, Debug, Default)]
pub struct WindowTally {
    /// The seq of the last message tallied (the message the last turn answered).
    through: Option<Seq>,
    /// Estimated tokens of the last messages up to `through`, oldest first, at most the window.
    tokens: VecDeque<u64>,
}

impl WindowTally {
    /// Forgets everything: the next turn counts from the log.
    pub fn clear(&mut self) {
        self.through = None;
        self.tokens.clear();
    }

    /// Starts again from `before` (the last messages before `new`, oldest first) and counts the
    /// window of the message at `new` with `new_tokens`.
    fn restart(
        &mut self,
        before: impl IntoIterator<Item = u64>,
        new: Seq,
        new_tokens: u64,
        window: usize,
    ) -> u64 {
        self.clear();
        self.tokens.extend(before);
        self.advance(std::iter::empty(), new, new_tokens, window)
    }

    /// Adds `between` (the messages after `through` and before `new`, oldest first), counts
    /// the window of the message at `new` (the last `window` messages before it, and it), then
    /// tallies `new` too.
    fn advance(
        &mut self,
        between: impl IntoIterator<Item = u64>,
        new: Seq,
        new_tokens: u64,
        window: usize,
    ) -> u64 {
        self.tokens.extend(between);
        self.trim(window);
        let counted = self.tokens.iter().sum::<u64>() + new_tokens;
        self.tokens.push_back(new_tokens);
        self.trim(window);
        self.through = Some(new);
        counted
    }

    fn trim(&mut self, window: usize) {
        while self.tokens.len() > window {
            self.tokens.pop_front();
        }
    }
}

/// Estimated tokens that re-sending the window would cost for `turn`: the last `history_window`
/// visible messages before its new message, plus the new message. For the tokens-avoided metric;
/// equal to the plan's own estimate unless the plan is a delta. A delta from the seq `tally`
/// holds reads only the messages since; otherwise the window is read. Blocks on a log read.
pub fn window_tokens(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    turn: &PreparedTurn,
    tally: &mut WindowTally,
) -> Result<u64, OpsError> {
    let plan = &turn.plan;
    let Delivery::Delta { checkpoint } = turn.decision.delivery else {
        tally.clear();
        return Ok(plan.estimated_tokens);
    };
    let window = inputs.settings.history_window;
    let (new, new_tokens) = (
        plan.new_message.seq,
        estimate_message_tokens(&plan.new_message.message),
    );
    let viewer = inputs.spec.viewer();
    if tally.through == Some(checkpoint) {
        let after = log.visible_after(inputs.conversation, viewer, checkpoint, MAX_DELTA)?;
        if after.len() < MAX_DELTA {
            let between = after
                .iter()
                .filter(|r| r.seq < new)
                .filter_map(|r| r.event.as_message())
                .map(estimate_message_tokens);
            let counted = tally.advance(between, new, new_tokens, window);
            // Debug builds (every test) check the tally against the window read whole.
            debug_assert_eq!(
                Ok(counted),
                read_window(log, inputs, new).map(|before| before.iter().sum::<u64>() + new_tokens),
                "the tallied window of {} at {new} differs from the log's",
                inputs.spec.name
            );
            return Ok(counted);
        }
    }
    let before = read_window(log, inputs, new)?;
    Ok(tally.restart(before, new, new_tokens, window))
}

/// The estimated tokens of the last `history_window` messages the agent sees before `new`,
/// oldest first.
fn read_window(
    log: &dyn EventLog,
    inputs: &TurnInputs<'_>,
    new: Seq,
) -> Result<Vec<u64>, OpsError> {
    let window = inputs.settings.history_window;
    let before = log.visible_before(inputs.conversation, inputs.spec.viewer(), new, window)?;
    Ok(before
        .iter()
        .filter_map(|r| r.event.as_message())
        .map(estimate_message_tokens)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message's tokens in log order, and the window counted the slow way.
    fn naive(all: &[u64], new: usize, window: usize) -> u64 {
        all[new.saturating_sub(window)..new].iter().sum::<u64>() + all[new]
    }

    /// Turns at random places of a growing history, each a delta from the last (advance) or
    /// after a boundary (restart), count what the whole window counts.
    #[test]
    fn a_tally_counts_what_reading_the_window_counts() {
        let mut random = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |below: u64| {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random % below
        };
        for window in [1, 2, 5, 50] {
            let all: Vec<u64> = (0..400).map(|_| 1 + next(300)).collect();
            let mut tally = WindowTally::default();
            let mut last: Option<usize> = None;
            let mut at = 0;
            while at < all.len() {
                let counted = match last {
                    Some(from) if next(8) != 0 => tally.advance(
                        all[from + 1..at].iter().copied(),
                        Seq(at as u64),
                        all[at],
                        window,
                    ),
                    _ => {
                        let before = all[at.saturating_sub(window)..at].iter().copied();
                        tally.restart(before, Seq(at as u64), all[at], window)
                    }
                };
                assert_eq!(
                    counted,
                    naive(&all, at, window),
                    "window {window}, message {at}"
                );
                assert_eq!(tally.through, Some(Seq(at as u64)));
                last = Some(at);
                at += 1 + next(4) as usize;
            }
        }
    }

    #[test]
    fn a_cleared_tally_holds_nothing() {
        let mut tally = WindowTally::default();
        tally.restart([3, 4], Seq(9), 5, 10);
        tally.clear();
        assert_eq!(tally.through, None);
        assert_eq!(tally.advance([], Seq(10), 7, 10), 7);
    }
}
