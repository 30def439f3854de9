//! The Claude Code CLI's process, tied to legio's life: spawned in a process group of its own
//! with `PR_SET_PDEATHSIG(SIGKILL)` (Linux), from one long-lived thread (the signal follows the
//! thread that forked, and tokio's blocking threads come and go); recorded in a pid file while it
//! runs; its whole group killed when the turn is dropped or stopped; and, before a process's
//! first turn, the groups a dead legio process left behind killed ([`reap_orphans`]).
//!
//! A pid file `children/PID` in the provider's state directory holds `PID START OWNER
//! OWNER_START`: the child's pid and start time (`/proc/PID/stat`'s field 22, in clock ticks
//! since boot) and those of the legio process that spawned it. A pid is only ever killed when
//! its start time is the recorded one, so a reused pid is left alone; an owner that still runs
//! (another legio process, or this one) keeps its children.
//!
//! The one module of the workspace allowed `unsafe` (ARCHITECTURE.md): `pre_exec` is unsafe by
//! nature, and `killpg` and `kill` are libc calls with no memory-safety preconditions.
#![allow(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The folder of pid files under the state directory.
const CHILDREN: &str = "children";

/// A spawned CLI and its pid file; dropping it kills the CLI's process group (unless the CLI
/// was waited for) and removes the pid file.
#[derive(Debug)]
pub(crate) struct Running {
    /// The child (its pipes are taken by the caller).
    pub(crate) child: Child,
    /// Its pid, which is also its process group's id; `None` once waited for.
    group: Option<i32>,
    /// Its pid file, if one could be written.
    record: Option<PathBuf>,
}

impl Running {
    /// Spawns `command` as the CLI: its own process group, killed with legio (Linux), recorded
    /// under `state_dir` while it runs.
    pub(crate) async fn spawn(mut command: Command, state_dir: &Path) -> io::Result<Self> {
        command.process_group(0).kill_on_drop(true);
        die_with_parent(&mut command);
        let child = spawn_on_the_spawner_thread(command).await?;
        let group = child.id().and_then(|id| i32::try_from(id).ok());
        let record = group.and_then(|pid| write_record(state_dir, pid));
        Ok(Self {
            child,
            group,
            record,
        })
    }

    /// Waits for the CLI to exit; once it has, its group is no longer killed on drop (its pid
    /// may be reused).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.child.wait().await?;
        self.group = None;
        Ok(status)
    }

    /// Kills the CLI's whole process group (the CLI and whatever it started), if not waited for.
    pub(crate) fn kill_group(&mut self) {
        if let Some(group) = self.group {
            kill_group(group);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Before the child's own kill_on_drop, while its pid is not reaped: the group id is ours.
        self.kill_group();
        if let Some(record) = &self.record {
            let _ = std::fs::remove_file(record);
        }
    }
}

fn kill_group(group: i32) {
    if group > 0 {
        // SAFETY: killpg has no memory-safety preconditions; a group that is gone is ESRCH.
        unsafe {
            libc::killpg(group, libc::SIGKILL);
        }
    }
}

/// On Linux, the child gets SIGKILL when the thread that forked it ends (with legio's process:
/// the spawner thread lives as long as it). Runs between fork and exec, so only
/// async-signal-safe calls and no allocation.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure calls prctl and getppid only (both async-signal-safe syscalls) and
    // builds its errors without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            // legio died between fork and prctl: the signal will never come.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

/// A command to spawn on the spawner thread, in the runtime of `handle`.
struct Job {
    command: Command,
    handle: Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The one thread children are forked from, started on first use and never ended, so that a
/// child's parent-death signal means legio's process died.
fn spawner() -> Option<&'static mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("legio-claude-code-spawner".into())
                .spawn(move || {
                    for job in queue {
                        // The child's pipes and exit are driven by the caller's runtime.
                        let _entered = job.handle.enter();
                        let mut command = job.command;
                        let _ = job.reply.send(command.spawn());
                    }
                })
                .ok()
                .map(|_| jobs)
        })
        .as_ref()
}

async fn spawn_on_the_spawner_thread(mut command: Command) -> io::Result<Child> {
    let Some(jobs) = spawner() else {
        // No thread could be started: spawn here (the signal then follows this thread).
        return command.spawn();
    };
    let (reply, answer) = oneshot::channel();
    let job = Job {
        command,
        handle: Handle::current(),
        reply,
    };
    if let Err(mpsc::SendError(job)) = jobs.send(job) {
        let mut command = job.command;
        return command.spawn();
    }
    answer
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the spawner thread is gone")))
}

