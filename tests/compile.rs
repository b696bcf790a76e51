//! NVRTC compilation on the CPU: every kernel in kernels/, lowered names, parameter
//! layouts, template deduction, compile errors, the caches. Needs NVRTC (pip wheels in
//! the virtualenv suffice); CI has it, so these tests do not skip there.

use std::sync::Arc;

use cai_runtime::cai::DType;
use cai_runtime::compile::{compile, compile_with, Arch, CacheSource, CompileOptions, DiskCache, Program};
use cai_runtime::signature::{array_param_size, deduce, ArgType, ArrayLayout, ParamKind};
use cai_runtime::stats::stats;
use cai_runtime::Error;
use caijit_integration::{fresh, kernel_sources, memory_only, through_disk};

#[test]
fn nvrtc_is_found() {
    let tk = cai_runtime::compile::toolkit().expect("NVRTC must be installed for the CPU suite (scripts/setup.sh)");
    assert!(tk.version.0 >= 12, "{:?}", tk.version);
    assert!(tk.supported_archs.contains(&90));
    assert!(!tk.include_dirs.is_empty(), "CUDA headers (cuda_fp16.h) not found");
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    let sources = kernel_sources();
    assert!(sources.len() >= 2, "{sources:?}");
    for path in sources {
        for arch in ["sm_80", "sm_90"] {
            let mut p = Program::from_file(&path).unwrap();
            // Instantiate every template for float so that its code is generated too.
            for d in &p.declarations().kernels {
                if d.is_template() {
                    let args: Vec<String> =
                        d.template_params.iter().map(|t| if t.is_type { "float".to_string() } else { "2".to_string() }).collect();
                    p = p.name_expression(format!("{}<{}>", d.name, args.join(", ")));
                }
            }
            let c = compile_with(&p, Arch::parse(arch).unwrap(), &fresh()).unwrap_or_else(|e| panic!("{} for {arch}: {e}", path.display()));
            assert!(matches!(c.image, cai_runtime::compile::Image::Cubin(ref b) if b.starts_with(b"\x7fELF")));
            assert!(!c.kernels.is_empty(), "{}", path.display());
        }
    }
}

const MIXED: &str = r#"
#include <caijit/caijit.cuh>
struct Params { double scale; char flag; };
extern "C" __global__ void c_kernel(float* out, const double* in, int n, unsigned long long m) {}
__global__ void cpp_kernel(caijit::Array<const float, 2> a, Params p, __half h, bool b) {}
template <typename T, int N>
__global__ void tmpl(caijit::Array<T, N> a, const T* b, T s) {}
"#;

#[test]
fn lowered_names_and_layouts() {
    let p = Program::new(MIXED).name_expression("tmpl<double, 3>");
    let c = compile_with(&p, Arch(90), &fresh()).unwrap();

    let k = c.kernel("c_kernel").unwrap();
    assert_eq!(k.lowered_name, "c_kernel");
    assert_eq!(k.demangled, None);
    let kinds: Vec<_> = k.params.iter().map(|p| (p.kind.clone(), p.size, p.offset)).collect();
    assert_eq!(
        kinds,
        vec![
            (ParamKind::Pointer { dtype: Some(DType::F32), is_const: false }, 8, 0),
            (ParamKind::Pointer { dtype: Some(DType::F64), is_const: true }, 8, 8),
            (ParamKind::Scalar(DType::I32), 4, 16),
            (ParamKind::Scalar(DType::U64), 8, 24),
        ]
    );
    assert_eq!(k.params[0].name.as_deref(), Some("out"));

    let k = c.kernel("cpp_kernel").unwrap();
    assert!(k.lowered_name.starts_with("_Z10cpp_kernel"), "{}", k.lowered_name);
    assert_eq!(k.name_expression.as_deref(), Some("cpp_kernel"));
    let p0 = &k.params[0];
    assert_eq!(p0.kind, ParamKind::Array { dtype: Some(DType::F32), is_const: true, rank: 2 });
    assert_eq!((p0.size, p0.align, p0.offset), (array_param_size(2), 8, 0));
    let p1 = &k.params[1];
    assert_eq!(p1.kind, ParamKind::Struct { name: "Params".into() });
    assert_eq!((p1.size, p1.align, p1.offset), (16, 8, 40));
    assert_eq!((k.params[2].kind.clone(), k.params[2].offset), (ParamKind::Scalar(DType::F16), 56));
    assert_eq!((k.params[3].kind.clone(), k.params[3].offset), (ParamKind::Scalar(DType::Bool), 58));
    assert_eq!(k.param_buffer_size(), 59);

    let k = c.kernel("tmpl<double, 3>").unwrap();
    assert_eq!(k.demangled.as_deref(), Some("void tmpl<double, 3>(caijit::Array<double, 3>, double const*, double)"));
    assert_eq!(k.params[0].kind, ParamKind::Array { dtype: Some(DType::F64), is_const: false, rank: 3 });
    assert_eq!(k.params[1].offset, array_param_size(3));
    assert_eq!(k.params[2].kind, ParamKind::Scalar(DType::F64));
}

