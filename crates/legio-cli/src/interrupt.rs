//! Ctrl-C for the commands that stream (`replay` live, and `replay --follow`, live or not): one
//! listener for the whole command, so a Ctrl-C the runtime takes in while nothing waits for it
//! (between the two requests of a live follow, while the second is sent) is seen by the next
//! wait. `tokio::signal::ctrl_c()` sees only the presses taken in after its future is first
//! polled (and once any has been, a press no longer ends the process), so a new one for each
//! wait missed such a press, and the command went on until a second one. On Unix only: elsewhere
//! the listener is such a future, made when the listener is and again after each press.

use std::io;

/// Listens for Ctrl-C from its making on, on Unix (see the module docs).
pub struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
    #[cfg(not(unix))]
    pressed: std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send>>,
}

impl Interrupt {
    /// Listens from now on. Call it inside the tokio runtime that will wait (its signal
    /// driver).
    pub fn new() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                signal: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {
                pressed: Box::pin(tokio::signal::ctrl_c()),
            })
        }
    }

    /// Waits for a Ctrl-C pressed since the listener was made, or since the last one this
    /// returned for.
    pub async fn pressed(&mut self) {
        #[cfg(unix)]
        {
            self.signal.recv().await;
        }
        #[cfg(not(unix))]
        {
            let _ = (&mut self.pressed).await;
            self.pressed = Box::pin(tokio::signal::ctrl_c());
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::signal::unix::{signal, SignalKind};

    #[test]
    fn a_ctrl_c_pressed_while_nothing_waits_is_seen_by_the_next_wait() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut interrupt = Interrupt::new().unwrap();
            // A second listener, to know when the runtime has taken the press in.
            let mut seen = signal(SignalKind::interrupt()).unwrap();
            let sent = std::process::Command::new("kill")
                .args(["-INT", &std::process::id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
            tokio::time::timeout(Duration::from_secs(30), seen.recv())
                .await
                .expect("the runtime takes the press in");
            // Taken in while nothing waited on `interrupt` (as while a line is printed, or
            // between two requests): its next wait still sees it.
            tokio::time::timeout(Duration::from_secs(10), interrupt.pressed())
                .await
                .expect("the press made before the wait is seen");
        });
    }
}
