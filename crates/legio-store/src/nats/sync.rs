//! Locking shared by the NATS backend's modules: a leaf, so that any of them can use it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`, also when a panic poisoned it: what the backend guards stays consistent (each
/// critical section is a single read or assignment), so a panicked holder loses nothing.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