#[test]
fn template_deduction_then_instantiation() {
    let src =
        "template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) { int i = threadIdx.x; if (i < n) y[i] += a * x[i]; }";
    let p = Program::new(src);
    let decl = &p.declarations().kernels[0];
    for (dtype, cpp) in [(DType::F32, "float"), (DType::F64, "double"), (DType::F16, "__half"), (DType::I32, "int")] {
        let arr = ArgType::Array { dtype, rank: 1 };
        let instance = deduce(decl, &[ArgType::UntypedScalar, arr, arr, ArgType::UntypedScalar]).unwrap();
        let expr = instance.expression;
        assert_eq!(expr, format!("axpy<{cpp}>"));
        // The instance includes the headers its types need: the source includes none.
        let c = compile_with(&Program::new(src).including(&instance.headers).name_expression(&expr), Arch(90), &fresh()).unwrap();
        let k = c.kernel(&expr).unwrap();
        assert_eq!(k.params[0].kind, ParamKind::Scalar(dtype));
        assert_eq!(k.params[1].kind, ParamKind::Pointer { dtype: Some(dtype), is_const: true });
    }
}

#[test]
fn compile_errors_carry_the_log_with_line_numbers() {
    let src = "extern \"C\" __global__ void k(float* y) {\n  y[0] = undefined_name;\n}\n";
    let err = compile_with(&Program::new(src).name("broken.cu"), Arch(90), &fresh()).unwrap_err();
    match err {
        Error::Compile(e) => {
            assert!(e.log.contains("broken.cu(2)"), "{}", e.log);
            assert!(e.log.contains("undefined_name"), "{}", e.log);
            assert_eq!(e.nvrtc, None, "NVRTC ran; the program is what it refused");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn refused_options_keep_nvrtcs_result() {
    let err = compile_with(&Program::new("").option("--no-such-option"), Arch(90), &fresh()).unwrap_err();
    assert!(err.to_string().contains("--no-such-option"), "{err}");
    let Error::Compile(e) = err else { panic!("expected a compile error, got {err:?}") };
    assert!(e.message.contains("does not accept"), "{}", e.message);
}

#[test]
fn arch_options_are_rejected() {
    let err = compile_with(&Program::new("").option("-arch=sm_70"), Arch(90), &fresh()).unwrap_err();
    assert!(err.to_string().contains("-arch=sm_70"), "{err}");
}

#[test]
fn memory_and_disk_caches() {
    let dir = tempfile::tempdir().unwrap();
    let unique = format!("// {:?}\nextern \"C\" __global__ void k(int* y) {{ y[0] = 1; }}", std::time::SystemTime::now());
    let p = Program::new(unique);
    let disk = through_disk(dir.path());

    let first = compile_with(&p, Arch(90), &disk).unwrap();
    assert_eq!(first.source, CacheSource::Compiled);
    let second = compile_with(&p, Arch(90), &disk).unwrap();
    assert_eq!(second.source, CacheSource::Disk);
    assert_eq!(first.image, second.image);
    assert_eq!(first.kernels, second.kernels);

    // Corrupt the entry: it is recompiled and replaced, never loaded.
    let entry = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".cubin-entry"))
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();
    let before = stats().disk_cache_corrupt;
    let third = compile_with(&p, Arch(90), &disk).unwrap();
    assert_eq!(third.source, CacheSource::Compiled);
    assert!(stats().disk_cache_corrupt > before);
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Disk);
    // Truncated to half.
    std::fs::write(&entry, &std::fs::read(&entry).unwrap()[..mid]).unwrap();
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Compiled);

    // The memory cache answers with the same Arc.
    let mem = memory_only();
    let a = compile_with(&p, Arch(80), &mem).unwrap();
    let b = compile_with(&p, Arch(80), &mem).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    // A different architecture or option is a different key.
    assert_ne!(a.key, compile_with(&p, Arch(90), &mem).unwrap().key);
    assert_ne!(a.key, compile_with(&p.clone().option("-lineinfo"), Arch(80), &mem).unwrap().key);
}

#[test]
fn one_key_compiles_once_across_threads() {
    let unique = format!("// {:?} threads\nextern \"C\" __global__ void k(int* y) {{ y[0] = 2; }}", std::time::SystemTime::now());
    let p = Program::new(unique);
    let mem = memory_only();
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8).map(|_| s.spawn(|| compile_with(&p, Arch(90), &mem).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // One compilation made one `Compiled`; every thread got that very one.
    assert_eq!(results[0].source, CacheSource::Compiled);
    assert!(results.iter().all(|c| Arc::ptr_eq(c, &results[0])), "the same program compiled more than once");
}

#[test]
fn concurrent_writers_leave_one_good_entry() {
    let dir = tempfile::tempdir().unwrap();
    let unique = format!("// {:?} writers\nextern \"C\" __global__ void k(int* y) {{ y[0] = 3; }}", std::time::SystemTime::now());
    let p = Program::new(unique);
    let disk = through_disk(dir.path());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| compile_with(&p, Arch(90), &disk).unwrap());
        }
    });
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Disk);
}

