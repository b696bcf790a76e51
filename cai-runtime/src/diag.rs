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
//! unrelated one. So every launch writes its raw facts (kernel, configuration, stream, and
//! per argument its kind, dtype, rank, extents and pointer, or a scalar's bits) into a
//! fixed slot of its device's ring: a few dozen relaxed stores, no lock, no allocation,
//! nothing formatted. Every error that carries a sticky code reads the ring back (newest
//! first): the kernels that may have caused it.
//!
//! The switches live in one atomic word: a launch with everything off pays one relaxed load.
//!
//! # Limitations
//! The ring keeps the last [`RING_LEN`] launches per device, [`ARGS_KEPT`] arguments per
//! launch and [`DIMS_KEPT`] dimensions per array. A slot is written without a lock: a
//! launch whose slot is still being written by another is left out (see [`write()`]). The Python
//! call site of each launch is kept only with [`SITES`] on: finding it costs a frame
//! lookup per launch (launch-blocking mode names the site without it).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::{Mutex, OnceLock};

use crate::cai::DType;
use crate::sync::lock;

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
/// Keep each launch's call site in the ring (`CAIJIT_LAUNCH_SITES=1`,
/// `caijit.debug(sites=True)`): set by the caller ([`set_site`]) when it is on.
pub const SITES: u32 = 16;
/// The word has been read from the environment.
const READ: u32 = 1 << 31;

static FLAGS: AtomicU32 = AtomicU32::new(0);

/// The switches (a mask of [`BLOCKING`], [`NVTX`], [`PROFILE`], [`BOUNDS`], [`SITES`]): one relaxed load once
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
    if on("CAIJIT_LAUNCH_SITES") {
        f |= SITES;
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
pub const DIMS_KEPT: usize = 4;
/// Devices with a ring.
const DEVICES: usize = 32;

/// A scalar argument's value, exactly as the launch saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarShown {
    Bool(bool),
    Int(i128),
    Float(f64),
    Complex(f64, f64),
}

/// What a launch record keeps of one argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgSummary {
    /// An array: its dtype, rank, first [`DIMS_KEPT`] extents (zero past the rank) and
    /// data pointer.
    Array {
        dtype: DType,
        ndim: usize,
        shape: [u64; DIMS_KEPT],
        ptr: u64,
    },
    Scalar(ScalarShown),
    /// A struct argument of this many bytes.
    Bytes(u64),
    /// A raw device pointer.
    Pointer(u64),
}

impl std::fmt::Display for ArgSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ArgSummary::Array { dtype, ndim, shape, ptr } => {
                let dims: Vec<String> = shape[..ndim.min(DIMS_KEPT)].iter().map(u64::to_string).collect();
                let more = if ndim > DIMS_KEPT { ", …" } else { "" };
                write!(f, "{}[{}{more}] at {ptr:#x}", dtype.name(), dims.join(", "))
            }
            ArgSummary::Scalar(ScalarShown::Bool(b)) => write!(f, "{b}"),
            ArgSummary::Scalar(ScalarShown::Int(i)) => write!(f, "{i}"),
            ArgSummary::Scalar(ScalarShown::Float(x)) => write!(f, "{x:?}"),
            ArgSummary::Scalar(ScalarShown::Complex(re, im)) => write!(f, "({re:?}{im:+?}j)"),
            ArgSummary::Bytes(n) => write!(f, "struct of {n} bytes"),
            ArgSummary::Pointer(p) => write!(f, "pointer {p:#x}"),
        }
    }
}

