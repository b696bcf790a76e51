//! Timing one candidate on the GPU: its instance compiled and loaded, one warm-up launch,
//! then samples of back-to-back launches between two timing events, until the samples
//! agree; every launch on scratch copies of the arrays the kernel may write, on a stream
//! of the tuner's own.

use std::sync::{Arc, Mutex};

use super::candidate::Candidate;
use super::choice::{Timing, Trial};
use crate::array::DeviceArray;
use crate::cai::{ArrayView, DType, StreamRef};
use crate::dispatch::Dispatcher;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::{copy_contiguous, Arg};
use crate::runtime::{Context, Stream};
use crate::stats::{bump, COUNTERS};
use crate::sync::lock;
use crate::sys::RawEvent;

/// Samples taken at least, and at most.
const MIN_SAMPLES: usize = 5;
const MAX_SAMPLES: usize = 25;
/// A sample's launches last about this long (a short kernel is timed over many launches,
/// so that the events' resolution and the launch gaps do not decide).
const SAMPLE_US: f64 = 200.0;
const MAX_BATCH: usize = 1000;
/// Sampling stops once the samples' spread ((max - min) / median) is below this.
const SPREAD: f64 = 0.05;

/// Pairs of timing events per device, each pair taken by one measurement at a time (a
/// thread tuning another kernel takes another pair) and given back after it.
static EVENTS: Mutex<Vec<(usize, RawEvent, RawEvent)>> = Mutex::new(Vec::new());

/// A pair of timing events of one device, held by one measurement.
struct Events<'c> {
    ctx: &'c Context,
    start: RawEvent,
    end: RawEvent,
}

impl<'c> Events<'c> {
    fn take(ctx: &'c Context) -> Result<Events<'c>> {
        let mut pool = lock(&EVENTS);
        if let Some(i) = pool.iter().position(|(d, ..)| *d == ctx.ordinal()) {
            let (_, start, end) = pool.swap_remove(i);
            return Ok(Events { ctx, start, end });
        }
        drop(pool);
        let d = ctx.bind()?;
        Ok(Events { ctx, start: d.event_create_timed()?, end: d.event_create_timed()? })
    }
}

impl Drop for Events<'_> {
    fn drop(&mut self) {
        lock(&EVENTS).push((self.ctx.ordinal(), self.start, self.end));
    }
}

/// The arguments a tuning launches with: `args`, with each array a parameter of `k` may
/// write replaced by a scratch copy (the same bytes, alignment and strides), so that
/// tuning never changes the caller's data, and every other array by a view of it without
/// a stream, once the tuner's stream has waited for its producer: the timed launches make
/// no stream edges of their own. The copies live as long as the value.
pub(super) struct Scratch {
    /// Per argument: its view for the timed launches, and its device when it said one.
    views: Vec<Option<(ArrayView, Option<usize>)>>,
    _memory: Vec<DeviceArray>,
}