#[test]
fn default_compile_uses_the_global_caches() {
    // The default path reads its disk cache from the environment: run this test again in a
    // child process whose CAIJIT_CACHE_DIR is a temporary directory (no test changes the
    // environment under its neighbours, and none writes into the user's ~/.cache).
    if std::env::var_os("CAIJIT_TEST_CHILD").is_none() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "default_compile_uses_the_global_caches", "--test-threads=1"])
            .env("CAIJIT_TEST_CHILD", "1")
            .env("CAIJIT_CACHE_DIR", &cache)
            .env_remove("CAIJIT_CACHE")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::read_dir(&cache).unwrap().next().is_some(), "the default compile wrote into CAIJIT_CACHE_DIR");
        return;
    }
    let p = Program::new("extern \"C\" __global__ void default_path(int* y) { y[0] = 4; }");
    let a = compile(&p, Arch(90)).unwrap();
    let b = compile(&p, Arch(90)).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

/// The device-side `caijit::Array<T, N>` and its Rust mirror agree member by member: a
/// probe kernel reads `shape[0]` and `strides[0]`, and its PTX says at which offsets.
#[test]
fn array_layout_matches_the_rust_mirror() {
    use cai_runtime::params::ArrayParam;
    let src = r#"
        #include <caijit/caijit.cuh>
        extern "C" __global__ void probe(caijit::Array<float, 3> a, long long* out) {
            out[0] = (long long)a.data; out[1] = a.shape[0]; out[2] = a.strides[0]; out[3] = a.strides[2];
        }"#;
    let c = compile_with(&Program::new(src), Arch(90), &fresh()).unwrap();
    let load_offsets: Vec<usize> = c
        .ptx
        .lines()
        .filter(|l| l.contains("ld.param") && l.contains("probe_param_0"))
        .map(|l| {
            let inside = &l[l.find('[').unwrap() + 1..l.find(']').unwrap()];
            inside.split('+').nth(1).map_or(0, |o| o.trim().parse().unwrap())
        })
        .collect();
    let shape0 = std::mem::offset_of!(ArrayParam<3>, shape);
    let strides0 = std::mem::offset_of!(ArrayParam<3>, strides);
    let strides2 = strides0 + 2 * 8;
    for expected in [std::mem::offset_of!(ArrayParam<3>, data), shape0, strides0, strides2] {
        assert!(load_offsets.contains(&expected), "no load at +{expected} in {load_offsets:?}\n{}", c.ptx);
    }
    assert_eq!((shape0, strides0), (8, 32));
    assert_eq!(std::mem::size_of::<ArrayParam<3>>(), c.kernel("probe").unwrap().params[0].size);
}

/// A derived Rust twin has exactly the size NVRTC compiled for the CUDA struct.
#[test]
fn derived_struct_twin_matches_the_compiled_parameter() {
    use cai_runtime::ParamBytes;
    #[derive(cai_runtime::KernelParams, Clone, Copy)]
    #[repr(C)]
    struct Twin {
        a: f64,
        b: i8,
        c: [f32; 3],
    }
    let src = "struct Twin { double a; signed char b; float c[3]; };\nextern \"C\" __global__ void k(Twin t, int* o) { o[0] = t.b; }";
    let c = compile_with(&Program::new(src), Arch(90), &fresh()).unwrap();
    let p = &c.kernel("k").unwrap().params[0];
    assert_eq!(p.kind, ParamKind::Struct { name: "Twin".into() });
    assert_eq!((p.size, p.align), (<Twin as ParamBytes>::SIZE, std::mem::align_of::<Twin>()));
}

/// Program names, options and name expressions never reach a file name: entries are named
/// by the key's hex digits, inside the cache directory.
#[test]
fn nothing_escapes_the_cache_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let disk = through_disk(&cache);
    let p = Program::new(format!("// {:?}\nextern \"C\" __global__ void k(int* y) {{ y[0] = 6; }}", std::time::SystemTime::now()))
        .name("../../../escape.cu")
        .option("-DPATH=../../x");
    compile_with(&p, Arch(90), &disk).unwrap();
    let outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside, [std::ffi::OsString::from("cache")]);
    for e in std::fs::read_dir(&cache).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let stem = name.strip_suffix(".cubin-entry").expect("only cache entries");
        assert!(stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    }
}

