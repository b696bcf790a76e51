//! Tests of `compile` in a build without NVRTC.

use super::*;

/// A build without the `nvrtc` feature refuses to compile, naming the instance and the
/// way out (a bundle, or the feature), and looks for no NVRTC.
#[test]
fn a_build_without_nvrtc_refuses_to_compile_naming_the_instance() {
    let program = Program::new("template <typename T> __global__ void k(T* x) {}").name("refused.cu").name_expression("k<float>");
    let Err(Error::Bundle(message)) = compile(&program, Arch(90)) else { panic!("compiled without NVRTC") };
    for part in [
        "this build of cai-runtime has no NVRTC (the `nvrtc` feature is off)",
        "refused.cu (k<float>) for sm_90",
        "Bundle::from_bytes",
        "or enable the feature",
    ] {
        assert!(message.contains(part), "{part:?} is not in: {message}");
    }
    let Err(Error::CudaNotAvailable(why)) = toolkit() else { panic!("a toolkit without NVRTC") };
    assert!(why.contains("the `nvrtc` feature is off"), "{why}");
    let e = bake::bake(&[program], &bake::BakeOptions::new(vec![Arch(90)])).unwrap_err().to_string();
    assert!(e.contains("the `nvrtc` feature is off"), "{e}");
    assert!(!std::fs::read_to_string("/proc/self/maps").unwrap().contains("libnvrtc"), "NVRTC was loaded");
}
