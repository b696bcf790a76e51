//! Shared fixtures of the cross-crate tests.

use std::path::PathBuf;

/// The repository's `kernels/` directory (`CAIJIT_KERNELS_DIR` where test binaries run
/// away from the checkout they were built in, as on the GPU machine).
pub fn kernels_dir() -> PathBuf {
    std::env::var_os("CAIJIT_KERNELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kernels"))
}

/// Every `.cu` file under `kernels/`.
pub fn kernel_sources() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "cu") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&kernels_dir(), &mut out);
    out.sort();
    out
}

/// Point this test process's disk cache at a temporary directory, once: every test of a
/// binary that compiles through the default caches calls it first (no test is compiling
/// while it is set), so that tests never write into the user's cache.
pub fn private_disk_cache() {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::env::set_var("CAIJIT_CACHE_DIR", dir.path());
        dir
    });
}

/// Compile options that compile every time: no memory cache, no disk cache.
pub fn fresh() -> cai_runtime::compile::CompileOptions {
    let mut o = cai_runtime::compile::CompileOptions::default();
    o.disk_cache = Some(None);
    o.skip_memory_cache = true;
    o
}

/// Compile options with the memory cache only (no disk cache).
pub fn memory_only() -> cai_runtime::compile::CompileOptions {
    let mut o = cai_runtime::compile::CompileOptions::default();
    o.disk_cache = Some(None);
    o
}

/// Compile options with the disk cache in `cache` and no memory cache.
pub fn through_disk(cache: &std::path::Path) -> cai_runtime::compile::CompileOptions {
    let mut o = cai_runtime::compile::CompileOptions::default();
    o.disk_cache = Some(Some(cai_runtime::compile::DiskCache::at(cache)));
    o.skip_memory_cache = true;
    o
}

/// Device 0's context, or why there is none (for [`run_gpu_tests`]).
pub fn gpu_context() -> Result<std::sync::Arc<cai_runtime::runtime::Context>, cai_runtime::Error> {
    cai_runtime::runtime::device_count()?;
    cai_runtime::runtime::Context::new(0)
}

/// A small deterministic generator (fresh inputs per test, no zeros).
pub fn randoms(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0 + 0.001
        })
        .collect()
}

/// A seed that differs per run.
pub fn seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}

/// Little-endian bytes of f32s, and back.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

/// Whether a GPU test must fail instead of skipping (`CAIJIT_REQUIRE_GPU=1`).
pub fn require_gpu() -> bool {
    std::env::var("CAIJIT_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// A GPU test: it gets device 0's context and panics on a failure.
pub type GpuTest = (&'static str, fn(std::sync::Arc<cai_runtime::runtime::Context>));

/// The `main` of a GPU test binary (`harness = false`, through [`gpu_main!`]): runs the tests
/// as libtest would (filters, `--list`, `--exact`, `--test-threads`), each on device 0.
/// Where there is no device each test is reported *ignored*, with the reason, or fails with
/// it under `CAIJIT_REQUIRE_GPU=1`. (libtest itself cannot skip at run time.) The tests run
/// one at a time unless `--test-threads` says otherwise: they share device 0's context and
/// caijit's counters, whose changes several of them check (memory held, stream waits, host
/// synchronisations), and a test beside them would change those too.
pub fn run_gpu_tests(tests: &[GpuTest]) -> std::process::ExitCode {
    use libtest_mimic::{Completion, Trial};
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads.get_or_insert(1);
    private_disk_cache();
    // The reason's first clause (the whole message lists every library tried).
    let gpu = gpu_context().map_err(|e| e.to_string().split(" (tried").next().unwrap_or_default().to_string());
    let trials = tests
        .iter()
        .map(|&(name, test)| {
            let gpu = gpu.clone();
            Trial::ignorable_test(name, move || match gpu {
                Ok(ctx) => {
                    test(ctx);
                    Ok(Completion::Completed)
                }
                Err(why) if require_gpu() => Err(format!("CAIJIT_REQUIRE_GPU=1 but there is no CUDA device: {why}").into()),
                Err(why) => Ok(Completion::ignored_with(format!("no CUDA device: {why}"))),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// `fn main` running the named test functions (each `fn(Arc<Context>)`) through
/// [`run_gpu_tests`].
#[macro_export]
macro_rules! gpu_main {
    ($($test:ident),+ $(,)?) => {
        fn main() -> std::process::ExitCode {
            $crate::run_gpu_tests(&[$((stringify!($test), $test as fn(_))),+])
        }
    };
}

/// The program the dispatch tests launch (`gpu_dispatch`) and select instances of without a
/// GPU (`dispatch`): a template with a default template argument, and an overload set.
pub const DISPATCH_SOURCE: &str = r#"
#include <caijit/caijit.cuh>
// T is deduced from the arguments; Acc is left to its default.
template <typename T, typename Acc = double>
__global__ void axpy(T a, const T* x, T* y, int n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) y[i] = (T)((Acc)a * (Acc)x[i] + (Acc)y[i]);
}
// An overload set: the array's dtype (and a typed scalar's type) picks one.
__global__ void scale(float* x, float a, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) x[i] *= a;
}
__global__ void scale(double* x, double a, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) x[i] *= a;
}
__global__ void scale(int* x, int a, long long n) {
    for (long long i = caijit::global_thread(); i < n; i += caijit::grid_threads()) x[i] = x[i] * a + 1;
}
"#;
