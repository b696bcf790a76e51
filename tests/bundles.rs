//! Kernel bundles on the CPU: baking with NVRTC, the lookup table, lookups before compiling (by
//! bundle key and architecture), recording. Needs NVRTC (pip wheels in the virtualenv).
//! Bundles installed here are process-wide: each test uses sources of its own.

use cai_runtime::bundle::{self, Bundle};
use cai_runtime::cai::DType;
use cai_runtime::compile::bake::{bake, BakeOptions};
use cai_runtime::compile::{bundle_key, compile_with, family_key, read_manifest, record_to, Arch, CacheSource, Image, Program, OPS};
use cai_runtime::dispatch::{Dispatcher, TemplateArg};
use caijit_integration::fresh;

const AXPY: &str = r#"
template <typename T> __global__ void axpy_b(T a, const T* x, T* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale_b(float* __restrict__ v, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] *= s;
}
"#;

/// Records into a manifest while alive. The manifest recorded into is one per process
/// ([`record_to`]): tests that record take turns, or one records into the other's manifest
/// and stops the other's recording when it ends.
struct Recording {
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Recording {
    fn to(path: std::path::PathBuf) -> Recording {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        record_to(Some(path));
        Recording { _turn: turn }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        record_to(None);
    }
}

fn bake_for(programs: &[Program], archs: &[u32], ptx: bool) -> Bundle {
    let options = BakeOptions::new(archs.iter().map(|&a| Arch(a)).collect()).ptx(ptx).jobs(2);
    let bytes = bake(programs, &options).unwrap();
    Bundle::from_vec(bytes, "test.caijit").unwrap()
}

#[test]
fn a_baked_program_is_found_by_key_and_architecture_and_matches_a_compilation() {
    let program = Program::new(format!("// a_baked_program\n{AXPY}")).name_expression("axpy_b<float>").name_expression("axpy_b<double>");
    let compiled = compile_with(&program, Arch(90), &fresh()).unwrap();
    let bundle = bake_for(std::slice::from_ref(&program), &[80, 90], true);
    assert_eq!(bundle.archs(), &[80, 90]);
    let listing = bundle.describe().unwrap();
    assert!(listing.contains("kernel axpy_b<double>(double a @0+8, const double* x @8+8"), "{listing}");
    assert!(listing.contains("kernel scale_b(float* v @0+8, float s @8+4, int n @12+4)"), "{listing}");
    bundle::install(bundle).unwrap();

    let hit = compile_with(&program, Arch(90), &fresh()).unwrap();
    assert_eq!(hit.source, CacheSource::Bundle);
    assert_eq!(hit.kernels, compiled.kernels, "layouts from the bundle differ from a compilation's");
    assert!(matches!(&hit.image, Image::Cubin(b) if b.starts_with(b"\x7fELF")));
    // sm_86 runs the sm_80 CUBIN; sm_100 the PTX; sm_75 has nothing: NVRTC compiles it.
    assert_eq!(compile_with(&program, Arch(86), &fresh()).unwrap().source, CacheSource::Bundle);
    let newer = compile_with(&program, Arch(100), &fresh()).unwrap();
    assert!(matches!((&newer.image, newer.source), (Image::Ptx(p), CacheSource::Bundle) if p.contains(".target sm_90")));
    assert_eq!(compile_with(&program, Arch(75), &fresh()).unwrap().source, CacheSource::Compiled);
    // Fewer of its instances: served by the same program (its family).
    let double = Program::new(program.source.clone()).name_expression("axpy_b<double>");
    assert_eq!(compile_with(&double, Arch(90), &fresh()).unwrap().source, CacheSource::Bundle);
    // Another instance, other options: not in the bundle.
    assert_eq!(compile_with(&program.clone().name_expression("axpy_b<int>"), Arch(90), &fresh()).unwrap().source, CacheSource::Compiled);
    assert_eq!(compile_with(&program.clone().option("-DX=1"), Arch(90), &fresh()).unwrap().source, CacheSource::Compiled);
}

#[test]
fn programs_of_one_source_are_baked_as_one() {
    let source = format!("// merged\n{AXPY}");
    let programs: Vec<Program> = ["axpy_b<float>", "axpy_b<int>"]
        .iter()
        .map(|e| Program::new(source.clone()).name_expression(*e))
        .chain([Program::new(source.clone())])
        .collect();
    let bundle = bake_for(&programs, &[90], false);
    let [p] = bundle.programs().unwrap()[..] else { panic!("{:?}", bundle.describe()) };
    assert_eq!(p.name_expressions, ["axpy_b<float>", "axpy_b<int>"]);
    let names: Vec<&str> = p.kernel_names.iter().map(String::as_str).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    bundle::install(bundle).unwrap();
    // Each is served by the one program, with the kernels its own compilation has: the
    // other instance is in the binary, not among its kernels; the binary is named the same.
    let mut images = Vec::new();
    for program in &programs {
        let hit = compile_with(program, Arch(90), &fresh()).unwrap();
        assert_eq!(hit.source, CacheSource::Bundle);
        let mut unbundled = fresh();
        unbundled.skip_bundles = true;
        let compiled = compile_with(program, Arch(90), &unbundled).unwrap();
        let names = |c: &cai_runtime::compile::Compiled| c.kernels.iter().map(|k| k.lowered_name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&hit), names(&compiled), "{:?}", program.name_expressions);
        images.push(hit.key.split('/').next().unwrap().to_string());
    }
    assert!(images.iter().all(|i| *i == images[0]), "{images:?}");
}

