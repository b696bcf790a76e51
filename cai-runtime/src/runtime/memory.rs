//! caijit's caching allocator on a device, as [`Context`] runs it: blocks handed out per
//! stream, kept for the stream they were freed on, parked behind an event when their
//! stream goes, held by a graph being captured, and given back to the driver once no work
//! pending uses them. `blocks.rs` keeps the accounting; this file decides when a block may
//! change hands, and makes the driver calls.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::blocks::{self, Owner};
use super::{Allocation, Context, Events, GraphHold, Memory, MemoryStats, Stream};
use crate::error::{Error, Result};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;
use crate::sys::{self, Capture, Driver, RawEvent, RawStream};

/// Whether every array gets its own driver allocation (the stream-ordered allocator's)
/// instead of a block of caijit's cache: with `CAIJIT_NO_MEMORY_CACHING=1`, and under
/// compute-sanitizer (its `NV_SANITIZER_*` environment), whose memcheck sees an access past
/// an array's end only when nothing else is allocated there (PyTorch's
/// `PYTORCH_NO_CUDA_MEMORY_CACHING=1` for the same reason). Read once.
fn exact_allocations() -> bool {
    static EXACT: OnceLock<bool> = OnceLock::new();
    *EXACT.get_or_init(|| {
        std::env::var("CAIJIT_NO_MEMORY_CACHING").is_ok_and(|v| v == "1")
            || std::env::vars_os().any(|(k, _)| k.to_str().is_some_and(|k| k.starts_with("NV_SANITIZER_")))
    })
}

/// The graph's part of a [`GraphHold`]: dropped once the graph and every executable graph
/// made from it are destroyed and their launches have finished. When the array has gone
/// already, the memory is freed as the array's free would have: on its stream, where the
/// array's every use was ordered.
struct GraphLetGo {
    ctx: Arc<Context>,
    hold: Arc<GraphHold>,
    /// A block of the cache ([`Context::alloc_written_on`]).
    ptr: u64,
    home: Arc<Stream>,
}

impl Drop for GraphLetGo {
    fn drop(&mut self) {
        let array_gone = {
            let mut h = lock(&self.hold.holders);
            h.1 = false;
            !h.0
        };
        if array_gone {
            self.ctx.free(&Allocation::new(self.ptr, false), &self.home, false);
        }
    }
}

/// A block of the caching allocator freed on a stream being captured: the captured graph
/// may use it whenever it is replayed, so the graph keeps it (a user object) and hands it
/// back once the graph is destroyed and its launches have finished. Work enqueued on the
/// stream before the capture may still be running then (the graph may never have been
/// launched): the block is parked behind the stream's work.
struct HeldByGraph {
    ctx: Arc<Context>,
    ptr: u64,
    stream: Arc<Stream>,
    /// For the per-thread default stream: the thread whose stream it is (only there does
    /// `2` name it; elsewhere the block waits for the next synchronisation).
    thread: Option<std::thread::ThreadId>,
}

impl Drop for HeldByGraph {
    fn drop(&mut self) {
        let nameable = self.thread.is_none_or(|t| t == std::thread::current().id());
        let mut m = lock(&self.ctx.memory);
        if m.blocks.give_back(self.ptr, Owner::Parked) {
            let after = if nameable { self.ctx.event_behind(&self.stream) } else { None };
            m.parked.push((after, vec![self.ptr]));
        }
    }
}

impl Context {
    /// `bytes` of device memory for work on `stream`, from caijit's caching allocator
    /// (`runtime::blocks`): a block freed on the same stream, or an idle one, else a new
    /// segment from `cuMemAlloc`. When the device is out of memory, the segments the cache
    /// keeps are given back (once their work has completed, as for
    /// [`Context::empty_cache`]) and the allocation is tried once more. Inside a graph
    /// capture the allocation is a node of the graph instead (the stream-ordered
    /// allocator), so that its memory is the graph's; without caching
    /// ([`exact_allocations`]) every allocation is the stream-ordered allocator's.
    pub(crate) fn alloc(&self, bytes: usize, stream: &Stream) -> Result<Allocation> {
        let d = self.bind()?;
        if exact_allocations() || stream.capture_id(&d)? != 0 {
            let failed = |e| Error::driver(format_args!("allocating {bytes} bytes on device {}", self.ordinal), e);
            let pool = match self.ordered_pool.get() {
                Some(&p) => p,
                None => {
                    let created = d.mem_pool_create(self.ordinal as i32).map_err(failed)?;
                    *self.ordered_pool.get_or_init(|| created)
                }
            };
            let ptr = d.mem_alloc_async(bytes, pool, stream.raw()).map_err(failed)?;
            return Ok(Allocation::new(ptr, true));
        }
        self.alloc_cached(&d, bytes, Some(stream))
    }

