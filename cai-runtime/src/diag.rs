//! Diagnostics that are free when off: the switches (launch-blocking mode, NVTX ranges,
//! profiling), the ring of recent launches kept per device, and the sticky CUDA errors
//! that name them.
//!
//! # Examples
//! ```
//! use cai_runtime::diag;
//! diag::set(diag::BLOCKING, true); // like CAIJIT_LAUNCH_BLOCKING=1
//! assert!(diag::enabled(diag::BLOCKING));
//! diag::set(diag::BLOCKING, false);
//! ```
//!
//! # Rationale
//! A kernel that faults (illegal address, misaligned access, trap) does not fail its own
//! launch: the error is *sticky* and surfaces at whatever call comes next, often an
//! unrelated one. So every launch writes a small fixed-size record (kernel instance,
//! configuration, stream, each argument's kind, dtype and shape) into its device's ring —
//! a copy of plain values under an uncontended lock, no allocation — and every error that
//! carries a sticky code lists the ring (newest first): the kernels that may have caused
//! it. Records are formatted only then.
//!
//! The switches live in one atomic word: a launch with everything off pays one relaxed load.
//!
//! # Limitations
//! The ring keeps the last [`RING_LEN`] launches per device, [`ARGS_KEPT`] arguments per
//! launch and [`DIMS_KEPT`] dimensions per array. It does not record the Python call site
//! of each launch (that would cost a frame walk per launch); launch-blocking mode names it.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use crate::cai::DType;

/// Synchronize after each launch and report a fault at the launch that caused it
/// (`CAIJIT_LAUNCH_BLOCKING=1`, `caijit.debug(True)`).
pub const BLOCKING: u32 = 1;
/// Wrap each launch and compile in an NVTX range named by the kernel instance
/// (`CAIJIT_NVTX=1`, `caijit.nvtx(True)`).
pub const NVTX: u32 = 2;
/// Time each launch with events (`caijit.profile()`).
pub const PROFILE: u32 = 4;
/// Launch kernels' bounds-checked debug instances (`CAIJIT_DEBUG=1`, `caijit.debug(True)`,
/// which also turn [`BLOCKING`] on).
pub const BOUNDS: u32 = 8;
/// The word has been read from the environment.
const READ: u32 = 1 << 31;

static FLAGS: AtomicU32 = AtomicU32::new(0);

/// The switches (a mask of [`BLOCKING`], [`NVTX`], [`PROFILE`], [`BOUNDS`]): one relaxed load once
/// the environment has been read.
#[inline]
pub fn flags() -> u32 {
    let f = FLAGS.load(Relaxed);
    if f & READ != 0 {
        f
    } else {
        from_env()
    }
}

#[cold]
fn from_env() -> u32 {
    let on = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    let mut f = READ;
    if on("CAIJIT_LAUNCH_BLOCKING") {
        f |= BLOCKING;
    }
    if on("CAIJIT_DEBUG") {
        f |= BLOCKING | BOUNDS;
    }
    if on("CAIJIT_NVTX") {
        f |= NVTX;
    }
    FLAGS.fetch_or(f, Relaxed) | f
}

/// Whether every switch of `mask` is on.
#[inline]
pub fn enabled(mask: u32) -> bool {
    flags() & mask == mask
}

/// Turn the switches of `mask` on or off for the process (overriding the environment).
pub fn set(mask: u32, on: bool) {
    flags();
    let mask = mask & !READ;
    if on {
        FLAGS.fetch_or(mask, Relaxed);
    } else {
        FLAGS.fetch_and(!mask, Relaxed);
    }
}

/// Whether `CAIJIT_LINEINFO` asks for `-lineinfo` builds.
pub fn lineinfo_by_env() -> bool {
    std::env::var("CAIJIT_LINEINFO").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Whether a `CUresult` is sticky: the context is unusable after it, and the error is
/// reported by whichever call comes next (illegal address, hardware stack error, illegal
/// instruction, misaligned address, invalid address space, invalid PC, launch failure,
/// device-side assert/trap, launch timeout).
pub fn is_sticky(code: u32) -> bool {
    matches!(code, 700 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719)
}

/// Launches kept per device.
pub const RING_LEN: usize = 16;
/// Arguments kept per launch (the count is always kept).
pub const ARGS_KEPT: usize = 8;
/// Dimensions kept per array argument (the rank is always kept).
pub const DIMS_KEPT: usize = 4; // `ArgSummary::array` writes exactly these four
/// Devices with a ring.
const DEVICES: usize = 32;

/// A scalar argument's value, as the launch saw it (integers beyond 64 bits are kept as
/// their nearest 64-bit bound: no parameter is wider).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarShown {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Complex(f32, f32),
}