#[test]
fn without_ptx_a_newer_device_is_not_served() {
    let program = Program::new(format!("// without_ptx\n{AXPY}")).name_expression("axpy_b<float>");
    let bundle = bake_for(std::slice::from_ref(&program), &[80], false);
    let p = bundle.program_at(0).unwrap();
    let e = bundle.image(p, 90).unwrap_err().to_string();
    assert!(e.contains("no code for this device's architecture sm_90") && e.contains("(it has: sm_80)"), "{e}");
    bundle::install(bundle).unwrap();
    // NVRTC is here: the program is compiled instead.
    assert_eq!(compile_with(&program, Arch(90), &fresh()).unwrap().source, CacheSource::Compiled);
}

#[test]
fn the_bundle_key_covers_headers_but_not_where_they_are() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for d in [&a, &b] {
        std::fs::write(d.path().join("k.cu"), "#include \"v.cuh\"\n__global__ void k(V* v) {}\n").unwrap();
        std::fs::write(d.path().join("v.cuh"), "typedef float V;\n").unwrap();
    }
    let key = |d: &tempfile::TempDir| bundle_key(&Program::from_file(d.path().join("k.cu")).unwrap()).unwrap().unwrap();
    assert_eq!(key(&a), key(&b));
    std::fs::write(b.path().join("v.cuh"), "typedef double V;\n").unwrap();
    assert_ne!(key(&a), key(&b));

    // However the include directory is spelled, as the program's or as an option.
    let inc = tempfile::tempdir().unwrap();
    std::fs::write(inc.path().join("v.cuh"), "typedef float V;\n").unwrap();
    let source = "#include \"v.cuh\"\n__global__ void k(V* v) {}\n";
    let d = inc.path().display();
    let spellings: Vec<Vec<String>> =
        vec![vec!["-I".into(), d.to_string()], vec![format!("-I{d}")], vec![format!("--include-path={d}")], vec![format!(" -I{d} ")]];
    let keys: Vec<String> = spellings
        .into_iter()
        .map(|options| bundle_key(&options.into_iter().fold(Program::new(source), Program::option)).unwrap().unwrap())
        .chain([bundle_key(&Program::new(source).include_dir(inc.path())).unwrap().unwrap()])
        .collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[test]
