//! Helpers shared by the benchmarks in `benches/`: the scale knob, percentiles, number
//! formatting and the aligned tables every bench prints.

use std::time::Duration;

/// `LEGIO_BENCH_SCALE` (default 1.0): scales event counts and durations.
pub fn scale() -> f64 {
    match std::env::var("LEGIO_BENCH_SCALE") {
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => s,
            _ => panic!("LEGIO_BENCH_SCALE must be a positive number, got {text:?}"),
        },
        Err(_) => 1.0,
    }
}

/// Events per append while loading: `LEGIO_BENCH_LOAD_BATCH`, default 2,000 (large batches; sled's
/// layout, memory use and later reads depend on this, see the report).
pub fn load_batch() -> usize {
    match std::env::var("LEGIO_BENCH_LOAD_BATCH") {
        Ok(text) => match text.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("LEGIO_BENCH_LOAD_BATCH must be a positive integer, got {text:?}"),
        },
        Err(_) => 2_000,
    }
}

/// CPU time (user + system, all threads) a process has used so far, from `/proc/PID/stat`
/// (Linux; `None` elsewhere or when the process is gone). `pid` 0: this process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let path = if pid == 0 {
        "/proc/self/stat".to_owned()
    } else {
        format!("/proc/{pid}/stat")
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command (which may hold spaces) in parentheses: state is field 3, utime
    // and stime fields 14 and 15, in clock ticks of USER_HZ (100 on Linux).
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The CPU seconds of this process and of `others`, summed, so far.
pub fn cpu_of(others: &[u32]) -> (f64, f64) {
    let own = cpu_seconds(0).unwrap_or(0.0);
    let theirs = others.iter().filter_map(|&pid| cpu_seconds(pid)).sum();
    (own, theirs)
}

/// The `p` quantile (0..=1) of sorted nanoseconds.
pub fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    Duration::from_nanos(sorted[rank - 1])
}

pub fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

pub fn fmt_int(n: u64) -> String {
    let mut out = Vec::new();
    let mut in_group = 0;
    for c in n.to_string().chars().rev() {
        if in_group == 3 {
            out.push(',');
            in_group = 0;
        }
        out.push(c);
        in_group += 1;
    }
    out.iter().rev().collect()
}

pub fn fmt_rate(per_sec: f64) -> String {
    fmt_int(per_sec.round() as u64)
}

/// Prints an aligned table: the first column left-aligned, the others right-aligned.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::from("  ");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!("  {cell:>w$}"));
            }
        }
        println!("{}", out.trim_end());
    };
    line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    println!("  {}", "-".repeat(total));
    for row in rows {
        line(row);
    }
}

/// Prints each goal with its measured value and "goal met" / "goal NOT met".
pub fn print_goals(goals: &[(String, String, bool)]) {
    let rows: Vec<Vec<String>> = goals
        .iter()
        .map(|(goal, value, met)| {
            vec![
                goal.clone(),
                value.clone(),
                if *met { "goal met" } else { "goal NOT met" }.to_owned(),
            ]
        })
        .collect();
    print_table(&["goal", "measured", "verdict"], &rows);
    let all = goals.iter().all(|(_, _, met)| *met);
    println!(
        "  overall: {}",
        if all { "goal met" } else { "goal NOT met" }
    );
}

/// Appends `count` events from `next` in batches of `batch`, with a few appends in flight, then
/// flushes. `each` sees every event before it is submitted (to keep its encoding, say).
pub fn load(
    log: &dyn legio_store::EventLog,
    count: u64,
    batch: usize,
    mut next: impl FnMut() -> legio_core::Event,
    mut each: impl FnMut(&legio_core::Event),
) {
    let mut pending = std::collections::VecDeque::new();
    let mut left = count;
    while left > 0 {
        let n = left.min(batch as u64);
        left -= n;
        let events: Vec<legio_core::Event> = (0..n).map(|_| next()).collect();
        events.iter().for_each(&mut each);
        pending.push_back(log.submit(events).expect("submit"));
        if pending.len() >= 4 {
            if let Some(h) = pending.pop_front() {
                h.wait().expect("append");
            }
        }
    }
    for h in pending {
        h.wait().expect("append");
    }
    log.flush().expect("flush");
}

