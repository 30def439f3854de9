//! Where a benchmark window's slow turns waited: the store's commit steps (each step of every
//! group commit, `legio_store_commit_step_seconds`, caught by a metrics recorder installed here,
//! with each append's wait from submit to acknowledgement and each write of the list overlay)
//! and how late a sleeping thread woke (the machine's scheduling), lined up against the turns
//! that took longer than a bound. Benchmarks only: the recorder replaces any global one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder};
use metrics::{SharedString, Unit};

use crate::bench::{fmt_dur, percentile};

/// Something that took time: when it ended, and how long it took.
pub type Span = (Instant, Duration);

/// Named spans, e.g. every fdatasync of a window.
#[derive(Debug, Default)]
pub struct Spans {
    pub name: String,
    pub spans: Vec<Span>,
}

/// The spans by name, and whether they are being kept (only between `start` and `finish`: kept
/// all along, their growing vectors were reallocated on the committer's thread, a stall of
/// their own in the window measured).
#[derive(Debug, Default)]
struct Kept {
    on: AtomicBool,
    spans: Mutex<BTreeMap<String, Vec<Span>>>,
}

type Shared = Arc<Kept>;

/// Room for a window's spans of one name (a 10 s open loop of `turns` has about 64,000 appends).
const ROOM: usize = 1 << 17;

/// The store's commit steps, append waits and list writes (by name), kept while started.
#[derive(Clone, Debug)]
pub struct CommitSteps(Shared);

impl CommitSteps {
    /// Installs the recorder; `None` when another global recorder is already set.
    pub fn install() -> Option<Self> {
        let shared = Shared::default();
        let recorder = StepRecorder(Arc::clone(&shared));
        metrics::set_global_recorder(recorder).ok()?;
        Some(Self(shared))
    }

    /// Keeps every span from now on (and drops any kept before).
    pub fn start(&self) {
        self.0
            .spans
            .lock()
            .expect("the step recorder's lock")
            .clear();
        self.0.on.store(true, Ordering::Relaxed);
    }

    /// Stops keeping spans and hands over those kept since `start`, one [`Spans`] per name.
    pub fn finish(&self) -> Vec<Spans> {
        self.0.on.store(false, Ordering::Relaxed);
        let kept = std::mem::take(&mut *self.0.spans.lock().expect("the step recorder's lock"));
        kept.into_iter()
            .map(|(name, spans)| Spans { name, spans })
            .collect()
    }
}

struct StepRecorder(Shared);

struct StepHistogram {
    step: String,
    shared: Shared,
}

impl HistogramFn for StepHistogram {
    fn record(&self, seconds: f64) {
        if !self.shared.on.load(Ordering::Relaxed) {
            return;
        }
        let span = (Instant::now(), Duration::from_secs_f64(seconds.max(0.0)));
        let mut spans = self.shared.spans.lock().expect("the step recorder's lock");
        match spans.get_mut(&self.step) {
            Some(kept) => kept.push(span),
            None => {
                let mut kept = Vec::with_capacity(ROOM);
                kept.push(span);
                spans.insert(self.step.clone(), kept);
            }
        }
    }
}

impl Recorder for StepRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    /// The `histogram!` macro registers on every call: outside a window this hands back a no-op
    /// at once, so the bench's other windows pay no allocation per append or commit step.
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        use legio_store::metrics::{APPEND_LATENCY, COMMIT_STEP, LIST_WRITE};
        if !self.0.on.load(Ordering::Relaxed) {
            return Histogram::noop();
        }
        let step = match key.name() {
            COMMIT_STEP => key
                .labels()
                .find(|l| l.key() == "step")
                .map_or("?", |l| l.value()),
            APPEND_LATENCY => "append (submit to ack)",
            LIST_WRITE => "list write",
            _ => return Histogram::noop(),
        };
        Histogram::from_arc(Arc::new(StepHistogram {
            step: step.to_owned(),
            shared: Arc::clone(&self.0),
        }))
    }
}

/// A thread that sleeps 1 ms over and over and records how much later than asked it woke: the
/// time the machine left a runnable thread waiting.
#[derive(Debug)]
pub struct WakeProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Span>>,
}

impl WakeProbe {
    const NAP: Duration = Duration::from_millis(1);

    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wake-probe".into())
            .spawn(move || {
                let mut lags = Vec::with_capacity(1 << 15);
                while !flag.load(Ordering::Relaxed) {
                    let asleep = Instant::now();
                    std::thread::sleep(Self::NAP);
                    let woke = Instant::now();
                    lags.push((woke, (woke - asleep).saturating_sub(Self::NAP)));
                }
                lags
            })
            .expect("starting the wake probe");
        Self { stop, thread }
    }

    pub fn finish(self, name: &str) -> Spans {
        self.stop.store(true, Ordering::Relaxed);
        Spans {
            name: name.to_owned(),
            spans: self.thread.join().expect("the wake probe"),
        }
    }
}

