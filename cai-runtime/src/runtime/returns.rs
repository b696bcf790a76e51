//! What caijit keeps alive for work it cannot wait for: objects dropped once an event has
//! completed ([`Deferred`]), and objects captured graphs hand back when they are destroyed
//! ([`GraphReturns`]). `Context::release_after` and `Context::collect_released` use them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;
use crate::sys::{RawEvent, RawStream};

/// Objects handed back by destroyed graphs (on a driver thread), dropped by the next
/// [`Context::collect_released`] on a thread of the caller's.
#[derive(Default)]
pub(super) struct GraphReturns {
    pub(super) objects: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    pub(super) any: AtomicBool,
}

impl GraphReturns {
    /// What a graph calls (on a driver thread, [`sys::Driver::keep_with_capture`]) to hand
    /// back what it kept: held here until the next [`Context::collect_released`].
    pub(super) fn receiver<T: Send + 'static>(self: &Arc<Self>) -> impl FnOnce(T) + Send + 'static {
        let returns = self.clone();
        move |object| {
            lock(&returns.objects).push(Box::new(object));
            returns.any.store(true, Ordering::Release);
        }
    }
}

impl std::fmt::Debug for GraphReturns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphReturns({} handed back)", lock(&self.objects).len())
    }
}

/// `(stream, event recorded on it, object)`, in the order recorded: each object is dropped
/// once its event has completed.
#[derive(Default)]
pub(super) struct Deferred(pub(super) Vec<(RawStream, RawEvent, Box<dyn std::any::Any + Send>)>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({} pending)", self.0.len())
    }
}