/// Prints the disk's own floor, measured now in a temporary folder (the folder kind the benches
/// use): one 20 KB write (a commit group of 64 small messages) and `fdatasync`, back to back, for
/// `duration`. No group can be durable faster than its fdatasync, so a latency goal below the
/// p99 printed here is a goal for the disk, not for the code.
pub fn print_disk_floor(duration: std::time::Duration) {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut file = std::fs::File::create(dir.path().join("probe")).expect("a probe file");
    let block = vec![b'x'; 20 * 1024];
    let mut latencies = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < duration {
        let one = std::time::Instant::now();
        file.write_all(&block).expect("writing the probe");
        file.sync_data().expect("fdatasync of the probe");
        latencies.push(one.elapsed().as_nanos() as u64);
    }
    latencies.sort_unstable();
    let max = std::time::Duration::from_nanos(latencies.last().copied().unwrap_or(0));
    println!(
        "  the disk alone (20 KB write + fdatasync, {} times, one thread): p50 {}, p99 {}, max {}",
        fmt_int(latencies.len() as u64),
        fmt_dur(percentile(&latencies, 0.50)),
        fmt_dur(percentile(&latencies, 0.99)),
        fmt_dur(max)
    );
}

/// The bytes this process has written so far, from `/proc/self/io` (Linux; `None` elsewhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoBytes {
    /// Through write syscalls (`wchar`; to files, pipes and sockets alike): what the code asked
    /// to write.
    pub written: u64,
    /// To the storage layer (`write_bytes`: whole pages, counted as they are dirtied): what the
    /// disk is asked to take, each commit's rewritten pages included.
    pub sent: u64,
}

impl IoBytes {
    /// The counts now.
    pub fn now() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/self/io").ok()?)
    }

    fn parse(text: &str) -> Option<Self> {
        let field = |name: &str| {
            text.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key == name).then(|| value.trim().parse().ok())?
            })
        };
        Some(Self {
            written: field("wchar")?,
            sent: field("write_bytes")?,
        })
    }

    /// "`A` written, `B` sent to the device per `what`" since `earlier`, over `count` of them.
    pub fn per(self, earlier: Self, count: u64, what: &str) -> String {
        let each =
            |now: u64, then: u64| now.saturating_sub(then) as f64 / count.max(1) as f64 / 1e3;
        format!(
            "{:.2} KB written, {:.2} KB sent to the device per {what}",
            each(self.written, earlier.written),
            each(self.sent, earlier.sent)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::IoBytes;

    #[test]
    fn io_bytes_are_read_from_the_kernels_fields_by_name() {
        let text = "rchar: 10\nwchar: 2048\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 8192\ncancelled_write_bytes: 4096\n";
        let io = IoBytes::parse(text).expect("both fields");
        assert_eq!(
            io,
            IoBytes {
                written: 2048,
                sent: 8192
            }
        );
        assert_eq!(IoBytes::parse("wchar: 1\n"), None);
        let later = IoBytes {
            written: 2048 + 3000,
            sent: 8192 + 8000,
        };
        assert_eq!(
            later.per(io, 2, "turn"),
            "1.50 KB written, 4.00 KB sent to the device per turn"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_shows_in_this_process_counts() {
        if !std::path::Path::new("/proc/self/io").exists() {
            eprintln!("skipped: this kernel keeps no I/O accounting (/proc/self/io is missing)");
            return;
        }
        let before = IoBytes::now().expect("/proc/self/io on Linux");
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(dir.path().join("probe"), vec![b'x'; 64 * 1024]).expect("a write");
        let after = IoBytes::now().expect("/proc/self/io on Linux");
        assert!(
            after.written >= before.written + 64 * 1024,
            "{before:?} then {after:?}"
        );
    }
}
