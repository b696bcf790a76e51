//! Launches on the GPU: arguments, layouts, the stream protocol. Without a device each
//! test is reported ignored, with the reason; it fails instead with CAIJIT_REQUIRE_GPU=1.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::cai::{ArrayView, DType, StreamRef};
use cai_runtime::compile::{toolkit, Program};
use cai_runtime::launch::{Arg, LaunchConfig, Num};
use cai_runtime::runtime::{driver_version, Context, Stream};
use cai_runtime::stats::stats;
use caijit_integration::{f32_bytes as bytes, f32s, randoms, seed};

// Every test of this file: a `fn(Arc<Context>)` named here. (This binary has its own
// harness, `caijit_integration::run_gpu_tests`: a `#[test]` function would not run.)
caijit_integration::gpu_main!(
    smoke_driver_nvrtc_device,
    axpy_template_on_device_arrays,
    strided_views_and_argument_errors,
    stream_protocol_orders_both_ways,
    cai_stream_values_and_export,
    struct_parameters_from_derived_rust_twins,
    cudarc_slices_as_arguments,
    cudarc_records_each_access_after_the_kernel_is_enqueued,
    every_spelling_of_a_kernel_is_one_kernel,
    freed_memory_goes_to_its_stream_first,
    graphs_capture_once_and_replay_with_new_arguments
);

fn smoke_driver_nvrtc_device(ctx: Arc<Context>) {
    let tk = toolkit().expect("NVRTC");
    println!(
        "device 0: {} (compute capability {}.{}, {}), driver {}, NVRTC {}.{} at {}",
        ctx.name(),
        ctx.compute_capability().0,
        ctx.compute_capability().1,
        ctx.arch(),
        driver_version().unwrap(),
        tk.version.0,
        tk.version.1,
        tk.nvrtc_path.display()
    );
    assert!(ctx.compute_capability().0 >= 7);
}

const AXPY: &str = r#"
#include <caijit/caijit.cuh>
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void transpose_add(caijit::Array<const float, 2> a, caijit::Array<float, 2> out) {
    long long r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < out.shape[0] && c < out.shape[1]) out(r, c) += a(r, c);
}
// Spins ~`cycles` clock cycles in one thread, then writes `v` everywhere: a slow producer.
extern "C" __global__ void slow_fill(float* y, float v, long long n, long long cycles) {
    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
    __syncthreads();
    for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = v;
}
extern "C" __global__ void copy(const float* x, float* y, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = x[i];
}
"#;

fn axpy_template_on_device_arrays(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let n = 100_003;
    let xs = randoms(n, seed());
    let ys = randoms(n, seed() + 1);
    let x = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&xs), &s).unwrap();
    let y = DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&ys), &s).unwrap();
    let m = ctx.compile(&Program::new(AXPY).name_expression("axpy<float>")).unwrap();
    let k = m.kernel("axpy<float>").unwrap();
    let (xv, yv) = (x.view(), y.view());
    let args = [
        Arg::Scalar { value: Num::Float(2.5), dtype: None },
        Arg::Array(&xv),
        Arg::Array(&yv),
        Arg::Scalar { value: Num::Int(n as i128), dtype: None },
    ];
    let launched_on = k.forall(n, &args, None, true).unwrap();
    assert_eq!(launched_on, s.handle(), "the common producer stream is the launch stream");
    let got = f32s(&y.to_bytes().unwrap());
    for i in 0..n {
        let want = 2.5 * xs[i] + ys[i];
        assert!((got[i] - want).abs() <= 1e-6 * want.abs().max(1.0), "{i}: {} vs {want}", got[i]);
    }
    // Into a buffer of the caller's: exactly the array's bytes, or an error naming both sizes.
    let mut mine = vec![0u8; 4 * n];
    y.copy_to_host(&mut mine).unwrap();
    assert_eq!(f32s(&mine), got);
    let e = y.copy_to_host(&mut mine[..4 * n - 1]).unwrap_err().to_string();
    assert!(e.contains(&format!("needs {} bytes, not {}", 4 * n, 4 * n - 1)), "{e}");
}