/// The cache directory is trusted only when this user owns it and nobody else can write it:
/// whoever can write it can forge an entry with a valid digest, whose code caijit would load.
#[test]
fn a_forged_entry_in_an_untrusted_directory_is_never_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let p = Program::new(format!("// {:?} forged\nextern \"C\" __global__ void k(int* y) {{ y[0] = 7; }}", std::time::SystemTime::now()));
    let disk = through_disk(&shared);
    // A good entry, written while the directory was private; then the directory is opened
    // to everyone (anybody could have replaced the entry since).
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Compiled);
    assert_eq!(std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777, 0o700, "created private");
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Disk);
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let why = DiskCache::at(&shared).trusted().unwrap_err();
    assert!(why.contains("777") && why.contains("others"), "{why}");
    assert_eq!(
        compile_with(&p, Arch(90), &disk).unwrap().source,
        CacheSource::Compiled,
        "an entry of a world-writable directory was loaded"
    );
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
    assert!(DiskCache::at(&shared).trusted().is_err(), "group-writable");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Disk, "private again (readable is fine)");
    // Owned by another user (root can make one here): refused whatever its mode.
    if std::process::Command::new("chown").arg("12345").arg(&shared).status().is_ok_and(|s| s.success()) {
        let why = DiskCache::at(&shared).trusted().unwrap_err();
        assert!(why.contains("owned by user 12345"), "{why}");
        assert_eq!(compile_with(&p, Arch(90), &disk).unwrap().source, CacheSource::Compiled);
    }
    // A file where the directory should be.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(DiskCache::at(&file).trusted().is_err());
}

// The key covers every header NVRTC can open (issue #18): a header changed anywhere it can
// be found recompiles; an unchanged one is served from the disk cache.

/// A kernel whose parameter layout follows the header's `T`.
const USES_T: &str = "extern \"C\" __global__ void k(T* x, T a) { x[0] = a; }\n";

/// `(where it came from, size of parameter 1)` of `k`.
fn compiled_t(program: &Program, options: &CompileOptions) -> (CacheSource, usize) {
    let c = compile_with(program, Arch(90), options).unwrap_or_else(|e| panic!("{e}"));
    (c.source, c.kernel("k").unwrap().params[1].size)
}

/// With `header` defining `T` as `float`, then `double`: each change compiles anew with the
/// header's layout, and each unchanged header is a disk hit.
fn assert_header_change_recompiles(program: &Program, header: &std::path::Path) {
    let cache = tempfile::tempdir().unwrap();
    let disk = through_disk(cache.path());
    std::fs::write(header, "typedef float T;\n").unwrap();
    assert_eq!(compiled_t(program, &disk), (CacheSource::Compiled, 4));
    assert_eq!(compiled_t(program, &disk), (CacheSource::Disk, 4));
    std::fs::write(header, "typedef double T;\n").unwrap();
    assert_eq!(compiled_t(program, &disk), (CacheSource::Compiled, 8), "a stale entry was served for {}", header.display());
    assert_eq!(compiled_t(program, &disk), (CacheSource::Disk, 8));
}

#[test]
fn a_header_in_the_parent_directory_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let file = dir.path().join("sub/k.cu");
    std::fs::write(&file, format!("#include \"../common.h\"\n{USES_T}")).unwrap();
    assert_header_change_recompiles(&Program::from_file(&file).unwrap(), &dir.path().join("common.h"));
}

#[test]
fn a_header_included_by_absolute_path_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("common.h");
    let program = Program::new(format!("#include \"{}\"\n{USES_T}", header.display()));
    assert_header_change_recompiles(&program, &header);
}

/// `Program::from_file("k.cu")`: a relative path without a directory, whose header is in
/// the current directory. The current directory belongs to the whole process (and so to
/// every test thread), so the case runs in a child process of this test binary started in a
/// temporary directory: `relative_cu_path_child` below, which does nothing unless started so.
#[test]
fn a_header_next_to_a_relative_cu_path_is_in_the_key() {
    let cwd = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "relative_cu_path_child", "--nocapture", "--test-threads=1"])
        .current_dir(cwd.path())
        .env("CAIJIT_TEST_RELATIVE_CU_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed") && stdout.contains("child ran"), "{stdout}\n{stderr}");
}

#[test]
fn relative_cu_path_child() {
    if std::env::var_os("CAIJIT_TEST_RELATIVE_CU_CHILD").is_none() {
        return;
    }
    std::fs::write("k.cu", format!("#include \"common.h\"\n{USES_T}")).unwrap();
    let program = Program::from_file("k.cu").unwrap();
    assert!(program.include_dirs.is_empty(), "{:?}", program.include_dirs);
    assert_header_change_recompiles(&program, std::path::Path::new("common.h"));
    println!("child ran");
}