impl Scratch {
    pub(super) fn of(k: &Kernel, ctx: &Arc<Context>, args: &[Arg<'_>], stream: &Arc<Stream>) -> Result<Scratch> {
        let mut views = Vec::with_capacity(args.len());
        let mut memory = Vec::new();
        for (a, p) in args.iter().zip(k.info().params.iter().map(Some).chain(std::iter::repeat(None))) {
            let (v, device) = match a {
                Arg::Array(v) => (*v, None),
                Arg::ArrayOn(v, d) => (*v, Some(*d)),
                _ => {
                    views.push(None);
                    continue;
                }
            };
            let written = p.is_some_and(|p| p.kind.is_const() == Some(false));
            if !written || v.is_empty() {
                if let Some(s) = v.stream() {
                    ctx.order_streams(stream, &Stream::borrowed(s.to_cai())?)?;
                }
                views.push(Some((ArrayView::new(v.ptr(), v.shape(), Some(v.strides()), v.dtype(), v.readonly(), None)?, device)));
                continue;
            }
            let (lo, hi) = v.byte_extent();
            let start = u64::try_from(i128::from(v.ptr()) + lo).map_err(|_| Error::argument("an array below address 0"))?;
            let len = usize::try_from(hi - lo).map_err(|_| Error::argument("an array too large to copy"))?;
            // (The copy keeps the original's alignment to 256 bytes, which vector loads need.)
            let pad = start % 256;
            let copy = DeviceArray::empty(ctx, &[len + pad as usize], DType::U8, stream)?;
            let from = ArrayView::new(start, &[len], None, DType::U8, true, v.stream())?.owned_by_caijit(v.is_owned_by_caijit());
            let to = ArrayView::new(copy.ptr() + pad, &[len], None, DType::U8, false, Some(stream.stream_ref()))?;
            copy_contiguous(ctx, &Arg::Array(&from), &Arg::Array(&to), Some(stream), true)?;
            let at = u64::try_from(i128::from(copy.ptr() + pad) - lo).map_err(|_| Error::argument("a scratch copy below address 0"))?;
            views.push(Some((ArrayView::new(at, v.shape(), Some(v.strides()), v.dtype(), false, None)?, Some(ctx.ordinal()))));
            memory.push(copy);
        }
        Ok(Scratch { views, _memory: memory })
    }

    /// `args` with the scratch copies in place of the arrays they copy.
    pub(super) fn args<'a>(&'a self, args: &[Arg<'a>]) -> Vec<Arg<'a>> {
        args.iter()
            .zip(&self.views)
            .map(|(a, s)| match s {
                Some((v, Some(d))) => Arg::ArrayOn(v, *d),
                Some((v, None)) => Arg::Array(v),
                None => *a,
            })
            .collect()
    }
}

/// The kernel candidate `c` launches on `ctx`'s device: its explicit instance, else the
/// instance the arguments select; with its dynamic shared memory limit raised to what `c`
/// asks for.
pub(super) fn kernel(d: &Dispatcher, c: &Candidate, ctx: &Arc<Context>, args: &[Arg<'_>]) -> Result<Arc<Kernel>> {
    let k = if c.template.is_empty() { d.resolve(ctx.ordinal(), args)? } else { d.instance(ctx, &c.template)? };
    if i64::from(c.config.shared_mem) > i64::from(k.max_dynamic_shared_size_bytes()) {
        let bytes = i32::try_from(c.config.shared_mem)
            .map_err(|_| Error::argument(format!("{} bytes of dynamic shared memory is out of range", c.config.shared_mem)))?;
        k.set_max_dynamic_shared_size_bytes(bytes)?;
    }
    Ok(k)
}

/// Time candidate `c`, whose kernel is `k` (or why it has none), on `args` (the scratch
/// copies in place), on `stream`: a failure to compile, load or launch it is its trial's
/// reason, not an error.
pub(super) fn trial(c: &Candidate, k: &Result<Arc<Kernel>>, ctx: &Arc<Context>, args: &[Arg<'_>], stream: &Arc<Stream>) -> Trial {
    let timed = match k {
        Ok(k) => time(c, k, ctx, args, stream),
        Err(e) => return Trial::Failed(e.to_string()),
    };
    match timed {
        Ok(t) => Trial::Timed(t),
        Err(e) => Trial::Failed(e.to_string()),
    }
}

fn time(c: &Candidate, k: &Kernel, ctx: &Arc<Context>, args: &[Arg<'_>], stream: &Arc<Stream>) -> Result<Timing> {
    let launch = || -> Result<()> {
        k.launch(&c.config, args, Some(stream), true)?;
        bump(&COUNTERS.tune_launches);
        Ok(())
    };
    launch()?;
    let events = Events::take(ctx)?;
    let (start, end) = (events.start, events.end);
    let sample = |batch: usize| -> Result<f64> {
        let drv = ctx.bind()?;
        drv.event_record(start, stream.raw())?;
        for _ in 0..batch {
            launch()?;
        }
        drv.event_record(end, stream.raw())?;
        drv.event_synchronize(end)?;
        let ms =
            drv.event_elapsed_ms(start, end)?.ok_or_else(|| Error::launch("this driver cannot time events (CUDA 12.8 or newer can)"))?;
        Ok(f64::from(ms) * 1000.0 / batch as f64)
    };
    let first = sample(1)?;
    let batch = ((SAMPLE_US / first.max(0.1)).ceil() as usize).clamp(1, MAX_BATCH);
    let mut samples = Vec::with_capacity(MAX_SAMPLES);
    while samples.len() < MAX_SAMPLES {
        samples.push(sample(batch)?);
        if samples.len() >= MIN_SAMPLES && Timing::of(samples.clone(), batch).is_some_and(|t| t.spread() < SPREAD) {
            break;
        }
    }
    Timing::of(samples, batch).ok_or_else(|| Error::launch("no sample could be timed"))
}

/// Whether `stream` (a CAI value) is being captured into a graph: tuning there would
/// break the capture. The legacy default stream is never asked (it cannot be captured).
pub(super) fn capturing(stream: u64) -> bool {
    stream != 1 && Stream::borrowed(stream).and_then(|s| s.is_capturing()).unwrap_or(false)
}

/// The streams the arrays among `args` carry (CAI values).
pub(super) fn array_streams(args: &[Arg<'_>]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for a in args {
        if let Arg::Array(v) | Arg::ArrayOn(v, _) = a {
            if let Some(s) = v.stream().map(StreamRef::to_cai) {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}
