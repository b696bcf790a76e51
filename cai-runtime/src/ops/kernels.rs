//! The library's kernels: the instances they launch (each named by its template arguments
//! and loaded through its kernel's dispatcher, [`library`](super::library)), grids and
//! launches, over operands an op call has checked and prepared (`Call::run`), on the call's
//! launch stream; and every instance the library can launch, for its bundle.

use std::sync::Arc;

use smallvec::SmallVec;

use super::library;
use super::registry::{BinaryOp, Reduction, UnaryOp, UNARY_OPS};
use super::rules::accumulator;
use crate::array::DeviceArray;
use crate::cai::{ArrayView, DType};
use crate::compile::Program;
use crate::dispatch::TemplateArg;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::{Arg, LaunchConfig, Num};
use crate::runtime::{Context, Stream};

const BLOCK: u32 = 256;
/// Cast's block: one chunk of 128 threads × 2 vectors of 4 elements (PyTorch's layout).
const CAST_BLOCK: u32 = 128;
/// 16-byte vectors of a row each thread holds in `softmax_rows_reg`.
const SOFTMAX_VPT: usize = 8;
/// Grid cap of the kernels that loop over rows or tiles.
const MAX_BLOCKS: usize = 65535 * 32;

/// A type template argument: the dtype's C++ type.
fn ty(d: DType) -> TemplateArg {
    TemplateArg::Type(d)
}

/// A number template argument (a rank, a count of vectors).
fn number(n: usize) -> TemplateArg {
    TemplateArg::Int(n as i64)
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

fn int(n: usize) -> Arg<'static> {
    Arg::Scalar { value: Num::Int(n as i128), dtype: None }
}

fn scalar(value: impl Into<Num>) -> Arg<'static> {
    Arg::Scalar { value: value.into(), dtype: None }
}

/// What an op's kernels are launched with: the context and the launch stream, decided once
/// per call (every kernel and copy of the call is enqueued on it).
pub(crate) struct OpStream<'s> {
    pub ctx: &'s Arc<Context>,
    pub stream: &'s Arc<Stream>,
}

impl OpStream<'_> {
    /// Launch `k` on the call's stream (ordered against every producer, as any launch is).
    fn go(&self, k: &Kernel, cfg: &LaunchConfig, args: &[Arg<'_>]) -> Result<()> {
        k.launch(cfg, args, Some(self.stream), true).map(drop)
    }

    /// The instance `name<targs>` of library file `file`'s kernel `name`, on the call's
    /// device.
    fn kernel(&self, file: &'static str, name: &'static str, targs: &[TemplateArg]) -> Result<Arc<Kernel>> {
        library::kernel(self.ctx, file, name, targs)
    }
}

/// `out = op(x)`: the op's `unary` kernel.
pub(crate) fn unary(l: &OpStream, op: &UnaryOp, x: &ArrayView, out: &ArrayView) -> Result<()> {
    let k = l.kernel(op.name, "unary", &[ty(x.dtype())])?;
    l.go(&k, &elementwise_grid(x), &[Arg::Array(x), Arg::Array(out), int(x.size())])
}

/// `out = a * x + y`; `a` is converted to the arrays' dtype as a launch converts a scalar.
pub(crate) fn axpy(l: &OpStream, a: Num, x: &ArrayView, y: &ArrayView, out: &ArrayView) -> Result<()> {
    let k = l.kernel("elementwise", "axpy", &[ty(x.dtype())])?;
    l.go(&k, &elementwise_grid(x), &[scalar(a), Arg::Array(x), Arg::Array(y), Arg::Array(out), int(x.size())])
}

/// `out = a * x`.
pub(crate) fn scale(l: &OpStream, x: &ArrayView, a: Num, out: &ArrayView) -> Result<()> {
    let k = l.kernel("elementwise", "scale", &[ty(x.dtype())])?;
    l.go(&k, &elementwise_grid(x), &[scalar(a), Arg::Array(x), Arg::Array(out), int(x.size())])
}

/// Every element of `out` = `value`.
pub(crate) fn fill(l: &OpStream, out: &ArrayView, value: Num) -> Result<()> {
    let k = l.kernel("elementwise", "fill", &[ty(out.dtype())])?;
    l.go(&k, &elementwise_grid(out), &[Arg::Array(out), scalar(value), int(out.size())])
}

