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

use std::ffi::c_void;
use std::sync::OnceLock;

use smallvec::SmallVec;

use crate::cai::{ArrayView, DType};
use crate::kernel::Kernel;
use crate::runtime::{Context, Events, Stream};
use crate::signature::{ArgType, ArrayLayout, ParamKind, ParamLayout};
use crate::stats::timing::{self, Phase};
use crate::stats::{bump, COUNTERS};
use crate::sys::{Driver, RawStream};
use crate::{Error, Result};

pub use crate::sys::LaunchConfig;
pub use trace::{nvtx_tool, ProfileRow, Profiler};

mod bounds;
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

/// A scalar argument's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Bool(bool),
    Int(i128),
    Float(f64),
    Complex(f64, f64),
}

macro_rules! num_from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Num {
            fn from(x: $t) -> Num {
                Num::$v(x.into())
            }
        })*
    };
}
num_from!(bool => Bool, i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => Int, u16 => Int, u32 => Int, u64 => Int, f32 => Float, f64 => Float);

impl From<usize> for Num {
    fn from(x: usize) -> Num {
        Num::Int(x as i128)
    }
}

impl From<isize> for Num {
    fn from(x: isize) -> Num {
        Num::Int(x as i128)
    }
}

impl From<half::f16> for Num {
    fn from(x: half::f16) -> Num {
        Num::Float(x.into())
    }
}

impl From<half::bf16> for Num {
    fn from(x: half::bf16) -> Num {
        Num::Float(x.into())
    }
}

/// A launch argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A CAI array (any producer); its device is read from its pointer at launch.
    Array(&'a ArrayView),
    /// A CAI array whose device the caller already knows (caijit's own arrays, or a
    /// producer's array object that says so): no pointer query at launch.
    ArrayOn(&'a ArrayView, usize),
    /// A scalar; `dtype` is its own type when it has one (NumPy scalars), for deduction.
    Scalar { value: Num, dtype: Option<DType> },
    /// The bytes of a struct parameter.
    Bytes(&'a [u8]),
    /// A raw device pointer (only for pointer parameters).
    Pointer(u64),
}

impl Arg<'_> {
    /// A typed scalar: its Rust type is its C++ type for deduction and overloads
    /// (`Arg::scalar(2.0f32)` deduces `float`), and it is converted exactly to the
    /// parameter's type (out of range is an error), as a NumPy scalar is.
    pub fn scalar<T: crate::cai::Element + Into<Num>>(value: T) -> Self {
        Arg::Scalar { value: value.into(), dtype: Some(T::DTYPE) }
    }

    /// An untyped scalar, as a Python `int`, `float` or `bool` is: converted exactly to
    /// the parameter's type (out of range is an error), it deduces nothing.
    pub fn untyped(value: impl Into<Num>) -> Self {
        Arg::Scalar { value: value.into(), dtype: None }
    }

    /// What template deduction sees of this argument.
    pub fn arg_type(&self) -> ArgType {
        match self {
            Arg::Array(v) | Arg::ArrayOn(v, _) => ArgType::Array { dtype: v.dtype(), rank: v.ndim() },
            Arg::Scalar { dtype: Some(d), .. } => ArgType::TypedScalar(*d),
            Arg::Scalar { dtype: None, .. } => ArgType::UntypedScalar,
            Arg::Bytes(_) | Arg::Pointer(_) => ArgType::Opaque,
        }
    }
}

fn sync_enabled_by_env() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| std::env::var("CAIJIT_CAI_SYNC").map_or(true, |v| v != "0"))
}

/// A parameter buffer, 16-byte aligned and zeroed; on the stack for the usual sizes
/// (≤ 512 bytes), where only the words the kernel's parameters span are written (not the
/// whole inline capacity).
pub(crate) struct ParamBuffer(SmallVec<[u128; 32]>);

