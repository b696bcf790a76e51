//! What a launch does for diagnostics ([`crate::diag`]): write its record into the ring
//! (always), time it with events (while a [`Profiler`] is active), and wait for it and
//! report its fault at it (launch-blocking mode). With every switch off, a launch pays
//! the record (a few dozen plain stores) and a relaxed load of the switches. A graph's
//! replay is traced the same way, as one entry named by the graph's kernels ([`Traced`]).

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::sync::Mutex;
use std::time::Instant;

use super::{Arg, LaunchConfig, Num};
use crate::diag::{self, ArgSlot, LaunchRecord, ARGS_KEPT};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::runtime::Context;
use crate::sys::{nvtx, Driver, DriverError, RawEvent, RawStream};

/// What a trace names: a kernel instance, or a graph replay (named by its kernels). The
/// name is kept for the process and nameable by launch records ([`diag::name_kernel`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Traced {
    pub name: &'static str,
    /// The name for NVTX ranges (`None` where it holds a NUL).
    pub name_c: Option<&'static CStr>,
    pub device: usize,
}

impl Traced {
    #[inline]
    fn of(k: &Kernel) -> Traced {
        Traced { name: k.instance(), name_c: k.instance_c, device: k.context().ordinal() }
    }
}

/// The [`Traced`] of a graph's replay on `device` whose captured kernels are `kernels`, in
/// launch order: named `graph[k1, k2 x3, ...]` (runs of one kernel counted, cut after
/// about 160 characters), each name made once per process however many graphs share it.
pub(crate) fn graph_traced<'a>(kernels: impl IntoIterator<Item = &'a str>, device: usize) -> Traced {
    static NAMES: Mutex<BTreeMap<String, (&'static str, Option<&'static CStr>)>> = Mutex::new(BTreeMap::new());
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for k in kernels {
        match runs.last_mut() {
            Some((last, n)) if *last == k => *n += 1,
            _ => runs.push((k, 1)),
        }
    }
    let total: usize = runs.iter().map(|r| r.1).sum();
    let mut text = String::from("graph[");
    for (i, (k, n)) in runs.iter().enumerate() {
        if text.len() > 160 {
            let rest: usize = runs[i..].iter().map(|r| r.1).sum();
            text += &format!("... {rest} more of {total}");
            break;
        }
        if i > 0 {
            text += ", ";
        }
        text += k;
        if *n > 1 {
            text += &format!(" x{n}");
        }
    }
    text.push(']');
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let &mut (name, name_c) = names.entry(text).or_insert_with_key(|text| {
        // Kept for the process, as kernel names are: launch records name them by address.
        let named: &'static str = Box::leak(format!("{text}\0").into_boxed_str());
        let name = &named[..named.len() - 1];
        diag::name_kernel(name);
        (name, CStr::from_bytes_with_nul(named.as_bytes()).ok())
    });
    Traced { name, name_c, device }
}

/// Write a launch of `k` enqueued on `stream` into its device's ring. With launch-blocking
/// mode or bounds checks on (which need it after the launch), also returns its record
/// (boxed: the launch path moves only a pointer-sized `None` when both are off).
#[inline]
pub(super) fn record(k: &Kernel, cfg: &LaunchConfig, args: &[Arg<'_>], stream: RawStream) -> Option<Box<LaunchRecord>> {
    record_with(k, cfg, stream, args.len(), |slots| write_args(args, slots))
}

/// Write `args` into the first slots of a record.
#[inline]
pub(crate) fn write_args<'a, 'b: 'a>(args: impl IntoIterator<Item = &'a Arg<'b>>, slots: &[ArgSlot; ARGS_KEPT]) {
    for (a, w) in args.into_iter().zip(slots) {
        match *a {
            Arg::Array(v) | Arg::ArrayOn(v, _) => w.array(v.dtype(), v.shape(), v.ptr()),
            Arg::Scalar { value, .. } => scalar(w, value),
            Arg::ScalarInput(s) => scalar(w, s.value),
            Arg::Bytes(b) => w.bytes(b.len()),
            Arg::Pointer(p) => w.pointer(p),
        }
    }
}

