//! The restart policy: exponential backoff with jitter, within an intensity limit (at most N
//! restarts in a window). ractor's default is to stop; this is ours. The pace is backon's
//! exponential backoff, the one the store and the providers retry with; which step of it a
//! failure takes is the number of restarts still in the window (old ones fall out), so the
//! tracker counts and backon paces.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use legio_config::RestartSettings;

/// What to do after a failure.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RestartDecision {
    /// Restart after this delay.
    Restart(Duration),
    /// Too many restarts in the window: the agent is failed until a manual reset.
    GiveUp {
        /// Restarts made within the window.
        restarts: u32,
    },
}

/// One agent's recent restarts.
#[derive(Clone, Debug, Default)]
pub struct RestartTracker {
    restarts: VecDeque<Instant>,
}

impl RestartTracker {
    /// Records a failure at `now`; `jitter` in `[0, 1)` spreads restarts of many agents apart.
    pub fn on_failure(
        &mut self,
        settings: &RestartSettings,
        now: Instant,
        jitter: f64,
    ) -> RestartDecision {
        while self
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > settings.window)
        {
            self.restarts.pop_front();
        }
        let count = self.restarts.len() as u32;
        if count >= settings.max_restarts {
            return RestartDecision::GiveUp { restarts: count };
        }
        self.restarts.push_back(now);
        let capped = pace(settings, count);
        // Jitter: between 50% and 100% of the backoff.
        RestartDecision::Restart(capped.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0)))
    }

    /// Forgets every restart (after a manual reset).
    pub fn clear(&mut self) {
        self.restarts.clear();
    }
}

/// The pause before restart number `count + 1` in the window: `backoff` doubled `count` times,
/// at most `max_backoff`.
fn pace(settings: &RestartSettings, count: u32) -> Duration {
    use backon::BackoffBuilder;
    let pauses = backon::ExponentialBuilder::new()
        .with_min_delay(settings.backoff)
        .with_max_delay(settings.max_backoff)
        .with_factor(2.0)
        .without_max_times()
        .build();
    let pause = pauses.take(count as usize + 1).last();
    // backon doubles in f32 seconds (200 ms comes out as 199.99999 ms): the settings are whole
    // milliseconds, and so are the pauses.
    let pause = pause.map(|p| Duration::from_millis((p.as_secs_f64() * 1000.0).round() as u64));
    pause
        .unwrap_or(settings.max_backoff)
        .min(settings.max_backoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RestartSettings {
        RestartSettings {
            max_restarts: 3,
            window: Duration::from_secs(60),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(250),
        }
    }

    #[test]
    fn backoff_doubles_is_capped_and_gives_up_past_the_intensity() {
        let s = settings();
        let mut t = RestartTracker::default();
        let now = Instant::now();
        assert_eq!(
            t.on_failure(&s, now, 1.0),
            RestartDecision::Restart(Duration::from_millis(100))
        );
        assert_eq!(
            t.on_failure(&s, now, 1.0),
            RestartDecision::Restart(Duration::from_millis(200))
        );
        assert_eq!(
            t.on_failure(&s, now, 0.0),
            RestartDecision::Restart(Duration::from_millis(125))
        );
        assert_eq!(
            t.on_failure(&s, now, 1.0),
            RestartDecision::GiveUp { restarts: 3 }
        );
    }

    #[test]
    fn old_restarts_leave_the_window() {
        let s = settings();
        let mut t = RestartTracker::default();
        let start = Instant::now();
        for _ in 0..3 {
            assert!(matches!(
                t.on_failure(&s, start, 0.5),
                RestartDecision::Restart(_)
            ));
        }
        let later = start + Duration::from_secs(61);
        assert!(matches!(
            t.on_failure(&s, later, 0.5),
            RestartDecision::Restart(_)
        ));
        t.clear();
        assert_eq!(
            t.on_failure(&s, later, 1.0),
            RestartDecision::Restart(Duration::from_millis(100))
        );
    }
}