    /// A block of the caching allocator for `stream`; for `None`, one no work may still use
    /// (an idle block, or a new segment's).
    fn alloc_cached(&self, d: &Driver, bytes: usize, stream: Option<&Stream>) -> Result<Allocation> {
        let failed = |e| Error::driver(format_args!("allocating {bytes} bytes on device {}", self.ordinal), e);
        let owner = stream.map_or(Owner::Idle, Stream::owner);
        let rounded = blocks::round(bytes);
        self.collect_released();
        let mut m = lock(&self.memory);
        if let Some(ptr) = m.blocks.take(owner, rounded) {
            return Ok(Allocation::new(ptr, false));
        }
        self.unpark_finished(d, &mut m);
        let parked = |m: &mut Memory| stream.and_then(|s| self.take_parked(d, m, owner, rounded, s));
        if let Some(ptr) = m.blocks.take(owner, rounded).or_else(|| parked(&mut m)) {
            return Ok(Allocation::new(ptr, false));
        }
        let size = blocks::segment_size(rounded);
        // (A global-mode capture on another thread forbids `cuMemAlloc` here otherwise.)
        let mut base = d.relaxed_capture(|| d.mem_alloc(size));
        if matches!(&base, Err(e) if sys::is_out_of_memory(e.code)) {
            // (Best effort: what it could give back may be enough; else out of memory it is.)
            let _ = self.release_kept(d, &mut m);
            base = d.relaxed_capture(|| d.mem_alloc(size));
        }
        m.blocks.add_segment(base.map_err(failed)?, size);
        let ptr = m.blocks.take(owner, rounded).expect("a new segment fits its request");
        Ok(Allocation::new(ptr, false))
    }

    /// Give back memory of [`Context::alloc`], allocated for `stream`, once the work
    /// enqueued on `stream` so far no longer needs it (the array's last use was ordered
    /// there). `elsewhere`: the stream is another thread's per-thread default stream, which
    /// cannot be named here: the device is synchronised first (counted).
    ///
    /// Never fails: a failure is the driver's sticky error, reported by its next call, and
    /// leaks this memory at worst.
    pub(crate) fn free(self: &Arc<Self>, a: &Allocation, stream: &Arc<Stream>, elsewhere: bool) {
        if let Some(hold) = &a.held {
            let mut h = lock(&hold.holders);
            h.0 = false;
            if h.1 {
                return; // a graph still writes it: freed when the graph lets go (`GraphLetGo`)
            }
        }
        let Ok(d) = self.bind() else { return };
        let synchronized = elsewhere && {
            bump(&COUNTERS.host_syncs);
            d.ctx_synchronize().is_ok()
        };
        if a.stream_ordered {
            // SAFETY: the allocation of `mem_alloc_async` is given up once, here, ordered
            // after the work on its stream; nothing uses it afterwards.
            #[allow(unsafe_code)]
            let _ = unsafe { d.free_owned_async(a.ptr, stream.raw()) };
            return;
        }
        if elsewhere {
            // Idle once nothing is pending; else (a capture forbade the synchronisation)
            // for nobody until the next one.
            let mut m = lock(&self.memory);
            if synchronized {
                m.blocks.give_back(a.ptr, Owner::Idle);
            } else if m.blocks.give_back(a.ptr, Owner::Parked) {
                m.parked.push((None, vec![a.ptr]));
            }
            return;
        }
        if !stream.is_legacy() {
            let (ctx, home) = (self.clone(), stream.clone());
            let receive = self.from_graphs.receiver();
            let thread = home.is_per_thread().then(|| std::thread::current().id());
            match d.keep_with_capture(stream.raw(), a.ptr, move |ptr| receive(HeldByGraph { ctx, ptr, stream: home, thread })) {
                Ok(Ok(())) => return, // the capturing graph holds it
                Ok(Err(_)) => {}      // not capturing
                Err(_) => return,     // leaked: the graph may use it at every replay
            }
        }
        let owner = stream.owner();
        {
            let mut m = lock(&self.memory);
            m.blocks.give_back(a.ptr, owner);
            m.keep_for(stream);
        }
        if stream.is_per_thread() {
            self.park_at_thread_exit(owner);
        }
    }