impl ParamBuffer {
    #[inline]
    pub(crate) fn new(size: usize) -> Self {
        let mut words = SmallVec::new();
        words.resize(size.div_ceil(16).max(1), 0);
        ParamBuffer(words)
    }
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.0[..]);
        bytes[offset..offset + data.len()].copy_from_slice(data);
    }
    /// A `caijit::Array<T, N>` at `offset` ([`ArrayLayout`]): the data pointer, then each
    /// dimension's `(extent, byte stride)` of a rank-`rank` array.
    pub(crate) fn write_array(&mut self, offset: usize, ptr: u64, rank: usize, dims: impl Iterator<Item = (i64, i64)>) {
        self.write(offset + ArrayLayout::DATA, &ptr.to_le_bytes());
        for (d, (n, s)) in dims.enumerate() {
            self.write_dim(offset, rank, d, n, s);
        }
    }
    /// Dimension `d`'s extent and byte stride of the rank-`rank` `caijit::Array` at `offset`
    /// (its pointer written by [`ParamBuffer::write_array`], or apart).
    pub(crate) fn write_dim(&mut self, offset: usize, rank: usize, d: usize, extent: i64, stride: i64) {
        self.write(offset + ArrayLayout::extent(d), &extent.to_le_bytes());
        self.write(offset + ArrayLayout::stride(rank, d), &stride.to_le_bytes());
    }
    /// Call `f` with one pointer per parameter into this buffer (on the stack for up to 32
    /// parameters).
    pub(crate) fn with_pointers<R>(&mut self, params: &[ParamLayout], f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
        let start = self.0.as_mut_ptr() as *mut u8;
        let mut pointers: SmallVec<[*mut c_void; 32]> = params.iter().map(|p| start.wrapping_add(p.offset) as *mut c_void).collect();
        f(&mut pointers)
    }
}

fn err(p: &ParamLayout, what: String) -> Error {
    Error::argument_at(p.index, p.name.as_deref(), &p.cpp_type, what)
}

fn check_array(p: &ParamLayout, v: &ArrayView, dtype: Option<DType>, is_const: bool) -> Result<()> {
    if let Some(d) = dtype {
        if v.dtype() != d {
            return Err(err(p, format!("expected an array of {} ({}), got {}", d.name(), d.cpp_name(), v.dtype().name())));
        }
    }
    if v.readonly() && !is_const {
        return Err(err(
            p,
            "the array is readonly but the parameter is not const; declare it `const T*` / `caijit::Array<const T, N>`".into(),
        ));
    }
    Ok(())
}

/// Elements must sit at multiples of their size: a misaligned access faults the kernel,
/// and a fault kills the context for every library in the process. A pointer to a CUDA
/// vector type (`float4*`, say) needs that type's alignment too.
/// `vector` is [`crate::kernel::pointee_alignment`] of `p` (computed once, at the kernel's load).
fn check_aligned(p: &ParamLayout, v: &ArrayView, vector: usize) -> Result<()> {
    if !v.is_itemsize_aligned() || !crate::cai::is_multiple_of(v.ptr().into(), vector as u64) {
        if vector > 1 {
            return Err(err(p, format!("the pointer {:#x} is not aligned to the {vector} bytes of the parameter's vector type", v.ptr())));
        }
        return Err(err(
            p,
            format!(
                "the array is not aligned to its {}-byte elements (pointer {:#x}, byte strides {:?})",
                v.dtype().itemsize(),
                v.ptr(),
                v.strides()
            ),
        ));
    }
    Ok(())
}

/// A scalar parameter's bytes (at most 16, for complex128), kept on the stack: encoding
/// a launch's scalars allocates nothing.
#[derive(Clone, Copy, Debug)]
pub struct ScalarBytes {
    buf: [u8; 16],
    len: usize,
}

impl ScalarBytes {
    fn new(parts: &[&[u8]]) -> Self {
        let mut s = ScalarBytes { buf: [0; 16], len: 0 };
        for p in parts {
            s.buf[s.len..s.len + p.len()].copy_from_slice(p);
            s.len += p.len();
        }
        s
    }
}

