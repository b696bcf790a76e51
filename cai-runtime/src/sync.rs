//! Locking that survives a panic elsewhere.

use std::sync::{Mutex, MutexGuard};

/// A mutex's guard; a panic elsewhere while it was held does not poison it for the process
/// (every value caijit keeps behind a mutex is valid between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
