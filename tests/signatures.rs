//! Issue #20, case by case: parameter types come from what NVRTC compiled (demangled
//! lowered names, probes for `extern "C"` kernels), cross-checked against the PTX; every
//! program NVRTC compiles has launchable kernels. CPU only (sm_90, the pip NVRTC).

use cai_runtime::cai::DType;
use cai_runtime::compile::{compile_with, Arch, Compiled, KernelInfo, Program};
use cai_runtime::signature::{deduce, ArgType, ParamKind};
use caijit_integration::fresh;

fn build(p: &Program) -> std::sync::Arc<Compiled> {
    compile_with(p, Arch(90), &fresh()).unwrap_or_else(|e| panic!("{e}"))
}

/// `(kind, size, offset)` of every parameter.
fn shape(k: &KernelInfo) -> Vec<(ParamKind, usize, usize)> {
    k.params.iter().map(|p| (p.kind.clone(), p.size, p.offset)).collect()
}

fn ptr(d: DType, is_const: bool) -> ParamKind {
    ParamKind::Pointer { dtype: Some(d), is_const }
}

const IFDEF: &str = r#"
#ifdef USE_INT
extern "C" __global__ void scale(int* x, int a, int n) { int i = threadIdx.x; if (i < n) x[i] *= a; }
#else
extern "C" __global__ void scale(float* x, float a, int n) { int i = threadIdx.x; if (i < n) x[i] *= a; }
#endif
"#;

#[test]
fn ifdef_branches_give_the_types_the_preprocessor_chose() {
    let k = build(&Program::new(IFDEF)).kernel("scale").unwrap().clone();
    assert_eq!(shape(&k), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::F32), 4, 8), (ParamKind::Scalar(DType::I32), 4, 12)]);
    // The two declarations name their parameters alike: the names are kept.
    assert_eq!(k.params.iter().map(|p| p.name.clone().unwrap_or_default()).collect::<Vec<_>>(), ["x", "a", "n"]);
    let c = build(&Program::new(IFDEF).define("USE_INT", None));
    assert_eq!(
        shape(c.kernel("scale").unwrap()),
        [(ptr(DType::I32, false), 8, 0), (ParamKind::Scalar(DType::I32), 4, 8), (ParamKind::Scalar(DType::I32), 4, 12)]
    );
}

#[test]
fn a_raw_string_with_a_fake_declaration_swallows_nothing() {
    let src = r#"
__device__ const char* help = R"txt(needs a 5" screen; see extern "C" __global__ void scale(int* x, int a, int n) )txt";
extern "C" __global__ void scale(float* x, float a, int n) {}
"#;
    let c = build(&Program::new(src));
    assert_eq!(c.kernel("scale").unwrap().params[1].kind, ParamKind::Scalar(DType::F32));
    assert!(c.notes.is_empty(), "{:?}", c.notes);
}

#[test]
fn namespaced_kernels_launch_by_plain_or_qualified_name() {
    let src = "namespace a { __global__ void k(float* x, int n) {} namespace b { __global__ void k(double* x) {} } }\n\
               namespace { __global__ void hidden(short s) {} }";
    let c = build(&Program::new(src));
    let k = c.kernel("a::k").unwrap();
    assert_eq!((k.qualified_name.as_str(), k.lowered_name.as_str()), ("a::k", "_ZN1a1kEPfi"));
    assert_eq!(shape(k), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::I32), 4, 8)]);
    assert_eq!(c.kernel("::a::k").unwrap().lowered_name, "_ZN1a1kEPfi");
    assert_eq!(shape(c.kernel("a::b::k").unwrap()), [(ptr(DType::F64, false), 8, 0)]);
    assert_eq!(c.kernel("hidden").unwrap().params[0].kind, ParamKind::Scalar(DType::I16));
    assert!(c.kernel("k").unwrap_err().to_string().contains("ambiguous"));
    // As a name expression (what `--instantiate a::k` and `caijit.kernel(src, "a::k")` do).
    let c = build(&Program::new(src).name_expression("a::k"));
    assert_eq!(c.kernel("a::k").unwrap().name_expression.as_deref(), Some("a::k"));
}