impl std::ops::Deref for ScalarBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> PartialEq<[u8; N]> for ScalarBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

/// Encode a scalar as exactly `dtype`, checking its range.
pub fn encode_scalar(value: Num, dtype: DType) -> std::result::Result<ScalarBytes, String> {
    use DType::*;
    let int = |v: Num| -> std::result::Result<i128, String> {
        match v {
            Num::Int(i) => Ok(i),
            Num::Bool(b) => Ok(i128::from(b)),
            Num::Float(f) => Err(format!("{f} is a float; the parameter is an integer (convert explicitly)")),
            Num::Complex(..) => Err("a complex number cannot be converted to an integer".into()),
        }
    };
    let float = |v: Num| -> std::result::Result<f64, String> {
        match v {
            Num::Float(f) => Ok(f),
            Num::Int(i) => Ok(i as f64),
            Num::Bool(b) => Ok(f64::from(u8::from(b))),
            Num::Complex(..) => Err("a complex number cannot be converted to a real type".into()),
        }
    };
    macro_rules! ranged {
        ($t:ty) => {{
            let i = int(value)?;
            <$t>::try_from(i)
                .map(|x| ScalarBytes::new(&[&x.to_le_bytes()]))
                .map_err(|_| format!("{i} is out of range for {} [{}, {}]", dtype.cpp_name(), <$t>::MIN, <$t>::MAX))?
        }};
    }
    let finite_max = |f: f64, max: f64| -> std::result::Result<f64, String> {
        if f.is_finite() && f.abs() > max {
            Err(format!("{f} is out of range for {} (largest finite value {max})", dtype.cpp_name()))
        } else {
            Ok(f)
        }
    };
    Ok(match dtype {
        Bool => match value {
            Num::Bool(b) => ScalarBytes::new(&[&[u8::from(b)]]),
            Num::Int(i @ (0 | 1)) => ScalarBytes::new(&[&[i as u8]]),
            other => return Err(format!("{other:?} is not a bool")),
        },
        I8 => ranged!(i8),
        I16 => ranged!(i16),
        I32 => ranged!(i32),
        I64 => ranged!(i64),
        U8 => ranged!(u8),
        U16 => ranged!(u16),
        U32 => ranged!(u32),
        U64 => ranged!(u64),
        F16 => ScalarBytes::new(&[&half::f16::from_f64(finite_max(float(value)?, 65504.0)?).to_le_bytes()]),
        BF16 => ScalarBytes::new(&[&half::bf16::from_f64(finite_max(float(value)?, 3.3895313892515355e38)?).to_le_bytes()]),
        F32 => ScalarBytes::new(&[&(finite_max(float(value)?, f32::MAX as f64)? as f32).to_le_bytes()]),
        F64 => ScalarBytes::new(&[&float(value)?.to_le_bytes()]),
        C64 | C128 => {
            let (re, im) = match value {
                Num::Complex(re, im) => (re, im),
                other => (float(other)?, 0.0),
            };
            if dtype == C64 {
                let (re, im) = (finite_max(re, f32::MAX as f64)? as f32, finite_max(im, f32::MAX as f64)? as f32);
                ScalarBytes::new(&[&re.to_le_bytes(), &im.to_le_bytes()])
            } else {
                ScalarBytes::new(&[&re.to_le_bytes(), &im.to_le_bytes()])
            }
        }
    })
}

