//! The kernel library (`kernels/ops/*.cu`) as Rust functions over CAI arrays: the same
//! kernels `caijit.ops` launches from Python, compiled once per device and dtype.
//!
//! # Examples
//! ```no_run
//! # fn f(ctx: &std::sync::Arc<cai_runtime::runtime::Context>, x: &cai_runtime::cai::ArrayView,
//! #      y: &cai_runtime::cai::ArrayView, out: &cai_runtime::cai::ArrayView) -> cai_runtime::Result<()> {
//! use cai_runtime::ops::{self, BinaryOp};
//! ops::axpy(ctx, 2.0, x, y, out, None)?;                   // out = 2 x + y
//! ops::binary(ctx, BinaryOp::Add, x, y, out, None)?;       // out = x + y, NumPy broadcasting
//! ops::ascontiguous(ctx, x, out, None)?;                   // any strided view → C order
//! # Ok(()) }
//! ```
//!
//! # Limitations
//! Outputs are given, never allocated (allocate a `DeviceArray` and pass its view); inputs
//! of pointer kernels must be C-contiguous (make them so with [`ascontiguous`]). Whole-array
//! reductions allocate their scratch themselves, from caijit's pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::array::DeviceArray;
use crate::cai::{ArrayView, DType};
use crate::compile::{Program, OPS};
use crate::kernel::Kernel;
use crate::launch::{Arg, LaunchConfig, Num};
use crate::runtime::{Context, Stream};
use crate::sync::lock;
use crate::{Error, Result};

const BLOCK: u32 = 256;
/// Cast's block: one chunk of 128 threads × 2 vectors of 4 elements (PyTorch's layout).
const CAST_BLOCK: u32 = 128;
/// 16-byte vectors of a row each thread holds in `softmax_rows_reg`.
const SOFTMAX_VPT: usize = 8;
/// Grid cap of the kernels that loop over rows or tiles.
const MAX_BLOCKS: usize = 65535 * 32;

/// A template argument of a library kernel: a dtype (its C++ type) or a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TArg {
    T(DType),
    N(usize),
}

impl std::fmt::Display for TArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TArg::T(d) => f.write_str(d.cpp_name()),
            TArg::N(n) => write!(f, "{n}"),
        }
    }
}

/// The key of a loaded library kernel: (device, file, kernel, template arguments).
type KernelKey = (usize, &'static str, &'static str, [Option<TArg>; 3]);

/// Loaded library kernels, by key.
type KernelCache = Mutex<HashMap<KernelKey, Arc<Kernel>>>;

/// The loaded kernel `name<targs>` of library file `file`, cached per device: a call looks
/// it up without writing its name expression, which is written once, when it is loaded.
fn kernel(ctx: &Arc<Context>, file: &'static str, name: &'static str, targs: &[TArg]) -> Result<Arc<Kernel>> {
    static CACHE: OnceLock<KernelCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut args = [None; 3];
    for (slot, a) in args.iter_mut().zip(targs) {
        *slot = Some(*a);
    }
    debug_assert!(targs.len() <= args.len());
    let key = (ctx.ordinal(), file, name, args);
    if let Some(k) = lock(cache).get(&key) {
        return Ok(k.clone());
    }
    let list: Vec<String> = targs.iter().map(TArg::to_string).collect();
    let expr = format!("{name}<{}>", list.join(", "));
    let k = ctx.compile(&instance_program(file, &expr))?.kernel(&expr)?;
    lock(cache).insert(key, k.clone());
    Ok(k)
}

fn grid(ctx: &Context, work: usize) -> LaunchConfig {
    let blocks = work.div_ceil(BLOCK as usize).clamp(1, ctx.sm_count() * 16);
    LaunchConfig::new([blocks as u32, 1, 1], [BLOCK, 1, 1])
}