#[test]
fn a_comparison_in_a_default_template_argument_keeps_the_template_parameters() {
    let src = "template <int N, bool B = (N > 4)> __global__ void k(caijit::Array<float, N> a, int n) {}";
    let p = Program::new(format!("#include <caijit/array.cuh>\n{src}"));
    let d = &p.declarations().kernels[0];
    assert_eq!(d.template_params.len(), 2);
    let c = build(&p.name_expression("k<8>"));
    let k = c.kernel("k<8>").unwrap();
    assert_eq!(k.demangled.as_deref(), Some("void k<8, true>(caijit::Array<float, 8>, int)"));
    assert_eq!(
        shape(k),
        [(ParamKind::Array { dtype: Some(DType::F32), is_const: false, rank: 8 }, 136, 0), (ParamKind::Scalar(DType::I32), 4, 136)]
    );
}

#[test]
fn a_macro_made_extern_c_kernel_costs_nothing_and_launches_when_named() {
    let src = r#"
#define MAKE(T) extern "C" __global__ void k_##T(T* x, T a) { x[threadIdx.x] += a; }
MAKE(float)
MAKE(double)
extern "C" __global__ void plain(int* x) {}
"#;
    let c = build(&Program::new(src));
    assert_eq!(shape(c.kernel("plain").unwrap()), [(ptr(DType::I32, false), 8, 0)]);
    assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    assert!(c.notes[0].contains("k_double") && c.notes[0].contains("macro"), "{:?}", c.notes);
    let e = c.kernel("k_float").unwrap_err().to_string();
    assert!(e.contains("no kernel named") && e.contains("note:") && e.contains("k_float"), "{e}");
    // Named, its probe tells the compiler's types.
    let c = build(&Program::new(src).name_expression("k_float"));
    assert_eq!(shape(c.kernel("k_float").unwrap()), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::F32), 4, 8)]);
}

#[test]
fn a_macro_made_cpp_kernel_and_overloads_by_name_expression() {
    let src = r#"
#define MAKE(T) __global__ void k_##T(T* x, T a) { x[threadIdx.x] += a; }
MAKE(float)
__global__ void ov(double x, int n) {}
__global__ void ov(float x, int n) {}
"#;
    let p = Program::new(src).name_expression("k_float").name_expression("(void(*)(double, int))ov");
    let c = build(&p);
    assert_eq!(shape(c.kernel("k_float").unwrap()), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::F32), 4, 8)]);
    let k = c.kernel("(void(*)(double, int))ov").unwrap();
    assert_eq!(k.params[0].kind, ParamKind::Scalar(DType::F64));
    // By plain name: both overloads, for the launch's arguments to pick.
    let both = c.kernels_named("ov").unwrap();
    assert_eq!(both.len(), 2);
    let f = ArgType::TypedScalar(DType::F32);
    let fits: Vec<_> = both.iter().filter(|k| k.params.iter().zip([f, ArgType::UntypedScalar]).all(|(p, a)| p.kind.admits(&a))).collect();
    assert_eq!(fits.len(), 1);
    assert_eq!(fits[0].params[0].kind, ParamKind::Scalar(DType::F32));
}

#[test]
fn a_probe_for_a_kernel_the_preprocessor_removed_is_dropped() {
    let src = "#if 0\nextern \"C\" __global__ void gone(int x) {}\n#endif\nextern \"C\" __global__ void here(float* y) {}\n";
    let c = build(&Program::new(src));
    assert_eq!(shape(c.kernel("here").unwrap()), [(ptr(DType::F32, false), 8, 0)]);
    assert!(c.kernel("gone").is_err());
}

#[test]
fn default_template_arguments_are_deduced_around() {
    let src = "template <typename T, typename Acc = float, int BLOCK = 256> __global__ void k(const T* x, Acc* y, int n) {}";
    let p = Program::new(src);
    let d = p.declarations().kernels[0].clone();
    let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
    let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
    let i = deduce(&d, &[f64a, f32a, ArgType::UntypedScalar]).unwrap();
    assert_eq!(i.expression, "k<double, float>");
    let c = build(&p.clone().name_expression(&i.expression));
    let k = c.kernel(&i.expression).unwrap();
    assert_eq!(k.demangled.as_deref(), Some("void k<double, float, 256>(double const*, float*, int)"));
    // Only the non-deduced, defaulted one: left to the compiler.
    let i = deduce(&d, &[f64a, ArgType::Opaque, ArgType::UntypedScalar]).unwrap();
    assert_eq!(i.expression, "k<double>");
    assert!(build(&p.name_expression("k<double>")).kernel("k<double>").is_ok());
}

