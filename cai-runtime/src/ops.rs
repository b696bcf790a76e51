//! The kernel library (`kernels/ops/*.cu`) as Rust functions over CAI arrays: the same
//! kernels `caijit.ops` launches from Python, compiled once per device and dtype.
//!
//! # Examples
//! ```no_run
//! # fn f(ctx: &std::sync::Arc<cai_runtime::runtime::Context>, x: &cai_runtime::cai::ArrayView,
//! #      y: &cai_runtime::cai::ArrayView, out: &cai_runtime::cai::ArrayView) -> cai_runtime::Result<()> {
//! cai_runtime::ops::axpy(ctx, 2.0, x, y, out, None)?;      // out = 2 x + y
//! cai_runtime::ops::ascontiguous(ctx, x, out, None)?;      // any strided view → C order
//! # Ok(()) }
//! ```
//!
//! # Limitations
//! Outputs are given, never allocated (allocate a `DeviceArray` and pass its view); inputs
//! of pointer kernels must be C-contiguous (make them so with [`ascontiguous`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::cai::{ArrayView, DType};
use crate::compile::{Program, OPS};
use crate::launch::{Arg, LaunchConfig, Num};
use crate::runtime::{Context, Kernel, Stream};
use crate::{Error, Result};

const BLOCK: u32 = 256;

/// Loaded library kernels by (device, name expression).
type KernelCache = Mutex<HashMap<(usize, String), Arc<Kernel>>>;

/// The loaded kernel `expr` of library file `file`, cached per device.
fn kernel(ctx: &Arc<Context>, file: &str, expr: String) -> Result<Arc<Kernel>> {
    static CACHE: OnceLock<KernelCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (ctx.ordinal(), expr);
    if let Some(k) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(k.clone());
    }
    let source = OPS.iter().find(|(n, _)| *n == file).map(|(_, s)| *s).expect("a library file");
    let program = Program::new(source).name(format!("{file}.cu")).name_expression(key.1.clone());
    let k = ctx.compile(&program)?.kernel(&key.1)?;
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(key, k.clone());
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
        return Err(Error::Argument(format!(
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
        return Err(Error::Argument(format!("{what}: needs C-contiguous arrays (make them so with ops::ascontiguous)")));
    }
    Ok(())
}

fn int(n: usize) -> Arg<'static> {
    Arg::Scalar { value: Num::Int(n as i128), dtype: None }
}

/// `out = a * x + y` (elementwise; `out` may be `y`).
pub fn axpy(ctx: &Arc<Context>, a: f64, x: &ArrayView, y: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    same("axpy", x, y)?;
    same("axpy", x, out)?;
    for v in [x, y, out] {
        contiguous("axpy", v)?;
    }
    let k = kernel(ctx, "elementwise", format!("axpy<{}>", x.dtype().cpp_name()))?;
    let args = [Arg::Scalar { value: Num::Float(a), dtype: None }, Arg::Array(x), Arg::Array(y), Arg::Array(out), int(x.size())];
    k.launch(&elementwise_grid(x), &args, stream, true).map(drop)
}

/// `out = a * x`.
pub fn scale(ctx: &Arc<Context>, x: &ArrayView, a: f64, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    same("scale", x, out)?;
    contiguous("scale", x)?;
    contiguous("scale", out)?;
    let k = kernel(ctx, "elementwise", format!("scale<{}>", x.dtype().cpp_name()))?;
    let args = [Arg::Scalar { value: Num::Float(a), dtype: None }, Arg::Array(x), Arg::Array(out), int(x.size())];
    k.launch(&elementwise_grid(x), &args, stream, true).map(drop)
}

