//! The source of an error that came from elsewhere (an `io::Error`, sled's, the NATS client's, a
//! task's join error), kept as it was for [`std::error::Error::source`] while the errors that
//! hold it stay `Clone` and comparable: one commit failure is handed to every writer of its
//! group, and tests compare errors. Shared behind an `Arc`; two sources are equal when they say
//! the same. A cause that is only words (a thread that panicked, a task that was cut) is an
//! `ErrorSource::new("words")`.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// A foreign error kept as the source of one of legio's errors (see the module docs).
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn Error + Send + Sync + 'static>);

impl ErrorSource {
    /// `error`, kept as it is: an error, a boxed one, or words (`&str`, `String`).
    pub fn new(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self(Arc::from(error.into()))
    }

    /// The error as it was given, to downcast (`source.get().downcast_ref::<std::io::Error>()`).
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        self.0.as_ref()
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The source's own chain goes on from the error it holds: a source is shown once, as itself.
impl Error for ErrorSource {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for ErrorSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ErrorSource {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error is kept as it was (it downcasts), clones share it, and equality is by message.
    #[test]
    fn a_source_keeps_its_error_and_compares_by_message() {
        let io = ErrorSource::new(std::io::Error::from(std::io::ErrorKind::StorageFull));
        let kind = io.get().downcast_ref::<std::io::Error>().map(|e| e.kind());
        assert_eq!(kind, Some(std::io::ErrorKind::StorageFull));
        assert_eq!(io.clone(), io);
        assert_eq!(ErrorSource::new("a"), ErrorSource::new("a"));
        assert_ne!(ErrorSource::new("a"), ErrorSource::new("b"));
        assert_eq!(ErrorSource::new("cut").to_string(), "cut");
    }
}
