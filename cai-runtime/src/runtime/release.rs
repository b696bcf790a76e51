//! Objects kept alive until the work that uses them has finished, without waiting for it:
//! [`Context::release_after`] and [`Context::collect_released`].

use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::{Context, Events};
use crate::error::Result;
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;
use crate::sys::RawStream;

impl Context {
    /// Keep `keep` alive until the work enqueued so far on `stream` (a CAI value) has
    /// finished, then drop it, without blocking the host: for memory the kernel reads whose
    /// owner caijit cannot order otherwise (a DLPack capsule, whose deleter hands the memory
    /// back to its producer). Objects are dropped by later calls of
    /// [`Context::collect_released`] (every launch makes one).
    ///
    /// On a stream that is being captured nothing runs yet: the work runs whenever the
    /// graph is replayed. The object is then kept by the captured graph itself (a graph
    /// user object), and dropped once that graph and every executable graph made from it
    /// are destroyed and their launches have finished.
    pub fn release_after(&self, stream: u64, keep: Box<dyn std::any::Any + Send>) -> Result<()> {
        self.collect_released();
        let raw = RawStream::from_cai(stream);
        let mut keep = keep;
        // (The legacy default stream is never captured, and never asked.)
        if stream != 1 {
            let d = self.bind()?;
            match d.keep_with_capture(raw, keep, self.from_graphs.receiver())? {
                Ok(()) => return Ok(()),
                Err(k) => keep = k,
            }
        }
        let mut events = Events::new();
        let recorded = self.take_events(1, &mut events).and_then(|()| Ok(self.bind()?.event_record(events[0], raw)?));
        if let Err(e) = recorded {
            self.return_events(&mut events);
            // Untracked, the object may only go once the stream is idle.
            if let Ok(d) = self.bind() {
                let _ = d.stream_synchronize(raw);
                bump(&COUNTERS.host_syncs);
            }
            return Err(e);
        }
        lock(&self.deferred).0.push((raw, events[0], keep));
        self.has_deferred.store(true, Ordering::Release);
        Ok(())
    }

    /// Drop the objects of [`Context::release_after`] whose work has finished (event
    /// queries, never a wait), and those destroyed graphs handed back. Cheap when nothing
    /// is pending.
    pub fn collect_released(&self) {
        if self.from_graphs.any.load(Ordering::Acquire) {
            let returned = {
                let mut objects = lock(&self.from_graphs.objects);
                self.from_graphs.any.store(false, Ordering::Release);
                std::mem::take(&mut *objects)
            };
            drop(returned); // outside the lock: a producer's deleter may call back into caijit
        }
        if !self.has_deferred.load(Ordering::Acquire) {
            return;
        }
        let Ok(d) = self.bind() else { return };
        let mut done = Vec::new();
        let mut events = Events::new();
        {
            let mut pending = lock(&self.deferred);
            // Only an event known to have completed releases its object: an event that
            // cannot be queried keeps it (a dead context runs nothing again, so keeping it
            // costs memory at worst; releasing it could free memory under a kernel). Events
            // of one stream complete in the order they were recorded: after one that has
            // not, the later ones of its stream are not asked (a host far ahead of the GPU
            // queries once per stream, not once per object). The per-thread default stream
            // is one value for every thread's own stream, so one thread's unfinished work
            // can keep another's objects a little longer: later, never sooner.
            let mut busy: SmallVec<[RawStream; 4]> = SmallVec::new();
            let (finished, waiting): (Vec<_>, Vec<_>) = d.relaxed_capture(|| {
                std::mem::take(&mut pending.0).into_iter().partition(|(s, e, _)| {
                    if busy.contains(s) {
                        return false;
                    }
                    let done = d.event_done(*e).unwrap_or(false);
                    if !done {
                        busy.push(*s);
                    }
                    done
                })
            });
            pending.0 = waiting;
            self.has_deferred.store(!pending.0.is_empty(), Ordering::Release);
            for (_, e, keep) in finished {
                events.push(e);
                done.push(keep);
            }
        }
        self.return_events(&mut events);
        drop(done); // outside the lock: a producer's deleter may call back into caijit
    }
}