/// `out = x` converted to `out`'s dtype, as C++ converts.
pub(crate) fn cast(l: &OpStream, x: &ArrayView, out: &ArrayView) -> Result<()> {
    let k = l.kernel("elementwise", "cast", &[ty(x.dtype()), ty(out.dtype())])?;
    let blocks = x.size().div_ceil(8 * CAST_BLOCK as usize).clamp(1, i32::MAX as usize);
    let cfg = LaunchConfig::new([blocks as u32, 1, 1], [CAST_BLOCK, 1, 1]);
    l.go(&k, &cfg, &[Arg::Array(x), Arg::Array(out), int(x.size())])
}

/// `v` viewed with the broadcast `shape`: zero strides on new axes and on unit axes that
/// `shape` stretches (the view keeps `v`'s stream, so a launch still orders against it).
fn broadcast_to(v: &ArrayView, shape: &[usize]) -> Result<ArrayView> {
    let pad = shape.len() - v.ndim();
    let strides: SmallVec<[i64; 8]> =
        (0..shape.len()).map(|k| if k < pad || (v.shape()[k - pad] == 1 && shape[k] != 1) { 0 } else { v.strides()[k - pad] }).collect();
    Ok(ArrayView::new(v.ptr(), shape, Some(&strides), v.dtype(), true, v.stream())?.owned_by_caijit(v.is_owned_by_caijit()))
}