fn recording_writes_what_baking_reads() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.json");
    let program = Program::new(format!("// recording\n{AXPY}")).name_expression("axpy_b<float>").define("N", Some("4".into()));
    let recording = Recording::to(manifest.clone());
    let compiled = compile_with(&program, Arch(90), &fresh());
    // Twice: recorded once.
    let again = compile_with(&program, Arch(90), &fresh());
    drop(recording);
    compiled.unwrap();
    again.unwrap();
    let text = std::fs::read_to_string(&manifest).unwrap();
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("// recording")).collect();
    assert_eq!(ours.len(), 1, "{text}");
    assert!(ours[0].contains("\"caijit_manifest\":1") && ours[0].contains("axpy_b<float>"), "{}", ours[0]);
    let programs = read_manifest(&manifest).unwrap().programs;
    let read = programs.iter().find(|p| p.source == program.source).expect("the recorded program");
    assert_eq!((&read.name_expressions, &read.defines, &read.name), (&program.name_expressions, &program.defines, &program.name));
    assert_eq!(bundle_key(read).unwrap(), bundle_key(&program).unwrap());

    std::fs::write(&manifest, "{\"not\": 1}\n").unwrap();
    let e = read_manifest(&manifest).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("not a caijit manifest entry"), "{e}");
}

/// A tuning result recorded with its program is shipped in the bundle baked from the
/// manifest, found by its key and listed; one whose program was not recorded is not.
#[test]
fn recorded_tunings_are_shipped_with_their_programs() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.json");
    let program = Program::new(format!("// tuned\n{AXPY}")).name_expression("axpy_b<float>");
    let family = family_key(&program).unwrap().unwrap();
    let tuning = |family: &str, kernel: &str| {
        let key = format!("caijit-autotune/2\n{family}\n{kernel}\nNVIDIA H200 sm_90\n\"n=2^20\"\n\"block=128\"\n\"block=256\"");
        let timed = serde_json::json!({"Timed": {"median_us": 3.5, "min_us": 3.4, "max_us": 3.6, "samples": 5, "batch": 50}});
        bundle::ShippedTuning {
            record: serde_json::json!({"key": key, "candidates": ["block=128", "block=256"], "trials": [timed, timed], "best": 1}),
            key,
            family: family.to_string(),
            kernel: kernel.to_string(),
            device: "NVIDIA H200 sm_90".into(),
            tuning_key: "n=2^20".into(),
            winner: "block=256".into(),
            median_us: 3.5,
        }
    };
    let recording = Recording::to(manifest.clone());
    let compiled = compile_with(&program, Arch(90), &fresh());
    cai_runtime::compile::record_tuning(&tuning(&family, "axpy_b"));
    cai_runtime::compile::record_tuning(&tuning(&"0".repeat(64), "elsewhere"));
    drop(recording);
    compiled.unwrap();
    let read = read_manifest(&manifest).unwrap();
    assert_eq!(read.tunings.len(), 2);
    let options = BakeOptions::new(vec![Arch(90)]).jobs(2).tunings(read.tunings.clone());
    let b = Bundle::from_vec(bake(&read.programs, &options).unwrap(), "tuned.caijit").unwrap();
    cai_runtime::compile::verify_bundle(&b).unwrap();
    assert_eq!(b.tunings().unwrap(), &[tuning(&family, "axpy_b")]);
    assert_eq!(b.tuning(&read.tunings[0].key).unwrap(), Some(&read.tunings[0]));
    assert_eq!(b.tuning(&read.tunings[1].key).unwrap(), None);
    let listing = b.describe().unwrap();
    assert!(
        listing.contains("1 tunings") && listing.contains("kernel axpy_b on NVIDIA H200 sm_90, key \"n=2^20\": block=256 (3.500 µs)"),
        "{listing}"
    );

    std::fs::write(&manifest, "{\"caijit_manifest\": 1, \"tuning\": {\"key\": 3}}\n").unwrap();
    let e = read_manifest(&manifest).unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("not a tuning result"), "{e}");
}

