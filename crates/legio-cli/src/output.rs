//! Standard output for the operator: every command prints through `outln!` / `out!`, so a reader
//! that stops early (`legio replay | head`) ends the command quietly instead of a panic, and text
//! that came from messages is made safe for a terminal (`visible`).

use std::io::Write;

/// The exit status when standard output closed early: the status a shell reports for a program
/// ended by SIGPIPE (128 + 13), so `set -o pipefail` scripts can tell it from success.
pub const STDOUT_CLOSED: u8 = 141;

/// Prints `line` and a newline on standard output (see `outln!`).
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        failed(&e);
    }
}

/// Prints `text` on standard output and flushes it (see `out!`: prompts without a newline).
#[cfg_attr(not(feature = "runtime"), allow(dead_code))] // only `chat` prompts
pub fn text(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Whether `error` (anywhere in its chain) is standard output closed by its reader.
pub fn is_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A write to standard output failed: its reader is gone (exit quietly with `STDOUT_CLOSED`), or
/// something else is wrong with it (say so on stderr, exit 1).
fn failed(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(STDOUT_CLOSED));
    }
    eprintln!("legio: cannot write to standard output: {error}");
    std::process::exit(1)
}

/// `text` with every control character escaped visibly (`\u{1b}`, `\r`, `\t`), so a message
/// cannot move the cursor, recolour, retitle or beep the operator's terminal: C0 controls but the
/// newline, DEL, C1 controls, and the bidirectional overrides that reorder what is shown. Newlines
/// are kept (callers that print one line per item flatten them first).
pub fn visible(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_owned();
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if needs_escape(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    shown
}

/// Whether `visible` escapes `c`.
pub fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn controls_are_escaped_visibly_and_plain_text_is_untouched() {
        assert_eq!(visible("plain, ünïcode ✓\nnext"), "plain, ünïcode ✓\nnext");
        assert_eq!(
            visible("a\u{1b}[2Jb\rc\u{7}d\te\u{9b}f\u{202e}g\u{7f}"),
            "a\\u{1b}[2Jb\\rc\\u{7}d\\te\\u{9b}f\\u{202e}g\\u{7f}"
        );
    }
}
