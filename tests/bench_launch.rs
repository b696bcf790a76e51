//! Per-launch host cost of a 3-array + 1-scalar launch through caijit (no foreign
//! streams; one; three) beside a raw cudarc launch of the same CUBIN, in one run.
//!
//! `cargo test --test bench_launch` only checks that it can run; on a GPU machine run the
//! binary with `--bench` (scripts/gpu-run.sh --bench does).
//!
//! host µs = median over 100 batches of 200 launches without synchronising;
//! sustained µs = 20,000 launches then one synchronisation. The paths are measured in
//! ROUNDS interleaved rounds and each figure is the median over rounds (the ratio to raw
//! cudarc: the median of the per-round ratios), because the host's speed drifts by more
//! than the differences measured here.

use std::sync::Arc;
use std::time::Instant;

use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::compile::{Image, Program};
use cai_runtime::dispatch::Dispatcher;
use cai_runtime::launch::{Arg, LaunchConfig, Num};
use cai_runtime::runtime::{Context, Stream};
use cai_runtime::stats::stats;

const SRC: &str = r#"extern "C" __global__ void empty3(const float* a, const float* b, float* c, int n) {}"#;
const N: usize = 1 << 10;

fn measure(mut launch: impl FnMut(), sync: impl Fn()) -> (f64, f64) {
    for _ in 0..2000 {
        launch();
    }
    sync();
    let mut batches = Vec::with_capacity(100);
    for _ in 0..100 {
        let t0 = Instant::now();
        for _ in 0..200 {
            launch();
        }
        batches.push(t0.elapsed().as_secs_f64() / 200.0);
        sync();
    }
    let t0 = Instant::now();
    for _ in 0..20_000 {
        launch();
    }
    sync();
    let sustained = t0.elapsed().as_secs_f64() / 20_000.0;
    batches.sort_by(|a, b| a.total_cmp(b));
    (batches[50] * 1e6, sustained * 1e6)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let ctx = match Context::new(0) {
        Ok(c) => c,
        Err(e) => {
            if caijit_integration::require_gpu() {
                panic!("CAIJIT_REQUIRE_GPU=1 but no CUDA device: {e}");
            }
            println!("SKIPPED: bench_launch needs a CUDA device: {e}");
            return;
        }
    };
    if !bench {
        println!("bench_launch: pass --bench to measure");
        return;
    }
    let module = ctx.compile(&Program::new(SRC)).unwrap();
    let k = module.kernel("empty3").unwrap();
    let home = Arc::new(Stream::new(&ctx).unwrap());
    let foreign: Vec<Stream> = (0..3).map(|_| Stream::new(&ctx).unwrap()).collect();
    let bufs: Vec<_> = (0..3).map(|_| cai_runtime::array::DeviceArray::zeros(&ctx, &[N], DType::F32, &home).unwrap()).collect();
    home.synchronize().unwrap();
    let view =
        |i: usize, s: &Stream| ArrayView::contiguous(bufs[i].ptr(), &[N], DType::F32, false).unwrap().with_stream(Some(s.stream_ref()));
    let n = Arg::Scalar { value: Num::Int(N as i128), dtype: None };
    let cfg = LaunchConfig::new([1, 1, 1], [128, 1, 1]);
    let sync_all = || {
        home.synchronize().unwrap();
        for f in &foreign {
            f.synchronize().unwrap();
        }
    };
    let same = [view(0, &home), view(1, &home), view(2, &home)];
    let one = [view(0, &home), view(1, &home), view(2, &foreign[0])];
    let three = [view(0, &foreign[0]), view(1, &foreign[1]), view(2, &foreign[2])];
    fn arrays<'a>(v: &'a [ArrayView; 3], n: Arg<'a>) -> [Arg<'a>; 4] {
        [Arg::Array(&v[0]), Arg::Array(&v[1]), Arg::Array(&v[2]), n]
    }
    let (args_same, args_one, args_three) = (arrays(&same, n), arrays(&one, n), arrays(&three, n));
    let args_known = [Arg::ArrayOn(&same[0], 0), Arg::ArrayOn(&same[1], 0), Arg::ArrayOn(&same[2], 0), n];
    let caijit = |args: &[Arg<'_>]| k.launch(&cfg, args, Some(&home), true).map(drop).unwrap();
    // The same kernel through the dispatcher (instance looked up per launch, as Python does).
    let dispatcher = Dispatcher::new(Program::new(SRC), Some("empty3")).unwrap();
    let dispatched = |args: &[Arg<'_>]| dispatcher.launch(&cfg, args, Some(&home)).map(drop).unwrap();

    // Raw cudarc: the same CUBIN, cudarc's own slices and stream, event tracking off.
    let cubin = match &module.compiled().image {
        Image::Cubin(b) => b.clone(),
        Image::Ptx(p) => p.clone().into_bytes(),
    };
    let cctx = cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: single-stream use below; no slice is shared across streams.
    unsafe { cctx.disable_event_tracking() };
    let cstream = cctx.new_stream().unwrap();
    let cmod = cctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).unwrap();
    let f = cmod.load_function("empty3").unwrap();
    let (a, b, mut c) =
        (cstream.alloc_zeros::<f32>(N).unwrap(), cstream.alloc_zeros::<f32>(N).unwrap(), cstream.alloc_zeros::<f32>(N).unwrap());
    let nn = N as i32;
    let ccfg = cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    let mut raw = || {
        use cudarc::driver::PushKernelArg;
        let mut l = cstream.launch_builder(&f);
        l.arg(&a).arg(&b).arg(&mut c).arg(&nn);
        // SAFETY: empty3 takes three float pointers and an int, matching the args.
        unsafe { l.launch(ccfg) }.unwrap();
    };
    let raw_sync = || cstream.synchronize().unwrap();

    const ROUNDS: usize = 5;
    let names = [
        "caijit, no foreign stream (device from the pointer)",
        "caijit, no foreign stream, device known",
        "caijit, one foreign stream",
        "caijit, three foreign streams",
        "caijit through the dispatcher, no foreign stream",
        "raw cudarc launch_builder",
    ];
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); names.len()];
    for _ in 0..ROUNDS {
        runs[0].push(measure(|| caijit(&args_same), sync_all));
        runs[1].push(measure(|| caijit(&args_known), sync_all));
        runs[2].push(measure(|| caijit(&args_one), sync_all));
        runs[3].push(measure(|| caijit(&args_three), sync_all));
        runs[4].push(measure(|| dispatched(&args_same), sync_all));
        runs[5].push(measure(&mut raw, raw_sync));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!("\n## Rust launch cost, 3 arrays + 1 int, empty kernel ({}), median of {ROUNDS} interleaved rounds", ctx.name());
    println!("| path | host µs | sustained µs | host vs raw cudarc |");
    println!("|---|---|---|---|");
    for (name, r) in names.iter().zip(&runs) {
        let ratio = median(r.iter().zip(&runs[5]).map(|(m, base)| m.0 / base.0).collect());
        let (host, sus) = (median(r.iter().map(|m| m.0).collect()), median(r.iter().map(|m| m.1).collect()));
        println!("| {name} | {host:.2} | {sus:.2} | {ratio:.2}x |");
    }
    let per_stream = |i: usize, streams: f64| median(runs[i].iter().zip(&runs[0]).map(|(m, base)| (m.0 - base.0) / streams).collect());
    println!("\nper foreign stream: {:.2} µs with one, {:.2} µs each with three", per_stream(2, 1.0), per_stream(3, 3.0));
    let s = stats();
    println!(
        "\ncounters: launches={} waits={} reverse_waits={} host_syncs={} events_created={}",
        s.launches, s.waits, s.reverse_waits, s.host_syncs, s.events_created
    );
}