#[test]
fn an_include_directory_given_as_an_option_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("inc");
    std::fs::create_dir(&inc).unwrap();
    let inc_s = inc.display().to_string();
    let forms: [&[String]; 4] = [
        &[format!("-I{inc_s}")],
        &["-I".into(), inc_s.clone()],
        &[format!("--include-path={inc_s}")],
        &["--include-path".into(), inc_s.clone()],
    ];
    for form in forms {
        let mut program = Program::new(format!("#include <common.h>\n{USES_T}"));
        for o in form {
            program = program.option(o.clone());
        }
        assert_header_change_recompiles(&program, &inc.join("common.h"));
    }
}

#[test]
fn a_header_of_any_extension_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let program = Program::new(format!("#include \"impl.inl\"\n{USES_T}")).include_dir(dir.path());
    assert_header_change_recompiles(&program, &dir.path().join("impl.inl"));
}

#[test]
fn a_header_among_thousands_of_files_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5000 {
        std::fs::write(dir.path().join(format!("unrelated_{i:04}.h")), "// nothing\n").unwrap();
    }
    // Sorted after all of them (the old walk of the directory stopped after 4096 files).
    let program = Program::new(format!("#include <zz_common.h>\n{USES_T}")).include_dir(dir.path());
    assert_header_change_recompiles(&program, &dir.path().join("zz_common.h"));
}

#[test]
fn a_computed_include_is_compiled_without_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let disk = through_disk(cache.path());
    let header = dir.path().join("common.h");
    let program = Program::new(format!("#define HEADER \"common.h\"\n#include HEADER\n{USES_T}")).include_dir(dir.path());
    std::fs::write(&header, "typedef float T;\n").unwrap();
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 4));
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 4));
    std::fs::write(&header, "typedef double T;\n").unwrap();
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 8));
    assert_eq!(std::fs::read_dir(cache.path()).map_or(0, |d| d.count()), 0, "an entry was written");
    assert!(stats().disk_cache_untrusted_keys >= 3, "counted");
}

/// One name meaning two files (`x.h` next to the program, and next to `sub/y.h`): NVRTC
/// matches in-memory headers by name, so the program is compiled from the file system
/// (each include finds its own `x.h`) and kept out of the disk cache.
#[test]
fn a_name_meaning_two_files_is_compiled_from_the_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("x.h"), "typedef float T;\n").unwrap();
    std::fs::write(dir.path().join("sub/y.h"), "#include \"x.h\"\n").unwrap();
    std::fs::write(dir.path().join("sub/x.h"), "typedef double U;\n").unwrap();
    let file = dir.path().join("k.cu");
    std::fs::write(&file, "#include \"x.h\"\n#include \"sub/y.h\"\nextern \"C\" __global__ void k(T* x, U a) { x[0] = a; }\n").unwrap();
    let program = Program::from_file(&file).unwrap();
    let disk = through_disk(cache.path());
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 8));
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 8));
    assert_eq!(std::fs::read_dir(cache.path()).map_or(0, |d| d.count()), 0, "an entry was written");
}

/// CUDA's own headers (and CCCL's) are found, hashed and handed to NVRTC in memory too: such
/// programs compile, and their keys are trusted with the disk cache.
#[test]
fn toolkit_headers_are_in_the_key_and_compile_from_memory() {
    let cache = tempfile::tempdir().unwrap();
    let disk = through_disk(cache.path());
    let src = "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n#include <cuda/std/type_traits>\n\
               typedef __half T;\n\
               extern \"C\" __global__ void k(T* x, T a) { static_assert(cuda::std::is_same_v<T, __half>); \
               cooperative_groups::this_thread_block().sync(); x[0] = a; }\n";
    let program = Program::new(src);
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 2));
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Disk, 2));
}

/// A key is computed on every `compile`, memory hits included: it stays cheap (the
/// toolkit's headers are read and hashed once per process, then only looked up). The bound
/// is loose (debug builds, parallel tests); `--release --nocapture` prints the real cost.
#[test]
fn a_memory_hit_with_cuda_headers_stays_cheap() {
    let mem = memory_only();
    // cooperative_groups.h reaches some 270 headers (CCCL's), fewer rounds.
    for (header, rounds) in [("", 1000), ("cuda_fp16.h", 1000), ("caijit/caijit.cuh", 1000), ("cooperative_groups.h", 100)] {
        let include = if header.is_empty() { String::new() } else { format!("#include <{header}>") };
        let p = Program::new(format!("{include}\n// {:?}\ntypedef float T;\n{USES_T}", std::time::SystemTime::now()));
        compile_with(&p, Arch(90), &mem).unwrap();
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            assert_eq!(compile_with(&p, Arch(90), &mem).unwrap().source, CacheSource::Compiled);
        }
        let per_call = start.elapsed() / rounds;
        println!("a memory hit of a program including {}: {per_call:?}", if header.is_empty() { "no header" } else { header });
        assert!(per_call < std::time::Duration::from_millis(50), "{header}: {per_call:?} per memory hit");
    }
}

// Headers the scanner once missed (a directive spelled `%:` or with a trigraph, a probe of a
// name that is not a literal), a `_Pragma("once")` header under two names, a huge header.

