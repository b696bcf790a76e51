//! A Rust program that ships its CUDA kernels in a bundle and has no compiler: cai-runtime
//! without its `nvrtc` feature, a bundle embedded with `include_bytes!`, and a template
//! kernel (`kernels/axpy.cu`) launched on arrays of a `#[derive(CudaArrayInterface)]`
//! struct for float32 and float64, its instance deduced from the arguments (Numba-style,
//! through `cai_runtime::dispatch::Dispatcher`) and found in the bundle.
//!
//! `scripts/rust-bundle-example.sh` bakes the bundle, builds this and runs it. On a GPU it
//! checks every value on the host; `--inspect` (no GPU needed) only looks the instances up
//! and prints their parameters. Either way it ends by checking that no NVRTC library is
//! loaded. Exit status: 0 when everything matched, 1 otherwise.

use std::sync::Arc;

use cai_runtime::array::DeviceArray;
use cai_runtime::bundle::{self, Bundle};
use cai_runtime::cai::Element;
use cai_runtime::compile::{Arch, CacheSource, Program};
use cai_runtime::dispatch::Dispatcher;
use cai_runtime::launch::{Arg, LaunchConfig, Num};
use cai_runtime::runtime::{Context, Stream};
use cai_runtime::signature::ArgType;
use cai_runtime::CudaArrayInterface;

/// The bundle `build.rs` was pointed at (`CAIJIT_EXAMPLE_BUNDLE`).
static BUNDLE: &[u8] = include_bytes!(env!("CAIJIT_EXAMPLE_BUNDLE_PATH"));

/// The kernel's source and file name: with the compile options (none), what the bundle
/// key is made of, so they must be those the bundle was baked from.
const SOURCE: &str = include_str!("../kernels/axpy.cu");
const FILE_NAME: &str = "axpy.cu";

/// A vector in caijit's device memory; the derive gives it the CUDA Array Interface (its
/// dtype is the array's, its stream the one its data is ready on).
#[derive(CudaArrayInterface)]
struct Vector {
    #[cai(data)]
    data: DeviceArray,
    #[cai(shape)]
    len: usize,
    #[cai(stream)]
    stream: Option<u64>,
}

/// An element type this example launches `axpy` for.
trait Real: Element + Into<Num> + PartialEq + std::fmt::Debug {
    const NAME: &'static str;
    fn of(v: f64) -> Self;
    fn bytes(v: &[Self]) -> Vec<u8>;
    fn from_bytes(b: &[u8]) -> Vec<Self>;
    /// `a * x + y` as the device computes it. The example's `a` is a power of two, so the
    /// product is exact and a fused multiply-add rounds the same as the two operations.
    fn axpy(a: Self, x: Self, y: Self) -> Self;
}

macro_rules! real {
    ($t:ty, $name:literal, $n:literal) => {
        impl Real for $t {
            const NAME: &'static str = $name;
            fn of(v: f64) -> Self {
                v as $t
            }
            fn bytes(v: &[Self]) -> Vec<u8> {
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
            fn from_bytes(b: &[u8]) -> Vec<Self> {
                b.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; $n]))).collect()
            }
            fn axpy(a: Self, x: Self, y: Self) -> Self {
                a * x + y
            }
        }
    };
}
real!(f32, "float32", 4);
real!(f64, "float64", 8);