/// An extent as the ring keeps it: 32 bits, so that a summary is 32 bytes and a launch
/// writes it with a few stores; larger extents are kept as `u32::MAX` ("at least that").
pub type Extent = u32;

/// What a launch record keeps of one argument: plain values, no allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgSummary {
    /// An array: its dtype, rank, first [`DIMS_KEPT`] extents and data pointer.
    Array {
        dtype: DType,
        ndim: u8,
        shape: [Extent; DIMS_KEPT],
        ptr: u64,
    },
    Scalar(ScalarShown),
    /// A struct argument of this many bytes.
    Bytes(usize),
    /// A raw device pointer.
    Pointer(u64),
}

impl ArgSummary {
    /// An array's summary from its dtype, shape and pointer.
    #[inline]
    pub fn array(dtype: DType, shape: &[usize], ptr: u64) -> Self {
        // Unrolled (no iterator): this runs on every launch, per array argument.
        let at = |d: usize| shape.get(d).map_or(0, |&n| n.min(Extent::MAX as usize) as Extent);
        let kept = [at(0), at(1), at(2), at(3)];
        ArgSummary::Array { dtype, ndim: shape.len().min(u8::MAX as usize) as u8, shape: kept, ptr }
    }
}

impl std::fmt::Display for ArgSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ArgSummary::Array { dtype, ndim, shape, ptr } => {
                let n = (ndim as usize).min(DIMS_KEPT);
                let dims: Vec<String> =
                    shape[..n].iter().map(|&e| if e == Extent::MAX { format!("≥{e}") } else { e.to_string() }).collect();
                let more = if ndim as usize > DIMS_KEPT { ", …" } else { "" };
                write!(f, "{}[{}{more}] at {ptr:#x}", dtype.name(), dims.join(", "))
            }
            ArgSummary::Scalar(ScalarShown::Bool(b)) => write!(f, "{b}"),
            ArgSummary::Scalar(ScalarShown::Int(i)) => write!(f, "{i}"),
            ArgSummary::Scalar(ScalarShown::UInt(u)) => write!(f, "{u}"),
            ArgSummary::Scalar(ScalarShown::Float(x)) => write!(f, "{x:?}"),
            ArgSummary::Scalar(ScalarShown::Complex(re, im)) => write!(f, "({re:?}{im:+?}j)"),
            ArgSummary::Bytes(n) => write!(f, "struct of {n} bytes"),
            ArgSummary::Pointer(p) => write!(f, "pointer {p:#x}"),
        }
    }
}

/// One launch, as the ring keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchRecord {
    /// The launch's number on its device (1 for the first).
    pub seq: u64,
    /// The device ordinal.
    pub device: usize,
    /// The kernel instance (`axpy<float>`, or the demangled signature).
    pub kernel: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    /// The launch stream's CAI value.
    pub stream: u64,
    /// How many arguments the launch had (the first [`ARGS_KEPT`] are in `args`; slots
    /// after `nargs` are not this launch's).
    pub nargs: usize,
    pub args: [Option<ArgSummary>; ARGS_KEPT],
}

impl LaunchRecord {
    /// The arguments kept, each formatted, with a note for those left out.
    pub fn arguments(&self) -> Vec<String> {
        let kept = self.nargs.min(ARGS_KEPT);
        let mut shown: Vec<String> = self.args[..kept].iter().flatten().map(ToString::to_string).collect();
        if self.nargs > ARGS_KEPT {
            shown.push(format!("… {} more", self.nargs - ARGS_KEPT));
        }
        shown
    }
}

impl std::fmt::Display for LaunchRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        write!(f, "#{} {} grid ({gx}, {gy}, {gz}) block ({bx}, {by}, {bz})", self.seq, self.kernel)?;
        if self.shared_mem > 0 {
            write!(f, " shared {} B", self.shared_mem)?;
        }
        write!(f, " on device {} stream {:#x} with ({})", self.device, self.stream, self.arguments().join(", "))
    }
}

impl LaunchRecord {
    /// A record with nothing in it (`seq` 0).
    pub const EMPTY: LaunchRecord = LaunchRecord {
        seq: 0,
        device: 0,
        kernel: "",
        grid: [0; 3],
        block: [0; 3],
        shared_mem: 0,
        stream: 0,
        nargs: 0,
        args: [None; ARGS_KEPT],
    };
}

struct Ring {
    /// Slot `(seq - 1) % RING_LEN` holds launch `seq`; `seq` 0 is an empty slot.
    records: [LaunchRecord; RING_LEN],
    /// Launches recorded so far on the device.
    count: u64,
}

static RINGS: [Mutex<Ring>; DEVICES] = [const { Mutex::new(Ring { records: [LaunchRecord::EMPTY; RING_LEN], count: 0 }) }; DEVICES];