#[test]
fn kinds_that_were_read_as_structs_are_scalars() {
    let src = r#"
extern "C" __global__ void k(__grid_constant__ const int n, long unsigned int a, long long unsigned b, short unsigned c, float v[4],
                             unsigned char d, signed char e, long int f) {}
template <class T, int N> struct Array { T v[N]; };
__global__ void own(Array<float, 4> a, caijit::Array<const float, 1> b) {}
"#;
    let c = build(&Program::new(format!("#include <caijit/array.cuh>\n{src}")));
    let kinds: Vec<_> = c.kernel("k").unwrap().params.iter().map(|p| p.kind.clone()).collect();
    use ParamKind::Scalar;
    assert_eq!(
        kinds,
        [
            Scalar(DType::I32),
            Scalar(DType::U64),
            Scalar(DType::U64),
            Scalar(DType::U16),
            ptr(DType::F32, false),
            Scalar(DType::U8),
            Scalar(DType::I8),
            Scalar(DType::I64)
        ]
    );
    let own = c.kernel("own").unwrap();
    assert_eq!(
        shape(own),
        [
            (ParamKind::Struct { name: "Array<float, 4>".into() }, 16, 0),
            (ParamKind::Array { dtype: Some(DType::F32), is_const: true, rank: 1 }, 24, 16),
        ]
    );
}

#[test]
fn structs_keep_their_alignment_and_every_kind_matches_the_ptx() {
    let src = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <caijit/caijit.cuh>
struct __align__(16) S { float a; double b; };
struct P { char c; };
extern "C" __global__ void k(char c, S s, bool b, P p, __half h, __nv_bfloat16 g, caijit::complex<double> z, caijit::Array<double, 2> a) {}
"#;
    let c = build(&Program::new(src));
    let k = c.kernel("k").unwrap();
    let got: Vec<_> = k.params.iter().map(|p| (p.kind.clone(), p.size, p.align, p.offset)).collect();
    assert_eq!(
        got,
        [
            (ParamKind::Scalar(DType::I8), 1, 1, 0),
            (ParamKind::Struct { name: "S".into() }, 16, 16, 16),
            (ParamKind::Scalar(DType::Bool), 1, 1, 32),
            (ParamKind::Struct { name: "P".into() }, 1, 1, 33),
            (ParamKind::Scalar(DType::F16), 2, 2, 34),
            (ParamKind::Scalar(DType::BF16), 2, 2, 36),
            (ParamKind::Scalar(DType::C128), 16, 16, 48),
            (ParamKind::Array { dtype: Some(DType::F64), is_const: false, rank: 2 }, 40, 8, 64),
        ]
    );
}

#[test]
fn generated_instances_include_the_headers_their_types_need() {
    // The README's axpy includes nothing; instances for float16, bfloat16 and complex compile.
    let src = "template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }";
    let d = Program::new(src).declarations().kernels[0].clone();
    for dtype in [DType::F16, DType::BF16, DType::C64] {
        let arr = ArgType::Array { dtype, rank: 1 };
        let i = deduce(&d, &[ArgType::UntypedScalar, arr, arr, ArgType::UntypedScalar]).unwrap();
        assert_eq!(i.headers.len(), 1, "{i:?}");
        let c = build(&Program::new(src).including(&i.headers).name_expression(&i.expression));
        let k = c.kernel(&i.expression).unwrap();
        assert_eq!(k.params[0].kind, ParamKind::Scalar(dtype));
        assert_eq!(k.params[1].kind, ptr(dtype, true));
    }
    // Line numbers in NVRTC's messages stay the source's own.
    let broken = Program::new("template <typename T> __global__ void k(T* x) {\n  x[0] = nope;\n}").name("b.cu");
    let e = compile_with(&broken.including(&["cuda_fp16.h"]).name_expression("k<__half>"), Arch(90), &fresh()).unwrap_err();
    assert!(matches!(&e, cai_runtime::Error::Compile(c) if c.log.contains("b.cu(2)")), "{e:?}");
}

#[test]
fn an_unreadable_extern_c_declaration_leaves_the_others_usable() {
    // A reference parameter the tokenizer refuses: a note, not an error; the compiler says
    // what the kernel is (and caijit refuses to launch a reference).
    let src = "extern \"C\" __global__ void ok(float* x) {}\n__global__ void weird(caijit::Array<float> a) {}";
    let p = Program::new(src);
    assert_eq!(p.declarations().notes.len(), 1);
    let c = build(&Program::new("#include <caijit/array.cuh>\nextern \"C\" __global__ void ok(float* x) {}\n#define DECL(n) extern \"C\" __global__ void n(int* y)\nDECL(made) {}"));
    assert_eq!(shape(c.kernel("ok").unwrap()), [(ptr(DType::F32, false), 8, 0)]);
}