fn strided_views_and_argument_errors(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let (r, c) = (37, 53);
    let av = randoms(r * c, seed());
    let ov = randoms(r * c, seed() + 7);
    // `a` holds a (c, r) matrix; its transpose (r, c) is a strided view.
    let a = DeviceArray::from_bytes(&ctx, &[c, r], DType::F32, &bytes(&av), &s).unwrap();
    let out = DeviceArray::from_bytes(&ctx, &[r, c], DType::F32, &bytes(&ov), &s).unwrap();
    let at = ArrayView::new(a.ptr(), &[r, c], Some(&[4, 4 * r as i64]), DType::F32, true, Some(s.stream_ref())).unwrap();
    let m = ctx.compile(&Program::new(AXPY)).unwrap();
    let k = m.kernel("transpose_add").unwrap();
    let outv = out.view();
    let cfg = LaunchConfig::new([(c as u32).div_ceil(16), (r as u32).div_ceil(16), 1], [16, 16, 1]);
    k.launch(&cfg, &[Arg::Array(&at), Arg::Array(&outv)], None, true).unwrap();
    let got = f32s(&out.to_bytes().unwrap());
    for i in 0..r {
        for j in 0..c {
            assert_eq!(got[i * c + j], ov[i * c + j] + av[j * r + i]);
        }
    }
    // Errors name the parameter.
    let e = k.launch(&cfg, &[Arg::Array(&at)], None, true).unwrap_err().to_string();
    assert!(e.contains("takes 2 arguments, got 1"), "{e}");
    let ro = ArrayView::new(out.ptr(), &[r, c], None, DType::F32, true, None).unwrap();
    let e = k.launch(&cfg, &[Arg::Array(&at), Arg::Array(&ro)], None, true).unwrap_err().to_string();
    assert!(e.contains("argument 1 `out`") && e.contains("readonly"), "{e}");
    let f64v = ArrayView::new(out.ptr(), &[r, c / 2], None, DType::F64, false, None).unwrap();
    let e = k.launch(&cfg, &[Arg::Array(&at), Arg::Array(&f64v)], None, true).unwrap_err().to_string();
    assert!(e.contains("argument 1") && e.contains("float32") && e.contains("float64"), "{e}");
    let copy = m.kernel("copy").unwrap();
    let e = copy
        .launch(&cfg, &[Arg::Array(&at), Arg::Array(&outv), Arg::Scalar { value: Num::Int(1), dtype: None }], None, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("argument 0 `x`") && e.contains("C-contiguous"), "{e}");
    let host = [1.0f32; 4];
    let hv = ArrayView::contiguous(host.as_ptr() as u64, &[4], DType::F32, false).unwrap();
    let e = copy
        .launch(&cfg, &[Arg::Array(&hv), Arg::Array(&outv), Arg::Scalar { value: Num::Int(4), dtype: None }], None, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not device memory"), "{e}");
    // An address inside an allocation already launched on is device memory (on one device,
    // answered from the per-thread range table; on several, by the driver).
    let inner = ArrayView::contiguous(out.ptr() + 4, &[1], DType::F32, false).unwrap();
    let one = Arg::Scalar { value: Num::Int(1), dtype: None };
    copy.launch(&cfg, &[Arg::Array(&inner), Arg::Array(&inner), one], None, true).unwrap();
    let big = LaunchConfig::new([1, 1, 1], [2048, 1, 1]);
    assert!(k.launch(&big, &[Arg::Array(&at), Arg::Array(&outv)], None, true).unwrap_err().to_string().contains("block dimension x"));
}

/// Producer on stream A (slow), consumer launched on stream C: the launch waits for A.
/// Then stream A copies the consumer's output: the reverse edge orders it after the launch.
fn stream_protocol_orders_both_ways(ctx: Arc<Context>) {
    let a_stream = Arc::new(Stream::new(&ctx).unwrap());
    let c_stream = Stream::new(&ctx).unwrap();
    let n = 1 << 16;
    let m = ctx.compile(&Program::new(AXPY)).unwrap();
    let (slow, copy) = (m.kernel("slow_fill").unwrap(), m.kernel("copy").unwrap());
    let x = DeviceArray::zeros(&ctx, &[n], DType::F32, &a_stream).unwrap();
    let y = DeviceArray::zeros(&ctx, &[n], DType::F32, &a_stream).unwrap();
    let z = DeviceArray::zeros(&ctx, &[n], DType::F32, &a_stream).unwrap();
    a_stream.synchronize().unwrap();
    let before = stats();
    let nn = Arg::Scalar { value: Num::Int(n as i128), dtype: None };
    let (xv, yv, zv) = (x.view(), y.view(), z.view());
    // ~50 ms of spinning on A before x is written with 7.
    let cycles = Arg::Scalar { value: Num::Int(100_000_000), dtype: None };
    let one = LaunchConfig::new([1, 1, 1], [256, 1, 1]);
    slow.launch(&one, &[Arg::Array(&xv), Arg::Scalar { value: Num::Float(7.0), dtype: None }, nn, cycles], Some(&a_stream), true).unwrap();
    // Consumer on C: y = x (must see 7s), then A copies y into z (must see 7s too).
    copy.launch(&LaunchConfig::for_elements(n, 256), &[Arg::Array(&xv), Arg::Array(&yv), nn], Some(&c_stream), true).unwrap();
    let after = stats();
    copy.launch(&LaunchConfig::for_elements(n, 256), &[Arg::Array(&yv), Arg::Array(&zv), nn], Some(&a_stream), true).unwrap();
    assert_eq!(after.waits - before.waits, 1, "one producer stream (A) waited on");
    assert_eq!(after.reverse_waits - before.reverse_waits, 1);
    assert_eq!(after.host_syncs, 0);
    let got = f32s(&z.to_bytes().unwrap());
    assert!(got.iter().all(|&v| v == 7.0), "z[0..4] = {:?}", &got[..4]);
    let got = f32s(&y.to_bytes().unwrap());
    assert!(got.iter().all(|&v| v == 7.0));
}

fn cai_stream_values_and_export(ctx: Arc<Context>) {
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let a = DeviceArray::zeros(&ctx, &[3, 4], DType::I32, &s).unwrap();
    let d = a.view().to_descriptor();
    assert_eq!(d.version, 3);
    assert_eq!(d.stream, Some(s.handle()));
    assert!(d.strides.is_none());
    assert_eq!(Stream::legacy().stream_ref(), StreamRef::Legacy);
    assert_eq!(Stream::per_thread().handle(), 2);
    assert!(Stream::borrowed(0).is_err());
    let e = DeviceArray::zeros(&ctx, &[0, 5], DType::F64, &s).unwrap();
    assert_eq!(e.view().to_descriptor().data.ptr, 0);
}

/// A `#[derive(KernelParams)]` struct and its CUDA twin: same bytes, same offsets.
#[derive(cai_runtime::KernelParams, Clone, Copy)]
#[repr(C)]
#[cai(size = 24, align = 8)]
struct Params {
    scale: f64,
    flag: i8,
    #[cai(offset = 12)]
    v: [f32; 2],
    n: i32,
}

const PARAMS_SRC: &str = r#"
struct Params { double scale; signed char flag; float v[2]; int n; };
extern "C" __global__ void use_params(Params p, double* out) {
    out[0] = p.scale; out[1] = p.flag; out[2] = p.v[0]; out[3] = p.v[1]; out[4] = p.n;
}
"#;

fn struct_parameters_from_derived_rust_twins(ctx: Arc<Context>) {
    use cai_runtime::ParamBytes;
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let m = ctx.compile(&Program::new(PARAMS_SRC)).unwrap();
    let k = m.kernel("use_params").unwrap();
    assert_eq!(k.info().params[0].size, <Params as ParamBytes>::SIZE);
    let out = DeviceArray::from_bytes(&ctx, &[5], DType::F64, &[0xAAu8; 40], &s).unwrap();
    let p = Params { scale: 2.5, flag: -3, v: [0.25, -8.0], n: 41 };
    let bytes = p.param_bytes();
    let ov = out.view();
    k.launch(&LaunchConfig::new([1, 1, 1], [1, 1, 1]), &[Arg::Bytes(&bytes), Arg::Array(&ov)], None, true).unwrap();
    let got: Vec<f64> = out.to_bytes().unwrap().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(got, [2.5, -3.0, 0.25, -8.0, 41.0]);
    let e = k.launch(&LaunchConfig::new([1, 1, 1], [1, 1, 1]), &[Arg::Bytes(&bytes[..20]), Arg::Array(&ov)], None, true).unwrap_err();
    assert!(e.to_string().contains("expected 24 bytes"), "{e}");
}

/// cudarc slices are arguments like any other CAI array, ordered against their stream; a
/// slice borrowed for reading is a readonly array.
fn cudarc_slices_as_arguments(ctx: Arc<Context>) {
    use cai_runtime::interop::{cudarc_view, cudarc_view_mut};
    let cctx = cudarc::driver::CudaContext::new(0).unwrap();
    let cstream = cctx.new_stream().unwrap();
    let n = 10_001;
    let xs = randoms(n, seed());
    let x = cstream.clone_htod(&xs).unwrap();
    let mut y = cstream.alloc_zeros::<f32>(n).unwrap();
    let m = ctx.compile(&Program::new(AXPY).name_expression("axpy<float>")).unwrap();
    let k = m.kernel("axpy<float>").unwrap();
    let own = Stream::new(&ctx).unwrap();
    {
        // Read through a non-const parameter: refused, naming the argument.
        let (xv, x2) = (cudarc_view(&x, &cstream).unwrap(), cudarc_view(&x, &cstream).unwrap());
        let args = [Arg::untyped(3.0), Arg::Array(&xv), Arg::Array(&x2), Arg::untyped(n)];
        let e = k.forall(n, &args, Some(&own), true).unwrap_err().to_string();
        assert!(e.starts_with("argument 2") && e.contains("readonly"), "{e}");
    }
    let (xv, yv) = (cudarc_view(&x, &cstream).unwrap(), cudarc_view_mut(&mut y, &cstream).unwrap());
    assert_eq!(xv.stream(), yv.stream());
    assert!(xv.readonly() && !yv.readonly());
    let before = stats();
    let args = [Arg::untyped(3.0), Arg::Array(&xv), Arg::Array(&yv), Arg::untyped(n)];
    k.forall(n, &args, Some(&own), true).unwrap();
    assert_eq!(stats().waits - before.waits, 1, "the launch waited on the cudarc stream");
    drop((xv, yv));
    let got: Vec<f32> = cstream.clone_dtoh(&y).unwrap();
    for i in 0..n {
        assert_eq!(got[i], 3.0 * xs[i]);
    }
}

/// cudarc orders its other streams by the accesses its views record: the read of `x` and
/// the write of `y` are recorded after caijit's (slow) kernel is enqueued, so a cudarc write
/// of `x` and a cudarc read of `y` on another stream wait for the kernel. A view that
/// recorded its access before the launch, or a write as a read, fails here: the other
/// stream would overwrite `x` before the kernel reads it, or read `y` before it is written.
fn cudarc_records_each_access_after_the_kernel_is_enqueued(ctx: Arc<Context>) {
    use cai_runtime::interop::{cudarc_view, cudarc_view_mut};
    const SLOW_COPY: &str = r#"
    extern "C" __global__ void slow_copy(const float* x, float* y, long long n, long long cycles) {
        if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
        __syncthreads();
        for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
    }"#;
    let k = ctx.compile(&Program::new(SLOW_COPY)).unwrap().kernel("slow_copy").unwrap();
    let cctx = cudarc::driver::CudaContext::new(0).unwrap();
    let (a, b) = (cctx.new_stream().unwrap(), cctx.new_stream().unwrap());
    let n = 4096;
    let xs = randoms(n, seed());
    let mut x = a.clone_htod(&xs).unwrap();
    let mut y = a.alloc_zeros::<f32>(n).unwrap();
    a.synchronize().unwrap();
    let own = Stream::new(&ctx).unwrap();
    {
        let (xv, yv) = (cudarc_view(&x, &a).unwrap(), cudarc_view_mut(&mut y, &a).unwrap());
        // About 0.1 s of spinning (at 2 GHz) before the kernel touches either array.
        let args = [Arg::Array(&xv), Arg::Array(&yv), Arg::untyped(n), Arg::untyped(200_000_000i64)];
        k.launch(&LaunchConfig::new([1, 1, 1], [256, 1, 1]), &args, Some(&own), true).unwrap();
    } // the views drop: cudarc records the read of x and the write of y on `a`
    b.memcpy_htod(&vec![0f32; n], &mut x).unwrap();
    let got = b.clone_dtoh(&y).unwrap();
    assert!(
        got == xs,
        "stream b did not wait for caijit's kernel: {} of {n} elements differ",
        got.iter().zip(&xs).filter(|(g, w)| g != w).count()
    );
}

fn every_spelling_of_a_kernel_is_one_kernel(ctx: Arc<Context>) {
    // A source of its own (its module is loaded here first), asked for by eight threads at once.
    let program = Program::new(format!("{AXPY}\n// every_spelling_of_a_kernel_is_one_kernel {}\n", seed())).name_expression("axpy<float>");
    let modules: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| ctx.compile(&program).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(modules.iter().all(|m| Arc::ptr_eq(m, &modules[0])));
    let m = &modules[0];
    let by_expression = m.kernel("axpy<float>").unwrap();
    let by_symbol = m.kernel(&by_expression.info().lowered_name).unwrap();
    assert!(Arc::ptr_eq(&by_expression, &by_symbol), "one kernel per driver function");
    // A limit raised through one spelling is the one every spelling's launch checks against.
    by_expression.set_max_dynamic_shared_size_bytes(100_000).unwrap();
    assert_eq!(by_symbol.attributes().max_dynamic_shared_size_bytes, 100_000);
}

/// caijit's caching allocator: a block freed while its stream's kernel still writes it goes
/// back to that stream only (the next allocation there reuses it at once); another stream,
/// or any stream once its stream is gone, gets other memory until that kernel has finished.
/// Checked by values: an array that shared the block would be overwritten by the slow kernel.
fn freed_memory_goes_to_its_stream_first(ctx: Arc<Context>) {
    let n = 1 << 16;
    let m = ctx.compile(&Program::new(AXPY)).unwrap();
    let slow = m.kernel("slow_fill").unwrap();
    let one = LaunchConfig::new([1, 1, 1], [256, 1, 1]);
    let (s, t) = (Arc::new(Stream::new(&ctx).unwrap()), Arc::new(Stream::new(&ctx).unwrap()));
    let warm = DeviceArray::zeros(&ctx, &[n], DType::F32, &s).unwrap();
    let slow_fill = |a: &DeviceArray, on: &Stream| {
        let (v, nn) = (Arg::Scalar { value: Num::Float(7.0), dtype: None }, Arg::Scalar { value: Num::Int(n as i128), dtype: None });
        let cycles = Arg::Scalar { value: Num::Int(100_000_000), dtype: None }; // ~50 ms
        slow.launch(&one, &[Arg::Array(a.as_view()), v, nn, cycles], Some(on), true).unwrap();
    };
    slow_fill(&warm, &s); // (loads the module: the next launches are asynchronous)
    s.synchronize().unwrap();
    let before = ctx.memory_stats();

    let a = DeviceArray::empty(&ctx, &[n], DType::F32, &s).unwrap();
    assert_eq!(ctx.memory_stats().allocated_bytes - before.allocated_bytes, 4 * n);
    let freed = a.ptr();
    slow_fill(&a, &s);
    drop(a);
    assert_eq!(ctx.memory_stats().allocated_bytes, before.allocated_bytes);
    let elsewhere = DeviceArray::zeros(&ctx, &[n], DType::F32, &t).unwrap();
    assert_ne!(elsewhere.ptr(), freed, "another stream took a block its stream's kernel still writes");
    let again = DeviceArray::empty(&ctx, &[n], DType::F32, &s).unwrap();
    assert_eq!(again.ptr(), freed, "the stream it was freed on reuses it at once");
    drop(again);

    // A stream that goes away leaves its blocks to whichever stream comes once its work is done.
    let gone = Arc::new(Stream::new(&ctx).unwrap());
    let b = DeviceArray::empty(&ctx, &[n], DType::F32, &gone).unwrap();
    slow_fill(&b, &gone);
    drop((b, gone));
    let after_gone = DeviceArray::zeros(&ctx, &[n], DType::F32, &t).unwrap();
    ctx.synchronize().unwrap(); // every slow kernel has written by now
    for (name, x) in [("elsewhere", &elsewhere), ("after_gone", &after_gone)] {
        let got = f32s(&x.to_bytes().unwrap());
        assert!(got.iter().all(|&v| v == 0.0), "{name} shares memory with a slow kernel: {:?}", &got[..4]);
    }
}

/// A graph of two launches captured through the public API, replayed with new arrays and a
/// new scalar (values checked against the same launches made eagerly), a bad rebinding
/// refused with the graph left as it was.
fn graphs_capture_once_and_replay_with_new_arguments(ctx: Arc<Context>) {
    use cai_runtime::graph::Capture;
    let s = Arc::new(Stream::new(&ctx).unwrap());
    let n = 4096;
    let m = ctx.compile(&Program::new(AXPY).name_expression("axpy<float>")).unwrap();
    let (axpy, copy) = (m.kernel("axpy<float>").unwrap(), m.kernel("copy").unwrap());
    // One seed: the eager twins of the rebound arrays start from the same values.
    let base = seed();
    let array = |k: u64| DeviceArray::from_bytes(&ctx, &[n], DType::F32, &bytes(&randoms(n, base + k)), &s).unwrap();
    let (x, y, t) = (array(0), array(1), array(2));
    let (xv, yv, tv) = (x.view(), y.view(), t.view());
    let cfg = LaunchConfig::for_elements(n, 256);
    let count = Arg::Scalar { value: Num::Int(n as i128), dtype: None };
    s.synchronize().unwrap();
    // y = a * x + y; t = y
    let capture = Capture::begin(&ctx).unwrap();
    capture.input("x", &xv).unwrap();
    capture.input("y", &yv).unwrap();
    let a = capture.scalar("a", Arg::scalar(2.0f32)).unwrap();
    axpy.launch(&cfg, &[a.arg(), Arg::Array(&xv), Arg::Array(&yv), count], None, true).unwrap();
    copy.launch(&cfg, &[Arg::Array(&yv), Arg::Array(&tv), count], None, true).unwrap();
    let mut g = capture.end().unwrap();
    let kernels: Vec<&str> = g.kernels().collect();
    assert_eq!(kernels.len(), 2, "{kernels:?}");
    assert!(kernels[0].starts_with("axpy") && kernels[1] == "copy", "{kernels:?}");
    assert_eq!(g.inputs().collect::<Vec<_>>(), ["x", "y", "a"]);

    let (x2, y2) = (array(3), array(4));
    let (ex, ey, et) = (array(3), array(4), array(5));
    let (x2v, y2v) = (x2.view(), y2.view());
    let (exv, eyv, etv) = (ex.view(), ey.view(), et.view());
    for (i, alpha) in [0.5f32, -3.0, 7.25].into_iter().enumerate() {
        g.replay(&[("x", Arg::Array(&x2v)), ("y", Arg::Array(&y2v)), ("a", Arg::scalar(alpha))], Some(&s), true).unwrap();
        axpy.launch(&cfg, &[Arg::scalar(alpha), Arg::Array(&exv), Arg::Array(&eyv), count], Some(&s), true).unwrap();
        copy.launch(&cfg, &[Arg::Array(&eyv), Arg::Array(&etv), count], Some(&s), true).unwrap();
        assert_eq!(y2.to_bytes().unwrap(), ey.to_bytes().unwrap(), "replay {i}");
        assert_eq!(t.to_bytes().unwrap(), et.to_bytes().unwrap(), "replay {i}: the copy wrote the captured `t`");
    }
    // A wrong dtype is refused, naming the input and the parameter; nothing changed.
    let wrong = ArrayView::contiguous(x2.ptr(), &[n / 2], DType::F64, false).unwrap();
    let e = g.replay(&[("x", Arg::Array(&wrong))], Some(&s), true).unwrap_err().to_string();
    assert!(e.contains("graph input `x`") && e.contains("float64"), "{e}");
    let e = g.replay(&[("z", Arg::Array(&x2v))], Some(&s), true).unwrap_err().to_string();
    assert!(e.contains("no input `z`"), "{e}");
    g.replay(&[], Some(&s), true).unwrap();
    axpy.launch(&cfg, &[Arg::scalar(7.25f32), Arg::Array(&exv), Arg::Array(&eyv), count], Some(&s), true).unwrap();
    assert_eq!(y2.to_bytes().unwrap(), ey.to_bytes().unwrap());
    assert!(stats().graph_replays >= 4);
}