/// Write a launch on `device` into its ring: `fill` writes every field but `seq` and
/// `device` straight into the slot (no copy of the record, no allocation). Returns `seq`.
#[inline]
pub fn record_with(device: usize, fill: impl FnOnce(&mut LaunchRecord)) -> u64 {
    let Some(ring) = RINGS.get(device) else { return 0 };
    // A poisoned lock only means a panic elsewhere while holding it: the records are plain
    // values, still consistent.
    let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
    ring.count += 1;
    let seq = ring.count;
    let slot = &mut ring.records[((seq - 1) % RING_LEN as u64) as usize];
    fill(slot);
    slot.seq = seq;
    slot.device = device;
    seq
}

/// Write a whole record into its device's ring; returns it with its `seq`.
pub fn record(r: LaunchRecord) -> LaunchRecord {
    let seq = record_with(r.device, |slot| *slot = r);
    LaunchRecord { seq, ..r }
}

/// The launches kept for `device`, newest first.
pub fn recent(device: usize) -> Vec<LaunchRecord> {
    let Some(ring) = RINGS.get(device) else { return Vec::new() };
    let ring = ring.lock().unwrap_or_else(|p| p.into_inner());
    let mut v: Vec<LaunchRecord> = ring.records.iter().filter(|r| r.seq != 0).copied().collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.seq));
    v
}

/// The launches kept for every device that launched, by device, newest first.
pub fn recent_all() -> Vec<LaunchRecord> {
    (0..DEVICES).flat_map(recent).collect()
}

/// Forget the launches kept (tests; a fresh process starts empty).
pub fn clear() {
    for ring in &RINGS {
        let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.records = [LaunchRecord::EMPTY; RING_LEN];
        ring.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(device: usize, kernel: &'static str) -> LaunchRecord {
        let mut args = [None; ARGS_KEPT];
        args[0] = Some(ArgSummary::array(DType::F32, &[3, 4], 0x7000));
        args[1] = Some(ArgSummary::Scalar(ScalarShown::Int(12)));
        assert_eq!(std::mem::size_of::<Option<ArgSummary>>(), 32, "a summary is written with a few stores");
        LaunchRecord { seq: 0, device, kernel, grid: [2, 1, 1], block: [128, 1, 1], shared_mem: 0, stream: 1, nargs: 2, args }
    }

    #[test]
    fn the_ring_keeps_the_newest_launches_per_device_and_formats_them() {
        clear();
        // A slot reused by a launch with fewer arguments shows only that launch's.
        record_with(11, |r| *r = rec(11, "two"));
        for _ in 1..RING_LEN {
            record(rec(11, "filler"));
        }
        record_with(11, |r| {
            r.kernel = "none";
            r.nargs = 0;
        });
        let newest = recent(11)[0];
        assert_eq!((newest.kernel, newest.arguments().len()), ("none", 0));
        for _ in 0..RING_LEN + 3 {
            record(rec(7, "old<float>"));
        }
        record(rec(7, "axpy<float>"));
        record(rec(9, "other"));
        let r = recent(7);
        assert_eq!(r.len(), RING_LEN);
        assert_eq!(r[0].kernel, "axpy<float>");
        assert_eq!(r[0].seq, RING_LEN as u64 + 4);
        assert!(r.windows(2).all(|w| w[0].seq == w[1].seq + 1));
        assert_eq!(recent(9).len(), 1);
        assert_eq!(
            r[0].to_string(),
            format!("#{} axpy<float> grid (2, 1, 1) block (128, 1, 1) on device 7 stream 0x1 with (float32[3, 4] at 0x7000, 12)", r[0].seq)
        );
        record(rec(DEVICES + 1, "ignored"));
        clear();
        assert!(recent_all().is_empty());
    }

    #[test]
    fn summaries_keep_the_rank_beyond_the_dimensions_kept_and_count_left_out_arguments() {
        let a = ArgSummary::array(DType::I64, &[1, 2, 3, 4, 5, 6], 0x10);
        assert_eq!(a.to_string(), "int64[1, 2, 3, 4, …] at 0x10");
        let mut r = rec(0, "k");
        r.nargs = ARGS_KEPT + 2;
        assert_eq!(r.arguments().last().unwrap(), "… 2 more");
        assert_eq!(ArgSummary::Scalar(ScalarShown::Complex(1.0, -2.0)).to_string(), "(1.0-2.0j)");
        let huge = ArgSummary::array(DType::U8, &[1 << 33], 0x10);
        assert_eq!(huge.to_string(), format!("uint8[≥{}] at 0x10", u32::MAX));
    }

    #[test]
    fn sticky_codes_are_the_faults_that_poison_a_context() {
        for code in [700, 710, 716, 719] {
            assert!(is_sticky(code));
        }
        for code in [0, 1, 2, 98, 201, 400, 999] {
            assert!(!is_sticky(code));
        }
    }
}