/// Lay out `args` for `params`: every check that names a parameter happens here.
/// `vector[i]` is [`crate::kernel::pointee_alignment`] of `params[i]`.
fn marshal(params: &[ParamLayout], vector: &[usize], args: &[Arg<'_>], buf: &mut ParamBuffer) -> Result<()> {
    for ((p, a), &vector) in params.iter().zip(args).zip(vector) {
        let a = match a {
            Arg::ArrayOn(v, _) => &Arg::Array(v),
            other => other,
        };
        match (&p.kind, a) {
            (ParamKind::Pointer { dtype, is_const }, Arg::Array(v)) => {
                check_array(p, v, *dtype, *is_const)?;
                if !v.is_c_contiguous() {
                    return Err(err(p, format!(
                        "a pointer parameter needs a C-contiguous array; this one has shape {:?} and byte strides {:?} (declare the parameter caijit::Array<T, {}> to accept strided views)",
                        v.shape(), v.strides(), v.ndim()
                    )));
                }
                check_aligned(p, v, vector)?;
                buf.write(p.offset, &v.ptr().to_le_bytes());
            }
            (ParamKind::Pointer { .. }, Arg::Pointer(ptr)) => buf.write(p.offset, &ptr.to_le_bytes()),
            // A plain integer for a pointer parameter is a raw device address.
            (ParamKind::Pointer { .. }, Arg::Scalar { value: Num::Int(i), dtype: None }) => {
                let ptr = u64::try_from(*i).map_err(|_| err(p, format!("{i} is not a device address")))?;
                buf.write(p.offset, &ptr.to_le_bytes());
            }
            (ParamKind::Array { dtype, is_const, rank }, Arg::Array(v)) => {
                check_array(p, v, *dtype, *is_const)?;
                if v.ndim() != *rank {
                    return Err(err(p, format!("expected a {rank}-d array, got {}-d (shape {:?})", v.ndim(), v.shape())));
                }
                check_aligned(p, v, vector)?;
                buf.write_array(p.offset, v.ptr(), *rank, v.shape().iter().zip(v.strides()).map(|(&n, &s)| (n as i64, s)));
            }
            (ParamKind::Scalar(d), Arg::Scalar { value, .. }) => {
                let bytes = encode_scalar(*value, *d).map_err(|e| err(p, e))?;
                buf.write(p.offset, &bytes);
            }
            (ParamKind::Struct { .. }, Arg::Bytes(b)) => {
                if b.len() != p.size {
                    return Err(err(p, format!("expected {} bytes for the struct, got {}", p.size, b.len())));
                }
                buf.write(p.offset, b);
            }
            (kind, other) => {
                let got = match other {
                    Arg::Array(v) | Arg::ArrayOn(v, _) => format!("a {}-d array of {}", v.ndim(), v.dtype()),
                    Arg::Scalar { .. } => "a scalar".into(),
                    Arg::Bytes(b) => format!("{} bytes", b.len()),
                    Arg::Pointer(_) => "a raw pointer (int)".into(),
                };
                return Err(err(p, format!("expected {}, got {got}", kind.describe())));
            }
        }
    }
    Ok(())
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
        if params.len() != args.len() {
            return Err(Error::argument(format!(
                "kernel `{}` takes {} arguments, got {}",
                self.info.base_name(),
                params.len(),
                args.len()
            )));
        }
        cfg.check(self)?;
        let mut buf = ParamBuffer::new(self.info.param_buffer_size());
        marshal(params, &self.pointee_alignment, args, &mut buf)?;
        probe.stop(Phase::LaunchCheck);

        let arrays = args.iter().enumerate().filter_map(|(i, a)| match a {
            Arg::Array(v) => Some((i, *v, None)),
            Arg::ArrayOn(v, device) => Some((i, *v, Some(*device))),
            _ => None,
        });
        let named = |i: usize, what: String| err(&params[i], what);
        let mut recorded = None;
        let on = enqueue_ordered(self.context(), arrays, stream, sync, named, |d, launch_stream| {
            let span = trace::begin(self, d, launch_stream)?;
            // The arguments were checked against the compiled parameter list above: each
            // pointer refers to a value of exactly the parameter's size; device pointers come
            // from validated CAI descriptors whose owners keep them alive (CAI contract).
            let probe = timing::start();
            let launched = buf.with_pointers(params, |ptrs| d.launch_checked(self.raw, cfg, launch_stream, ptrs));
            probe.stop(Phase::LaunchDriver);
            launched?;
            bump(&COUNTERS.launches);
            recorded = trace::record(self, cfg, args, launch_stream);
            trace::end(span, self, d, launch_stream)
        })?;
        if let Some(r) = recorded.as_ref().filter(|_| crate::diag::flags() & crate::diag::BLOCKING != 0) {
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
    let foreign = sync && sync_enabled_by_env();
    producers.retain(|p| p.stream != launch_stream && (foreign || p.own));
    if !producers.is_empty() {
        keep_capture_legal(&d, launch_stream, &mut producers, &named)?;
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
/// other work is the capturer's business, as in CUDA itself. Outside a capture, waiting on
/// a stream that is being captured would silently pull the launch into that capture: an
/// error naming the argument.
///
/// The legacy default stream is never captured, and asking it while another stream is
/// captured is itself an illegal implicit synchronisation: it is never asked.
fn keep_capture_legal(
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
            _ => {} // a producer outside this capture
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

/// The stream work runs on: the one given, else the producer stream all its arrays share,
/// else the legacy default stream.
fn chosen(stream: Option<&Stream>, common: Option<Option<RawStream>>) -> RawStream {
    match stream {
        Some(s) => s.raw(),
        None => common.flatten().unwrap_or(RawStream::from_cai(1)),
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
            // Both ranges were validated above: C-contiguous views of `bytes` bytes on this
            // device, kept alive by their owners (CAI contract); the destination is writable.
            drv.copy_device_to_device(d.ptr(), s.ptr(), bytes, on)?;
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

    pub(crate) fn check(p: Point) -> crate::Result<()> {
        let bit = p as u32;
        if ARMED.load(Relaxed) & bit != 0 && ARMED.fetch_and(!bit, Relaxed) & bit != 0 {
            return Err(crate::Error::launch(format!("injected fault at {p:?}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_given_stream_else_the_shared_producer_else_legacy() {
        use crate::cai::StreamRef;
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
    fn scalars_are_converted_exactly_with_range_checks() {
        assert_eq!(encode_scalar(Num::Int(-1), DType::I32).unwrap(), (-1i32).to_le_bytes());
        assert!(encode_scalar(Num::Int(1 << 40), DType::I32).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Int(-1), DType::U8).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Float(1.5), DType::I64).unwrap_err().contains("float"));
        assert_eq!(encode_scalar(Num::Int(3), DType::F32).unwrap(), 3.0f32.to_le_bytes());
        assert_eq!(encode_scalar(Num::Float(0.5), DType::F16).unwrap(), half::f16::from_f32(0.5).to_le_bytes());
        assert!(encode_scalar(Num::Float(1e6), DType::F16).unwrap_err().contains("out of range"));
        assert!(encode_scalar(Num::Float(f64::INFINITY), DType::F32).is_ok());
        assert_eq!(encode_scalar(Num::Bool(true), DType::Bool).unwrap(), [1]);
        assert!(encode_scalar(Num::Int(2), DType::Bool).is_err());
        assert_eq!(encode_scalar(Num::Complex(1.0, -2.0), DType::C128).unwrap().len(), 16);
        assert_eq!(encode_scalar(Num::Int(u64::MAX as i128), DType::U64).unwrap(), u64::MAX.to_le_bytes());
    }

    #[test]
    fn parameter_buffers_are_zeroed_aligned_and_sized_to_their_parameters() {
        let mut b = ParamBuffer::new(20);
        assert_eq!(b.0.len(), 2);
        assert!(!b.0.spilled());
        assert_eq!(b.0.as_ptr() as usize % 16, 0);
        assert!(b.0.iter().all(|&w| w == 0));
        b.write(16, &[1, 2, 3, 4]);
        let bytes: &[u8] = bytemuck::cast_slice(&b.0[..]);
        assert_eq!(&bytes[16..20], &[1, 2, 3, 4]);
        assert_eq!(ParamBuffer::new(0).0.len(), 1);
        assert!(ParamBuffer::new(513).0.spilled());
    }

    #[test]
    fn configs() {
        assert_eq!(LaunchConfig::for_elements(0, 256).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::for_elements(257, 256).grid, [2, 1, 1]);
    }
}
