//! Launching a kernel on CAI arrays, ordered against every producer stream (CAI v3).
//!
//! # The stream protocol
//! Given the launch stream L (the caller's; else the one stream every array argument
//! carries, if they agree; else the legacy default stream):
//! 1. for each distinct producer stream P ≠ L: record a pooled event on P, L waits on it;
//! 2. launch on L;
//! 3. record one pooled event on L after the kernel; every such P waits on it (the
//!    reverse edge: one record serves all producers, since they all wait for the same point).
//!
//! No host synchronisation happens on this path. `sync = false` (or `CAIJIT_CAI_SYNC=0`)
//! skips steps 1 and 3 for other libraries' arrays only: caijit's own arrays (and the
//! scratch memory, allocations and frees made for them) are always ordered.
//!
//! If step 3 fails after the kernel was enqueued, the producers could release or overwrite
//! memory the kernel still reads: the launch then waits for the kernel (a counted host
//! synchronisation) before it reports the error.
//!
//! # Graph capture
//! See `keep_capture_legal`: inside a capture only edges to streams of the same capture
//! are made; outside one, an argument whose stream is being captured is an error.

use std::sync::OnceLock;

use smallvec::SmallVec;

use crate::cai::ArrayView;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::params::{check_count, marshal, param_error, ParamBuffer};
use crate::runtime::{Context, Events, Stream};
use crate::stats::timing::{self, Phase};
use crate::stats::{bump, COUNTERS};
use crate::sys::{Driver, RawStream};

/// The launch arguments and their encodings, defined with the parameter checks they
/// meet (`crate::params`).
pub use crate::params::{encode_scalar, Arg, NamedScalar, Num, ScalarBytes};
pub use crate::sys::LaunchConfig;
pub use trace::{nvtx_tool, ProfileRow, Profiler};

mod bounds;
pub(crate) mod record;
pub(crate) mod trace;

impl LaunchConfig {
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> Self {
        LaunchConfig { grid, block, shared_mem: 0, cluster: None, cooperative: false }
    }

    /// Thread-block cluster dimensions (each grid dimension must be a multiple).
    pub fn cluster(mut self, dims: [u32; 3]) -> Self {
        self.cluster = Some(dims);
        self
    }

    /// A cooperative launch (grid-wide synchronisation); every block must be co-resident.
    pub fn cooperative(mut self, yes: bool) -> Self {
        self.cooperative = yes;
        self
    }

    /// A 1-D launch covering `n` elements with `block` threads per block (grid ≥ 1).
    pub fn for_elements(n: usize, block: u32) -> Self {
        let block = block.max(1);
        let blocks = n.div_ceil(block as usize).clamp(1, i32::MAX as usize) as u32;
        LaunchConfig::new([blocks, 1, 1], [block, 1, 1])
    }

    pub fn shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem = bytes;
        self
    }

    pub(crate) fn check(&self, k: &Kernel) -> Result<()> {
        // The kernel's limits, kept in the kernel since its load (no lock, no driver call).
        let (max_threads, max_dynamic_shared) = (k.max_threads_per_block(), k.max_dynamic_shared_size_bytes());
        let limits = [("grid", self.grid, [i32::MAX as u32, 65535, 65535]), ("block", self.block, [1024, 1024, 64])];
        for (what, dims, max) in limits {
            for (axis, (&d, &m)) in dims.iter().zip(&max).enumerate() {
                if d == 0 || d > m {
                    return Err(Error::argument(format!(
                        "{what} dimension {} is {d}; it must be between 1 and {m}",
                        ["x", "y", "z"][axis]
                    )));
                }
            }
        }
        let threads = self.block.iter().map(|&b| u64::from(b)).product::<u64>();
        if threads > max_threads as u64 {
            return Err(Error::argument(format!(
                "block of {threads} threads exceeds this kernel's limit of {max_threads} threads per block"
            )));
        }
        if let Some(cluster) = self.cluster {
            let (major, _) = k.context().compute_capability();
            if major < 9 {
                return Err(Error::argument(format!(
                    "thread-block clusters need compute capability 9.0 or newer; device {} has {major}.x",
                    k.context().ordinal()
                )));
            }
            for (axis, (&c, &g)) in cluster.iter().zip(&self.grid).enumerate() {
                if c == 0 || g % c != 0 {
                    return Err(Error::argument(format!(
                        "cluster dimension {} is {c}; it must be at least 1 and divide the grid dimension {g}",
                        ["x", "y", "z"][axis]
                    )));
                }
            }
            let size: u32 = cluster.iter().product();
            if size > 8 {
                return Err(Error::argument(format!("a cluster of {size} blocks exceeds the portable limit of 8")));
            }
        }
        if self.shared_mem as i64 > max_dynamic_shared as i64 {
            return Err(Error::argument(format!(
                "{} bytes of dynamic shared memory exceed this kernel's limit of {max_dynamic_shared} (raise it with max_dynamic_shared_size_bytes)",
                self.shared_mem
            )));
        }
        Ok(())
    }
}