/// [`record`] of a launch made elsewhere than [`Kernel::launch`] (an XLA custom call):
/// `args` writes its first [`ARGS_KEPT`] arguments of `nargs`. With [`diag::SITES`] on,
/// the record takes the site its caller set.
#[inline]
pub(crate) fn record_with(
    k: &Kernel,
    cfg: &LaunchConfig,
    stream: RawStream,
    nargs: usize,
    args: impl Fn(&[ArgSlot; ARGS_KEPT]),
) -> Option<Box<LaunchRecord>> {
    record_as(k.instance(), k.context().ordinal(), cfg, stream, nargs, args)
}

/// [`record_with`] of a launch named `name` on `device`: a graph's replay writes the
/// graph's name, the grid and block of no one kernel (zeros), and the inputs it was given.
#[inline]
pub(crate) fn record_as(
    name: &'static str,
    device: usize,
    cfg: &LaunchConfig,
    stream: RawStream,
    nargs: usize,
    args: impl Fn(&[ArgSlot; ARGS_KEPT]),
) -> Option<Box<LaunchRecord>> {
    let flags = diag::flags();
    let site = if flags & diag::SITES != 0 { diag::take_site() } else { 0 };
    let launch = LaunchFacts { name, cfg, stream, nargs, site };
    let seq = diag::write(device, |s| launch.fill(s, &args));
    if flags & (diag::BLOCKING | diag::BOUNDS) == 0 {
        return None;
    }
    kept(seq, device, &launch, &args)
}

/// What a record says of a launch besides its arguments.
struct LaunchFacts<'a> {
    name: &'static str,
    cfg: &'a LaunchConfig,
    stream: RawStream,
    nargs: usize,
    site: u64,
}

impl LaunchFacts<'_> {
    /// Write the launch into slot `s`. Always inlined: on the launch path it is a run of
    /// stores, not a call.
    #[inline(always)]
    fn fill(&self, s: &diag::Slot, args: &(impl Fn(&[ArgSlot; ARGS_KEPT]) + ?Sized)) {
        let LaunchFacts { name, cfg, stream, nargs, site } = *self;
        s.launch(name, cfg.grid, cfg.block, cfg.shared_mem, stream.as_u64(), nargs, site);
        args(s.args());
    }
}

/// The record of the launch just written, for launch-blocking mode and bounds checks
/// (written again, apart from the ring, which other threads' launches may overwrite).
/// `args` is taken as `dyn`: one static call of the argument writer is left, on the launch
/// path, where it is inlined (callgrind: some 17 instructions fewer per launch).
#[cold]
fn kept(seq: u64, device: usize, launch: &LaunchFacts<'_>, args: &dyn Fn(&[ArgSlot; ARGS_KEPT])) -> Option<Box<LaunchRecord>> {
    Some(Box::new(diag::record_of(seq, device, |s| launch.fill(s, args))))
}

/// A scalar argument into its slot.
#[inline]
pub(crate) fn scalar(w: &ArgSlot, value: Num) {
    match value {
        Num::Bool(b) => w.bool(b),
        Num::Int(i) => w.int(i),
        Num::Float(x) => w.float(x),
        Num::Complex(re, im) => w.complex(re, im),
    }
}

/// Launch-blocking mode (when on): wait for the launch and report a fault as an error
/// naming it; unless its stream is being captured into a graph (waiting there is illegal,
/// and the kernel does not run until the graph is launched).
pub(crate) fn block(ctx: &Context, launched: &LaunchRecord) -> Result<()> {
    if !diag::enabled(diag::BLOCKING) {
        return Ok(());
    }
    let d = ctx.bind()?;
    let stream = RawStream::from_cai(launched.stream);
    if d.capture_id(stream).map_err(|e| fault_at(launched, e))? != 0 {
        return Ok(());
    }
    d.stream_synchronize(stream).map_err(|e| fault_at(launched, e))
}

fn fault_at(launched: &LaunchRecord, e: DriverError) -> Error {
    let what = format!("kernel {} (launch-blocking mode)", launched.kernel);
    if diag::is_sticky(e.code) {
        Error::fault_at(what, e, *launched)
    } else {
        Error::driver(what, e)
    }
}