/// One 16-byte vector per thread: a grid covering the array once (on the H200 99 % of the
/// copy bandwidth, against 93-96 % for a grid capped at 16 blocks per SM).
fn elementwise_grid(v: &ArrayView) -> LaunchConfig {
    let per_thread = (16 / v.dtype().itemsize()).max(1);
    let blocks = v.size().div_ceil(per_thread).div_ceil(BLOCK as usize).clamp(1, i32::MAX as usize);
    LaunchConfig::new([blocks as u32, 1, 1], [BLOCK, 1, 1])
}

fn same(what: &str, a: &ArrayView, b: &ArrayView) -> Result<()> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Err(Error::argument(format!(
            "{what}: arrays must match, got {} {:?} and {} {:?}",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        )));
    }
    Ok(())
}

fn contiguous(what: &str, v: &ArrayView) -> Result<()> {
    if !v.is_c_contiguous() {
        return Err(Error::argument(format!("{what}: needs C-contiguous arrays (make them so with ops::ascontiguous)")));
    }
    Ok(())
}

/// `out` is what an op writes: C-contiguous, of `shape` and `dtype`.
fn check_out(what: &str, out: &ArrayView, shape: &[usize], dtype: DType) -> Result<()> {
    if out.shape() != shape || out.dtype() != dtype || !out.is_c_contiguous() {
        let layout = if out.is_c_contiguous() { "" } else { " (not C-contiguous)" };
        return Err(Error::argument(format!(
            "{what}: out must be a C-contiguous {dtype} array of shape {shape:?}, got {} {:?}{layout}",
            out.dtype(),
            out.shape()
        )));
    }
    Ok(())
}

fn int(n: usize) -> Arg<'static> {
    Arg::Scalar { value: Num::Int(n as i128), dtype: None }
}

fn scalar(value: impl Into<Num>) -> Arg<'static> {
    Arg::Scalar { value: value.into(), dtype: None }
}

/// Refuses complex dtypes (the kernels named by `what` are written for real types).
fn real(what: &str, d: DType) -> Result<()> {
    if matches!(d, DType::C64 | DType::C128) {
        return Err(Error::argument(format!("{what}: {d} is not supported (real types only)")));
    }
    Ok(())
}

/// An elementwise op `out = f(x)` of the kernel library's registry. Adding one is a file and
/// an entry of [`UNARY_OPS`]: `kernels/ops/<name>.cu` defines
/// `template <typename T> __global__ void unary(const T* x, T* out, long long n)`
/// (usually a functor and `caijit::map`, see `abs.cu`); [`unary`] launches it, and the
/// Python binding (`caijit.ops.<name>`) is made from the table.
#[derive(Clone, Copy, Debug)]
pub struct UnaryOp {
    /// The op's name and its file's name (`kernels/ops/<name>.cu`).
    pub name: &'static str,
    /// One line for the docs (`caijit.ops.<name>.__doc__`).
    pub doc: &'static str,
    /// Whether it is defined for a dtype ([`UnaryOp::dtypes`] lists them).
    pub supports: fn(DType) -> bool,
}

/// Every dtype but bool and the complex ones.
fn real_number(d: DType) -> bool {
    !matches!(d, DType::Bool | DType::C64 | DType::C128)
}

impl UnaryOp {
    /// The dtypes it is defined for, in [`DType::ALL`]'s order.
    pub fn dtypes(&self) -> impl Iterator<Item = DType> + '_ {
        DType::ALL.into_iter().filter(|&d| (self.supports)(d))
    }
}

/// The registry of elementwise unary ops.
pub const UNARY_OPS: &[UnaryOp] = &[UnaryOp { name: "abs", doc: "``out = |x|``, elementwise (real types).", supports: real_number }];

/// The op of [`UNARY_OPS`] named `name`.
pub fn unary_op(name: &str) -> Result<&'static UnaryOp> {
    UNARY_OPS.iter().find(|o| o.name == name).ok_or_else(|| {
        let known: Vec<&str> = UNARY_OPS.iter().map(|o| o.name).collect();
        Error::argument(format!("no unary op named {name:?} (the library has {})", known.join(", ")))
    })
}