#[test]
fn an_extern_c_kernel_declared_in_a_header_launches_when_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cuh"), "extern \"C\" __global__ void from_header(double* x, unsigned n) {}\n").unwrap();
    let src = "#include \"k.cuh\"\nextern \"C\" __global__ void here(int* y) {}\n";
    let p = Program::new(src).include_dir(dir.path());
    let c = build(&p);
    assert_eq!(shape(c.kernel("here").unwrap()), [(ptr(DType::I32, false), 8, 0)]);
    assert!(c.notes.iter().any(|n| n.contains("from_header")), "{:?}", c.notes);
    let c = build(&p.name_expression("from_header"));
    assert_eq!(shape(c.kernel("from_header").unwrap()), [(ptr(DType::F64, false), 8, 0), (ParamKind::Scalar(DType::U32), 4, 8)]);
}

#[test]
fn parameter_names_are_those_every_declaration_agrees_on() {
    let src = r#"
#ifdef SWAP
extern "C" __global__ void affine(const float* x, float* out, float b, float a, int n) {}
#else
extern "C" __global__ void affine(const float* x, float* out, float a, float b, int n) {}
#endif
__global__ void fwd(float*, int);
__global__ void fwd(float* y, int n) {}
"#;
    for p in [Program::new(src), Program::new(src).define("SWAP", None)] {
        let c = build(&p);
        let names: Vec<_> = c.kernel("affine").unwrap().params.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, [Some("x".into()), Some("out".into()), None, None, Some("n".into())]);
        let names: Vec<_> = c.kernel("fwd").unwrap().params.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, [Some("y".into()), Some("n".into())]);
    }
    // Branches of different types: the compiled types tell which branch names them.
    let src = r#"
#ifdef USE_INT
extern "C" __global__ void s(int* xs, int factor, int n) {}
__global__ void t(int* xs, int factor) {}
#else
extern "C" __global__ void s(float* x, float a, int n) {}
__global__ void t(float* x, float a) {}
#endif
"#;
    for (p, want) in [(Program::new(src), ["x", "a"]), (Program::new(src).define("USE_INT", None), ["xs", "factor"])] {
        let c = build(&p);
        for k in ["s", "t"] {
            let names: Vec<_> = c.kernel(k).unwrap().params.iter().map(|p| p.name.clone().unwrap_or_default()).take(2).collect();
            assert_eq!(names, want, "{k}");
        }
    }
}

#[test]
fn a_cpp_kernel_the_preprocessor_removed_costs_nothing() {
    let src = "#ifdef B\nnamespace b { __global__ void k(double* x) {} }\n#else\nnamespace a { __global__ void k(float* x) {} }\n#endif\n";
    let c = build(&Program::new(src));
    assert_eq!(shape(c.kernel("k").unwrap()), [(ptr(DType::F32, false), 8, 0)]);
    assert_eq!(shape(c.kernel("a::k").unwrap()), [(ptr(DType::F32, false), 8, 0)]);
    let c = build(&Program::new(src).define("B", None));
    assert_eq!(shape(c.kernel("k").unwrap()), [(ptr(DType::F64, false), 8, 0)]);
}

#[test]
fn a_plain_name_in_two_namespaces_is_ambiguous_not_an_overload_set() {
    let src = "namespace a { __global__ void k(float* x) {} }\nnamespace b { __global__ void k(double* x) {} }\n__global__ void ov(int) {}\n__global__ void ov(float) {}\n";
    let c = build(&Program::new(src));
    let e = c.kernels_named("k").unwrap_err().to_string();
    assert!(e.contains("`k` is ambiguous: a::k, b::k"), "{e}");
    assert!(c.kernel("k").is_err());
    assert_eq!(shape(c.kernel("b::k").unwrap()), [(ptr(DType::F64, false), 8, 0)]);
    assert_eq!(c.kernels_named("ov").unwrap().len(), 2);
}