/// One launch, as read back from the ring.
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
    /// How many arguments the launch had (the first [`ARGS_KEPT`] are in `args`).
    pub nargs: usize,
    pub args: [Option<ArgSummary>; ARGS_KEPT],
    /// The caller's token for where the launch was made (0: none; see [`set_site`]).
    pub site: u64,
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

    /// Where the launch was made (`file:line`), when its caller left a site that can still
    /// be named ([`set_site_names`]).
    pub fn call_site(&self) -> Option<String> {
        if self.site == 0 {
            return None;
        }
        SITE_NAMES.get().and_then(|name| name(self.site))
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
        write!(f, " on device {} stream {:#x} with ({})", self.device, self.stream, self.arguments().join(", "))?;
        if let Some(site) = self.call_site() {
            write!(f, " from {site}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The ring: raw words written by every launch, decoded only when read.

/// An argument's kind, as its slot keeps it.
mod kind {
    pub const ARRAY: u8 = 1;
    pub const BOOL: u8 = 2;
    pub const INT: u8 = 3;
    pub const FLOAT: u8 = 4;
    pub const COMPLEX: u8 = 5;
    pub const BYTES: u8 = 6;
    pub const POINTER: u8 = 7;
}

/// One argument of a ring slot: its kind (an array's also its dtype and rank, each stored
/// as it is, without packing) and up to five words of value (an array's pointer and
/// extents; a scalar's bits, an integer's as two halves).
#[derive(Debug)]
pub struct ArgSlot {
    kind: AtomicU8,
    dtype: AtomicU8,
    ndim: AtomicUsize,
    words: [AtomicU64; 1 + DIMS_KEPT],
}

impl ArgSlot {
    #[inline]
    pub fn array(&self, dtype: DType, shape: &[usize], ptr: u64) {
        self.kind.store(kind::ARRAY, Relaxed);
        self.dtype.store(dtype as u8, Relaxed);
        self.ndim.store(shape.len(), Relaxed);
        self.words[0].store(ptr, Relaxed);
        for (w, &n) in self.words[1..].iter().zip(shape) {
            w.store(n as u64, Relaxed);
        }
    }
    #[inline]
    pub fn bool(&self, b: bool) {
        self.one(kind::BOOL, u64::from(b));
    }
    #[inline]
    pub fn int(&self, i: i128) {
        self.kind.store(kind::INT, Relaxed);
        self.words[0].store(i as u64, Relaxed);
        self.words[1].store((i >> 64) as u64, Relaxed);
    }
    #[inline]
    pub fn float(&self, x: f64) {
        self.one(kind::FLOAT, x.to_bits());
    }
    #[inline]
    pub fn complex(&self, re: f64, im: f64) {
        self.kind.store(kind::COMPLEX, Relaxed);
        self.words[0].store(re.to_bits(), Relaxed);
        self.words[1].store(im.to_bits(), Relaxed);
    }
    /// A struct argument of `len` bytes.
    #[inline]
    pub fn bytes(&self, len: usize) {
        self.one(kind::BYTES, len as u64);
    }
    #[inline]
    pub fn pointer(&self, p: u64) {
        self.one(kind::POINTER, p);
    }
    #[inline]
    fn one(&self, kind: u8, word: u64) {
        self.kind.store(kind, Relaxed);
        self.words[0].store(word, Relaxed);
    }

    fn read(&self) -> Option<ArgSummary> {
        let w = |i: usize| self.words[i].load(Relaxed);
        Some(match self.kind.load(Relaxed) {
            kind::ARRAY => {
                let dtype = *DType::ALL.get(usize::from(self.dtype.load(Relaxed)))?;
                let ndim = self.ndim.load(Relaxed);
                let mut shape = [0; DIMS_KEPT];
                for (d, n) in shape.iter_mut().enumerate().take(ndim) {
                    *n = w(1 + d);
                }
                ArgSummary::Array { dtype, ndim, shape, ptr: w(0) }
            }
            kind::BOOL => ArgSummary::Scalar(ScalarShown::Bool(w(0) != 0)),
            kind::INT => ArgSummary::Scalar(ScalarShown::Int(i128::from(w(1) as i64) << 64 | i128::from(w(0)))),
            kind::FLOAT => ArgSummary::Scalar(ScalarShown::Float(f64::from_bits(w(0)))),
            kind::COMPLEX => ArgSummary::Scalar(ScalarShown::Complex(f64::from_bits(w(0)), f64::from_bits(w(1)))),
            kind::BYTES => ArgSummary::Bytes(w(0)),
            kind::POINTER => ArgSummary::Pointer(w(0)),
            _ => return None,
        })
    }
}

/// One launch in a ring: relaxed atomic words, so that a launch writes it with plain
/// stores (no lock), and a reader racing a writer reads a mix it can detect by `seq`
/// instead of undefined behaviour.
#[derive(Debug)]
pub struct Slot {
    /// The launch's number, [`WRITING`] while a launch fills the slot, 0 when empty.
    seq: AtomicU64,
    /// The kernel instance's name, by its address (see [`name_kernel`]).
    kernel: AtomicU64,
    grid_xy: AtomicU64,
    grid_z_block_x: AtomicU64,
    block_yz: AtomicU64,
    /// Dynamic shared memory (low half) and the number of arguments (high half).
    shared_nargs: AtomicU64,
    stream: AtomicU64,
    site: AtomicU64,
    args: [ArgSlot; ARGS_KEPT],
}

/// A slot's `seq` while a launch writes it.
const WRITING: u64 = u64::MAX;

impl Slot {
    #[allow(clippy::declare_interior_mutable_const)] // the initialiser of the statics below
    const EMPTY: Slot = {
        const ZERO: AtomicU64 = AtomicU64::new(0);
        const ARG: ArgSlot =
            ArgSlot { kind: AtomicU8::new(0), dtype: AtomicU8::new(0), ndim: AtomicUsize::new(0), words: [ZERO; 1 + DIMS_KEPT] };
        Slot {
            seq: ZERO,
            kernel: ZERO,
            grid_xy: ZERO,
            grid_z_block_x: ZERO,
            block_yz: ZERO,
            shared_nargs: ZERO,
            stream: ZERO,
            site: ZERO,
            args: [ARG; ARGS_KEPT],
        }
    };

    /// Write the launch itself: `kernel` must have been named with [`name_kernel`] for the
    /// record to name it; `nargs` is how many arguments it had (write the first
    /// [`ARGS_KEPT`] with [`Slot::args`]).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn launch(&self, kernel: &'static str, grid: [u32; 3], block: [u32; 3], shared_mem: u32, stream: u64, nargs: usize, site: u64) {
        let pair = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
        self.kernel.store(kernel.as_ptr() as u64, Relaxed);
        self.grid_xy.store(pair(grid[0], grid[1]), Relaxed);
        self.grid_z_block_x.store(pair(grid[2], block[0]), Relaxed);
        self.block_yz.store(pair(block[1], block[2]), Relaxed);
        self.shared_nargs.store(u64::from(shared_mem) | (nargs as u64) << 32, Relaxed);
        self.stream.store(stream, Relaxed);
        self.site.store(site, Relaxed);
    }

    /// The argument slots, in order.
    #[inline]
    pub fn args(&self) -> &[ArgSlot; ARGS_KEPT] {
        &self.args
    }

    /// The record in the slot, or `None` if the slot is empty, being written, or was
    /// rewritten while read (seqlock: the words are read between two loads of `seq`).
    fn read(&self, device: usize) -> Option<LaunchRecord> {
        let seq = self.seq.load(Acquire);
        if seq == 0 || seq == WRITING {
            return None;
        }
        let r = self.decode(seq, device);
        fence(Acquire);
        (self.seq.load(Relaxed) == seq).then_some(r)
    }

    /// The slot's words as the record of launch `seq` on `device`.
    fn decode(&self, seq: u64, device: usize) -> LaunchRecord {
        let half = |w: &AtomicU64| {
            let v = w.load(Relaxed);
            (v as u32, (v >> 32) as u32)
        };
        let (gx, gy) = half(&self.grid_xy);
        let (gz, bx) = half(&self.grid_z_block_x);
        let (by, bz) = half(&self.block_yz);
        let (shared_mem, nargs) = half(&self.shared_nargs);
        let nargs = nargs as usize;
        let mut args = [None; ARGS_KEPT];
        for (a, slot) in args.iter_mut().zip(&self.args).take(nargs) {
            *a = slot.read();
        }
        let kernel = kernel_named(self.kernel.load(Relaxed)).unwrap_or("<a kernel caijit did not name>");
        let (stream, site) = (self.stream.load(Relaxed), self.site.load(Relaxed));
        LaunchRecord { seq, device, kernel, grid: [gx, gy, gz], block: [bx, by, bz], shared_mem, stream, nargs, args, site }
    }
}

struct Ring {
    /// Slot `seq % RING_LEN` holds launch `seq`.
    slots: [Slot; RING_LEN],
    /// Launches recorded so far on the device.
    count: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_RING: Ring = Ring { slots: [Slot::EMPTY; RING_LEN], count: AtomicU64::new(0) };
static RINGS: [Ring; DEVICES] = [EMPTY_RING; DEVICES];

/// Write a launch on `device` into its ring: `fill` writes the slot's words in place (with
/// [`Slot::launch`] and [`Slot::args`]). Returns the launch's `seq`, or 0 when it was not
/// recorded (a device beyond the rings, or a slot another launch is still writing).
///
/// No lock: the launch takes a number with one relaxed `fetch_add`, claims its slot by
/// swapping in a "being written" mark and releases it by storing its number (a seqlock),
/// so a reader drops a slot it raced (`seq` differs before and after). The swap also tells a launch
/// that its slot is still being written by the launch [`RING_LEN`] before it (a thread
/// preempted mid-record while others launched 16 times): that launch is then left out
/// rather than mixed with the other.
#[inline(always)]
pub fn write(device: usize, fill: impl FnOnce(&Slot)) -> u64 {
    let Some(ring) = RINGS.get(device) else { return 0 };
    let seq = ring.count.fetch_add(1, Relaxed) + 1;
    let slot = &ring.slots[(seq % RING_LEN as u64) as usize];
    if slot.seq.swap(WRITING, Relaxed) == WRITING {
        return 0;
    }
    fence(Release);
    fill(slot);
    slot.seq.store(seq, Release);
    seq
}

/// The launch `seq` of `device`, if the ring still holds it.
pub fn launch(device: usize, seq: u64) -> Option<LaunchRecord> {
    let ring = RINGS.get(device)?;
    ring.slots[(seq % RING_LEN as u64) as usize].read(device).filter(|r| r.seq == seq)
}

/// The record `fill` writes for launch `seq` on `device`, read back without the ring (for
/// a launch's own error, which must not depend on what other threads launched since).
pub fn record_of(seq: u64, device: usize, fill: impl FnOnce(&Slot)) -> LaunchRecord {
    let slot = Slot::EMPTY;
    fill(&slot);
    slot.decode(seq, device)
}

/// The launches kept for `device`, newest first.
pub fn recent(device: usize) -> Vec<LaunchRecord> {
    let Some(ring) = RINGS.get(device) else { return Vec::new() };
    let mut v: Vec<LaunchRecord> = ring.slots.iter().filter_map(|s| s.read(device)).collect();
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
        for slot in &ring.slots {
            slot.seq.store(0, Relaxed);
        }
        ring.count.store(0, Relaxed);
    }
}

/// Kernel names by address: a launch writes its kernel's name as a pointer, and the ring
/// reads the name back from here (only ever with the address of a name put here).
static KERNEL_NAMES: Mutex<BTreeMap<u64, &'static str>> = Mutex::new(BTreeMap::new());

/// Make `name` (a kernel instance's, kept for the process) nameable by launch records.
pub fn name_kernel(name: &'static str) {
    lock(&KERNEL_NAMES).insert(name.as_ptr() as u64, name);
}

fn kernel_named(address: u64) -> Option<&'static str> {
    lock(&KERNEL_NAMES).get(&address).copied()
}

// ---------------------------------------------------------------------------------------
// Call sites

thread_local! {
    static SITE: Cell<u64> = const { Cell::new(0) };
}

/// The site of the next launch on this thread (with [`SITES`] on; a token of the caller's,
/// named by the function given to [`set_site_names`]). The launch takes it.
pub fn set_site(token: u64) {
    SITE.with(|s| s.set(token));
}

/// The site [`set_site`] left for this launch (0 when none), forgotten once taken.
pub fn take_site() -> u64 {
    SITE.with(|s| s.replace(0))
}

static SITE_NAMES: OnceLock<fn(u64) -> Option<String>> = OnceLock::new();

/// The function that names a site token as `file:line` (`None` once it can no longer);
/// set once per process, by the caller that sets sites (the Python extension).
pub fn set_site_names(name: fn(u64) -> Option<String>) {
    let _ = SITE_NAMES.set(name);
}

#[cfg(test)]
mod tests;
