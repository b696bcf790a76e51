//! The kernel library from Rust (`cai_runtime::ops`), checked against CPU references.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::ops;
use cai_runtime::runtime::Stream;
use caijit_integration::{f32_bytes, f32s, gpu_context as ctx, skip_unless};

#[test]
fn rust_ops_match_cpu_references() {
    let ctx = skip_unless!(ctx(), "no CUDA device");
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

    let partial = DeviceArray::zeros(&ctx, &[ops::reduce_scratch_len(&ctx)], DType::F32, &s).unwrap();
    let total = DeviceArray::zeros(&ctx, &[], DType::F32, &s).unwrap();
    ops::sum(&ctx, &x.view(), &total.view(), &partial.view(), None).unwrap();
    let want: f64 = xs.iter().map(|&v| f64::from(v)).sum();
    let got = f64::from(f32s(&total.to_bytes().unwrap())[0]);
    assert!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "{got} vs {want}");
    ops::max(&ctx, &x.view(), &total.view(), &partial.view(), None).unwrap();
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

#[test]
fn contiguous_copies_check_their_arrays() {
    use cai_runtime::launch::{copy_contiguous, Arg};
    let ctx = skip_unless!(ctx(), "no CUDA device");
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let a = DeviceArray::zeros(&ctx, &[4, 6], DType::F32, &s).unwrap();
    let b = DeviceArray::zeros(&ctx, &[24], DType::F32, &s).unwrap();
    let i = DeviceArray::zeros(&ctx, &[24], DType::I32, &s).unwrap();
    // Same dtype and size, any shapes: a flat copy.
    copy_contiguous(&ctx, &Arg::Array(&a.view()), &Arg::Array(&b.view()), None, true).unwrap();
    let err = |src: &ArrayView, dst: &ArrayView| copy_contiguous(&ctx, &Arg::Array(src), &Arg::Array(dst), None, true).unwrap_err().to_string();
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