fn sync_enabled_by_env() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var("CAIJIT_CAI_SYNC").map_or(true, |v| v != "0"))
}

impl Kernel {
    /// Launch with arguments checked against the kernel's parameters, on `stream` (or the
    /// stream the protocol picks), ordered against every producer stream unless `sync` is
    /// false. Returns the stream the kernel was launched on (its CAI value).
    ///
    /// With bounds checks on (`caijit.debug(True)`, `CAIJIT_DEBUG=1`), the kernel's
    /// bounds-checked debug instance is launched instead, waited for, and an out-of-bounds
    /// `caijit::Array` access is an argument error naming the argument, index and shape.
    pub fn launch(&self, cfg: &LaunchConfig, args: &[Arg<'_>], stream: Option<&Stream>, sync: bool) -> Result<u64> {
        if crate::diag::flags() & crate::diag::BOUNDS != 0 {
            if let Some(twin) = self.debug_instance()? {
                let (on, launched) = twin.launch_traced(cfg, args, stream, sync)?;
                if let Some(r) = launched {
                    bounds::check_bounds(&twin, &r, args)?;
                }
                return Ok(on);
            }
        }
        self.launch_traced(cfg, args, stream, sync).map(|(on, _)| on)
    }

    /// [`Kernel::launch`] of this very instance; also returns its ring record.
    #[inline]
    fn launch_traced(
        &self,
        cfg: &LaunchConfig,
        args: &[Arg<'_>],
        stream: Option<&Stream>,
        sync: bool,
    ) -> Result<(u64, Option<Box<crate::diag::LaunchRecord>>)> {
        let probe = timing::start();
        let params = &self.info.params;
        check_count(|| self.info.base_name(), params.len(), args.len())?;
        cfg.check(self)?;
        let mut buf = ParamBuffer::new(self.info.param_buffer_size());
        marshal(params, &self.pointee_alignment, args, &mut buf)?;
        probe.stop(Phase::LaunchCheck);

        let arrays = args.iter().enumerate().filter_map(|(i, a)| match a {
            Arg::Array(v) => Some((i, *v, None)),
            Arg::ArrayOn(v, device) => Some((i, *v, Some(*device))),
            _ => None,
        });
        let named = |i: usize, what: String| param_error(&params[i], what);
        let mut recorded = None;
        let on = enqueue_ordered(self.context(), arrays, stream, sync, named, |d, launch_stream| {
            let span = trace::begin(self, d, launch_stream)?;
            let probe = timing::start();
            // SAFETY: `self.raw` is this kernel, loaded in the context `enqueue_ordered`
            // bound, and `launch_stream` a stream of that context (checked there); `marshal`
            // wrote every argument at its parameter's offset after checking it against the
            // kernel's compiled parameter list, and `with_pointers` points at each; the device
            // pointers come from validated CAI descriptors whose producers keep them alive
            // until the work on their streams (which this launch is ordered against) is done.
            #[allow(unsafe_code)]
            let launched = buf.with_pointers(params, |ptrs| unsafe { d.launch_checked(self.raw, cfg, launch_stream, ptrs) });
            probe.stop(Phase::LaunchDriver);
            launched?;
            bump(&COUNTERS.launches);
            recorded = trace::record(self, cfg, args, launch_stream);
            record::note_launch(d, launch_stream, self, cfg, &buf, args)?;
            trace::end(span, self, d, launch_stream)
        })?;
        if let Some(r) = &recorded {
            trace::block(self.context(), r)?;
        }
        Ok((on, recorded))
    }

    /// Launch over `n` elements with the occupancy-maximising block size.
    pub fn forall(&self, n: usize, args: &[Arg<'_>], stream: Option<&Stream>, sync: bool) -> Result<u64> {
        let block = self.occupancy_block_size(0)?;
        self.launch(&LaunchConfig::for_elements(n, block), args, stream, sync)
    }
}

/// Enqueue `work` on the launch stream — `stream`, else the one stream every array names,
/// else the legacy default stream — by the stream protocol: after the work enqueued so far
/// on each array's producer stream, and with each producer stream made to wait for it.
/// `sync = false` (or `CAIJIT_CAI_SYNC=0`) drops the edges of other libraries' arrays only:
/// caijit's own arrays are always ordered. `arrays` are `(index, view, device when
/// known)`; an array on another device than `ctx`'s is refused with `named(index, what)`.
/// Returns the launch stream's CAI value.
pub(crate) fn enqueue_ordered<'v>(
    ctx: &Context,
    arrays: impl Iterator<Item = (usize, &'v ArrayView, Option<usize>)>,
    stream: Option<&Stream>,
    sync: bool,
    named: impl Fn(usize, String) -> Error,
    work: impl FnOnce(&Driver, RawStream) -> Result<()>,
) -> Result<u64> {
    let probe = timing::start();
    ctx.collect_released();
    let d = ctx.bind()?;
    probe.stop(Phase::LaunchBind);
    let probe = timing::start();
    // Producer streams (with the first array naming each, and whether caijit's own memory
    // is among its arrays), and each array's device (from its pointer, never a null one).
    // Inline for up to four producer streams: no allocation on the launch path.
    let mut producers: SmallVec<[Producer; 4]> = SmallVec::new();
    let mut common: Option<Option<RawStream>> = None;
    for (i, v, known) in arrays {
        if !v.is_empty() {
            let device = match known {
                Some(o) => Some(o as i32),
                None => crate::runtime::device_of(&d, v.ptr())?,
            };
            match device {
                Some(o) if o as usize == ctx.ordinal() => {}
                Some(o) => return Err(named(i, format!("the array is on device {o} but the launch is on device {}", ctx.ordinal()))),
                None => return Err(named(i, format!("{:#x} is not device memory (host arrays are never copied implicitly)", v.ptr()))),
            }
        }
        if let Some(s) = v.stream().map(|s| RawStream::from_cai(s.to_cai())) {
            match producers.iter_mut().find(|p| p.stream == s) {
                Some(p) => p.own |= v.is_owned_by_caijit(),
                None => producers.push(Producer { stream: s, index: i, own: v.is_owned_by_caijit() }),
            }
            common = shared(common, s);
        }
    }
    if let Some(o) = stream.and_then(Stream::device).filter(|&o| o != ctx.ordinal()) {
        return Err(Error::argument(format!("the stream is on device {o} but the arrays are on device {}", ctx.ordinal())));
    }
    let launch_stream = chosen(stream, common);
    if stream.is_some() {
        record::check_launch_stream(&d, launch_stream)?;
    }
    let foreign = sync && sync_enabled_by_env();
    producers.retain(|p| p.stream != launch_stream && (foreign || p.own));
    if !producers.is_empty() {
        keep_capture_legal(ctx, &d, launch_stream, &mut producers, &named)?;
    }
    probe.stop(Phase::LaunchScan);
    // Forward edges: one event per producer stream, all waited on by the launch stream.
    let probe = timing::start();
    let mut events = Events::new();
    if !producers.is_empty() {
        ctx.take_events(producers.len() + 1, &mut events)?;
    }
    let before = (|| -> Result<()> {
        for (p, &e) in producers.iter().zip(&events) {
            d.event_record(e, p.stream)?;
            d.stream_wait_event(launch_stream, e)?;
            bump(&COUNTERS.waits);
        }
        probe.stop_uncounted(Phase::LaunchEvents);
        work(&d, launch_stream)
    })();
    if let Err(e) = before {
        ctx.return_events(&mut events);
        // A borrowed stream of another device is refused by the driver: say which.
        if let Some(o) = stream.and_then(|s| s.device_from_driver().ok().flatten()).filter(|&o| o != ctx.ordinal()) {
            return Err(Error::argument(format!("the stream is on device {o} but the arrays are on device {}", ctx.ordinal())));
        }
        return Err(e);
    }
    // Reverse edges: one event after the work, waited on by every producer stream.
    let probe = timing::start();
    let after = (|| -> Result<()> {
        fault::check(fault::Point::ReverseEdge)?;
        if let Some(&after) = events.last() {
            d.event_record(after, launch_stream)?;
            for p in &producers {
                d.stream_wait_event(p.stream, after)?;
                bump(&COUNTERS.reverse_waits);
            }
        }
        Ok(())
    })();
    ctx.return_events(&mut events);
    probe.stop(Phase::LaunchEvents);
    if let Err(e) = after {
        // The work is enqueued but its producers may not wait for it, so their memory could
        // be released or overwritten under it: hold the caller until it has finished.
        let _ = d.stream_synchronize(launch_stream);
        bump(&COUNTERS.host_syncs);
        return Err(e);
    }
    Ok(launch_stream.as_u64())
}

/// A producer stream to order a launch against.
#[derive(Clone, Copy, Debug)]
struct Producer {
    stream: RawStream,
    /// The first argument that names it (for errors).
    index: usize,
    /// Whether caijit's own memory lives on it (always ordered).
    own: bool,
}

/// Keep only the edges that are legal with graph capture. Inside a capture, only streams of
/// the same capture (forked from it with an event) may be joined: such edges become graph
/// dependencies. Edges to streams outside it would invalidate the capture (or order
/// nothing, since the graph runs later), so they are left out: ordering a replay against
/// other work is the capturer's business, as in CUDA itself (a caijit graph's first replay
/// waits for what such producers had enqueued: [`record::producer_outside`]; a replay's
/// new arguments are ordered as a launch's). Outside a capture, waiting on
/// a stream that is being captured would silently pull the launch into that capture: an
/// error naming the argument.
///
/// The legacy default stream is never captured, and asking it while another stream is
/// captured is itself an illegal implicit synchronisation: it is never asked.
fn keep_capture_legal(
    ctx: &Context,
    d: &Driver,
    launch: RawStream,
    producers: &mut SmallVec<[Producer; 4]>,
    named: &impl Fn(usize, String) -> Error,
) -> Result<()> {
    let legacy = RawStream::from_cai(1);
    let capture = |s: RawStream| if s == legacy { Ok(0) } else { d.capture_id(s) };
    let launch_capture = capture(launch)?;
    let mut kept: SmallVec<[Producer; 4]> = SmallVec::new();
    for &p in producers.iter() {
        match (launch_capture, capture(p.stream)?) {
            (l, q) if l == q => kept.push(p),
            (0, _) => {
                return Err(named(
                    p.index,
                    "the array's stream is being captured into a CUDA graph: launch on the capturing stream (or one forked from it), or finish the capture first".into(),
                ))
            }
            (l, _) => record::producer_outside(ctx, d, l, p.stream)?,
        }
    }
    *producers = kept;
    Ok(())
}

/// The producer stream every array seen so far shares: `None` before the first one with a
/// stream, `Some(None)` once two differ.
fn shared(common: Option<Option<RawStream>>, s: RawStream) -> Option<Option<RawStream>> {
    match common {
        None => Some(Some(s)),
        Some(Some(c)) if c == s => Some(Some(c)),
        _ => Some(None),
    }
}

/// The stream work runs on: the one given, else the stream of the caijit graph this thread
/// is capturing, else the producer stream all its arrays share, else the legacy default
/// stream.
fn chosen(stream: Option<&Stream>, common: Option<Option<RawStream>>) -> RawStream {
    match stream {
        Some(s) => s.raw(),
        None => match record::thread_capture() {
            Some((capturing, _)) => capturing,
            None => common.flatten().unwrap_or(RawStream::from_cai(1)),
        },
    }
}

/// The stream (CAI value) a launch over `arrays` with `stream` would be enqueued on: for
/// scratch memory that work allocates, stream-ordered with it and without extra events.
pub fn launch_stream<'v>(arrays: impl IntoIterator<Item = &'v ArrayView>, stream: Option<&Stream>) -> u64 {
    let common = arrays.into_iter().filter_map(|v| v.stream()).fold(None, |c, s| shared(c, RawStream::from_cai(s.to_cai())));
    chosen(stream, common).as_u64()
}

/// Copy the C-contiguous array `src` into the C-contiguous array `dst` of the same dtype and
/// size with the driver's device-to-device copy (what CuPy and PyTorch use for such copies),
/// ordered by the stream protocol as a launch is. Returns the stream it was enqueued on
/// (CAI value).
pub fn copy_contiguous(ctx: &Context, src: &Arg<'_>, dst: &Arg<'_>, stream: Option<&Stream>, sync: bool) -> Result<u64> {
    const NAMES: [&str; 2] = ["source", "destination"];
    let named = |i: usize, what: String| Error::argument(format!("copy {}: {what}", NAMES[i]));
    fn array<'a>(a: &Arg<'a>) -> std::result::Result<(&'a ArrayView, Option<usize>), &'static str> {
        let (v, device) = match a {
            Arg::Array(v) => (*v, None),
            Arg::ArrayOn(v, d) => (*v, Some(*d)),
            _ => return Err("not an array"),
        };
        match v.is_c_contiguous() {
            true => Ok((v, device)),
            false => Err("the array is not C-contiguous"),
        }
    }
    let (s, s_dev) = array(src).map_err(|e| named(0, e.into()))?;
    let (d, d_dev) = array(dst).map_err(|e| named(1, e.into()))?;
    if s.dtype() != d.dtype() || s.size() != d.size() {
        return Err(Error::argument(format!(
            "copy: the source ({} elements of {}) and the destination ({} of {}) differ",
            s.size(),
            s.dtype(),
            d.size(),
            d.dtype()
        )));
    }
    if d.readonly() {
        return Err(named(1, "the array is readonly".into()));
    }
    let bytes = s.nbytes();
    let arrays = [(0, s, s_dev), (1, d, d_dev)].into_iter();
    enqueue_ordered(ctx, arrays, stream, sync, named, |drv, on| {
        if bytes > 0 {
            // SAFETY: both ranges were validated above: C-contiguous views of `bytes` bytes on
            // this device, kept alive by their owners until the work ordered on their streams
            // is done (CAI contract); the destination is not readonly.
            #[allow(unsafe_code)]
            let copied = unsafe { drv.copy_device_to_device(d.ptr(), s.ptr(), bytes, on) };
            copied?;
            bump(&COUNTERS.copies);
        }
        Ok(())
    })
}

/// Fault injection for tests: make the next pass through a point fail, so that a GPU test
/// can check what a failure there leaves behind (memory safety after a failed reverse edge).
#[doc(hidden)]
pub mod fault {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

    #[derive(Clone, Copy, Debug)]
    pub enum Point {
        /// After the work is enqueued, before the reverse edges.
        ReverseEdge = 1,
    }

    static ARMED: AtomicU32 = AtomicU32::new(0);

    /// Fail the next pass through `p` (once).
    pub fn arm(p: Point) {
        ARMED.fetch_or(p as u32, Relaxed);
    }

    pub(crate) fn check(p: Point) -> crate::error::Result<()> {
        let bit = p as u32;
        if ARMED.load(Relaxed) & bit != 0 && ARMED.fetch_and(!bit, Relaxed) & bit != 0 {
            return Err(crate::error::Error::launch(format!("injected fault at {p:?}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_given_stream_else_the_shared_producer_else_legacy() {
        use crate::cai::{DType, StreamRef};
        let on = |s: Option<u64>| {
            ArrayView::contiguous(0x1000, &[4], DType::F32, false).unwrap().with_stream(s.map(|s| StreamRef::from_cai(s).unwrap()))
        };
        let (a, b, none) = (on(Some(0x77)), on(Some(0x99)), on(None));
        assert_eq!(launch_stream([&a, &none, &a], None), 0x77);
        assert_eq!(launch_stream([&a, &b], None), 1);
        assert_eq!(launch_stream([&none], None), 1);
        let given = Stream::borrowed(0x55).unwrap();
        assert_eq!(launch_stream([&a, &b], Some(&given)), 0x55);
    }

    #[test]
    fn configs() {
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(257, 256).grid, [2, 1, 1]);
    }
}