fn main() {
    let inspect_only = std::env::args().any(|a| a == "--inspect");
    let mut ok = match run(inspect_only) {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    };
    // What a build without NVRTC promises: no NVRTC library in the process.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    if maps.contains("libnvrtc") {
        println!("FAIL: a libnvrtc library is loaded in this process");
        ok = false;
    } else {
        println!("no libnvrtc in /proc/self/maps: this process never loaded NVRTC");
    }
    println!("{}", if ok { "rust-bundle example: OK" } else { "rust-bundle example: FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}

/// Load the bundle, then launch (or with `inspect_only`, only look up) both instances.
fn run(inspect_only: bool) -> cai_runtime::Result<bool> {
    let b = bundle::install(Bundle::from_bytes(BUNDLE)?)?;
    let archs: Vec<String> = b.archs().iter().map(|a| format!("sm_{a}")).collect();
    println!(
        "bundle: {} bytes, {} program(s), {}, NVRTC {} at baking",
        BUNDLE.len(),
        b.program_count(),
        archs.join(", "),
        b.nvrtc_version()
    );
    let axpy = Dispatcher::new(Program::new(SOURCE).name(FILE_NAME), Some("axpy"))?;
    if inspect_only {
        let arch = cai_runtime::kernel::inspection_arch()?;
        return Ok(inspect::<f32>(&axpy, arch)? & inspect::<f64>(&axpy, arch)?);
    }
    let ctx = Context::new(0)?;
    println!("device 0: {} ({})", ctx.name(), ctx.arch());
    let stream = Arc::new(Stream::new(&ctx)?);
    Ok(launch::<f32>(&axpy, &ctx, &stream, 2.0, 1 << 20)? & launch::<f64>(&axpy, &ctx, &stream, -0.5, 100_003)?)
}

/// The instance arguments of `T` deduce, for `arch`, and its parameters, from the bundle.
fn inspect<T: Real>(axpy: &Dispatcher, arch: Arch) -> cai_runtime::Result<bool> {
    let array = ArgType::Array { dtype: T::DTYPE, rank: 1 };
    let chosen = axpy.select(arch, &[ArgType::TypedScalar(T::DTYPE), array, array, ArgType::UntypedScalar])?;
    let params: Vec<String> =
        chosen.info()?.params.iter().map(|p| format!("{} {}", p.cpp_type, p.name.as_deref().unwrap_or("_"))).collect();
    let from_bundle = chosen.compiled.source == CacheSource::Bundle;
    println!(
        "{}: {}({}) for {arch}, from {}",
        T::NAME,
        chosen.name,
        params.join(", "),
        if from_bundle { "the bundle" } else { "a compiler" }
    );
    Ok(from_bundle)
}

/// `y = a * x + y` on `n` elements of `T` on the device, checked on the host.
fn launch<T: Real>(axpy: &Dispatcher, ctx: &Arc<Context>, stream: &Arc<Stream>, a: f64, n: usize) -> cai_runtime::Result<bool> {
    let xs: Vec<T> = (0..n).map(|i| T::of((i % 1013) as f64 * 0.25 - 100.0)).collect();
    let ys: Vec<T> = (0..n).map(|i| T::of((i % 97) as f64 / 3.0)).collect();
    let device = |v: &[T]| -> cai_runtime::Result<Vector> {
        let data = DeviceArray::from_bytes(ctx, &[n], T::DTYPE, &T::bytes(v), stream)?;
        Ok(Vector { data, len: n, stream: Some(stream.handle()) })
    };
    let (x, y) = (device(&xs)?, device(&ys)?);
    let (xv, yv) = (x.cai_view()?, y.cai_view()?);
    let a = T::of(a);
    let args = [Arg::scalar(a), Arg::Array(&xv), Arg::Array(&yv), Arg::scalar(n as i64)];
    axpy.launch(&LaunchConfig::for_elements(n, 256), &args, Some(stream))?;
    let instance = axpy.cached(ctx.ordinal(), &args).map(|k| k.instance().to_string()).unwrap_or_default();
    let got = T::from_bytes(&y.data.to_bytes()?);
    let wrong = (0..n).filter(|&i| got.get(i) != Some(&T::axpy(a, xs[i], ys[i]))).count();
    match (wrong, got.len() == n && y.data.dtype() == T::DTYPE) {
        (0, true) => println!("{}: {instance} on {n} elements: every value matches the host's", T::NAME),
        _ => println!("FAIL {}: {instance}: {wrong} of {n} values differ from the host's", T::NAME),
    }
    Ok(wrong == 0 && got.len() == n)
}