/// Whether an NVTX tool is attached: `Ok(false)` when `NVTX_INJECTION64_PATH` names none
/// (ranges are then no-ops), `Err` naming the library when it could not be loaded.
pub fn nvtx_tool() -> std::result::Result<bool, String> {
    nvtx::tool()
}

// ---------------------------------------------------------------------------------------
// Profiling

/// A launch being timed: its events and host enqueue time, read when the profile ends.
struct Timed {
    device: usize,
    kernel: &'static str,
    start: RawEvent,
    end: RawEvent,
    host_ns: u64,
}

#[derive(Default)]
struct Collector {
    /// Whether a profile is active.
    active: bool,
    timed: Vec<Timed>,
    /// Launches seen that could not be timed (inside a graph capture), by kernel.
    untimed: BTreeMap<&'static str, u64>,
    /// Timing events no longer in use, by device (created once, reused by later profiles).
    pool: BTreeMap<usize, Vec<RawEvent>>,
}

static COLLECTOR: Mutex<Collector> =
    Mutex::new(Collector { active: false, timed: Vec::new(), untimed: BTreeMap::new(), pool: BTreeMap::new() });

fn collector() -> std::sync::MutexGuard<'static, Collector> {
    COLLECTOR.lock().unwrap_or_else(|p| p.into_inner())
}

/// A launch being enqueued: its NVTX range and the start of its timing.
pub(crate) struct Span {
    start: Option<(RawEvent, Instant)>,
    _range: Option<nvtx::Range>,
}

/// Before the launch: with NVTX on, push a range named by the kernel instance; while
/// profiling, record a timing event on `stream` (outside graph captures, where an event is
/// a graph node and times nothing). With both off: one relaxed load.
#[inline]
pub(crate) fn begin(k: &Kernel, d: &Driver, stream: RawStream) -> Result<Span> {
    let flags = diag::flags();
    if flags & (diag::PROFILE | diag::NVTX) == 0 {
        return Ok(Span { start: None, _range: None });
    }
    begin_traced(flags, Traced::of(k), d, stream)
}

/// [`begin`] of a launch named by `t` (a graph's replay).
#[inline]
pub(crate) fn begin_as(t: Traced, d: &Driver, stream: RawStream) -> Result<Span> {
    let flags = diag::flags();
    if flags & (diag::PROFILE | diag::NVTX) == 0 {
        return Ok(Span { start: None, _range: None });
    }
    begin_traced(flags, t, d, stream)
}

#[cold]
fn begin_traced(flags: u32, t: Traced, d: &Driver, stream: RawStream) -> Result<Span> {
    let range = if flags & diag::NVTX != 0 { t.name_c.map(nvtx::Range::push) } else { None };
    if flags & diag::PROFILE == 0 {
        return Ok(Span { start: None, _range: range });
    }
    if stream != RawStream::from_cai(1) && d.capture_id(stream)? != 0 {
        *collector().untimed.entry(t.name).or_default() += 1;
        return Ok(Span { start: None, _range: range });
    }
    let e = take_event(d, t.device)?;
    d.event_record(e, stream)?;
    Ok(Span { start: Some((e, Instant::now())), _range: range })
}

/// After the launch was enqueued: record the end event and keep both for the profile; the
/// NVTX range ends with the span.
#[inline]
pub(crate) fn end(span: Span, k: &Kernel, d: &Driver, stream: RawStream) -> Result<()> {
    if span.start.is_none() {
        return Ok(());
    }
    end_as(span, Traced::of(k), d, stream)
}

/// [`end`] of a launch named by `t` (a graph's replay).
pub(crate) fn end_as(span: Span, t: Traced, d: &Driver, stream: RawStream) -> Result<()> {
    let Some((start, t0)) = span.start else { return Ok(()) };
    let host_ns = t0.elapsed().as_nanos() as u64;
    let device = t.device;
    let end = take_event(d, device)?;
    d.event_record(end, stream)?;
    let mut c = collector();
    if c.active {
        c.timed.push(Timed { device, kernel: t.name, start, end, host_ns });
    } else {
        let pool = c.pool.entry(device).or_default();
        pool.extend([start, end]);
    }
    Ok(())
}