/// Compiled twice with the disk cache, `header` changing in between (`before`, then
/// `after`): the second compile must not be a stale disk hit. Returns the layouts seen.
fn compile_around_a_change(program: &Program, header: &std::path::Path, before: Option<&str>, after: &str) -> [(CacheSource, usize); 2] {
    let cache = tempfile::tempdir().unwrap();
    let disk = through_disk(cache.path());
    match before {
        Some(text) => std::fs::write(header, text).unwrap(),
        None => _ = std::fs::remove_file(header),
    }
    let first = compiled_t(program, &disk);
    std::fs::write(header, after).unwrap();
    [first, compiled_t(program, &disk)]
}

#[test]
fn a_directive_spelled_with_a_digraph_is_in_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for src in [format!("%:include \"common.h\"\n{USES_T}"), format!("  %:  include <common.h>\n{USES_T}")] {
        let program = Program::new(src).include_dir(dir.path());
        assert_header_change_recompiles(&program, &dir.path().join("common.h"));
    }
}

#[test]
fn a_directive_spelled_with_a_trigraph_is_compiled_without_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("common.h");
    let program = Program::new(format!("??=include \"common.h\"\n{USES_T}")).include_dir(dir.path()).option("-std=c++14");
    let cache = tempfile::tempdir().unwrap();
    let disk = through_disk(cache.path());
    std::fs::write(&header, "typedef float T;\n").unwrap();
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 4));
    std::fs::write(&header, "typedef double T;\n").unwrap();
    assert_eq!(compiled_t(&program, &disk), (CacheSource::Compiled, 8));
    assert_eq!(std::fs::read_dir(cache.path()).map_or(0, |d| d.count()), 0, "an entry was written");
}

/// Creating the probed header changes the layout; no form of the probe may hide that.
#[test]
fn every_form_of_has_include_is_in_the_key_or_not_trusted() {
    let body = "\ntypedef double T;\n#else\ntypedef float T;\n#endif\n";
    let forms = [
        "#if __has_include(\"opt.h\")",
        "#if __has_include(<opt.h>)",
        "#define H \"opt.h\"\n#if __has_include(H)",
        "#if __has_include/**/(\"opt.h\")",
        "#if __has_include( /*x*/ \"opt.h\")",
        "#define P __has_include\n#if P(\"opt.h\")",
        "#define HAS(x) __has_include(x)\n#define OPT \"opt.h\"\n#if HAS(OPT)",
        "%:if __has_include(\"opt.h\")",
    ];
    for form in forms {
        let dir = tempfile::tempdir().unwrap();
        let program = Program::new(format!("{form}{body}{USES_T}")).include_dir(dir.path());
        let seen = compile_around_a_change(&program, &dir.path().join("opt.h"), None, "// here\n");
        assert_eq!(seen, [(CacheSource::Compiled, 4), (CacheSource::Compiled, 8)], "{form}");
    }
}

/// `_Pragma("once")` is `#pragma once`: a header so guarded and reached as `a.h` and
/// `../a.h` is compiled once (from the file system, as two in-memory names would be two files).
#[test]
fn a_pragma_operator_once_header_under_two_names_compiles() {
    for once in ["_Pragma(\"once\")", "_Pragma ( \"once\" )"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.h"), format!("{once}\ntypedef double T;\nstruct S {{ int x; }};\n")).unwrap();
        std::fs::write(dir.path().join("sub/b.h"), "#include \"../a.h\"\n").unwrap();
        let file = dir.path().join("k.cu");
        std::fs::write(&file, format!("#include \"a.h\"\n#include \"sub/b.h\"\n{USES_T}")).unwrap();
        let cache = tempfile::tempdir().unwrap();
        assert_eq!(compiled_t(&Program::from_file(&file).unwrap(), &through_disk(cache.path())), (CacheSource::Compiled, 8), "{once}");
    }
}

/// A header that claims a terabyte (sparse) is not read into memory, by caijit or by NVRTC
/// (which would run out of memory): the compile fails, naming the limit, and the process
/// survives.
#[test]
fn a_huge_header_does_not_abort_the_process() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::File::create(dir.path().join("big.h")).unwrap().set_len(1 << 40).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let program = Program::new(format!("#include \"big.h\"\ntypedef float T;\n{USES_T}")).include_dir(dir.path());
    let err = compile_with(&program, Arch(90), &through_disk(cache.path())).map(|c| c.source).unwrap_err();
    assert!(err.to_string().contains("larger than 64 MiB"), "{err}");
    assert_eq!(std::fs::read_dir(cache.path()).map_or(0, |d| d.count()), 0, "an entry was written");
}