/// What `bundle build --ops` bakes for `axpy` (its instances' programs of
/// `library_programs`, merged by the bake into one program of several instances) serves the
/// program an op compiles for it: its library kernel's dispatcher's explicit instance, found
/// by family.
#[test]
fn the_library_bundle_serves_the_explicit_instance_an_op_compiles() {
    let programs = cai_runtime::ops::library_programs().unwrap();
    let axpys: Vec<Program> =
        programs.iter().filter(|p| p.name == "elementwise.cu" && p.name_expressions[0].starts_with("axpy<")).cloned().collect();
    assert!(axpys.len() > 1 && axpys.iter().any(|p| p.name_expressions == ["axpy<float>"]), "{axpys:?}");
    let group = &axpys[0];
    // The program of `axpy`'s dispatcher in the library (`ops/library.rs`, checked there to be
    // this one).
    let source = OPS.iter().find(|(n, _)| *n == "elementwise").unwrap().1;
    let axpy = Dispatcher::new(Program::new(source).name("elementwise.cu"), Some("axpy")).unwrap();
    let f32s = [TemplateArg::Type(DType::F32)];
    let (program, name) = axpy.explicit_instance_for(&f32s).unwrap();
    assert_eq!((name.as_str(), program.name_expressions.as_slice()), ("axpy<float>", ["axpy<float>".to_string()].as_slice()));
    assert_eq!(family_key(&program).unwrap(), family_key(group).unwrap());

    let baked = bake_for(&axpys, &[90], false);
    // Merged by family, up to `MERGED_EXPRESSIONS` instances to a program: the instances on
    // the types of the C++ language in one family, each CUDA type's (`__half`, with its
    // header) in one of its own.
    let mut families = std::collections::BTreeMap::<String, usize>::new();
    for p in &axpys {
        *families.entry(family_key(p).unwrap().unwrap()).or_default() += 1;
    }
    let merged: usize = families.values().map(|n| n.div_ceil(cai_runtime::compile::bake::MERGED_EXPRESSIONS)).sum();
    assert_eq!(families.len(), 4);
    assert_eq!(baked.program_count(), merged, "merged by the bake");
    bundle::install(baked).unwrap();
    let chosen = axpy.select_instance(Arch(90), &f32s).unwrap();
    assert_eq!((chosen.name.as_str(), chosen.compiled.source), ("axpy<float>", CacheSource::Bundle));
    let types: Vec<&str> = chosen.info().unwrap().params.iter().map(|p| p.cpp_type.as_str()).collect();
    assert_eq!(types, ["float", "const float*", "const float*", "float*", "long long"]);
    // Another instance of the group, too.
    let f64s = axpy.select_instance(Arch(90), &[TemplateArg::Type(DType::F64)]).unwrap();
    assert_eq!((f64s.name.as_str(), f64s.compiled.source), ("axpy<double>", CacheSource::Bundle));
}

/// One instance is one program however it is asked for: a bundle baked for
/// `rr_half<__half>` from its file (`bundle build k.cu --instance 'rr_half<__half>'`, which
/// compiles what `specialize` does) serves the explicit instance by template arguments
/// (`Dispatcher::instance`), whose program also carries the header of `__half`.
#[test]
fn a_bundle_baked_for_an_instance_serves_it_asked_by_template_arguments() {
    let src = "// a_bundle_baked_for_an_instance\ntemplate <typename T> __global__ void rr_half(T* x) { x[0] = x[1]; }\n";
    let program = Program::new(src).name("rr_half.cu");
    let d = Dispatcher::new(program.clone(), Some("rr_half")).unwrap();
    let f16 = [TemplateArg::Type(DType::F16)];
    let (explicit, name) = d.explicit_instance_for(&f16).unwrap();
    let baked = cai_runtime::dispatch::instance_programs(&program, std::slice::from_ref(&name)).unwrap();
    assert_eq!(baked, std::slice::from_ref(&explicit));
    assert_eq!(baked[0], d.specialize("__half").unwrap().instance_for(&[]).unwrap().0);
    bundle::install(bake_for(&baked, &[90], false)).unwrap();
    let chosen = d.select_instance(Arch(90), &f16).unwrap();
    assert_eq!((chosen.name.as_str(), chosen.compiled.source), ("rr_half<__half>", CacheSource::Bundle));
}