/// The start time of process `pid` (clock ticks since boot), if it runs (or is a zombie).
fn start_time(pid: i32) -> Option<u64> {
    stat_fields(pid).and_then(|f| f.start)
}

/// The fields of `/proc/PID/stat` used here: the process group and the start time.
struct Stat {
    group: Option<i32>,
    start: Option<u64>,
}

fn stat_fields(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name, from field 3 (state) on.
    let rest = stat.rsplit_once(") ")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        group: fields.get(2).and_then(|f| f.parse().ok()),
        start: fields.get(19).and_then(|f| f.parse().ok()),
    })
}

/// This process's pid and start time.
pub(crate) fn this_process() -> (i32, u64) {
    let pid = std::process::id() as i32;
    (pid, start_time(pid).unwrap_or(0))
}

/// Writes the pid file of child `pid` (best effort: without /proc there is nothing to check a
/// pid against later, and no file is written).
fn write_record(state_dir: &Path, pid: i32) -> Option<PathBuf> {
    let start = start_time(pid)?;
    let (owner, owner_start) = this_process();
    let folder = state_dir.join(CHILDREN);
    crate::claude_code::state::private_dir(&folder).ok()?;
    let path = folder.join(pid.to_string());
    std::fs::write(&path, format!("{pid} {start} {owner} {owner_start}\n")).ok()?;
    Some(path)
}

/// One pid file's content.
#[derive(Debug, PartialEq, Eq)]
struct Record {
    pid: i32,
    start: u64,
    owner: i32,
    owner_start: u64,
}

fn parse_record(text: &str) -> Option<Record> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let mut next = || fields.next()?.ok();
    Some(Record {
        pid: i32::try_from(next()?).ok()?,
        start: next()?,
        owner: i32::try_from(next()?).ok()?,
        owner_start: next()?,
    })
}

/// Whether process `pid` runs with start time `start` (is the same process as recorded).
pub(crate) fn is_running(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// Kills what a dead legio process's CLI children left running under `state_dir`: for each pid
/// file whose owner no longer runs, the recorded CLI if it still runs (same start time), and
/// every process of its group that started after it (the CLI's own children, which outlive it:
/// the parent-death signal is the CLI's alone). Then removes the pid file. Returns the pids
/// killed. Blocking file IO; a handful of small files.
pub(crate) fn reap_orphans(state_dir: &Path) -> Vec<i32> {
    let mut killed = Vec::new();
    let Ok(entries) = std::fs::read_dir(state_dir.join(CHILDREN)) else {
        return killed;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(record) = std::fs::read_to_string(&path)
            .ok()
            .as_deref()
            .and_then(parse_record)
        else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if is_running(record.owner, record.owner_start) {
            continue;
        }
        for pid in group_members(&record) {
            // SAFETY: kill has no memory-safety preconditions.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed.push(pid);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    if !killed.is_empty() {
        tracing::warn!(state_dir = %state_dir.display(), pids = ?killed, "killed Claude Code CLI processes a previous legio process left running");
    }
    killed
}

/// The processes of the recorded CLI's group: the CLI itself if it still runs, and those with
/// its group id started no earlier. While the group has a member its id cannot be given to a
/// new process, so a member found is the CLI's (a group made anew under a reused pid would need
/// that pid's new owner to lead it: checked by the start time when it still runs).
fn group_members(record: &Record) -> Vec<i32> {
    if let Some(start) = start_time(record.pid) {
        if start != record.start {
            return Vec::new();
        }
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            stat_fields(pid).is_some_and(|s| {
                s.group == Some(record.pid) && s.start.is_some_and(|t| t >= record.start)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_parses_back_and_junk_does_not() {
        assert_eq!(
            parse_record("12 345 67 890\n"),
            Some(Record {
                pid: 12,
                start: 345,
                owner: 67,
                owner_start: 890
            })
        );
        assert_eq!(parse_record("12 345"), None);
        assert_eq!(parse_record("x 1 2 3"), None);
    }

    #[test]
    fn this_process_runs_and_a_wrong_start_time_is_another_process() {
        let (pid, start) = this_process();
        assert!(start > 0);
        assert!(is_running(pid, start));
        assert!(!is_running(pid, start + 1));
    }
}