/// `caijit::Array<T, N>`'s layout as Rust writes it ([`ArrayLayout`]) is the header's: for
/// each field of each rank a kernel reads only that field, and the PTX says at which offset
/// of the parameter it loads it; the parameters have the Rust size and alignment.
#[test]
fn the_array_layout_of_rust_is_the_headers() {
    let mut src = String::from("#include <caijit/array.cuh>\n");
    let mut expected = Vec::new();
    for n in 1..=8usize {
        let mut fields = vec![("data".to_string(), "(long long)a.data".to_string(), ArrayLayout::DATA)];
        for d in 0..n {
            fields.push((format!("shape{d}"), format!("a.shape[{d}]"), ArrayLayout::extent(d)));
            fields.push((format!("stride{d}"), format!("a.strides[{d}]"), ArrayLayout::stride(n, d)));
        }
        for (field, read, offset) in fields {
            let name = format!("r{n}_{field}");
            src += &format!("extern \"C\" __global__ void {name}(caijit::Array<double, {n}> a, long long* out) {{ *out = {read}; }}\n");
            expected.push((name, n, offset));
        }
    }
    let c = compile_with(&Program::new(src), Arch(90), &fresh()).unwrap();
    for (name, rank, offset) in expected {
        let p = &c.kernel(&name).unwrap().params[0];
        assert_eq!((p.size, p.align), (array_param_size(rank), ArrayLayout::ALIGN), "{name}");
        let at = |o: usize| if o == 0 { format!("[{name}_param_0]") } else { format!("[{name}_param_0+{o}]") };
        let loads: Vec<&str> = c.ptx.lines().filter(|l| l.contains("ld.param") && l.contains(&format!("{name}_param_0"))).collect();
        assert!(loads.iter().any(|l| l.contains(&at(offset))), "{name}: the header has it elsewhere than offset {offset}: {loads:?}");
    }
}

// A trusted compilation gives NVRTC no way to read a byte the key did not cover (issue #26):
// every header in memory, no search path of its own; what it still asks for is compiled
// again untrusted and never cached.

/// `-I`, `--include-path` and the pre-include options, in every spelling NVRTC accepts.
const INCLUDE_SPELLINGS: [&[&str]; 5] = [&["-I{}"], &["-I", "{}"], &["-I={}"], &["--include-path={}"], &["--include-path", "{}"]];
const PRE_INCLUDE_SPELLINGS: [&[&str]; 4] = [&["-include", "{}"], &["-include={}"], &["--pre-include={}"], &["--pre-include", "{}"]];

fn with_options(program: Program, spelling: &[&str], value: &str) -> Program {
    spelling.iter().fold(program, |p, o| p.option(o.replace("{}", value)))
}

/// What NVRTC was given: no directory to search, no search next to the includer.
fn assert_no_search_path(c: &cai_runtime::compile::Compiled) {
    assert_eq!(c.untrusted, None, "{:?}", c.nvrtc_options);
    let o = &c.nvrtc_options;
    assert!(o.iter().all(|o| !o.starts_with("-I") && !o.starts_with("--include-path")), "{o:?}");
    assert!(o.iter().any(|o| o == "-no-source-include"), "{o:?}");
}

#[test]
fn every_include_path_spelling_is_applied_by_caijit_and_in_the_key() {
    for spelling in INCLUDE_SPELLINGS {
        let dir = tempfile::tempdir().unwrap();
        let program = with_options(Program::new(format!("#include <t.h>\n{USES_T}")), spelling, &dir.path().display().to_string());
        assert_header_change_recompiles(&program, &dir.path().join("t.h"));
        assert_no_search_path(&compile_with(&program, Arch(90), &fresh()).unwrap());
    }
}

#[test]
fn every_pre_include_spelling_is_applied_by_caijit_and_in_the_key() {
    for spelling in PRE_INCLUDE_SPELLINGS {
        let dir = tempfile::tempdir().unwrap();
        let header = dir.path().join("pre.h");
        let program = with_options(Program::new(USES_T), spelling, &header.display().to_string());
        assert_header_change_recompiles(&program, &header);
        let c = compile_with(&program, Arch(90), &fresh()).unwrap();
        assert_no_search_path(&c);
        // Handed in memory under the name given, and pre-included by it.
        assert!(c.nvrtc_options.contains(&format!("--pre-include={}", header.display())), "{:?}", c.nvrtc_options);
    }
    // Relative to the include directories (`-no-source-include` changes nothing for it).
    let dir = tempfile::tempdir().unwrap();
    let program = Program::new(USES_T).include_dir(dir.path()).option("-no-source-include").option("-include=cfg.h");
    assert_header_change_recompiles(&program, &dir.path().join("cfg.h"));
}