    /// Memory for an array that lives on `home` and is written by work on `writer` (an op's
    /// result on the legacy default stream, launched on a producer's stream): as
    /// [`Context::alloc`] for `home`, unless `writer` is being captured (the legacy default
    /// stream never is, and is never asked). Then every replay of the captured graph writes
    /// it, ordered after no work of `home`'s: the memory is a block no work may still use (an
    /// idle block or a new segment's; a block of the cache even without caching, so that
    /// its free never enqueues anything), and the graph holds it until both the array and
    /// the graph have let go of it.
    pub(crate) fn alloc_written_on(self: &Arc<Self>, bytes: usize, home: &Arc<Stream>, writer: &Stream) -> Result<Allocation> {
        if writer.is_legacy() || writer.raw() == home.raw() {
            return self.alloc(bytes, home);
        }
        let d = self.bind()?;
        if writer.capture_id(&d)? == 0 {
            return self.alloc(bytes, home);
        }
        let mut a = self.alloc_cached(&d, bytes, None)?;
        let hold = Arc::new(GraphHold { holders: Mutex::new((true, true)) });
        let graph_part = GraphLetGo { ctx: self.clone(), hold: hold.clone(), ptr: a.ptr, home: home.clone() };
        match d.keep_with_capture(writer.raw(), graph_part, self.from_graphs.receiver()) {
            Ok(Ok(())) => a.held = Some(hold),
            // The capture ended meanwhile (on another thread): the graph's part is dropped
            // here, while the array holds on to an idle block.
            Ok(Err(_)) => {}
            Err(e) => {
                // Nothing uses it yet.
                lock(&self.memory).blocks.give_back(a.ptr, Owner::Idle);
                return Err(Error::driver("keeping memory with the graph being captured", e));
            }
        }
        Ok(a)
    }

    /// Memory this device's arrays hold, and what caijit keeps for reuse.
    pub fn memory_stats(&self) -> MemoryStats {
        lock(&self.memory).blocks.stats()
    }

    /// Park the blocks kept for `stream` (which is going away: its handle may name another
    /// stream later) behind the work enqueued on it so far.
    pub(super) fn park(&self, stream: &Stream) {
        self.park_owned_by(stream.owner(), stream);
    }

    /// [`Context::park`] for the blocks kept for `owner`, whose work was ordered on `stream`.
    fn park_owned_by(&self, owner: Owner, stream: &Stream) {
        let mut m = lock(&self.memory);
        if !stream.is_default() {
            m.streams.remove(&stream.id);
        }
        let blocks = m.blocks.park(owner);
        if !blocks.is_empty() {
            let after = self.event_behind(stream);
            m.parked.push((after, blocks));
        }
    }

    /// Park this thread's per-thread default stream's blocks (`owner`) when the thread
    /// exits: its stream goes with it, and no other thread could take them otherwise (until
    /// a synchronisation of the device). Registered when the thread first keeps a block.
    fn park_at_thread_exit(self: &Arc<Self>, owner: Owner) {
        /// This thread's kept blocks, per context, and the process they were kept in.
        struct AtExit(Vec<(Weak<Context>, Owner)>, u32);
        impl Drop for AtExit {
            fn drop(&mut self) {
                // A process forked from this one inherits the list, not the device (nor,
                // maybe, a lock another thread held): there is nothing to park there.
                if self.1 != std::process::id() {
                    return;
                }
                // On the exiting thread, so the per-thread stream named here is its own.
                // Rust's thread-local destructors (`__cxa_thread_atexit_impl`) run before
                // the pthread-key destructors, in the reverse order of their registration
                // (CUDA's per-thread state exists before this thread kept any block): CUDA
                // has not let go of the stream yet. A failed record leaves the blocks for
                // the next synchronisation, never idle early.
                let stream = Stream::per_thread();
                for (ctx, owner) in self.0.drain(..) {
                    if let Some(ctx) = ctx.upgrade() {
                        ctx.park_owned_by(owner, &stream);
                    }
                }
            }
        }
        thread_local! {
            static AT_EXIT: std::cell::RefCell<AtExit> = std::cell::RefCell::new(AtExit(Vec::new(), std::process::id()));
        }
        // (During the thread's own exit there is nothing left to register.)
        let _ = AT_EXIT.try_with(|a| {
            let mut a = a.borrow_mut();
            if !a.0.iter().any(|(c, _)| std::ptr::eq(c.as_ptr(), Arc::as_ptr(self))) {
                a.0.push((Arc::downgrade(self), owner));
            }
        });
    }