/// `out = a (op) b`; `out` has the broadcast shape of `a` and `b` (the call's result), any
/// strides on the inputs.
pub(crate) fn binary(l: &OpStream, op: BinaryOp, a: &ArrayView, b: &ArrayView, out: &ArrayView) -> Result<()> {
    let shape = out.shape();
    let t = ty(a.dtype());
    let code = scalar(op as i32);
    if a.shape() == shape && b.shape() == shape && a.is_c_contiguous() && b.is_c_contiguous() {
        let k = l.kernel("elementwise", "binary_contiguous", &[t])?;
        return l.go(&k, &elementwise_grid(out), &[Arg::Array(a), Arg::Array(b), Arg::Array(out), int(out.size()), code]);
    }
    // A broadcast or strided operand; rank >= 1 here (0-d arrays are C-contiguous).
    let Some(&cols) = shape.last().filter(|_| shape.len() <= 8) else {
        return Err(Error::argument(format!("{}: rank {} > 8", op.name(), shape.len())));
    };
    let (ab, bb) = (broadcast_to(a, shape)?, broadcast_to(b, shape)?);
    let tiles = (out.size() / cols) * cols.div_ceil(1024); // the kernel's (row, 1024-column chunk) tiles
    let k = l.kernel("elementwise", "binary_broadcast", &[t, number(shape.len())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, l.ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    l.go(&k, &cfg, &[Arg::Array(&ab), Arg::Array(&bb), Arg::Array(out), code])
}

/// A C-ordered copy of any strided view (rank 1 to 8) into `out`: the driver's copy when
/// `x` is C-contiguous.
pub(crate) fn ascontiguous(l: &OpStream, x: &ArrayView, out: &ArrayView) -> Result<()> {
    if x.is_c_contiguous() {
        return crate::launch::copy_contiguous(l.ctx, &Arg::Array(x), &Arg::Array(out), Some(l.stream), true).map(drop);
    }
    if !(1..=8).contains(&x.ndim()) {
        return Err(Error::argument(format!("ascontiguous: rank {} is outside 1 to 8", x.ndim())));
    }
    let cols = *x.shape().last().expect("rank >= 1");
    let tiles = (x.size() / cols) * cols.div_ceil(4096);
    let k = l.kernel("strided_copy", "strided_copy", &[ty(x.dtype()), number(x.ndim())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, l.ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    l.go(&k, &cfg, &[Arg::Array(x), Arg::Array(out)])
}

/// `x` (C-ordered) scattered into the strided view `out` of the same shape and dtype, whose
/// elements are distinct memory (rank 1 to 8).
pub(crate) fn scatter(l: &OpStream, x: &ArrayView, out: &ArrayView) -> Result<()> {
    let Some(&cols) = out.shape().last().filter(|_| out.ndim() <= 8) else {
        return Err(Error::argument(format!("a strided out of rank {} (1 to 8 are written)", out.ndim())));
    };
    let tiles = (out.size() / cols) * cols.div_ceil(4096);
    let k = l.kernel("strided_copy", "strided_scatter", &[ty(out.dtype()), number(out.ndim())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, l.ctx.sm_count() * 64) as u32, 1, 1], [BLOCK, 1, 1]);
    l.go(&k, &cfg, &[Arg::Array(x), Arg::Array(out)])
}

/// `out` (cols × rows) = the transpose of the 2-D `x` (rows × cols).
pub(crate) fn transpose(l: &OpStream, x: &ArrayView, out: &ArrayView) -> Result<()> {
    let (rows, cols) = (out.shape()[1], out.shape()[0]);
    let tile = if x.dtype().itemsize() <= 8 { 64 } else { 32 }; // the kernel's tile width; its block is (tile, 2)
    let tiles = rows.div_ceil(tile) * cols.div_ceil(tile);
    let k = l.kernel("transpose", "transpose", &[ty(x.dtype())])?;
    let cfg = LaunchConfig::new([tiles.clamp(1, MAX_BLOCKS) as u32, 1, 1], [tile as u32, 2, 1]);
    l.go(&k, &cfg, &[Arg::Array(x), Arg::Array(out), int(rows), int(cols)])
}

/// Whole-array reductions of at most this many bytes take one kernel of one block (16
/// 16-byte loads per thread at most), sparing the second launch and the scratch memory.
const ONE_BLOCK_BYTES: usize = 64 << 10;

/// The kernels' operation code of a reduction.
fn code(r: Reduction) -> Arg<'static> {
    scalar(i32::from(r == Reduction::Max))
}

/// Reduce `x` into the one-element `out`. Small arrays: one block over the whole array
/// (the last-axis kernel, one row). Others in two kernels: per-block partials into scratch
/// memory allocated, stream-ordered, on the call's stream (caijit's pool keeps it for
/// reuse), then one block over them.
pub(crate) fn reduce_all(l: &OpStream, r: Reduction, x: &ArrayView, out: &ArrayView) -> Result<()> {
    if x.nbytes() <= ONE_BLOCK_BYTES {
        return reduce_rows(l, r, x, out, 1, x.size());
    }
    let acc = accumulator(r, x.dtype());
    let cfg = grid(l.ctx, x.size());
    let blocks = cfg.grid[0] as usize;
    let partial = DeviceArray::empty(l.ctx, &[blocks], acc, l.stream)?;
    let (t, a, o) = (ty(x.dtype()), ty(acc), ty(out.dtype()));
    let scratch = Arg::ArrayOn(partial.as_view(), l.ctx.ordinal());
    let first = l.kernel("reduce", "reduce_partial", &[t, a])?;
    l.go(&first, &cfg, &[Arg::Array(x), scratch, int(x.size()), code(r)])?;
    let second = l.kernel("reduce", "reduce_final", &[a, o])?;
    l.go(&second, &LaunchConfig::new([1, 1, 1], [1024, 1, 1]), &[scratch, Arg::Array(out), int(blocks), code(r)])
    // `partial` is freed here, on the call's stream, after both kernels.
}

/// Reduce each of `rows` rows of `cols` elements of `x` (its last axis) into its element
/// of `out`, one block per row (the `reduce_rows` kernel).
pub(crate) fn reduce_rows(l: &OpStream, r: Reduction, x: &ArrayView, out: &ArrayView, rows: usize, cols: usize) -> Result<()> {
    let (t, a, o) = (ty(x.dtype()), ty(accumulator(r, x.dtype())), ty(out.dtype()));
    let k = l.kernel("reduce", "reduce_rows", &[t, a, o])?;
    let block = (cols.div_ceil(32) * 32).clamp(32, BLOCK as usize) as u32;
    let cfg = LaunchConfig::new([rows.min(65535 * 16) as u32, 1, 1], [block, 1, 1]);
    l.go(&k, &cfg, &[Arg::Array(x), Arg::Array(out), int(rows), int(cols), code(r)])
}

/// Softmax over the last axis of the floating `x` into `out`. Rows whose 16-byte vectors fit
/// in one block's registers are read once; longer or unaligned rows take two passes.
pub(crate) fn softmax(l: &OpStream, x: &ArrayView, out: &ArrayView) -> Result<()> {
    let cols = x.shape().last().copied().unwrap_or(1);
    let rows = x.size() / cols;
    let t = ty(x.dtype());
    let args = [Arg::Array(x), Arg::Array(out), int(rows), int(cols)];
    let grid = [rows.min(MAX_BLOCKS) as u32, 1, 1];
    let per_vec = 16 / x.dtype().itemsize();
    if cols.is_multiple_of(per_vec) && x.ptr().is_multiple_of(16) && out.ptr().is_multiple_of(16) {
        let k = l.kernel("softmax", "softmax_rows_reg", &[t, number(SOFTMAX_VPT)])?;
        let block = ((cols / per_vec).div_ceil(SOFTMAX_VPT).div_ceil(32) * 32).max(32);
        if block <= k.attributes().max_threads_per_block as usize {
            return l.go(&k, &LaunchConfig::new(grid, [block as u32, 1, 1]), &args);
        }
    }
    let block = (cols.div_ceil(4).div_ceil(32) * 32).clamp(32, 1024) as u32;
    let k = l.kernel("softmax", "softmax_rows", &[t])?;
    l.go(&k, &LaunchConfig::new(grid, [block, 1, 1]), &args)
}

/// An instance of a library kernel: (file, kernel, template arguments).
type Instance = (&'static str, &'static str, Vec<TemplateArg>);

/// Every kernel instance the library can launch, in the order [`library_programs`] groups
/// them.
fn library_instances() -> Vec<Instance> {
    let all = DType::ALL;
    let real: Vec<DType> = all.into_iter().filter(|d| !matches!(d, DType::C64 | DType::C128)).collect();
    let reducible: Vec<DType> = real.iter().copied().filter(|d| *d != DType::Bool).collect();
    let floats = [DType::F16, DType::BF16, DType::F32, DType::F64];
    let t = ty;
    let mut out: Vec<Instance> = Vec::new();
    let mut add = |file: &'static str, name: &'static str, targs: &[TemplateArg]| out.push((file, name, targs.to_vec()));
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
            add("elementwise", "binary_broadcast", &[t(d), number(n)]);
        }
    }
    for &d in &all {
        for n in 1..=8 {
            add("strided_copy", "strided_copy", &[t(d), number(n)]);
            add("strided_copy", "strided_scatter", &[t(d), number(n)]);
        }
        add("transpose", "transpose", &[t(d)]);
    }
    for &d in &reducible {
        for r in [Reduction::Sum, Reduction::Max] {
            let a = accumulator(r, d);
            add("reduce", "reduce_partial", &[t(d), t(a)]);
            for &o in &real {
                add("reduce", "reduce_final", &[t(a), t(o)]);
                add("reduce", "reduce_rows", &[t(d), t(a), t(o)]);
            }
        }
    }
    for d in floats {
        add("softmax", "softmax_rows_reg", &[t(d), number(SOFTMAX_VPT)]);
        add("softmax", "softmax_rows", &[t(d)]);
    }
    out
}

