//! The retry pace of the backend's appends, reads and lease listings: a first pause of 20 ms,
//! doubled after each failure up to 1 s, for as long as the next try would still start within
//! the deadline (`append_deadline`).

use std::time::{Duration, Instant};

const FIRST: Duration = Duration::from_millis(20);
const LONGEST: Duration = Duration::from_secs(1);

/// One operation's retries, counted from its first try.
pub(crate) struct Backoff {
    started: Instant,
    pause: Duration,
    deadline: Duration,
}

impl Backoff {
    /// Starts counting now.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self {
            started: Instant::now(),
            pause: FIRST,
            deadline,
        }
    }

    /// The pause before the next try, or `None` when it would end past the deadline: give up.
    pub(crate) fn next(&mut self) -> Option<Duration> {
        if self.started.elapsed() + self.pause > self.deadline {
            return None;
        }
        let pause = self.pause;
        self.pause = (pause * 2).min(LONGEST);
        Some(pause)
    }

    /// How long since the first try.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_a_second_and_stop_at_the_deadline() {
        let mut long = Backoff::new(Duration::from_secs(3600));
        let pauses: Vec<u64> = (0..8)
            .map(|_| long.next().unwrap().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(Backoff::new(Duration::ZERO).next(), None);
        assert_eq!(Backoff::new(Duration::from_millis(10)).next(), None);
    }
}
