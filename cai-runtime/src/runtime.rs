//! Devices, contexts, streams, the event pool and device memory's owner.
//!
//! # Examples
//! ```no_run
//! use cai_runtime::compile::Program;
//! use cai_runtime::launch::{Arg, LaunchConfig};
//! use cai_runtime::runtime::{Context, Stream};
//! let ctx = Context::new(0)?;
//! let k = ctx.compile(&Program::new(r#"extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.f; }"#))?.kernel("k")?;
//! let s = Stream::new(&ctx)?;
//! # let view = cai_runtime::cai::ArrayView::contiguous(0x7f00_0000_0000, &[32], cai_runtime::cai::DType::F32, false)?;
//! k.launch(&LaunchConfig::new([1, 1, 1], [32, 1, 1]), &[Arg::Array(&view)], Some(&s), true)?;
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! One [`Context`] per device: the primary context, shared with CuPy, PyTorch and Numba in
//! the same process, so pointers and streams from any of them are valid here. Streams are
//! caijit's own (destroyed on drop) or borrowed handles (foreign streams, the legacy and
//! per-thread default streams), never destroyed by caijit. Events come from a per-context
//! pool: the steady-state launch path creates none.
//!
//! # Files
//! `device.rs`: the driver, the device count, the current-context guard, pointers' devices;
//! `blocks.rs`: the caching allocator's accounting; `returns.rs`: what is kept alive for
//! work caijit does not wait for. This file holds [`Context`], [`Stream`] and the protocol
//! by which memory is kept for a stream and handed on: a stream parks the blocks kept for
//! it in every context when it goes, and a context's memory is kept per stream, so each of
//! the two names the other. Apart, they would be two files importing each other; together
//! they are one file, longer than the others, that reads the protocol in one place.
//!
//! # Limitations
//! Modules stay loaded for the life of the process (kernel handles may be held anywhere).

mod blocks;
mod device;
mod returns;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::cai::StreamRef;
use crate::error::{Error, Result};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;
use crate::sys::{self, Capture, Ctx, Driver, RawEvent, RawPool, RawStream};
pub use blocks::MemoryStats;
use blocks::{Blocks, Owner};
pub use device::{device_count, driver_checks_parameters, driver_version, sole_device};
pub(crate) use device::{device_of, driver, Current, Events};
use returns::{Deferred, GraphReturns};

/// A device and its primary context.
#[derive(Debug)]
pub struct Context {
    ordinal: usize,
    ctx: Ctx,
    name: String,
    capability: (i32, i32),
    sm_count: usize,
    events: Mutex<Vec<RawEvent>>,
    /// caijit's caching allocator on this device (see [`Context::alloc`]).
    memory: Mutex<Memory>,
    /// The stream-ordered pool that allocations inside a graph capture come from (and all
    /// of them without caching, see [`exact_allocations`]), created by the first of them.
    ordered_pool: OnceLock<RawPool>,
    /// Objects kept alive until the work before their event finished ([`Context::release_after`]).
    deferred: Mutex<Deferred>,
    has_deferred: AtomicBool,
    /// Objects kept by graphs captured since, handed back when a graph is destroyed.
    from_graphs: Arc<GraphReturns>,
}

/// The caching allocator's blocks, and the blocks of streams that went away, each list
/// waiting for an event recorded behind the stream's last work (none: for the next
/// synchronisation of the device).
#[derive(Debug, Default)]
struct Memory {
    blocks: Blocks,
    parked: Vec<(Option<RawEvent>, Vec<u64>)>,
    /// The handle of each stream (by identity, not a default stream) blocks may be kept
    /// for, while it lives (a stream that goes away parks its blocks): what
    /// `Context::release_kept` waits for instead of the device.
    streams: HashMap<u64, RawStream>,
}

impl Memory {
    /// Blocks may be kept for `stream` from now on: they are parked when it goes.
    fn keep_for(&mut self, stream: &Stream) {
        if !stream.is_default() {
            stream.keeps_blocks.store(true, Ordering::Relaxed);
            self.streams.insert(stream.id, stream.raw);
        }
    }
}

/// Device memory of caijit's, as [`Context::alloc`] handed it out.
#[derive(Debug)]
pub(crate) struct Allocation {
    pub(crate) ptr: u64,
    /// Allocated from the stream-ordered pool (inside a graph capture, or without caching)
    /// and freed stream-ordered; else a block of the caching allocator.
    stream_ordered: bool,
    /// Written by a graph being captured on another stream than its own
    /// ([`Context::alloc_written_on`]).
    held: Option<Arc<GraphHold>>,
}