    /// An event recorded behind the work enqueued on `stream` so far, from the pool; `None`
    /// inside a capture (a record there is a node of the graph, not a record) or when it
    /// cannot be recorded: what it guards then waits for the next synchronisation.
    fn event_behind(&self, stream: &Stream) -> Option<RawEvent> {
        let mut events = Events::new();
        let recorded = self.bind().is_ok_and(|d| {
            stream.capture_id(&d) == Ok(0) && self.take_events(1, &mut events).is_ok() && d.event_record(events[0], stream.raw()).is_ok()
        });
        if recorded {
            return events.pop();
        }
        self.return_events(&mut events);
        None
    }

    /// Parked blocks whose event has completed: idle.
    fn unpark_finished(&self, d: &Driver, m: &mut Memory) {
        let mut events = Events::new();
        let Memory { blocks, parked, .. } = m;
        parked.retain(|(e, ptrs)| match e {
            Some(e) if d.relaxed_capture(|| d.event_done(*e)).unwrap_or(false) => {
                blocks.unpark(ptrs, Owner::Idle);
                events.push(*e);
                false
            }
            _ => true,
        });
        self.return_events(&mut events);
    }

    /// A block for `owner` among those parked behind events not yet completed: `stream`
    /// is made to wait for the event (no host synchronisation), and the blocks it guarded
    /// are `owner`'s from then on. A stream of the same handle as one that went away (CuPy
    /// and PyTorch stream objects wrapped anew for each call) reuses its memory this way.
    fn take_parked(&self, d: &Driver, m: &mut Memory, owner: Owner, rounded: usize, stream: &Stream) -> Option<u64> {
        let (i, e) = m.parked.iter().enumerate().find_map(|(i, (e, ptrs))| e.filter(|_| m.blocks.fits(ptrs, rounded)).map(|e| (i, e)))?;
        d.stream_wait_event(stream.raw(), e).ok()?;
        let (_, ptrs) = m.parked.swap_remove(i);
        m.blocks.unpark(&ptrs, owner);
        m.keep_for(stream);
        self.return_events(&mut Events::from_slice(&[e]));
        m.blocks.take(owner, rounded)
    }

