//! Diagnostics builds on the CPU (needs NVRTC, as tests/compile.rs): `-lineinfo` builds name
//! the source file's absolute path and are cached apart; bounds-checked debug instances
//! carry the bounds record and are cached apart. docs/debugging.md.

use cai_runtime::compile::{compile_with, Arch, Program};
use cai_runtime::kernel::BOUNDS_CHECK;
use caijit_integration::fresh;

const ARCH: Arch = Arch(90);

#[test]
fn a_lineinfo_build_names_the_absolute_source_path_and_has_its_own_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lineinfo_probe.cu");
    std::fs::write(&path, "extern \"C\" __global__ void probe(float* y, int n) {\n    y[threadIdx.x + n] = 1.f;\n}\n").unwrap();
    let plain = compile_with(&Program::from_file(&path).unwrap(), ARCH, &fresh()).unwrap();
    let lined = compile_with(&Program::from_file(&path).unwrap().lineinfo(), ARCH, &fresh()).unwrap();
    assert_ne!(plain.key, lined.key, "a line-info build must be cached apart");
    assert!(lined.nvrtc_options.iter().any(|o| o == "-lineinfo"), "{:?}", lined.nvrtc_options);
    let absolute = std::path::absolute(&path).unwrap().to_string_lossy().into_owned();
    let has = |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(has(lined.ptx.as_bytes(), &absolute) || has(lined.image.bytes(), &absolute), "the line table must name {absolute}");
    assert!(has(lined.ptx.as_bytes(), ".loc"), "no line table in the PTX");
    assert!(!has(plain.ptx.as_bytes(), ".loc"), "a plain build has no line table");
}

#[test]
fn a_debug_instance_carries_the_bounds_record_and_has_its_own_key() {
    let src = "#include <caijit/array.cuh>\n\
               template <typename T> __global__ void at(caijit::Array<T, 2> x, long long i, long long j) { x(i, j) = T(1); x[i] = T(2); }\n";
    let plain = compile_with(&Program::new(src).name_expression("at<float>"), ARCH, &fresh()).unwrap();
    let debug =
        compile_with(&Program::new(src).name_expression("at<float>").define(BOUNDS_CHECK, Some("1".into())), ARCH, &fresh()).unwrap();
    assert_ne!(plain.key, debug.key);
    assert!(debug.ptx.contains("caijit_bounds_record"), "the debug instance must define the record");
    assert!(!plain.ptx.contains("caijit_bounds_record"), "the plain instance must not check");
    // The debug instance's kernel has the same lowered name and parameters: it launches
    // with the same arguments.
    assert_eq!(plain.kernels[0].lowered_name, debug.kernels[0].lowered_name);
    assert_eq!(plain.kernels[0].params, debug.kernels[0].params);
}