impl Allocation {
    fn new(ptr: u64, stream_ordered: bool) -> Allocation {
        Allocation { ptr, stream_ordered, held: None }
    }
}

/// Memory whose array lives on one stream while a graph being captured on another writes
/// it (an op's result on the legacy default stream, written by a launch on a producer's
/// capturing stream). Every replay of the graph writes it, so it goes back to the
/// allocator only once both the array and the graph have let go of it.
#[derive(Debug)]
pub(crate) struct GraphHold {
    /// Whether (the array, the graph) still hold it.
    holders: Mutex<(bool, bool)>,
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

/// Every device's context made so far, by ordinal.
static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<Context>>>> = OnceLock::new();

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

/// Every device's context made so far.
fn contexts() -> Vec<Arc<Context>> {
    CONTEXTS.get().map(|c| lock(c).values().cloned().collect()).unwrap_or_default()
}

/// [`Context::empty_cache`] on every device caijit has used (others are left untouched:
/// no context is created for them).
pub fn empty_cache() -> Result<()> {
    contexts().iter().try_for_each(|c| c.empty_cache())
}

impl Context {
    /// The context of device `ordinal` (created once per process, then shared).
    pub fn new(ordinal: usize) -> Result<Arc<Context>> {
        let drv = driver()?;
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::argument(format!("device {ordinal} does not exist ({count} CUDA devices)")));
        }
        let mut all = lock(CONTEXTS.get_or_init(Default::default));
        if let Some(c) = all.get(&ordinal) {
            return Ok(c.clone());
        }
        let o = ordinal as i32;
        let ctx = drv.primary_context(o)?;
        let c = Arc::new(Context {
            ordinal,
            ctx,
            name: drv.device_name(o)?,
            capability: drv.compute_capability(o)?,
            sm_count: drv.sm_count(o)? as usize,
            events: Mutex::new(Vec::new()),
            memory: Mutex::default(),
            ordered_pool: OnceLock::new(),
            deferred: Mutex::default(),
            has_deferred: AtomicBool::new(false),
            from_graphs: Arc::default(),
        });
        all.insert(ordinal, c.clone());
        Ok(c)
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }
    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }

    /// The driver with this context current on the calling thread until the guard drops;
    /// then the context that was current before (another library's device) is current
    /// again, so caijit never switches the caller's device.
    ///
    /// A thread with no current context is one whose device is 0 (as the CUDA runtime sees
    /// it): binding device 0 there is left in place (what the runtime would do itself, and
    /// it spares the next call the switch); binding another device is undone.
    pub(crate) fn bind(&self) -> Result<Current> {
        let driver = driver()?;
        let previous = driver.make_current(self.ctx)?.filter(|p| !p.is_null() || self.ordinal != 0);
        Ok(Current { driver, previous })
    }

    /// Free and total device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        Ok(self.bind()?.mem_info()?)
    }

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
    fn park(&self, stream: &Stream) {
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

    /// `n` events from the pool (created when it runs dry), under one lock.
    pub(crate) fn take_events(&self, n: usize, out: &mut Events) -> Result<()> {
        {
            let mut pool = lock(&self.events);
            while out.len() < n {
                match pool.pop() {
                    Some(e) => out.push(e),
                    None => break,
                }
            }
        }
        while out.len() < n {
            out.push(self.bind()?.event_create()?);
            bump(&COUNTERS.events_created);
        }
        Ok(())
    }

    /// Block the host until every stream of this device is idle (a counted host
    /// synchronisation): for work on a stream that cannot be named here (another thread's
    /// per-thread default stream). Never on the launch path.
    pub fn synchronize(&self) -> Result<()> {
        let d = self.bind()?;
        bump(&COUNTERS.host_syncs);
        Ok(d.ctx_synchronize()?)
    }

    /// Make `waiter` wait for the work enqueued so far on `producer`, without blocking the
    /// host (an event from the pool recorded on `producer`, waited on by `waiter`).
    pub fn order_streams(&self, waiter: &Stream, producer: &Stream) -> Result<()> {
        if waiter.raw() == producer.raw() {
            return Ok(());
        }
        let mut events = Events::new();
        self.take_events(1, &mut events)?;
        let d = self.bind()?;
        let r = d.event_record(events[0], producer.raw()).and_then(|_| d.stream_wait_event(waiter.raw(), events[0]));
        self.return_events(&mut events);
        bump(&COUNTERS.waits);
        Ok(r?)
    }

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
        lock(&self.deferred).0.push((events[0], keep));
        self.has_deferred.store(true, Ordering::Release);
        Ok(())
    }

    /// Drop the objects of [`Context::release_after`] whose work has finished (a query per
    /// pending object, never a wait), and those destroyed graphs handed back. Cheap when
    /// nothing is pending.
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
            // costs memory at worst; releasing it could free memory under a kernel).
            let (finished, waiting): (Vec<_>, Vec<_>) =
                d.relaxed_capture(|| std::mem::take(&mut pending.0).into_iter().partition(|(e, _)| d.event_done(*e).unwrap_or(false)));
            pending.0 = waiting;
            self.has_deferred.store(!pending.0.is_empty(), Ordering::Release);
            for (e, keep) in finished {
                events.push(e);
                done.push(keep);
            }
        }
        self.return_events(&mut events);
        drop(done); // outside the lock: a producer's deleter may call back into caijit
    }

    /// Give events back to the pool. A stream's wait captures an event's state when it is
    /// enqueued, so an event can be reused as soon as the waits on it are enqueued.
    /// Nothing to give back (a launch without producer edges, the usual case) takes no lock.
    pub(crate) fn return_events(&self, events: &mut Events) {
        if events.is_empty() {
            return;
        }
        lock(&self.events).extend(events.drain(..));
    }
}