/// A header caijit's search does not find but NVRTC's does (next to the program's name, as
/// NVRTC knows it): the trusted compile fails, the untrusted one succeeds, and its result
/// is neither stored on disk nor served from memory after the header changes.
#[test]
fn a_header_only_nvrtc_finds_is_compiled_again_untrusted_and_never_cached() {
    let (src, nvrtc_side, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let header = nvrtc_side.path().join("stray.h");
    let mut program = Program::new(format!("#include \"stray.h\"\n{USES_T}")).name(nvrtc_side.path().join("k.cu").display().to_string());
    program.source_dir = Some(src.path().to_path_buf());
    let mut both = CompileOptions::default();
    both.disk_cache = Some(Some(DiskCache::at(cache.path())));
    let before = stats();
    std::fs::write(&header, "typedef float T;\n").unwrap();
    let c = compile_with(&program, Arch(90), &both).unwrap();
    assert_eq!((c.source, c.kernel("k").unwrap().params[1].size), (CacheSource::Compiled, 4));
    assert!(c.untrusted.as_deref().is_some_and(|w| w.contains("stray.h")), "{:?}", c.untrusted);
    std::fs::write(&header, "typedef double T;\n").unwrap();
    assert_eq!(compiled_t(&program, &both), (CacheSource::Compiled, 8), "a stale result was served");
    assert_eq!(std::fs::read_dir(cache.path()).map_or(0, |d| d.count()), 0, "an entry was written");
    let after = stats();
    assert!(after.trusted_fallbacks >= before.trusted_fallbacks + 2, "{after:?}");
    assert!(after.untrusted_compiles >= before.untrusted_compiles + 2, "{after:?}");
    // Found by caijit too, it is trusted again.
    std::fs::write(src.path().join("stray.h"), "typedef double T;\n").unwrap();
    assert_no_search_path(&compile_with(&program, Arch(90), &both).unwrap());
}

/// An untrusted program (a computed include) is not kept in memory: a header edited in a
/// long-running process compiles anew.
#[test]
fn an_untrusted_program_is_not_served_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let program = Program::new(format!("#define HEADER \"cfg.h\"\n#include HEADER\n{USES_T}")).include_dir(dir.path());
    let memory = memory_only();
    std::fs::write(dir.path().join("cfg.h"), "typedef float T;\n").unwrap();
    let before = compile_with(&program, Arch(90), &memory).unwrap();
    assert_eq!((before.source, before.kernel("k").unwrap().params[1].size), (CacheSource::Compiled, 4));
    std::fs::write(dir.path().join("cfg.h"), "typedef double T;\n").unwrap();
    let c = compile_with(&program, Arch(90), &memory).unwrap();
    assert_eq!((c.source, c.kernel("k").unwrap().params[1].size), (CacheSource::Compiled, 8));
    assert!(c.untrusted.as_deref().is_some_and(|w| w.contains("HEADER")), "{:?}", c.untrusted);
    // A context's modules are cached by key: another binary has another key.
    assert_ne!(before.key, c.key);
}

/// NVRTC's automatic PCH reuses, within a process, a precompiled header made from a header's
/// old contents: caijit never passes it on, so an edited header compiles to its new types.
#[test]
fn automatic_pch_options_are_not_passed_to_nvrtc() {
    let (dir, pch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let body: String = (0..2000).map(|i| format!("__device__ inline int f{i}() {{ return {i}; }}\n")).collect();
    let program = Program::new(format!("#include <big.h>\n{USES_T}"))
        .include_dir(dir.path())
        .option("-pch")
        .option(format!("--pch-dir={}", pch.path().display()));
    let memory = memory_only();
    std::fs::write(dir.path().join("big.h"), format!("{body}typedef float T;\n")).unwrap();
    assert_eq!(compiled_t(&program, &memory), (CacheSource::Compiled, 4));
    std::fs::write(dir.path().join("big.h"), format!("{body}typedef double T;\n")).unwrap();
    let c = compile_with(&program, Arch(90), &memory).unwrap();
    assert_eq!(c.kernel("k").unwrap().params[1].size, 8, "NVRTC's stale PCH was used");
    assert_no_search_path(&c);
    assert!(c.nvrtc_options.iter().all(|o| !o.contains("pch")), "{:?}", c.nvrtc_options);
    // An explicit PCH file is NVRTC's to read: never trusted.
    let explicit = Program::new("extern \"C\" __global__ void k(float* x) { x[0] = 1.f; }\n")
        .option(format!("-create-pch={}", pch.path().join("x.pch").display()));
    let c = compile_with(&explicit, Arch(90), &memory).unwrap();
    assert!(c.untrusted.as_deref().is_some_and(|w| w.contains("-create-pch")), "{:?}", c.untrusted);
}

/// A FIFO header is an error naming it, at once (NVRTC would block opening it forever).
#[test]
fn a_fifo_header_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.h");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let program = Program::new(format!("#include \"fifo.h\"\n{USES_T}")).include_dir(dir.path());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || _ = tx.send(compile_with(&program, Arch(90), &fresh()).map(|_| ()).map_err(|e| e.to_string())));
    let e = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the compile hung on a FIFO").unwrap_err();
    assert!(e.contains(&fifo.display().to_string()) && e.contains("FIFO"), "{e}");
}