#[test]
fn signature_errors_name_the_kernel_and_carry_the_parameter() {
    for src in [r#"extern "C" __global__ void k(const float& a, float* y) {}"#, "__global__ void k(const float& a, float* y) {}"] {
        // The program compiles; naming the kernel is the error, and says why.
        let c = build(&Program::new(src));
        let e = c.kernel("k").unwrap_err();
        assert!(e.to_string().contains("`k`") && e.to_string().contains("reference") && !e.to_string().contains("caijit_probe"), "{e}");
        let cai_runtime::Error::Argument(a) = e else { panic!("{e}") };
        assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(0), Some("a"), Some("float const &")));
    }
}

/// Issue #26: the kernels of `c` other than `bad` are usable, and naming `bad` is an
/// error whose message contains every one of `why`.
fn only_unusable(c: &Compiled, bad: &str, why: &[&str]) {
    let e = c.kernel(bad).unwrap_err().to_string();
    for w in why {
        assert!(e.contains(w), "{bad}: {e}");
    }
    assert!(c.unusable.iter().any(|k| k.qualified_name == bad || k.lowered_name == bad), "{:?}", c.unusable);
    assert!(c.notes.iter().any(|n| n.contains(bad)), "{:?}", c.notes);
    assert!(!c.kernels.is_empty());
    for k in &c.kernels {
        assert!(c.kernel(&k.lowered_name).is_ok());
    }
}

#[test]
fn a_programs_own_types_named_like_cudas_are_its_own() {
    // Names CUDA and caijit use for their types, given by a program to its own (each of a
    // different size than CUDA's): the compiler's (demangled) names say whose they are.
    let own = r#"
struct half { float lo, hi; };
struct nv_bfloat16 { double v; };
template <class T> struct complex { T re, im, w; };
namespace mine { struct __half { int a, b, c; }; }
extern "C" __global__ void span(half h, nv_bfloat16 b, float* o) {}
__global__ void quat(complex<float> z, complex<double> d, mine::__half m, float* o) {}
extern "C" __global__ void unrelated(float* o) {}
"#;
    let c = build(&Program::new(own));
    assert!(c.unusable.is_empty(), "{:?}", c.unusable);
    let span = c.kernel("span").unwrap();
    assert_eq!(
        shape(span),
        [
            (ParamKind::Struct { name: "half".into() }, 8, 0),
            (ParamKind::Struct { name: "nv_bfloat16".into() }, 8, 8),
            (ptr(DType::F32, false), 8, 16)
        ]
    );
    let quat = c.kernel("quat").unwrap();
    assert_eq!(
        quat.params.iter().map(|p| (p.kind.clone(), p.size)).collect::<Vec<_>>(),
        [
            (ParamKind::Struct { name: "complex<float>".into() }, 12),
            (ParamKind::Struct { name: "complex<double>".into() }, 24),
            (ParamKind::Struct { name: "mine::__half".into() }, 12),
            (ptr(DType::F32, false), 8)
        ]
    );
    assert_eq!(shape(c.kernel("unrelated").unwrap()), [(ptr(DType::F32, false), 8, 0)]);
    // CUDA's own, however the program spells them (a typedef is resolved by the compiler).
    let cuda = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <caijit/complex.cuh>
typedef __half my_half;
extern "C" __global__ void k(half a, my_half b, nv_bfloat16 c, caijit::complex<float> z) {}
"#;
    let kinds: Vec<_> = build(&Program::new(cuda)).kernel("k").unwrap().params.iter().map(|p| p.kind.clone()).collect();
    use ParamKind::Scalar;
    assert_eq!(kinds, [Scalar(DType::F16), Scalar(DType::F16), Scalar(DType::BF16), Scalar(DType::C64)]);
}

#[test]
fn builtin_types_no_dtype_is_are_opaque_values_of_their_size() {
    let src = r#"
__global__ void mul(unsigned __int128 x, __int128 y, unsigned long long* o) {}
extern "C" __global__ void odd(unsigned __int128 u, long double d, wchar_t w, char16_t c16, char32_t c32, int n) {}
extern "C" __global__ void unrelated(float* o) {}
"#;
    let c = build(&Program::new(src).option("-device-int128"));
    assert!(c.unusable.is_empty(), "{:?}", c.unusable);
    let named = |n: &str| ParamKind::Struct { name: n.into() };
    assert_eq!(
        shape(c.kernel("mul").unwrap()),
        [(named("unsigned __int128"), 16, 0), (named("__int128"), 16, 16), (ptr(DType::U64, false), 8, 32)]
    );
    let odd = c.kernel("odd").unwrap();
    assert_eq!(
        odd.params.iter().map(|p| (p.kind.clone(), p.size, p.name.clone().unwrap_or_default())).collect::<Vec<_>>(),
        [
            (named("unsigned __int128"), 16, "u".into()),
            (named("long double"), 8, "d".into()),
            (named("wchar_t"), 4, "w".into()),
            (named("char16_t"), 2, "c16".into()),
            (named("char32_t"), 4, "c32".into()),
            (ParamKind::Scalar(DType::I32), 4, "n".into()),
        ]
    );
    assert!(c.kernel("unrelated").is_ok());
}