/// Lines that say, of the `turns` (each its start and latency) slower than `slow`, how many
/// overlapped a span of each source longer than `long`, and how many overlapped none; then each
/// source's p50, p99 and max.
pub fn attribute(
    turns: &[(Instant, Duration)],
    slow: Duration,
    long: Duration,
    sources: &[Spans],
) -> Vec<String> {
    let slow_turns: Vec<_> = turns.iter().filter(|(_, l)| *l > slow).collect();
    let mut explained = vec![false; slow_turns.len()];
    let mut by_source = Vec::new();
    for source in sources {
        let long_spans: Vec<&Span> = source.spans.iter().filter(|(_, d)| *d > long).collect();
        let overlaps = |(start, latency): &(Instant, Duration)| {
            let end = *start + *latency;
            long_spans.iter().any(|(e, d)| *e > *start && *e - *d < end)
        };
        let mut n = 0;
        for (i, turn) in slow_turns.iter().enumerate() {
            if overlaps(turn) {
                n += 1;
                explained[i] = true;
            }
        }
        by_source.push(format!("{} {n}", source.name));
    }
    let none = explained.iter().filter(|e| !**e).count();
    let mut lines = vec![format!(
        "{} of {} turns over {} ms; overlapping a span over {} ms of: {}; of none: {none}",
        slow_turns.len(),
        turns.len(),
        slow.as_millis(),
        long.as_millis(),
        by_source.join(", ")
    )];
    for source in sources {
        let mut nanos: Vec<u64> = source
            .spans
            .iter()
            .map(|(_, d)| d.as_nanos() as u64)
            .collect();
        nanos.sort_unstable();
        lines.push(format!(
            "{}: {} spans, p50 {}, p99 {}, max {}, over {} ms: {}",
            source.name,
            nanos.len(),
            fmt_dur(percentile(&nanos, 0.5)),
            fmt_dur(percentile(&nanos, 0.99)),
            fmt_dur(percentile(&nanos, 1.0)),
            long.as_millis(),
            nanos
                .iter()
                .filter(|n| **n > long.as_nanos() as u64)
                .count()
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test of this crate that installs the global recorder.
    #[test]
    fn the_recorder_keeps_the_stores_spans_by_name_only_while_started() {
        use legio_store::metrics::{APPEND_LATENCY, COMMIT_STEP, LIST_WRITE};
        let steps = CommitSteps::install().expect("no other recorder in this test binary");
        let record = || {
            metrics::histogram!(COMMIT_STEP, "step" => "fdatasync").record(0.006);
            metrics::histogram!(APPEND_LATENCY).record(0.002);
            metrics::histogram!(LIST_WRITE).record(0.010);
            metrics::histogram!("some_other_seconds").record(1.0);
        };
        record();
        steps.start();
        record();
        record();
        let kept = steps.finish();
        record();
        let names: Vec<(&str, usize)> = kept.iter().map(|s| (&s.name[..], s.spans.len())).collect();
        assert_eq!(
            names,
            [
                ("append (submit to ack)", 2),
                ("fdatasync", 2),
                ("list write", 2)
            ]
        );
        assert_eq!(kept[1].spans[0].1, Duration::from_millis(6));
        steps.start();
        assert!(
            steps.finish().is_empty(),
            "nothing recorded since the start"
        );
    }

    #[test]
    fn a_slow_turn_is_put_down_to_the_long_spans_it_overlaps() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let turns = [(t0, ms(20)), (t0 + ms(100), ms(15)), (t0 + ms(200), ms(2))];
        let disk = Spans {
            name: "fdatasync".into(),
            // Ends inside the first turn (long), inside the third (short turn), and a short one.
            spans: vec![
                (t0 + ms(10), ms(8)),
                (t0 + ms(201), ms(9)),
                (t0 + ms(105), ms(1)),
            ],
        };
        let wake = Spans {
            name: "wake".into(),
            // Ends before the second turn starts, though it is long.
            spans: vec![(t0 + ms(99), ms(30))],
        };
        let lines = attribute(&turns, ms(10), ms(5), &[disk, wake]);
        assert_eq!(
            lines[0],
            "2 of 3 turns over 10 ms; overlapping a span over 5 ms of: fdatasync 1, wake 0; of none: 1"
        );
        assert!(
            lines[1].starts_with("fdatasync: 3 spans, p50 8.00 ms"),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with("over 5 ms: 2"), "{}", lines[1]);
    }
}