fn take_event(d: &Driver, device: usize) -> Result<RawEvent> {
    if let Some(e) = collector().pool.get_mut(&device).and_then(Vec::pop) {
        return Ok(e);
    }
    Ok(d.event_create_timed()?)
}

/// One kernel instance's line of a profile.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProfileRow {
    pub kernel: String,
    pub device: usize,
    /// Launches timed.
    pub launches: u64,
    /// Launches seen but not timed (inside a graph capture).
    pub untimed: u64,
    /// GPU time between each launch's events, summed (milliseconds).
    pub gpu_ms: f64,
    /// Host time to enqueue the launches (the driver call, without caijit's checks), summed
    /// (milliseconds).
    pub host_ms: f64,
}

/// Times every caijit launch of the process on the GPU while it is alive: two events per
/// launch, on the launch's stream. One profile at a time.
#[derive(Debug)]
#[must_use = "the profile ends (and its timings are lost) when it is dropped"]
pub struct Profiler {
    _private: (),
}

impl Profiler {
    /// Start timing launches.
    pub fn start() -> Result<Profiler> {
        let mut c = collector();
        if c.active {
            return Err(Error::argument("a profile is already active (profiles do not nest)"));
        }
        c.active = true;
        diag::set(diag::PROFILE, true);
        Ok(Profiler { _private: () })
    }

    /// Stop timing, wait for the timed launches and return one row per kernel instance
    /// and device, in order of first launch.
    pub fn finish(self) -> Result<Vec<ProfileRow>> {
        let (timed, untimed) = stop();
        let mut rows: Vec<ProfileRow> = Vec::new();
        let mut result = Ok(());
        let mut done: Vec<(usize, RawEvent)> = Vec::new();
        for t in &timed {
            if result.is_ok() {
                result = elapsed(t).map(|ms| {
                    let row = match rows.iter_mut().position(|r| r.kernel == t.kernel && r.device == t.device) {
                        Some(i) => &mut rows[i],
                        None => {
                            rows.push(ProfileRow {
                                kernel: t.kernel.into(),
                                device: t.device,
                                launches: 0,
                                untimed: 0,
                                gpu_ms: 0.0,
                                host_ms: 0.0,
                            });
                            rows.last_mut().expect("just pushed")
                        }
                    };
                    row.launches += 1;
                    row.gpu_ms += ms;
                    row.host_ms += t.host_ns as f64 / 1e6;
                });
            }
            done.extend([(t.device, t.start), (t.device, t.end)]);
        }
        {
            let mut c = collector();
            for (device, e) in done {
                c.pool.entry(device).or_default().push(e);
            }
        }
        result?;
        for (kernel, n) in untimed {
            match rows.iter_mut().find(|r| r.kernel == kernel) {
                Some(r) => r.untimed += n,
                None => rows.push(ProfileRow { kernel: kernel.into(), device: 0, launches: 0, untimed: n, gpu_ms: 0.0, host_ms: 0.0 }),
            }
        }
        Ok(rows)
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        // `finish` already stopped it; otherwise the timings are dropped (their events go
        // back to the pool once the profile is read by nobody: they are reused as they are).
        let (timed, _) = stop();
        let mut c = collector();
        for t in timed {
            c.pool.entry(t.device).or_default().extend([t.start, t.end]);
        }
    }
}

fn stop() -> (Vec<Timed>, BTreeMap<&'static str, u64>) {
    let mut c = collector();
    if c.active {
        diag::set(diag::PROFILE, false);
        c.active = false;
    }
    (std::mem::take(&mut c.timed), std::mem::take(&mut c.untimed))
}

fn elapsed(t: &Timed) -> Result<f64> {
    let ctx = Context::new(t.device)?;
    let d = ctx.bind()?;
    d.event_synchronize(t.end)?;
    match d.event_elapsed_ms(t.start, t.end)? {
        Some(ms) => Ok(f64::from(ms)),
        None => Err(Error::launch("caijit.profile needs a CUDA 12.8 or newer driver (cuEventElapsedTime_v2)")),
    }
}