/// `W<W<…<int>…>>` nested `depth` deep.
fn nested(depth: usize) -> String {
    let mut t = "int".to_string();
    for _ in 0..depth {
        t = format!("W<{t}>");
    }
    t
}

#[test]
fn deeply_nested_template_arguments_demangle_and_past_the_limit_spoil_only_their_kernel() {
    let src = |depths: &[usize]| {
        // (Pointers: the compiler need not instantiate W that deep.)
        let mut s = "template <class T> struct W {};\ntemplate <class T> __global__ void k(T* t, int* o) {}\n".to_string();
        for d in depths {
            s.push_str(&format!("template __global__ void k<{0}>({0}*, int*);\n", nested(*d)));
        }
        s.push_str("extern \"C\" __global__ void unrelated(float* o) {}\n");
        s
    };
    let depths = [18, 32, 64];
    let c = build(&Program::new(src(&depths)));
    assert!(c.unusable.is_empty(), "{:?}", c.unusable);
    assert!(c.kernel("unrelated").is_ok());
    let mut found: Vec<usize> =
        c.kernels.iter().filter(|k| k.qualified_name == "k").map(|k| k.demangled.as_ref().unwrap().matches("W<").count() / 2).collect();
    found.sort_unstable();
    assert_eq!(found, depths);
    // Past caijit's limit: that instance alone is unusable, and says why.
    let p = Program::new(src(&[12, 260]));
    let c = build(&p);
    assert!(c.kernel("unrelated").is_ok());
    assert_eq!(c.unusable.len(), 1, "{:?}", c.unusable);
    assert_eq!(c.unusable[0].qualified_name, "k");
    let e = c.unusable[0].error().to_string();
    assert!(e.contains("cannot demangle") && e.contains("recursion"), "{e}");
    // By its lowered name: the reason; by its plain name: the usable instance.
    let lowered = c.unusable[0].lowered_name.clone();
    only_unusable(&c, &lowered, &["cannot demangle", "recursion"]);
    assert_eq!(c.kernel("k").unwrap().demangled.as_deref().unwrap().matches("W<").count(), 2 * 12);
}

#[test]
fn a_kernel_whose_parameters_cannot_be_laid_out_is_unusable_alone() {
    let src = r#"
extern "C" __global__ void by_ref(const float& a, float* y) {}
template <class T> __global__ void t(T& a) {}
template __global__ void t<int>(int&);
extern "C" __global__ void fine(float* y, int n) {}
"#;
    let c = build(&Program::new(src).name_expression("t<int>"));
    assert_eq!(shape(c.kernel("fine").unwrap()), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::I32), 4, 8)]);
    only_unusable(&c, "by_ref", &["`by_ref`", "reference"]);
    only_unusable(&c, "t", &["`t`", "reference"]);
    // A name expression that finds only an unusable kernel says why, too.
    assert!(c.kernel("t<int>").unwrap_err().to_string().contains("reference"));
    // A plain name in two namespaces is ambiguous even when one of them is unusable.
    let two = build(&Program::new("namespace a { __global__ void k(int& x) {} }\nnamespace b { __global__ void k(float* x) {} }\n"));
    let e = two.kernel("k").unwrap_err().to_string();
    assert!(e.contains("ambiguous") && e.contains("a::k") && e.contains("b::k"), "{e}");
    assert!(two.kernel("b::k").is_ok());
    assert!(two.kernel("a::k").unwrap_err().to_string().contains("reference"));
    // Not found at all: the notes list what is unusable.
    let e = c.kernel("nothing").unwrap_err().to_string();
    assert!(e.contains("no kernel named") && e.contains("by_ref"), "{e}");
}