/// Every kernel instance the library can launch, each as the very program an op compiles
/// for it (its kernel's dispatcher's program with its one name expression:
/// [`Dispatcher::explicit_instance_for`](crate::dispatch::Dispatcher::explicit_instance_for)):
/// what the precompiled bundle of the library is baked from (`python -m caijit bundle build
/// --ops`). Baking merges the instances of one file into programs of a few each
/// ([`BakeOptions::merge`](crate::compile::bake::BakeOptions::merge)), in this order: the
/// instances of one kernel together, those that differ only in their last template argument
/// next to each other (`axpy<*>`, `cast<float, *>`, `reduce_rows<float, double, *>`).
pub fn library_programs() -> Result<Vec<Program>> {
    let mut instances = library_instances();
    // Stable: each kernel's instances stay in their order within a group.
    instances.sort_by(|(f1, n1, a1), (f2, n2, a2)| {
        let group = |a: &[TemplateArg]| a[..a.len().saturating_sub(1)].iter().map(ToString::to_string).collect::<Vec<_>>();
        (f1, n1, group(a1)).cmp(&(f2, n2, group(a2)))
    });
    // Instances several ops launch (`reduce_final<long long, bool>`) once.
    let mut seen = std::collections::HashSet::new();
    instances.retain(|i| seen.insert(i.clone()));
    instances.into_iter().map(|(file, name, targs)| Ok(library::dispatcher(file, name)?.explicit_instance_for(&targs)?.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::OPS;
    use crate::ops::registry::Strided;

    #[test]
    fn every_registered_op_has_its_file_and_kernel() {
        for op in UNARY_OPS {
            let source = OPS.iter().find(|(n, _)| *n == op.name).map(|(_, s)| *s);
            let source = source.unwrap_or_else(|| panic!("op {}: no kernels/ops/{}.cu", op.name, op.name));
            assert!(source.contains("void unary("), "kernels/ops/{}.cu defines no `unary` kernel", op.name);
            // `unary` reads `const T* x`: C order only.
            assert_ne!(op.strided, Strided::Any, "op {}: a pointer kernel cannot read strided views", op.name);
            assert!(op.dtypes().next().is_some() && !op.doc.is_empty(), "op {}", op.name);
        }
    }

    #[test]
    fn the_library_programs_serve_each_instance_program() {
        use crate::compile::family_key;
        let programs = library_programs().unwrap();
        let mut files: Vec<&str> = Vec::new();
        for p in &programs {
            if !files.contains(&p.name.as_str()) {
                files.push(&p.name);
            }
        }
        files.sort_unstable();
        assert_eq!(files, ["abs.cu", "elementwise.cu", "reduce.cu", "softmax.cu", "strided_copy.cu", "transpose.cu"]);
        // One instance each: baking decides how many share a module.
        assert!(programs.iter().all(|p| p.name_expressions.len() == 1));
        let exprs =
            |file: &str| -> Vec<String> { programs.iter().filter(|p| p.name == file).flat_map(|p| p.name_expressions.clone()).collect() };
        // Each instance an op compiles (its kernel's dispatcher's program with its one name
        // expression, and the headers of the CUDA types it names) is in one library
        // program, of its family: a bundle of them serves it.
        let families: Vec<String> = programs.iter().map(|p| family_key(p).unwrap().unwrap()).collect();
        let instances = library_instances();
        for (file, name, targs) in &instances {
            let (program, expr) = library::dispatcher(file, name).unwrap().explicit_instance_for(targs).unwrap();
            let source = OPS.iter().find(|(n, _)| n == file).unwrap().1;
            let headers = crate::signature::headers_for(&expr);
            assert_eq!(program, Program::new(source).name(format!("{file}.cu")).including(&headers).name_expression(expr.as_str()));
            let holders: Vec<usize> =
                (0..programs.len()).filter(|&i| programs[i].name == program.name && programs[i].name_expressions.contains(&expr)).collect();
            assert_eq!(holders.len(), 1, "{expr}");
            assert_eq!(family_key(&program).unwrap().unwrap(), families[holders[0]], "{expr}");
        }
        // Every library kernel has instances in the bundle.
        for (file, name) in library::kernels() {
            assert!(instances.iter().any(|(f, n, _)| (*f, *n) == (file, name)), "{file}.cu: `{name}`");
        }
        let elementwise = exprs("elementwise.cu");
        for e in ["axpy<__half>", "cast<bool, __nv_bfloat16>", "binary_broadcast<double, 8>", "fill<caijit::complex<double> >"] {
            assert!(elementwise.contains(&e.to_string()), "{e} is not in {elementwise:?}");
        }
        assert!(exprs("reduce.cu").contains(&"reduce_rows<__half, float, long long>".to_string()));
        assert!(exprs("strided_copy.cu").contains(&"strided_scatter<__nv_bfloat16, 8>".to_string()));
    }

    #[test]
    fn broadcast_views_have_zero_strides_where_stretched() {
        let v = ArrayView::new(0x1000, &[1, 5], None, DType::F32, false, None).unwrap();
        let b = broadcast_to(&v, &[2, 3, 5]).unwrap();
        assert_eq!(b.shape(), [2, 3, 5]);
        assert_eq!(b.strides(), [0, 0, 4]);
        assert!(b.readonly());
    }
}
