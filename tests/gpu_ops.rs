//! The kernel library from Rust (`cai_runtime::ops`), checked against CPU references.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::ops::{self, Alloc, Axis, Operand, Out};
use cai_runtime::runtime::{Context, Stream};
use caijit_integration::{f32_bytes, f32s};

// Every test of this file: a `fn(Arc<Context>)` named here. (This binary has its own
// harness, `caijit_integration::run_gpu_tests`: a `#[test]` function would not run.)
caijit_integration::gpu_main!(
    rust_ops_match_cpu_references,
    contiguous_copies_check_their_arrays,
    rust_ops_fill_cast_broadcast_rows_softmax,
    rust_op_calls_allocate_results_and_take_strided_views
);

fn rust_ops_match_cpu_references(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let (r, c) = (129usize, 77usize);
    let xs: Vec<f32> = (0..r * c).map(|i| ((i * 7919) % 1000) as f32 / 7.0 - 50.0).collect();
    let ys: Vec<f32> = (0..r * c).map(|i| ((i * 104_729) % 997) as f32 / 3.0).collect();
    let x = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &f32_bytes(&xs), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &f32_bytes(&ys), &s).unwrap();
    let out = DeviceArray::zeros(&ctx, &[r, c], DType::F32, &s).unwrap();

    ops::axpy(&ctx, 2.0, &x.view(), &y.view(), &out.view(), None).unwrap();
    let got = f32s(&out.to_bytes().unwrap());
    assert!(got.iter().zip(xs.iter().zip(&ys)).all(|(g, (a, b))| *g == 2.0 * a + b));

    // The transpose of x as a strided view, made contiguous; and the tiled transpose.
    let xt = ArrayView::new(x.ptr(), &[c, r], Some(&[4, 4 * c as i64]), DType::F32, true, Some(s.stream_ref())).unwrap();
    let t1 = DeviceArray::zeros(&ctx, &[c, r], DType::F32, &s).unwrap();
    ops::ascontiguous(&ctx, &xt, &t1.view(), None).unwrap();
    let t2 = DeviceArray::zeros(&ctx, &[c, r], DType::F32, &s).unwrap();
    ops::transpose(&ctx, &x.view(), &t2.view(), None).unwrap();
    let want: Vec<f32> = (0..c * r).map(|k| xs[(k % r) * c + k / r]).collect();
    assert_eq!(f32s(&t1.to_bytes().unwrap()), want);
    assert_eq!(f32s(&t2.to_bytes().unwrap()), want);

    let total = DeviceArray::zeros(&ctx, &[], DType::F32, &s).unwrap();
    ops::sum(&ctx, &x.view(), Axis::All, &total.view(), None).unwrap();
    let want: f64 = xs.iter().map(|&v| f64::from(v)).sum();
    let got = f64::from(f32s(&total.to_bytes().unwrap())[0]);
    assert!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "{got} vs {want}");
    ops::max(&ctx, &x.view(), Axis::All, &total.view(), None).unwrap();
    assert_eq!(f32s(&total.to_bytes().unwrap())[0], xs.iter().cloned().fold(f32::MIN, f32::max));

    let e = ops::axpy(&ctx, 1.0, &xt, &y.view(), &out.view(), None).unwrap_err().to_string();
    assert!(e.contains("must match") || e.contains("C-contiguous"), "{e}");

    // A contiguous array is copied by the driver, ordered like a launch.
    let copies = cai_runtime::stats::stats().copies;
    let c1 = DeviceArray::zeros(&ctx, &[r, c], DType::F32, &s).unwrap();
    ops::ascontiguous(&ctx, &y.view(), &c1.view(), None).unwrap();
    assert_eq!(f32s(&c1.to_bytes().unwrap()), ys);
    assert_eq!(cai_runtime::stats::stats().copies, copies + 1);
}

fn contiguous_copies_check_their_arrays(ctx: Arc<Context>) {
    use cai_runtime::launch::{copy_contiguous, Arg};
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let a = DeviceArray::zeros(&ctx, &[4, 6], DType::F32, &s).unwrap();
    let b = DeviceArray::zeros(&ctx, &[24], DType::F32, &s).unwrap();
    let i = DeviceArray::zeros(&ctx, &[24], DType::I32, &s).unwrap();
    // Same dtype and size, any shapes: a flat copy.
    copy_contiguous(&ctx, &Arg::Array(&a.view()), &Arg::Array(&b.view()), None, true).unwrap();
    let err =
        |src: &ArrayView, dst: &ArrayView| copy_contiguous(&ctx, &Arg::Array(src), &Arg::Array(dst), None, true).unwrap_err().to_string();
    let e = err(&a.view(), &i.view());
    assert!(e.contains("differ") && e.contains("float32") && e.contains("int32"), "{e}");
    let strided = ArrayView::new(a.ptr(), &[4, 3], Some(&[24, 8]), DType::F32, false, None).unwrap();
    let e = err(&strided, &b.view());
    assert!(e.contains("copy source") && e.contains("not C-contiguous"), "{e}");
    let ro = ArrayView::new(b.ptr(), &[24], None, DType::F32, true, None).unwrap();
    let e = err(&a.view(), &ro);
    assert!(e.contains("copy destination") && e.contains("readonly"), "{e}");
    let host = [0f32; 24];
    let on_host = ArrayView::new(host.as_ptr() as u64, &[24], None, DType::F32, false, None).unwrap();
    let e = err(&on_host, &b.view());
    assert!(e.contains("copy source") && e.contains("not device memory"), "{e}");
}

