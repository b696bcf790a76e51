//! Rust launches through the dispatcher, Numba-style: a template kernel and an overloaded
//! kernel launched from source on arrays of `#[derive(CudaArrayInterface)]` structs with
//! scalars of several types, values checked. Skips without a device; fails instead with
//! CAIJIT_REQUIRE_GPU=1.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::compile::Program;
use cai_runtime::dispatch::{Dispatcher, TemplateArg};
use cai_runtime::launch::{Arg, LaunchConfig};
use cai_runtime::runtime::Context;
use cai_runtime::runtime::Stream;
use cai_runtime::CudaArrayInterface;
use caijit_integration::{randoms, seed, DISPATCH_SOURCE};

// (The tests run through the GPU harness, `caijit_integration::run_gpu_tests`: without a
// device each is reported ignored with the reason; a `#[test]` function would not run.)
caijit_integration::gpu_main!(
    a_template_kernel_is_instantiated_from_the_arguments,
    an_overloaded_kernel_is_picked_by_the_arguments,
    explicit_instances_are_cached_per_device_and_template_arguments
);

/// Device memory owned elsewhere, described by a derived interface.
#[derive(CudaArrayInterface)]
#[cai(dtype = f32)]
struct Floats {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    len: usize,
    #[cai(stream)]
    stream: Option<u64>,
}

#[derive(CudaArrayInterface)]
#[cai(dtype = f64)]
struct Doubles {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    len: usize,
    #[cai(stream)]
    stream: Option<u64>,
}

#[derive(CudaArrayInterface)]
#[cai(dtype = i32)]
struct Ints {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    len: usize,
    #[cai(stream)]
    stream: Option<u64>,
}

fn bytes<T: Copy, const N: usize>(v: &[T], to: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| to(x)).collect()
}

fn back<T, const N: usize>(b: &[u8], from: impl Fn([u8; N]) -> T) -> Vec<T> {
    b.chunks_exact(N).map(|c| from(c.try_into().expect("N bytes"))).collect()
}

fn a_template_kernel_is_instantiated_from_the_arguments(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let axpy = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("axpy")).unwrap();

    // float32: axpy<float>, with typed scalars.
    let n = 10_007;
    let (xs, ys) = (randoms(n, seed()), randoms(n, seed() + 1));
    let x = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&xs, f32::to_le_bytes), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&ys, f32::to_le_bytes), &s).unwrap();
    let xb = Floats { ptr: x.ptr(), len: n, stream: Some(s.handle()) };
    let yb = Floats { ptr: y.ptr(), len: n, stream: Some(s.handle()) };
    let (xv, yv): (ArrayView, ArrayView) = (xb.cai_view().unwrap(), yb.cai_view().unwrap());
    let args = [Arg::scalar(2.5f32), Arg::Array(&xv), Arg::Array(&yv), Arg::scalar(n as i32)];
    let on = axpy.launch(&LaunchConfig::for_elements(n, 128), &args, Some(&s)).unwrap();
    assert_eq!(on, s.handle());
    let k = axpy.cached(0, &args).expect("the instance is cached after its launch");
    assert_eq!(k.info().name_expression.as_deref(), Some("axpy<float>"));
    let got = back(&y.to_bytes().unwrap(), f32::from_le_bytes);
    for i in 0..n {
        // Acc defaults to double: the sum is rounded once, to float.
        let want = (2.5f64 * xs[i] as f64 + ys[i] as f64) as f32;
        assert_eq!(got[i], want, "{i}");
    }

    // float64 through forall: axpy<double>, with an untyped count.
    let m = 3001;
    let xs: Vec<f64> = randoms(m, seed() + 2).into_iter().map(f64::from).collect();
    let ys: Vec<f64> = randoms(m, seed() + 3).into_iter().map(|v| f64::from(v) * 3.0).collect();
    let x = DeviceArray::from_bytes(&ctx, &[m], DType::F64, &bytes(&xs, f64::to_le_bytes), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[m], DType::F64, &bytes(&ys, f64::to_le_bytes), &s).unwrap();
    let xb = Doubles { ptr: x.ptr(), len: m, stream: Some(s.handle()) };
    let yb = Doubles { ptr: y.ptr(), len: m, stream: Some(s.handle()) };
    let (xv, yv) = (xb.cai_view().unwrap(), yb.cai_view().unwrap());
    let args = [Arg::scalar(-1.25f64), Arg::Array(&xv), Arg::Array(&yv), Arg::untyped(m)];
    axpy.forall(m, &args, None).unwrap();
    assert_eq!(axpy.cached(0, &args).unwrap().info().name_expression.as_deref(), Some("axpy<double>"));
    let got = back(&y.to_bytes().unwrap(), f64::from_le_bytes);
    for i in 0..m {
        assert_eq!(got[i], -1.25 * xs[i] + ys[i], "{i}");
    }

    // A typed scalar that contradicts the arrays is refused before anything runs.
    let bad = [Arg::scalar(1.0f32), Arg::Array(&xv), Arg::Array(&yv), Arg::untyped(m)];
    assert!(axpy.forall(m, &bad, None).is_err());
}

