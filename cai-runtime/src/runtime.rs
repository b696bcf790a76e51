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
//! This file: [`Context`] (a device's facts, its event pool, stream ordering) and
//! [`Stream`], with the state the files below work on. `memory.rs`: the caching
//! allocator's policy (which block a stream may take, parking, graph-held memory, giving
//! memory back); `blocks.rs`: its accounting; `release.rs`: objects kept until the work
//! using them has finished; `returns.rs`: the lists those are kept in; `device.rs`: the
//! driver, the device count, the current-context guard and the cache of pointers known to
//! be device 0's. `memory.rs` and `release.rs` add methods to `Context` and name this file;
//! this file names only the others (`device.rs`, `blocks.rs`, `returns.rs`).

//! # Limitations
//! Modules stay loaded for the life of the process (kernel handles may be held anywhere).

mod blocks;
mod device;
mod memory;
mod release;
mod returns;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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

/// Every device's context made so far, by ordinal.
static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<Context>>>> = OnceLock::new();

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
        // Drop never panics; a failure to destroy leaks one stream handle at most. The
        // caller's current context is restored when the guard drops.
        let bound = self.context.as_ref().and_then(|ctx| ctx.bind().ok());
        let let_go = || {
            // Blocks kept for this stream become idle once its work so far has completed:
            // its handle may name another stream from now on.
            if self.keeps_blocks.load(Ordering::Relaxed) {
                contexts().iter().for_each(|c| c.park(self));
            }
            if let Some(d) = &bound {
                // SAFETY: an owned `Stream` (one with a context) holds a stream of
                // `stream_create` and destroys it once, here; the handle dies with it.
                #[allow(unsafe_code)]
                let _ = unsafe { d.destroy_owned_stream(self.raw) };
            }
        };
        // A stream may be dropped while this thread captures a graph (a Python object
        // collected inside `with caijit.graph()` or `torch.cuda.graph`): in relaxed mode
        // its release cannot invalidate that capture.
        match &bound {
            Some(d) => d.relaxed_capture(let_go),
            None => let_go(),
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