/// Little-endian values of `N` bytes each (`values(&bytes, i32::from_le_bytes)`).
fn values<T, const N: usize>(b: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    b.chunks_exact(N).map(|c| from(c.try_into().unwrap())).collect()
}

fn rust_ops_fill_cast_broadcast_rows_softmax(ctx: Arc<Context>) {
    use cai_runtime::ops::BinaryOp;
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let (r, c) = (33usize, 70usize);
    let xs: Vec<f32> = (0..r * c).map(|i| ((i * 7919) % 1000) as f32 / 7.0 - 50.0).collect();
    let x = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &f32_bytes(&xs), &s).unwrap();
    let out = DeviceArray::zeros(&ctx, &[r, c], DType::F32, &s).unwrap();

    // fill: scalars convert exactly to the array's dtype, or are refused.
    ops::fill(&ctx, &out.view(), 7.5, None).unwrap();
    assert!(f32s(&out.to_bytes().unwrap()).iter().all(|&v| v == 7.5));
    let ints = DeviceArray::zeros(&ctx, &[5], DType::I32, &s).unwrap();
    ops::fill(&ctx, &ints.view(), 3, None).unwrap();
    assert_eq!(values(&ints.to_bytes().unwrap(), i32::from_le_bytes), [3; 5]);
    let e = ops::fill(&ctx, &ints.view(), 2.5, None).unwrap_err().to_string();
    assert!(e.contains("float"), "{e}");

    // cast: C++ conversion (float → int truncates toward zero, as Rust's `as`).
    let xi = DeviceArray::zeros(&ctx, &[r, c], DType::I32, &s).unwrap();
    ops::cast(&ctx, &x.view(), DType::I32, &xi.view(), None).unwrap();
    assert_eq!(values(&xi.to_bytes().unwrap(), i32::from_le_bytes), xs.iter().map(|&v| v as i32).collect::<Vec<_>>());
    let e = ops::cast(&ctx, &x.view(), DType::I32, &ints.view(), None).unwrap_err().to_string();
    assert!(e.contains("out must be") && e.contains("[33, 70]"), "{e}");

    // binary with broadcasting: a row (1, c) and a 0-d array against (r, c).
    let row: Vec<f32> = (0..c).map(|j| j as f32).collect();
    let rowd = DeviceArray::from_bytes(&ctx, &[1, c], DType::F32, &f32_bytes(&row), &s).unwrap();
    ops::binary(&ctx, BinaryOp::Add, &x.view(), &rowd.view(), &out.view(), None).unwrap();
    let want: Vec<f32> = (0..r * c).map(|k| xs[k] + row[k % c]).collect();
    assert_eq!(f32s(&out.to_bytes().unwrap()), want);
    let zero = DeviceArray::zeros(&ctx, &[], DType::F32, &s).unwrap();
    ops::binary(&ctx, BinaryOp::Maximum, &x.view(), &zero.view(), &out.view(), None).unwrap();
    assert_eq!(f32s(&out.to_bytes().unwrap()), xs.iter().map(|&v| v.max(0.0)).collect::<Vec<_>>());
    ops::binary(&ctx, BinaryOp::Multiply, &x.view(), &x.view(), &out.view(), None).unwrap();
    assert_eq!(f32s(&out.to_bytes().unwrap()), xs.iter().map(|&v| v * v).collect::<Vec<_>>());
    let col = DeviceArray::zeros(&ctx, &[r], DType::F32, &s).unwrap();
    let e = ops::binary(&ctx, BinaryOp::Add, &x.view(), &col.view(), &out.view(), None).unwrap_err().to_string();
    assert!(e.contains("do not broadcast"), "{e}");
    let e = ops::binary(&ctx, BinaryOp::Add, &x.view(), &xi.view(), &out.view(), None).unwrap_err().to_string();
    assert!(e.contains("float32") && e.contains("int32"), "{e}");

    // Reductions over the last axis.
    ops::sum(&ctx, &x.view(), Axis::Last, &col.view(), None).unwrap();
    let sums = f32s(&col.to_bytes().unwrap());
    for (i, got) in sums.iter().enumerate() {
        let want: f64 = xs[i * c..(i + 1) * c].iter().map(|&v| f64::from(v)).sum();
        assert!((f64::from(*got) - want).abs() <= 1e-4 * want.abs().max(1.0), "row {i}: {got} vs {want}");
    }
    ops::max(&ctx, &x.view(), Axis::Last, &col.view(), None).unwrap();
    let maxes: Vec<f32> = (0..r).map(|i| xs[i * c..(i + 1) * c].iter().cloned().fold(f32::MIN, f32::max)).collect();
    assert_eq!(f32s(&col.to_bytes().unwrap()), maxes);

    // Softmax: rows of 70 (not whole 16-byte vectors: the two-pass kernel) and of 64 (held in
    // registers).
    for cols in [70usize, 64] {
        let shape = [r * c / cols, cols];
        let view = |a: &DeviceArray| ArrayView::new(a.ptr(), &shape, None, DType::F32, false, Some(s.stream_ref())).unwrap();
        ops::softmax(&ctx, &view(&x), &view(&out), None).unwrap();
        let got = f32s(&out.to_bytes().unwrap());
        for (row, g) in xs[..shape[0] * cols].chunks(cols).zip(got.chunks(cols)) {
            let m = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
            let z: f64 = row.iter().map(|&v| (f64::from(v) - m).exp()).sum();
            for (&v, &g) in row.iter().zip(g) {
                let want = (f64::from(v) - m).exp() / z;
                assert!((f64::from(g) - want).abs() <= 1e-5, "cols {cols}: {g} vs {want}");
            }
        }
    }
}