/// A bundle stores its kernels' parameter layouts as the bake described them, and a hit
/// reads them back instead of describing the kernels again: they must be the layouts a
/// compilation describes, for every kind of parameter (typed, const and opaque pointers,
/// strided arrays, scalars of CUDA's types, structs by value), unnamed parameters and
/// `extern "C"` kernels. A program with a kernel caijit cannot launch stores none, and a hit
/// describes it again, with the reason.
#[test]
fn a_hit_reads_the_layouts_a_compilation_describes() {
    let src = r#"// a_hit_reads_the_layouts
#include <cuda_fp16.h>
#include <caijit/array.cuh>
#include <caijit/complex.cuh>
struct Pair { float lo; double hi; };
template <typename T, int N>
__global__ void every_kind(caijit::Array<const T, N> x, caijit::Array<T, 2> y, const T* __restrict__ c, T* o, void* opaque,
                           T s, __half h, caijit::complex<double> z, Pair p, bool flag, long long) {}
extern "C" __global__ void plain_c(unsigned char* bytes, float s, int n) {}
"#;
    let program = Program::new(src).name_expression("every_kind<float, 3>").name_expression("every_kind<int, 1>");
    let compiled = compile_with(&program, Arch(90), &fresh()).unwrap();
    assert!(compiled.unusable.is_empty() && compiled.kernels.len() == 3, "{:?}", compiled.kernels);
    let bundle = bake_for(std::slice::from_ref(&program), &[90], false);
    let p = bundle.programs().unwrap()[0];
    assert!(bundle.details(p).unwrap().layouts.is_some(), "the layouts are stored");
    bundle::install(bundle).unwrap();
    let hit = compile_with(&program, Arch(90), &fresh()).unwrap();
    assert_eq!(hit.source, CacheSource::Bundle);
    assert_eq!(hit.kernels, compiled.kernels);
    assert_eq!(hit.notes, compiled.notes);

    // A kernel past caijit's limits (nested too deep to demangle): no stored layouts; the
    // hit describes the program again and names the reason.
    let mut deep = "int".to_string();
    for _ in 0..260 {
        deep = format!("W<{deep}>");
    }
    let src = format!(
        "// a_hit_reads_the_layouts, unusable\ntemplate <class T> struct W {{}};\ntemplate <class T> __global__ void k(T* t) {{}}\n\
         template __global__ void k<{deep}>({deep}*);\nextern \"C\" __global__ void fine(float* o) {{}}\n"
    );
    let program = Program::new(src);
    let compiled = compile_with(&program, Arch(90), &fresh()).unwrap();
    assert_eq!(compiled.unusable.len(), 1);
    let bundle = bake_for(std::slice::from_ref(&program), &[90], false);
    assert!(bundle.details(bundle.programs().unwrap()[0]).unwrap().layouts.is_none());
    bundle::install(bundle).unwrap();
    let hit = compile_with(&program, Arch(90), &fresh()).unwrap();
    assert_eq!(hit.source, CacheSource::Bundle);
    assert_eq!((&hit.kernels, &hit.notes), (&compiled.kernels, &compiled.notes));
    let e = hit.kernel(&compiled.unusable[0].lowered_name).unwrap_err().to_string();
    assert!(e.contains("cannot demangle"), "{e}");
}

/// Two spellings of one instance recorded into one manifest (`sp<float>` and `sp< float >`)
/// are baked into one program, whose module has the kernel once: each spelling finds it,
/// as a compilation of that spelling alone does.
#[test]
fn each_spelling_of_one_instance_finds_it_in_a_merged_program() {
    let src = "// each_spelling\ntemplate <typename T> __global__ void sp(T* x) { x[0] = x[1]; }\n";
    let spelled = |e: &str| Program::new(src).name("sp.cu").name_expression(e);
    let programs = [spelled("sp<float>"), spelled("sp< float >"), spelled("sp<int>")];
    let bundle = bake_for(&programs, &[90], false);
    assert_eq!(bundle.program_count(), 1, "one family, merged");
    bundle::install(bundle).unwrap();
    for e in ["sp<float>", "sp< float >", "sp<int>"] {
        let hit = compile_with(&spelled(e), Arch(90), &fresh()).unwrap();
        assert_eq!(hit.source, CacheSource::Bundle);
        let k = hit.kernel(e).unwrap_or_else(|err| panic!("{e}: {err}"));
        assert_eq!(k.params[0].cpp_type, if e.contains("int") { "int*" } else { "float*" }, "{e}");
    }
    let hit = compile_with(&spelled("sp< float >"), Arch(90), &fresh()).unwrap();
    assert_eq!(hit.kernel("sp< float >").unwrap().lowered_name, hit.kernel("sp<float>").unwrap().lowered_name);
}