/// What keeps a borrowed stream alive: its owner in another library (a CuPy or PyTorch
/// stream object), held as long as the [`Stream`].
pub type StreamOwner = Box<dyn std::any::Any + Send + Sync>;

/// A stream: caijit's own (destroyed on drop) or a borrowed handle.
///
/// # Lifetimes
/// Arrays keep the stream they live on (`Arc<Stream>`): their frees, exports and the
/// stream protocol's edges use it until the array is gone. A caijit stream is destroyed
/// only after its last array; a borrowed one given with its owner ([`Stream::borrowed_from`])
/// keeps that owner alive as long; a bare handle ([`Stream::borrowed`]) is the caller's
/// promise that it outlives every array and launch using it (CuPy's `ExternalStream` rule).
pub struct Stream {
    raw: RawStream,
    /// The stream's identity for the caching allocator, never reused (a handle may be:
    /// once a stream is destroyed, a new one may get its handle); the default streams'
    /// are their CAI values.
    id: u64,
    /// Blocks freed on this stream may be kept for it: they are parked when it goes.
    keeps_blocks: AtomicBool,
    /// caijit's own stream: the context it is destroyed in.
    context: Option<Arc<Context>>,
    /// A borrowed stream's owner, kept alive with it.
    _owner: Option<StreamOwner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("raw", &self.raw).field("owned", &self.context.is_some()).finish()
    }
}

impl Stream {
    /// A `Stream` of `raw` (neither owned nor with an owner yet), with a fresh identity
    /// (see [`Stream::owner`]).
    fn of(raw: RawStream) -> Stream {
        static NEXT: AtomicU64 = AtomicU64::new(16);
        let id = match raw.as_u64() {
            v @ (1 | 2) => v,
            _ => NEXT.fetch_add(1, Ordering::Relaxed),
        };
        Stream { raw, id, keeps_blocks: AtomicBool::new(false), context: None, _owner: None }
    }