/// Whole op calls from Rust: `Alloc` results (shape, NumPy's dtype, the stream they live on)
/// and `out=` arrays, with strided inputs taken as the op's registry entry says (views for
/// the broadcasting kernel, C-ordered copies for pointer kernels), values checked.
fn rust_op_calls_allocate_results_and_take_strided_views(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let (r, c) = (45usize, 70usize);
    let xs: Vec<f32> = (0..r * c).map(|i| ((i * 7919) % 1000) as f32 / 8.0 - 60.0).collect();
    let ys: Vec<f32> = (0..r * c).map(|i| ((i * 104_729) % 997) as f32 / 4.0).collect();
    let x = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &f32_bytes(&xs), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &f32_bytes(&ys), &s).unwrap();
    // Strided views: the transposes (c × r) of x and y, and every other column of y's
    // first row as a broadcast row (1 × c/2).
    let t = |a: &DeviceArray| ArrayView::new(a.ptr(), &[c, r], Some(&[4, 4 * c as i64]), DType::F32, true, Some(s.stream_ref())).unwrap();
    let (xt, yt) = (t(&x), t(&y));
    let row = ArrayView::new(y.ptr(), &[1, c / 2], Some(&[4 * c as i64, 8]), DType::F32, true, Some(s.stream_ref())).unwrap();
    let xt_h: Vec<f32> = (0..c * r).map(|k| xs[(k % r) * c + k / r]).collect();
    let yt_h: Vec<f32> = (0..c * r).map(|k| ys[(k % r) * c + k / r]).collect();

    // A kernel over caijit::Array (add) reads the strided views as they are; the result is
    // new, of the broadcast shape, on the stream asked for.
    let xh = ArrayView::new(x.ptr(), &[r, c / 2], Some(&[4 * c as i64, 8]), DType::F32, true, Some(s.stream_ref())).unwrap();
    // (That it took no copy is checked by counting launches in python/tests/test_ops.py.)
    let z = ops::add(&ctx, &xh, &row, Alloc, Some(&s)).unwrap();
    assert_eq!((z.shape(), z.dtype()), (&[r, c / 2][..], DType::F32));
    assert!(Arc::ptr_eq(z.stream(), &s));
    let want: Vec<f32> = (0..r * (c / 2)).map(|k| xs[(k / (c / 2)) * c + 2 * (k % (c / 2))] + ys[2 * (k % (c / 2))]).collect();
    assert_eq!(f32s(&z.to_bytes().unwrap()), want);

    // Pointer kernels (axpy, abs, cast, transpose) get C-ordered copies of strided inputs.
    let out = DeviceArray::zeros(&ctx, &[c, r], DType::F32, &s).unwrap();
    ops::axpy(&ctx, 2.0, &xt, &yt, &out, None).unwrap();
    let want: Vec<f32> = xt_h.iter().zip(&yt_h).map(|(a, b)| 2.0 * a + b).collect();
    assert_eq!(f32s(&out.to_bytes().unwrap()), want);
    let abs = ops::unary(&ctx, "abs", &xt, Alloc, None).unwrap();
    assert_eq!((abs.shape(), abs.dtype()), (&[c, r][..], DType::F32));
    // (It ran on the view's stream, which caijit cannot keep: the result lives on the legacy
    // stream; given as a view of x, it lives on x's stream.)
    assert_eq!(abs.stream().handle(), 1);
    let abs2 = ops::unary(&ctx, "abs", Operand::of_array(&xt, &x), Alloc, None).unwrap();
    assert!(Arc::ptr_eq(abs2.stream(), &s));
    assert_eq!(abs2.to_bytes().unwrap(), abs.to_bytes().unwrap());
    assert_eq!(f32s(&abs.to_bytes().unwrap()), xt_h.iter().map(|v| v.abs()).collect::<Vec<_>>());
    let wide = ops::cast(&ctx, &xt, DType::F64, Alloc, None).unwrap();
    assert_eq!(values(&wide.to_bytes().unwrap(), f64::from_le_bytes), xt_h.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    let back = ops::transpose(&ctx, &xt, Alloc, None).unwrap();
    assert_eq!((back.shape(), f32s(&back.to_bytes().unwrap())), (&[r, c][..], xs.clone()));

    // Reductions: NumPy's result dtypes (integer sums in 64 bits), over a strided view.
    let rows = ops::sum(&ctx, &xt, Axis::Last, Alloc, None).unwrap();
    assert_eq!((rows.shape(), rows.dtype()), (&[c][..], DType::F32));
    for (j, got) in f32s(&rows.to_bytes().unwrap()).into_iter().enumerate() {
        let want: f64 = (0..r).map(|i| f64::from(xs[i * c + j])).sum();
        assert!((f64::from(got) - want).abs() <= 1e-4 * want.abs().max(1.0), "column {j}: {got} vs {want}");
    }
    let ints: Vec<i32> = (0..r * c).map(|i| (i as i32 % 201) - 100).collect();
    let ints_b: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    let id = DeviceArray::from_bytes(&ctx, &[r, c], DType::I32, &ints_b, &s).unwrap();
    let total = ops::sum(&ctx, &id, Axis::All, Out::Alloc, None).unwrap().expect("Out::Alloc returns the new array");
    assert_eq!((total.shape(), total.dtype()), (&[][..], DType::I64));
    assert_eq!(values(&total.to_bytes().unwrap(), i64::from_le_bytes), [ints.iter().map(|&v| i64::from(v)).sum::<i64>()]);
    // Inputs that are caijit arrays on one stream: the result lives there too.
    assert!(Arc::ptr_eq(total.stream(), &s));

    // A strided `out=` is written (through a temporary): here the transpose of a (c, r)
    // array, from strided and C-ordered inputs alike, and in place.
    let o = DeviceArray::zeros(&ctx, &[c, r], DType::F32, &s).unwrap();
    // o's transpose: (r, c), byte strides (4, 4 r).
    let ot = ArrayView::new(o.ptr(), &[r, c], Some(&[4, 4 * r as i64]), DType::F32, false, Some(s.stream_ref())).unwrap();
    ops::axpy(&ctx, 2.0, &x, &y, &ot, None).unwrap();
    let want: Vec<f32> = (0..c * r).map(|k| 2.0 * xs[(k % r) * c + k / r] + ys[(k % r) * c + k / r]).collect();
    assert_eq!(f32s(&o.to_bytes().unwrap()), want);
    ops::binary(&ctx, ops::BinaryOp::Subtract, &ot, &x, &ot, None).unwrap(); // (2x + y) - x, in place
    let want: Vec<f32> = (0..c * r).map(|k| (2.0 * xs[(k % r) * c + k / r] + ys[(k % r) * c + k / r]) - xs[(k % r) * c + k / r]).collect();
    assert_eq!(f32s(&o.to_bytes().unwrap()), want);

    // `out=` must fit, and is never reinterpreted: another shape, another dtype, a
    // broadcast out, a strided array where the op writes in place.
    let e = ops::axpy(&ctx, 2.0, &x, &y, &xt, None).unwrap_err().to_string();
    assert!(e.contains("axpy: out must be a float32 array of shape [45, 70], got float32 [70, 45]"), "{e}");
    let e = ops::cast(&ctx, &x, DType::F16, &out, None).unwrap_err().to_string();
    assert!(e.contains("cast: out must be a float16 array"), "{e}");
    let bcast = ArrayView::new(o.ptr(), &[r, c], Some(&[0, 4]), DType::F32, false, None).unwrap();
    let e = ops::add(&ctx, &x, &y, &bcast, None).unwrap_err().to_string();
    assert!(e.contains("add: out has elements that share memory"), "{e}");
    let e = ops::fill(&ctx, &xt, 0.0, None).unwrap_err().to_string();
    assert!(e.contains("fill: needs C-contiguous arrays"), "{e}");
    s.synchronize().unwrap();
}