/// `out = op(x)` for the op of [`UNARY_OPS`] named `op` (`out` may be `x`).
pub fn unary(ctx: &Arc<Context>, op: &str, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    let spec = unary_op(op)?;
    if !(spec.supports)(x.dtype()) {
        let names: Vec<&str> = spec.dtypes().map(|d| d.name()).collect();
        return Err(Error::argument(format!("{op}: {} is not supported (supported: {})", x.dtype(), names.join(", "))));
    }
    contiguous(op, x)?;
    check_out(op, out, x.shape(), x.dtype())?;
    if x.size() == 0 {
        return Ok(());
    }
    let k = kernel(ctx, spec.name, "unary", &[TArg::T(x.dtype())])?;
    k.launch(&elementwise_grid(x), &[Arg::Array(x), Arg::Array(out), int(x.size())], stream, true).map(drop)
}

/// `out = a * x + y` (elementwise; `out` may be `y`). `a` is converted to the arrays'
/// dtype as a launch converts a scalar: exactly or with an error, never by truncation.
pub fn axpy(ctx: &Arc<Context>, a: impl Into<Num>, x: &ArrayView, y: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    same("axpy", x, y)?;
    contiguous("axpy", x)?;
    contiguous("axpy", y)?;
    check_out("axpy", out, x.shape(), x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let k = kernel(ctx, "elementwise", "axpy", &[TArg::T(x.dtype())])?;
    let args = [scalar(a), Arg::Array(x), Arg::Array(y), Arg::Array(out), int(x.size())];
    k.launch(&elementwise_grid(x), &args, stream, true).map(drop)
}

/// `out = a * x`.
pub fn scale(ctx: &Arc<Context>, x: &ArrayView, a: impl Into<Num>, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    contiguous("scale", x)?;
    check_out("scale", out, x.shape(), x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let k = kernel(ctx, "elementwise", "scale", &[TArg::T(x.dtype())])?;
    let args = [scalar(a), Arg::Array(x), Arg::Array(out), int(x.size())];
    k.launch(&elementwise_grid(x), &args, stream, true).map(drop)
}

/// Set every element of the C-contiguous `out` to `value`.
pub fn fill(ctx: &Arc<Context>, out: &ArrayView, value: impl Into<Num>, stream: Option<&Stream>) -> Result<()> {
    contiguous("fill", out)?;
    if out.is_empty() {
        return Ok(());
    }
    let k = kernel(ctx, "elementwise", "fill", &[TArg::T(out.dtype())])?;
    k.launch(&elementwise_grid(out), &[Arg::Array(out), scalar(value), int(out.size())], stream, true).map(drop)
}

/// `out = x` converted to `out`'s dtype, elementwise as C++ converts (real types: bool,
/// integers, float16, bfloat16, float32, float64).
pub fn cast(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    real("cast", x.dtype())?;
    real("cast", out.dtype())?;
    contiguous("cast", x)?;
    check_out("cast", out, x.shape(), out.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let k = kernel(ctx, "elementwise", "cast", &[TArg::T(x.dtype()), TArg::T(out.dtype())])?;
    let blocks = x.size().div_ceil(8 * CAST_BLOCK as usize).clamp(1, i32::MAX as usize);
    let cfg = LaunchConfig::new([blocks as u32, 1, 1], [CAST_BLOCK, 1, 1]);
    k.launch(&cfg, &[Arg::Array(x), Arg::Array(out), int(x.size())], stream, true).map(drop)
}

/// The elementwise operations of [`binary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryOp {
    // The discriminants are the kernels' operation codes.
    Add = 0,
    Subtract = 1,
    Multiply = 2,
    /// Integer division truncates, as in C++.
    Divide = 3,
    Maximum = 4,
    Minimum = 5,
}

impl BinaryOp {
    /// Every operation, in code order.
    pub const ALL: [BinaryOp; 6] =
        [BinaryOp::Add, BinaryOp::Subtract, BinaryOp::Multiply, BinaryOp::Divide, BinaryOp::Maximum, BinaryOp::Minimum];

    /// The operation named as NumPy names its ufunc (`"add"`, `"maximum"`, ...).
    pub fn from_name(name: &str) -> Option<BinaryOp> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// NumPy's name of the operation.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

/// NumPy's broadcast shape of `a` and `b`, or `None` when they do not broadcast.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], k: usize| if k < rank - s.len() { 1 } else { s[k - (rank - s.len())] };
    (0..rank)
        .map(|k| match (dim(a, k), dim(b, k)) {
            (1, n) | (n, 1) => Some(n),
            (m, n) if m == n => Some(m),
            _ => None,
        })
        .collect()
}

/// `v` viewed with the broadcast `shape`: zero strides on new axes and on unit axes that
/// `shape` stretches (the view keeps `v`'s stream, so a launch still orders against it).
fn broadcast_to(v: &ArrayView, shape: &[usize]) -> Result<ArrayView> {
    let pad = shape.len() - v.ndim();
    let strides: Vec<i64> =
        (0..shape.len()).map(|k| if k < pad || (v.shape()[k - pad] == 1 && shape[k] != 1) { 0 } else { v.strides()[k - pad] }).collect();
    Ok(ArrayView::new(v.ptr(), shape, Some(&strides), v.dtype(), true, v.stream())?.owned_by_caijit(v.is_owned_by_caijit()))
}

/// `out = a (op) b` elementwise with NumPy broadcasting: `out` is C-contiguous with the
/// broadcast shape of `a` and `b`; all three have one real dtype. Any strides.
pub fn binary(ctx: &Arc<Context>, op: BinaryOp, a: &ArrayView, b: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    let what = op.name();
    if a.dtype() != b.dtype() {
        return Err(Error::argument(format!("{what}: operands are {} and {}; cast one first", a.dtype(), b.dtype())));
    }
    real(what, a.dtype())?;
    let shape = broadcast_shape(a.shape(), b.shape())
        .ok_or_else(|| Error::argument(format!("{what}: shapes {:?} and {:?} do not broadcast", a.shape(), b.shape())))?;
    check_out(what, out, &shape, a.dtype())?;
    if out.is_empty() {
        return Ok(());
    }
    let t = TArg::T(a.dtype());
    let code = scalar(op as i32);
    if a.shape() == shape.as_slice() && b.shape() == shape.as_slice() && a.is_c_contiguous() && b.is_c_contiguous() {
        let k = kernel(ctx, "elementwise", "binary_contiguous", &[t])?;
        let args = [Arg::Array(a), Arg::Array(b), Arg::Array(out), int(out.size()), code];
        return k.launch(&elementwise_grid(out), &args, stream, true).map(drop);
    }
    // A broadcast or strided operand; rank >= 1 here (0-d arrays are C-contiguous).
    if shape.len() > 8 {
        return Err(Error::argument(format!("{what}: rank {} > 8", shape.len())));
    }
    let (ab, bb) = (broadcast_to(a, &shape)?, broadcast_to(b, &shape)?);
    let cols = *shape.last().expect("rank >= 1");
    let tiles = (out.size() / cols) * cols.div_ceil(1024); // the kernel's (row, 1024-column chunk) tiles
    let k = kernel(ctx, "elementwise", "binary_broadcast", &[t, TArg::N(shape.len())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    k.launch(&cfg, &[Arg::Array(&ab), Arg::Array(&bb), Arg::Array(out), code], stream, true).map(drop)
}

/// A C-contiguous copy of any strided view (rank 1 to 8) into `out`.
pub fn ascontiguous(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    check_out("ascontiguous", out, x.shape(), x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    if x.is_c_contiguous() {
        return crate::launch::copy_contiguous(ctx, &Arg::Array(x), &Arg::Array(out), stream, true).map(drop);
    }
    if !(1..=8).contains(&x.ndim()) {
        return Err(Error::argument(format!("ascontiguous: rank {} is outside 1 to 8", x.ndim())));
    }
    let cols = *x.shape().last().expect("rank >= 1");
    let tiles = (x.size() / cols) * cols.div_ceil(4096);
    let k = kernel(ctx, "strided_copy", "strided_copy", &[TArg::T(x.dtype()), TArg::N(x.ndim())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    k.launch(&cfg, &[Arg::Array(x), Arg::Array(out)], stream, true).map(drop)
}

/// `out` (cols × rows) = the transpose of the C-contiguous 2-D `x` (rows × cols).
pub fn transpose(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    let [rows, cols] = *x.shape() else {
        return Err(Error::argument(format!("transpose: expected a 2-D array, got {}-d", x.ndim())));
    };
    contiguous("transpose", x)?;
    check_out("transpose", out, &[cols, rows], x.dtype())?;
    let tile = if x.dtype().itemsize() <= 8 { 64 } else { 32 }; // the kernel's tile width; its block is (tile, 2)
    let tiles = rows.div_ceil(tile) * cols.div_ceil(tile);
    let k = kernel(ctx, "transpose", "transpose", &[TArg::T(x.dtype())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, MAX_BLOCKS) as u32, 1, 1], [tile as u32, 2, 1]);
    k.launch(&cfg, &[Arg::Array(x), Arg::Array(out), int(rows), int(cols)], stream, true).map(drop)
}

/// The accumulator of a reduction over `d` (float for 16-bit floats, 64-bit for integer sums).
fn accumulator(d: DType, sum: bool) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        DType::I8 | DType::I16 | DType::I32 | DType::I64 if sum => DType::I64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 if sum => DType::U64,
        other => other,
    }
}

/// Whole-array reductions of at most this many bytes take one kernel of one block (16
/// 16-byte loads per thread at most), sparing the second launch and the scratch memory.
const ONE_BLOCK_BYTES: usize = 64 << 10;

/// Reduce a C-contiguous `x` into the one-element `out` (any real dtype). Small arrays: one
/// block over the whole array (the last-axis kernel, one row). Others in two kernels:
/// per-block partials into scratch memory that the reduction allocates, stream-ordered, on
/// the stream it runs on (caijit's pool keeps it for reuse), then one block over them.
fn reduce(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, sum: bool, stream: Option<&Stream>) -> Result<()> {
    let what = if sum { "sum" } else { "max" };
    reducible(what, x)?;
    real(what, out.dtype())?;
    if out.size() != 1 {
        return Err(Error::argument(format!("{what}: out must have one element, got shape {:?}", out.shape())));
    }
    if x.nbytes() <= ONE_BLOCK_BYTES {
        // One kernel: the whole array as one row, reduced by one block into `out`.
        return launch_rows(ctx, x, out, 1, x.size(), sum, stream);
    }
    let acc = accumulator(x.dtype(), sum);
    let cfg = grid(ctx, x.size());
    let blocks = cfg.grid[0] as usize;
    let s = Arc::new(Stream::borrowed(crate::launch::launch_stream([x, out], stream))?);
    let partial = DeviceArray::empty(ctx, &[blocks], acc, &s)?;
    let op = scalar(i32::from(!sum));
    let (t, a, o) = (TArg::T(x.dtype()), TArg::T(acc), TArg::T(out.dtype()));
    let scratch = Arg::ArrayOn(partial.as_view(), ctx.ordinal());
    let first = kernel(ctx, "reduce", "reduce_partial", &[t, a])?;
    first.launch(&cfg, &[Arg::Array(x), scratch, int(x.size()), op], Some(&s), true)?;
    let second = kernel(ctx, "reduce", "reduce_final", &[a, o])?;
    let one = LaunchConfig::new([1, 1, 1], [1024, 1, 1]);
    second.launch(&one, &[scratch, Arg::Array(out), int(blocks), op], Some(&s), true).map(drop)
    // `partial` is freed here, on `s`, after both kernels.
}

/// Sum of every element of `x` into the one-element `out` (16-bit floats accumulate in
/// float32, integers in 64 bits; the sum is converted to `out`'s dtype).
pub fn sum(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce(ctx, x, out, true, stream)
}

/// Maximum of every element of `x` into the one-element `out`.
pub fn max(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce(ctx, x, out, false, stream)
}

/// A non-empty, C-contiguous array of a real dtype other than bool.
fn reducible(what: &str, x: &ArrayView) -> Result<()> {
    contiguous(what, x)?;
    if matches!(x.dtype(), DType::Bool | DType::C64 | DType::C128) {
        return Err(Error::argument(format!("{what}: {} is not supported", x.dtype())));
    }
    if x.is_empty() {
        return Err(Error::argument(format!("{what}: the array is empty")));
    }
    Ok(())
}

/// Reduce each row (the last axis) of `x` into `out` (x's shape without its last axis, any
/// real dtype; accumulating as the whole-array reductions do).
fn reduce_rows(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, sum: bool, stream: Option<&Stream>) -> Result<()> {
    let what = if sum { "sum" } else { "max" };
    reducible(what, x)?;
    let Some((&cols, lead)) = x.shape().split_last() else {
        return Err(Error::argument(format!("{what} over the last axis: x is 0-d")));
    };
    real(what, out.dtype())?;
    check_out(what, out, lead, out.dtype())?;
    launch_rows(ctx, x, out, x.size() / cols, cols, sum, stream)
}

/// The `reduce_rows` kernel: each of `rows` rows of `cols` elements of `x` reduced by one
/// block into its element of `out`.
fn launch_rows(
    ctx: &Arc<Context>,
    x: &ArrayView,
    out: &ArrayView,
    rows: usize,
    cols: usize,
    sum: bool,
    stream: Option<&Stream>,
) -> Result<()> {
    let (t, a, r) = (TArg::T(x.dtype()), TArg::T(accumulator(x.dtype(), sum)), TArg::T(out.dtype()));
    let k = kernel(ctx, "reduce", "reduce_rows", &[t, a, r])?;
    let block = (cols.div_ceil(32) * 32).clamp(32, BLOCK as usize) as u32;
    let cfg = LaunchConfig::new([rows.min(65535 * 16) as u32, 1, 1], [block, 1, 1]);
    k.launch(&cfg, &[Arg::Array(x), Arg::Array(out), int(rows), int(cols), scalar(i32::from(!sum))], stream, true).map(drop)
}

/// Sum over the last axis of the C-contiguous `x` into `out` (16-bit floats accumulate in
/// float32, integers in 64 bits; the sums are converted to `out`'s dtype, which NumPy
/// makes 64-bit for integers).
pub fn sum_last_axis(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce_rows(ctx, x, out, true, stream)
}

/// Maximum over the last axis of the C-contiguous `x` into `out`.
pub fn max_last_axis(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce_rows(ctx, x, out, false, stream)
}

/// Softmax over the last axis (numerically stable) of the C-contiguous floating `x` into
/// `out` (same shape and dtype). Rows whose 16-byte vectors fit in one block's registers
/// are read once; longer or unaligned rows take two passes.
pub fn softmax(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    if !matches!(x.dtype(), DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return Err(Error::argument(format!("softmax: {} is not a floating type", x.dtype())));
    }
    contiguous("softmax", x)?;
    check_out("softmax", out, x.shape(), x.dtype())?;
    if x.is_empty() {
        return Ok(());
    }
    let cols = x.shape().last().copied().unwrap_or(1);
    let rows = x.size() / cols;
    let t = TArg::T(x.dtype());
    let args = [Arg::Array(x), Arg::Array(out), int(rows), int(cols)];
    let grid = [rows.min(MAX_BLOCKS) as u32, 1, 1];
    let per_vec = 16 / x.dtype().itemsize();
    if cols.is_multiple_of(per_vec) && x.ptr().is_multiple_of(16) && out.ptr().is_multiple_of(16) {
        let k = kernel(ctx, "softmax", "softmax_rows_reg", &[t, TArg::N(SOFTMAX_VPT)])?;
        let block = ((cols / per_vec).div_ceil(SOFTMAX_VPT).div_ceil(32) * 32).max(32);
        if block <= k.attributes().max_threads_per_block as usize {
            return k.launch(&LaunchConfig::new(grid, [block as u32, 1, 1]), &args, stream, true).map(drop);
        }
    }
    let block = (cols.div_ceil(4).div_ceil(32) * 32).clamp(32, 1024) as u32;
    let k = kernel(ctx, "softmax", "softmax_rows", &[t])?;
    k.launch(&LaunchConfig::new(grid, [block, 1, 1]), &args, stream, true).map(drop)
}

/// The program of one instance (`expr`) of library file `file`.
fn instance_program(file: &str, expr: &str) -> Program {
    let source = OPS.iter().find(|(n, _)| *n == file).map(|(_, s)| *s).expect("a library file");
    Program::new(source).name(format!("{file}.cu")).name_expression(expr)
}

/// Every kernel instance the library can launch, as programs of a few instances each (its
/// instances as name expressions): what the precompiled bundle of the library is baked
/// from (`python -m caijit bundle build --ops`). A bundled program serves each instance's
/// own program (`kernel` asks for one instance at a time) as a member of its family.
///
/// One program holds the instances of one kernel that differ only in their last template
/// argument (`axpy<*>`, `cast<float, *>`, `reduce_rows<float, double, *>`): a first call
/// then loads a module of at most [`crate::compile::bake::MERGED_EXPRESSIONS`] kernels, not
/// one of a whole file's hundreds (a module's load time and the reading of its kernels'
/// layouts grow with its size).
pub fn library_programs() -> Vec<Program> {
    let all = DType::ALL;
    let real: Vec<DType> = all.into_iter().filter(|d| !matches!(d, DType::C64 | DType::C128)).collect();
    let reducible: Vec<DType> = real.iter().copied().filter(|d| *d != DType::Bool).collect();
    let floats = [DType::F16, DType::BF16, DType::F32, DType::F64];
    let t = TArg::T;
    // (file, kernel, template arguments but the last) and the group's name expressions.
    type Group = ((&'static str, String, Vec<TArg>), Vec<String>);
    let mut groups: Vec<Group> = Vec::new();
    let mut add = |file: &'static str, name: &str, targs: &[TArg]| {
        let list: Vec<String> = targs.iter().map(TArg::to_string).collect();
        let expr = format!("{name}<{}>", list.join(", "));
        let group = (file, name.to_string(), targs[..targs.len() - 1].to_vec());
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, exprs)) if !exprs.contains(&expr) => exprs.push(expr),
            Some(_) => {}
            None => groups.push((group, vec![expr])),
        }
    };
    for op in UNARY_OPS {
        for d in op.dtypes() {
            add(op.name, "unary", &[t(d)]);
        }
    }
    for &d in &all {
        for name in ["axpy", "scale", "fill"] {
            add("elementwise", name, &[t(d)]);
        }
    }
    for &d in &real {
        for &o in &real {
            add("elementwise", "cast", &[t(d), t(o)]);
        }
        add("elementwise", "binary_contiguous", &[t(d)]);
        for n in 1..=8 {
            add("elementwise", "binary_broadcast", &[t(d), TArg::N(n)]);
        }
    }
    for &d in &all {
        for n in 1..=8 {
            add("strided_copy", "strided_copy", &[t(d), TArg::N(n)]);
        }
        add("transpose", "transpose", &[t(d)]);
    }
    for &d in &reducible {
        for sum in [true, false] {
            let a = accumulator(d, sum);
            add("reduce", "reduce_partial", &[t(d), t(a)]);
            for &o in &real {
                add("reduce", "reduce_final", &[t(a), t(o)]);
                add("reduce", "reduce_rows", &[t(d), t(a), t(o)]);
            }
        }
    }
    for d in floats {
        add("softmax", "softmax_rows_reg", &[t(d), TArg::N(SOFTMAX_VPT)]);
        add("softmax", "softmax_rows", &[t(d)]);
    }
    groups
        .into_iter()
        .map(|((file, _, _), exprs)| {
            let mut p = instance_program(file, &exprs[0]);
            for e in exprs {
                p = p.name_expression(e);
            }
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_op_has_its_file_and_kernel() {
        for op in UNARY_OPS {
            let source = OPS.iter().find(|(n, _)| *n == op.name).map(|(_, s)| *s);
            let source = source.unwrap_or_else(|| panic!("op {}: no kernels/ops/{}.cu", op.name, op.name));
            assert!(source.contains("void unary("), "kernels/ops/{}.cu defines no `unary` kernel", op.name);
            assert!(op.dtypes().next().is_some() && !op.doc.is_empty(), "op {}", op.name);
        }
    }

    #[test]
    fn the_library_programs_serve_each_instance_program() {
        use crate::compile::family_key;
        let programs = library_programs();
        let mut files: Vec<&str> = Vec::new();
        for p in &programs {
            if !files.contains(&p.name.as_str()) {
                files.push(&p.name);
            }
        }
        assert_eq!(files, ["abs.cu", "elementwise.cu", "strided_copy.cu", "transpose.cu", "reduce.cu", "softmax.cu"]);
        // Small programs: a first launch loads a module of a few kernels.
        let largest = programs.iter().map(|p| p.name_expressions.len()).max().unwrap();
        assert!(largest <= crate::compile::bake::MERGED_EXPRESSIONS, "a library program of {largest} instances");
        let exprs =
            |file: &str| -> Vec<String> { programs.iter().filter(|p| p.name == file).flat_map(|p| p.name_expressions.clone()).collect() };
        for p in &programs {
            let family = family_key(p).unwrap().unwrap();
            let file = p.name.trim_end_matches(".cu");
            for e in &p.name_expressions {
                assert_eq!(family_key(&instance_program(file, e)).unwrap().unwrap(), family, "{e}");
            }
        }
        let elementwise = exprs("elementwise.cu");
        for e in ["axpy<__half>", "cast<bool, __nv_bfloat16>", "binary_broadcast<double, 8>", "fill<caijit::complex<double>>"] {
            assert!(elementwise.contains(&e.to_string()), "{e} is not in {elementwise:?}");
        }
        assert!(exprs("reduce.cu").contains(&"reduce_rows<__half, float, long long>".to_string()));
    }

    #[test]
    fn broadcast_shapes_follow_numpy() {
        assert_eq!(broadcast_shape(&[3, 1, 5], &[4, 1]), Some(vec![3, 4, 5]));
        assert_eq!(broadcast_shape(&[], &[2, 3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[1], &[0]), Some(vec![0]));
        assert_eq!(broadcast_shape(&[2, 3], &[3, 2]), None);
        assert_eq!(broadcast_shape(&[], &[]), Some(vec![]));
    }

    #[test]
    fn broadcast_views_have_zero_strides_where_stretched() {
        let v = ArrayView::new(0x1000, &[1, 5], None, DType::F32, false, None).unwrap();
        let b = broadcast_to(&v, &[2, 3, 5]).unwrap();
        assert_eq!(b.shape(), [2, 3, 5]);
        assert_eq!(b.strides(), [0, 0, 4]);
        assert!(b.readonly());
    }

    #[test]
    fn binary_ops_are_named_as_numpy_names_them() {
        for (code, op) in BinaryOp::ALL.into_iter().enumerate() {
            assert_eq!(op as usize, code);
            assert_eq!(BinaryOp::from_name(op.name()), Some(op));
        }
        assert_eq!(BinaryOp::from_name("power"), None);
    }
}