/// A C-contiguous copy of any strided view (rank 1 to 8) into `out`.
pub fn ascontiguous(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    same("ascontiguous", x, out)?;
    contiguous("ascontiguous (out)", out)?;
    if x.is_empty() {
        return Ok(());
    }
    if x.is_c_contiguous() {
        return crate::launch::copy_contiguous(ctx, &Arg::Array(x), &Arg::Array(out), stream, true).map(drop);
    }
    if !(1..=8).contains(&x.ndim()) {
        return Err(Error::Argument(format!("ascontiguous: rank {} is outside 1 to 8", x.ndim())));
    }
    let cols = *x.shape().last().expect("rank >= 1");
    let tiles = (x.size() / cols) * cols.div_ceil(4096);
    let k = kernel(ctx, "strided_copy", format!("strided_copy<{}, {}>", x.dtype().cpp_name(), x.ndim()))?;
    let cfg = LaunchConfig::new([tiles.clamp(1, ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    k.launch(&cfg, &[Arg::Array(x), Arg::Array(out)], stream, true).map(drop)
}

/// `out` (cols × rows) = the transpose of the C-contiguous 2-D `x` (rows × cols).
pub fn transpose(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    let [rows, cols] = *x.shape() else {
        return Err(Error::Argument(format!("transpose: expected a 2-D array, got {}-d", x.ndim())));
    };
    if out.shape() != [cols, rows] || out.dtype() != x.dtype() {
        return Err(Error::Argument(format!("transpose: out must be {} {:?}", x.dtype(), [cols, rows])));
    }
    contiguous("transpose", x)?;
    contiguous("transpose", out)?;
    let tile = if x.dtype().itemsize() <= 8 { 64 } else { 32 }; // the kernel's tile width; its block is (tile, 2)
    let tiles = rows.div_ceil(tile) * cols.div_ceil(tile);
    let k = kernel(ctx, "transpose", format!("transpose<{}>", x.dtype().cpp_name()))?;
    let cfg = LaunchConfig::new([tiles.clamp(1, 65535 * 32) as u32, 1, 1], [tile as u32, 2, 1]);
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

/// Reduce a C-contiguous `x` into the 0-d `out` (`partial`: scratch of at least
/// `reduce_scratch_len` accumulator elements). `sum` or max.
fn reduce(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, partial: &ArrayView, sum: bool, stream: Option<&Stream>) -> Result<()> {
    contiguous("reduce", x)?;
    if x.is_empty() {
        return Err(Error::Argument("reduce: the array is empty".into()));
    }
    let acc = accumulator(x.dtype(), sum);
    if partial.dtype() != acc || !partial.is_c_contiguous() {
        return Err(Error::Argument(format!("reduce: partial must be a contiguous {acc} array")));
    }
    let cfg = grid(ctx, x.size());
    if partial.size() < cfg.grid[0] as usize || out.size() != 1 {
        return Err(Error::Argument(format!("reduce: partial needs {} elements and out one", cfg.grid[0])));
    }
    let op = Arg::Scalar { value: Num::Int(i128::from(!sum)), dtype: None };
    let (t, a, o) = (x.dtype().cpp_name(), acc.cpp_name(), out.dtype().cpp_name());
    let first = kernel(ctx, "reduce", format!("reduce_partial<{t}, {a}>"))?;
    first.launch(&cfg, &[Arg::Array(x), Arg::Array(partial), int(x.size()), op], stream, true)?;
    let second = kernel(ctx, "reduce", format!("reduce_final<{a}, {o}>"))?;
    let one = LaunchConfig::new([1, 1, 1], [1024, 1, 1]);
    second.launch(&one, &[Arg::Array(partial), Arg::Array(out), int(cfg.grid[0] as usize), op], stream, true).map(drop)
}

/// Sum of every element of `x` into the 0-d `out`; `partial` is scratch of
/// [`reduce_scratch_len`] accumulator elements (float32 for 16-bit floats, 64-bit for integers).
pub fn sum(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, partial: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce(ctx, x, out, partial, true, stream)
}

/// Maximum of every element of `x` into the 0-d `out`.
pub fn max(ctx: &Arc<Context>, x: &ArrayView, out: &ArrayView, partial: &ArrayView, stream: Option<&Stream>) -> Result<()> {
    reduce(ctx, x, out, partial, false, stream)
}

/// Elements of scratch a whole-array reduction needs on this device.
pub fn reduce_scratch_len(ctx: &Context) -> usize {
    ctx.sm_count() * 16
}