    /// Give every segment the cache keeps and no array uses back to the driver, once no
    /// work pending uses it: waiting (counted) for each stream blocks are kept for and each
    /// event parked blocks wait for, not for the device. Synchronising the device is
    /// illegal while any of its streams is being captured, and would invalidate the capture
    /// (another library's, on a stream caijit may never have seen): it is done only for
    /// blocks no stream named here guards (another thread's per-thread default stream's,
    /// those parked for the next synchronisation), and only when no stream asked was found
    /// being captured (the legacy default stream is always asked: a blocking stream's
    /// capture shows there). A capture on a non-blocking stream caijit keeps nothing for
    /// cannot be seen: that synchronisation, when needed, invalidates it.
    ///
    /// Best effort: a stream or event that cannot be waited for keeps its blocks and the
    /// rest goes on; the first error is returned at the end.
    fn release_kept(&self, d: &Driver, m: &mut Memory) -> Result<()> {
        let idle = m.blocks.stats();
        if idle.reserved_bytes == idle.allocated_bytes && m.parked.is_empty() {
            return Ok(());
        }
        // (A global-mode capture, on this thread or another, forbids these calls otherwise.)
        d.relaxed_capture(|| {
            let mut first_error = None;
            let capturing = self.wait_for_kept(d, m, &mut first_error);
            let unguarded = !m.parked.is_empty() || !m.blocks.stream_owners().is_empty();
            if unguarded && !capturing && matches!(d.stream_capture_status(RawStream::from_cai(1)), Ok(Capture::None)) {
                match d.ctx_synchronize() {
                    Ok(()) => {
                        bump(&COUNTERS.host_syncs);
                        m.blocks.all_idle();
                        let mut events: Events = m.parked.drain(..).filter_map(|(e, _)| e).collect();
                        self.return_events(&mut events);
                    }
                    Err(e) => {
                        first_error.get_or_insert(Error::driver("synchronising the device to give kept memory back", e));
                    }
                }
            }
            for (base, _) in m.blocks.take_idle_segments() {
                // SAFETY: an idle segment of `mem_alloc`, out of the cache's books (given
                // back once), after its work has completed: nothing is pending on it or
                // uses it later.
                #[allow(unsafe_code)]
                let freed = unsafe { d.free_segment(base) };
                if let Err(e) = freed {
                    first_error.get_or_insert(Error::driver("giving kept memory back", e));
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// Make idle the blocks parked behind an event and those kept for a stream this thread
    /// can name (the legacy default stream, its own per-thread default stream, any other
    /// stream by its handle), waiting for each (counted; a handle shared by several
    /// `Stream`s once). A stream being captured is not waited for (that is illegal, and
    /// would invalidate the capture), nor is the legacy default stream while a blocking
    /// stream's capture forbids its use: `true` then. What cannot be waited for keeps its
    /// blocks; the first error is left in `first_error`.
    fn wait_for_kept(&self, d: &Driver, m: &mut Memory, first_error: &mut Option<Error>) -> bool {
        let mut note = |e| {
            first_error.get_or_insert(Error::driver("waiting for the work on memory kept for reuse", e));
        };
        let mut waited = Events::new();
        let Memory { blocks, parked, streams } = m;
        parked.retain(|(e, ptrs)| match e.map(|e| (e, d.event_synchronize(e))) {
            Some((e, Ok(()))) => {
                bump(&COUNTERS.host_syncs);
                blocks.unpark(ptrs, Owner::Idle);
                waited.push(e);
                false
            }
            Some((_, Err(why))) => {
                note(why);
                true
            }
            None => true,
        });
        self.return_events(&mut waited);
        let here = Stream::per_thread().owner();
        let mut capturing = false;
        let mut synchronized: Vec<RawStream> = Vec::new();
        for owner in blocks.stream_owners() {
            let Owner::Stream { stream: id, .. } = owner else { continue };
            let raw = match id {
                1 => RawStream::from_cai(1),
                2 if owner == here => RawStream::from_cai(2),
                _ => match streams.get(&id) {
                    Some(&raw) => raw,
                    None => continue, // another thread's per-thread default stream
                },
            };
            if !synchronized.contains(&raw) {
                // (On the legacy default stream, an error says that a blocking stream is
                // being captured; asking invalidates nothing.)
                if !matches!(d.stream_capture_status(raw), Ok(Capture::None)) {
                    capturing = true;
                    continue;
                }
                match d.stream_synchronize(raw) {
                    Ok(()) => {
                        bump(&COUNTERS.host_syncs);
                        synchronized.push(raw);
                    }
                    // A capture begun on another thread since it was asked.
                    Err(e) if sys::is_capture_error(e.code) => {
                        capturing = true;
                        continue;
                    }
                    Err(e) => {
                        note(e);
                        continue;
                    }
                }
            }
            blocks.make_idle(owner);
        }
        capturing
    }

    /// Return the memory caijit keeps for reuse to the system (PyTorch's
    /// `torch.cuda.empty_cache()`), once no work pending uses it (see
    /// `Context::release_kept`: it waits for streams, not for the device, so that a graph
    /// capture elsewhere survives); memory in use stays.
    pub fn empty_cache(&self) -> Result<()> {
        self.collect_released();
        let d = self.bind()?;
        self.release_kept(&d, &mut lock(&self.memory))?;
        match self.ordered_pool.get() {
            // (Forbidden by a global-mode capture otherwise.)
            Some(&p) => Ok(d.relaxed_capture(|| d.mem_pool_trim(p, 0))?),
            None => Ok(()),
        }
    }
}