    /// A new non-blocking stream on `ctx`'s device, owned by caijit.
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        let raw = ctx.bind()?.stream_create(true)?;
        let mut s = Stream::of(raw);
        s.context = Some(ctx.clone());
        Ok(s)
    }

    /// The legacy default stream (CAI `1`).
    pub fn legacy() -> Stream {
        Stream::of(RawStream::from_cai(1))
    }

    /// The per-thread default stream (CAI `2`).
    pub fn per_thread() -> Stream {
        Stream::of(RawStream::from_cai(2))
    }

    /// Borrow a foreign stream by its CAI value: `1`, `2` or a `CUstream` handle. The
    /// handle must stay valid while caijit uses it; caijit never destroys it.
    pub fn borrowed(handle: u64) -> Result<Stream> {
        if handle == 0 {
            return Err(Error::argument(
                "stream 0 is ambiguous; pass 1 for the legacy default stream or 2 for the per-thread default stream",
            ));
        }
        Ok(Stream::of(RawStream::from_cai(handle)))
    }

    /// Borrow a foreign stream together with the object that owns it (a CuPy, PyTorch or
    /// Numba stream): the owner is kept alive as long as this `Stream`, so arrays living on
    /// it never use a destroyed handle.
    pub fn borrowed_from(handle: u64, owner: StreamOwner) -> Result<Stream> {
        let mut s = Stream::borrowed(handle)?;
        s._owner = Some(owner);
        Ok(s)
    }

    /// The device of a caijit stream; `None` for a borrowed one (not asked of the driver).
    pub fn device(&self) -> Option<usize> {
        self.context.as_ref().map(|c| c.ordinal())
    }

    /// The device of any stream: a caijit stream's, else the driver's answer for the
    /// primary context the handle belongs to; `None` for the default streams (which follow
    /// the current device) and for streams of other contexts. Not for the launch path.
    pub fn device_from_driver(&self) -> Result<Option<usize>> {
        if let Some(o) = self.device() {
            return Ok(Some(o));
        }
        if self.raw == RawStream::from_cai(1) || self.raw == RawStream::from_cai(2) {
            return Ok(None);
        }
        let owner = driver()?.stream_context(self.raw)?;
        for ordinal in 0..device_count()? {
            if Context::new(ordinal)?.ctx == owner {
                return Ok(Some(ordinal));
            }
        }
        Ok(None)
    }

    pub fn is_per_thread(&self) -> bool {
        self.raw == RawStream::from_cai(2)
    }

    /// The CAI value of this stream: `1`, `2` or the handle.
    pub fn handle(&self) -> u64 {
        self.raw.as_u64()
    }

    pub fn stream_ref(&self) -> StreamRef {
        StreamRef::from_cai(self.handle()).expect("never 0")
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.raw
    }

    pub(crate) fn is_legacy(&self) -> bool {
        self.id == 1
    }

    /// The legacy or the per-thread default stream, which never goes away.
    fn is_default(&self) -> bool {
        self.id <= 2
    }

    /// Who may take the blocks freed on this stream: this `Stream`'s identity (another
    /// `Stream` of the same handle keeps its own), or on the per-thread default stream the
    /// calling thread's.
    fn owner(&self) -> Owner {
        thread_local! {
            static THREAD: u64 = {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            };
        }
        let thread = if self.is_per_thread() { THREAD.with(|t| *t) } else { 0 };
        Owner::Stream { stream: self.id, thread }
    }

    /// Block the host until the stream's work is done (never used on the launch path).
    pub fn synchronize(&self) -> Result<()> {
        Ok(driver()?.stream_synchronize(self.raw)?)
    }

    /// Whether the stream is being captured into a graph. The legacy default stream never
    /// is, and is never asked here (while a blocking stream is being captured, the driver
    /// answers it with an error).
    pub fn is_capturing(&self) -> Result<bool> {
        Ok(!self.is_legacy() && driver()?.stream_capture_status(self.raw)? != Capture::None)
    }

    /// The id of the capture the stream belongs to, 0 when none (the legacy default stream
    /// is never asked, as for [`Stream::is_capturing`]).
    pub(crate) fn capture_id(&self, d: &Driver) -> std::result::Result<u64, sys::DriverError> {
        if self.is_legacy() {
            return Ok(0);
        }
        d.capture_id(self.raw)
    }
}

/// A caijit stream in a `#[derive(CudaArrayInterface)]` struct exports its CAI value.
impl crate::cai::StreamField for Stream {
    fn stream(&self) -> Option<u64> {
        Some(self.handle())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Blocks kept for this stream become idle once its work so far has completed:
        // its handle may name another stream from now on.
        if self.keeps_blocks.load(Ordering::Relaxed) {
            contexts().iter().for_each(|c| c.park(self));
        }
        // Drop never panics; a failure to destroy leaks one stream handle at most. The
        // caller's current context is restored when the guard drops.
        if let Some(d) = self.context.as_ref().and_then(|ctx| ctx.bind().ok()) {
            // SAFETY: an owned `Stream` (one with a context) holds a stream of
            // `stream_create` and destroys it once, here; the handle dies with it.
            #[allow(unsafe_code)]
            let _ = unsafe { d.destroy_owned_stream(self.raw) };
        }
    }
}

/// The device owning `ptr` (`None` for host memory or an unknown pointer; never queried
/// for a null pointer).
pub fn pointer_device(ptr: u64) -> Result<Option<usize>> {
    if ptr == 0 {
        return Ok(None);
    }
    // The query needs a current context; any device's primary context will do.
    let d = Context::new(0)?.bind()?;
    Ok(device_of(&d, ptr)?.map(|o| o as usize))
}

#[cfg(test)]
mod tests {
    use super::Stream;
    use crate::cai::StreamField;

    #[test]
    fn caijit_streams_export_their_cai_value() {
        assert_eq!(StreamField::stream(&Stream::legacy()), Some(1));
        assert_eq!(StreamField::stream(&Stream::per_thread()), Some(2));
        assert_eq!(StreamField::stream(&std::sync::Arc::new(Stream::borrowed(0xabc0).unwrap())), Some(0xabc0));
    }
}