#[test]
fn attributes_before_global_leave_extern_c_and_templates_launchable() {
    for attrs in ["__launch_bounds__(256)", "[[deprecated]]", "__launch_bounds__(128, 2) [[deprecated(\"old\")]]", "__noinline__"] {
        let src = format!("extern \"C\" {attrs} __global__ void k(float* o, int n) {{}}");
        let c = build(&Program::new(&src));
        assert!(c.notes.is_empty(), "{src}: {:?}", c.notes);
        assert_eq!(shape(c.kernel("k").unwrap()), [(ptr(DType::F32, false), 8, 0), (ParamKind::Scalar(DType::I32), 4, 8)], "{src}");
        assert_eq!(c.kernel("k").unwrap().lowered_name, "k");
        let src = format!("template <typename T> {attrs} __global__ void t(T* o, int n) {{}}");
        let p = Program::new(&src);
        let d = p.declarations().kernels[0].clone();
        let i = deduce(&d, &[ArgType::Array { dtype: DType::F64, rank: 1 }, ArgType::UntypedScalar]).unwrap();
        assert_eq!(i.expression, "t<double>");
        assert_eq!(shape(build(&p.name_expression(&i.expression)).kernel("t<double>").unwrap())[0].0, ptr(DType::F64, false));
    }
}

#[test]
fn defaults_written_before_a_deduced_argument_are_the_compilers_values() {
    // Each: a kernel template with a default that depends on earlier parameters and must be
    // written (a later parameter is deduced), launch arguments, and the instance the
    // compiler makes of the same template arguments with the default left to it.
    let cases: &[(&str, &[ArgType], &str)] = &[
        (
            "template <int N, bool B = (N > 4), typename T = int> __global__ void k(T* x, caijit::Array<float, N> a) {}",
            &[ArgType::Array { dtype: DType::F64, rank: 1 }, ArgType::Array { dtype: DType::F32, rank: 2 }],
            "void k<2, false, double>(double*, caijit::Array<float, 2>)",
        ),
        (
            // Converted to the parameter's type: 2u - 5 wraps.
            "template <unsigned N, bool B = (N - 5 > 0), typename T = int> __global__ void k(caijit::Array<T, N> a) {}",
            &[ArgType::Array { dtype: DType::I16, rank: 2 }],
            "void k<(unsigned int)2, true, short>(caijit::Array<short, (unsigned int)2>)",
        ),
        (
            "template <typename T, int BITS = sizeof(T) * 8, typename Acc = float> __global__ void k(const T* x, Acc* y) {}",
            &[ArgType::Array { dtype: DType::U16, rank: 1 }, ArgType::Array { dtype: DType::F64, rank: 1 }],
            "void k<unsigned short, 16, double>(unsigned short const*, double*)",
        ),
        (
            "template <class T> struct wide { using type = T; };\ntemplate <> struct wide<float> { using type = double; };\n\
             template <typename T, typename U = typename wide<T>::type, typename O = U> __global__ void k(const T* x, O* y, U s) {}",
            &[ArgType::Array { dtype: DType::F32, rank: 1 }, ArgType::Array { dtype: DType::I32, rank: 1 }, ArgType::UntypedScalar],
            "void k<float, double, int>(float const*, int*, double)",
        ),
        (
            // A functional cast of a type spelled in two words.
            "template <typename T, int M = int(T(7) / 2), int K = M * 2, typename O = int> __global__ void k(T* x, O* y) {}",
            &[ArgType::Array { dtype: DType::U32, rank: 1 }, ArgType::Array { dtype: DType::F32, rank: 1 }],
            "void k<unsigned int, 3, 6, float>(unsigned int*, float*)",
        ),
    ];
    for (src, args, want) in cases {
        let p = Program::new(format!("#include <caijit/array.cuh>\n{src}"));
        let d = p.declarations().kernels[0].clone();
        let i = deduce(&d, args).unwrap_or_else(|e| panic!("{src}: {e}"));
        let c = compile_with(&p.clone().name_expression(&i.expression), Arch(90), &fresh())
            .unwrap_or_else(|e| panic!("{src}\n{}: {e}", i.expression));
        let k = c.kernel(&i.expression).unwrap_or_else(|e| panic!("{src}\n{}: {e}", i.expression));
        assert_eq!(k.demangled.as_deref(), Some(*want), "{src}\n{}", i.expression);
        // Each parameter is read as what it is (a rank spelled `(unsigned int)2` too).
        assert!(k.params.iter().all(|p| !matches!(p.kind, ParamKind::Struct { .. })), "{:?}", k.params);
    }
}