fn an_overloaded_kernel_is_picked_by_the_arguments(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let scale = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("scale")).unwrap();
    let n = 4099;
    let cfg = LaunchConfig::for_elements(n, 256);

    let fs = randoms(n, seed());
    let f = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&fs, f32::to_le_bytes), &s).unwrap();
    let fv = Floats { ptr: f.ptr(), len: n, stream: Some(s.handle()) }.cai_view().unwrap();
    scale.launch(&cfg, &[Arg::Array(&fv), Arg::untyped(3), Arg::scalar(n as i64)], None).unwrap();
    let got = back(&f.to_bytes().unwrap(), f32::from_le_bytes);
    assert!(got.iter().zip(&fs).all(|(g, x)| *g == x * 3.0));

    let ds: Vec<f64> = randoms(n, seed() + 1).into_iter().map(f64::from).collect();
    let d = DeviceArray::from_bytes(&ctx, &[n], DType::F64, &bytes(&ds, f64::to_le_bytes), &s).unwrap();
    let dv = Doubles { ptr: d.ptr(), len: n, stream: Some(s.handle()) }.cai_view().unwrap();
    scale.launch(&cfg, &[Arg::Array(&dv), Arg::scalar(0.5f64), Arg::untyped(n)], Some(&s)).unwrap();
    let got = back(&d.to_bytes().unwrap(), f64::from_le_bytes);
    assert!(got.iter().zip(&ds).all(|(g, x)| *g == x * 0.5));

    let is: Vec<i32> = (0..n as i32).map(|i| i * 7 - 5000).collect();
    let i = DeviceArray::from_bytes(&ctx, &[n], DType::I32, &bytes(&is, i32::to_le_bytes), &s).unwrap();
    let iv = Ints { ptr: i.ptr(), len: n, stream: None }.cai_view().unwrap();
    let args = [Arg::Array(&iv), Arg::scalar(-3i32), Arg::scalar(n as i64)];
    scale.launch(&cfg, &args, Some(&s)).unwrap();
    assert_eq!(scale.cached(0, &args).unwrap().info().params[0].cpp_type, "int*");
    let got = back(&i.to_bytes().unwrap(), i32::from_le_bytes);
    assert!(got.iter().zip(&is).all(|(g, x)| *g == x * -3 + 1), "the int overload ran");

    // No overload takes a float array with a typed double scalar.
    let e = scale.launch(&cfg, &[Arg::Array(&fv), Arg::scalar(0.5f64), Arg::untyped(n)], None).unwrap_err();
    assert!(e.to_string().contains("no overload"), "{e}");
}

/// `caijit.ops`' path: an instance named by its template arguments, loaded once per device
/// and arguments (the same kernel object each time), and launched.
fn explicit_instances_are_cached_per_device_and_template_arguments(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let axpy = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("axpy")).unwrap();
    let f32s = [TemplateArg::Type(DType::F32)];
    let k = axpy.instance(&ctx, &f32s).unwrap();
    assert_eq!(k.info().name_expression.as_deref(), Some("axpy<float>"));
    assert!(Arc::ptr_eq(&k, &axpy.instance(&ctx, &f32s).unwrap()), "the cached instance");
    let other = axpy.instance(&ctx, &[TemplateArg::Type(DType::F64), TemplateArg::Type(DType::F32)]).unwrap();
    assert_eq!(other.info().name_expression.as_deref(), Some("axpy<double, float>"));
    assert!(!Arc::ptr_eq(&k, &other));
    // Explicit instances are what the dispatcher compiles for inspection, with the deduced ones.
    let (compiled, _) = axpy.compile_launched(ctx.arch()).unwrap();
    let exprs: Vec<&str> = compiled.kernels.iter().filter_map(|k| k.name_expression.as_deref()).collect();
    assert!(exprs.contains(&"axpy<float>") && exprs.contains(&"axpy<double, float>"), "{exprs:?}");

    let n = 1000;
    let xs = randoms(n, seed());
    let x = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&xs, f32::to_le_bytes), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&vec![1.0f32; n], f32::to_le_bytes), &s).unwrap();
    let args = [Arg::scalar(2.0f32), Arg::Array(x.as_view()), Arg::Array(y.as_view()), Arg::scalar(n as i32)];
    k.launch(&LaunchConfig::for_elements(n, 128), &args, Some(&s), true).unwrap();
    let got = back(&y.to_bytes().unwrap(), f32::from_le_bytes);
    for i in 0..n {
        assert_eq!(got[i], (2.0f64 * xs[i] as f64 + 1.0) as f32, "{i}");
    }
}
