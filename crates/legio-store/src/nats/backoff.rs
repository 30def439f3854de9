//! The retry pace of the backend's appends, reads and lease listings: backon's exponential
//! backoff, a first pause of 20 ms doubled after each failure up to 1 s, for as long as the next
//! try would still start within the deadline (`append_deadline`). Creating the stream keeps a
//! slower pace of its own ([`Backoff::paced`]).

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

const FIRST: Duration = Duration::from_millis(20);
const LONGEST: Duration = Duration::from_secs(1);

/// One operation's retries, counted from its first try.
pub(crate) struct Backoff {
    started: Instant,
    pauses: ExponentialBackoff,
    deadline: Duration,
}

impl Backoff {
    /// Starts counting now, at the log's pace.
    pub(crate) fn new(deadline: Duration) -> Self {
        Self::paced(FIRST, LONGEST, deadline)
    }

    /// Starts counting now: a first pause of `first`, doubled up to `longest`.
    pub(crate) fn paced(first: Duration, longest: Duration, deadline: Duration) -> Self {
        Self {
            started: Instant::now(),
            pauses: ExponentialBuilder::new()
                .with_min_delay(first)
                .with_max_delay(longest)
                .without_max_times()
                .build(),
            deadline,
        }
    }

    /// The pause before the next try, or `None` when it would end past the deadline: give up.
    pub(crate) fn next(&mut self) -> Option<Duration> {
        // backon doubles in f32 seconds (40 ms comes out as 39.999999 ms): the pace is set in
        // whole milliseconds, and so are its pauses.
        let pause = self.pauses.next()?;
        let pause = Duration::from_millis((pause.as_secs_f64() * 1000.0).round() as u64);
        (self.started.elapsed() + pause <= self.deadline).then_some(pause)
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

    #[test]
    fn creating_the_stream_waits_from_250_ms_doubled_up_to_2_s() {
        let mut slow = Backoff::paced(
            Duration::from_millis(250),
            Duration::from_secs(2),
            Duration::from_secs(30),
        );
        let pauses: Vec<u64> = (0..6)
            .map(|_| slow.next().unwrap().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [250, 500, 1000, 2000, 2000, 2000]);
    }
}
