//! Property test of issue #20: random parameter lists (every C++ spelling of the scalars,
//! pointers, structs with alignment, `caijit::Array<T, N>`) as `extern "C"`, plain C++
//! and template kernels, compiled with NVRTC for sm_90. caijit's signature must be what
//! the declaration says: kinds from the demangled names (or the probe), sizes, alignments
//! and offsets from the PTX, all equal to an independent computation of the C++ layout.

use cai_runtime::cai::DType;
use cai_runtime::compile::{compile_with, Arch, Program};
use cai_runtime::signature::{ptx_entries, ParamKind};
use caijit_integration::fresh;
use proptest::prelude::*;

/// `(spelling, dtype)` of every scalar spelling caijit must read.
const SCALARS: &[(&str, DType)] = &[
    ("bool", DType::Bool),
    ("char", DType::I8),
    ("signed char", DType::I8),
    ("unsigned char", DType::U8),
    ("short", DType::I16),
    ("short int", DType::I16),
    ("unsigned short", DType::U16),
    ("short unsigned", DType::U16),
    ("int", DType::I32),
    ("signed", DType::I32),
    ("unsigned", DType::U32),
    ("unsigned int", DType::U32),
    ("long", DType::I64),
    ("long int", DType::I64),
    ("long unsigned int", DType::U64),
    ("unsigned long", DType::U64),
    ("long long", DType::I64),
    ("long long unsigned", DType::U64),
    ("unsigned long long", DType::U64),
    ("int8_t", DType::I8),
    ("uint8_t", DType::U8),
    ("int16_t", DType::I16),
    ("uint16_t", DType::U16),
    ("int32_t", DType::I32),
    ("uint32_t", DType::U32),
    ("int64_t", DType::I64),
    ("uint64_t", DType::U64),
    ("size_t", DType::U64),
    ("ptrdiff_t", DType::I64),
    ("float", DType::F32),
    ("double", DType::F64),
    ("__half", DType::F16),
    ("__nv_bfloat16", DType::BF16),
    ("caijit::complex<float>", DType::C64),
    ("caijit::complex<double>", DType::C128),
];

/// One generated parameter.
#[derive(Clone, Debug)]
enum Param {
    Scalar(usize),
    Pointer {
        scalar: usize,
        is_const: bool,
    },
    /// `struct __align__(align) S { char b[size]; }` (size a multiple of align).
    Struct {
        align: usize,
        size: usize,
    },
    Array {
        scalar: usize,
        is_const: bool,
        rank: usize,
    },
}

fn param() -> impl Strategy<Value = Param> {
    let s = 0..SCALARS.len();
    prop_oneof![
        s.clone().prop_map(Param::Scalar),
        (s.clone(), any::<bool>()).prop_map(|(scalar, is_const)| Param::Pointer { scalar, is_const }),
        (0..5u32, 1..4usize).prop_map(|(a, k)| Param::Struct { align: 1 << a, size: (1 << a) * k }),
        (s, any::<bool>(), 1..5usize).prop_map(|(scalar, is_const, rank)| Param::Array { scalar, is_const, rank }),
    ]
}

impl Param {
    /// The C++ spelling, declaring the struct it needs into `structs`.
    fn cpp(&self, index: usize, kernel: &str, structs: &mut String) -> String {
        let c = |is_const: bool| if is_const { "const " } else { "" };
        match self {
            Param::Scalar(s) => SCALARS[*s].0.to_string(),
            Param::Pointer { scalar, is_const } => format!("{}{}*", c(*is_const), SCALARS[*scalar].0),
            Param::Struct { align, size } => {
                let name = format!("S_{kernel}_{index}");
                structs.push_str(&format!("struct __align__({align}) {name} {{ char b[{size}]; }};\n"));
                name
            }
            Param::Array { scalar, is_const, rank } => format!("caijit::Array<{}{}, {rank}>", c(*is_const), SCALARS[*scalar].0),
        }
    }

    fn expected(&self, index: usize, kernel: &str) -> (ParamKind, usize, usize) {
        match self {
            Param::Scalar(s) => {
                let d = SCALARS[*s].1;
                (ParamKind::Scalar(d), d.itemsize(), d.itemsize())
            }
            Param::Pointer { scalar, is_const } => (ParamKind::Pointer { dtype: Some(SCALARS[*scalar].1), is_const: *is_const }, 8, 8),
            Param::Struct { align, size } => (ParamKind::Struct { name: format!("S_{kernel}_{index}") }, *size, *align),
            Param::Array { scalar, is_const, rank } => {
                (ParamKind::Array { dtype: Some(SCALARS[*scalar].1), is_const: *is_const, rank: *rank }, 8 + 16 * rank, 8)
            }
        }
    }
}

/// The C++ layout of `params`, computed from the declaration alone.
fn expected_layout(params: &[Param], kernel: &str) -> Vec<(ParamKind, usize, usize, usize)> {
    let mut offset = 0usize;
    params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (kind, size, align) = p.expected(i, kernel);
            offset = offset.next_multiple_of(align);
            let at = offset;
            offset += size;
            (kind, size, align, at)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn signatures_match_the_declaration_the_ptx_and_the_demangled_name(
        c_params in prop::collection::vec(param(), 0..7),
        cpp_params in prop::collection::vec(param(), 1..7),
    ) {
        let mut structs = String::new();
        let decl = |params: &[Param], kernel: &str, structs: &mut String| {
            params.iter().enumerate().map(|(i, p)| format!("{} p{i}", p.cpp(i, kernel, structs))).collect::<Vec<_>>().join(", ")
        };
        let c_list = decl(&c_params, "c", &mut structs);
        let cpp_list = decl(&cpp_params, "cpp", &mut structs);
        // The template's parameter list: the C++ list with its first parameter's type as `T`.
        let first = cpp_params[0].cpp(0, "cpp", &mut String::new());
        let t_list = std::iter::once("T p0".to_string())
            .chain(cpp_params.iter().enumerate().skip(1).map(|(i, p)| format!("{} p{i}", p.cpp(i, "cpp", &mut String::new()))))
            .collect::<Vec<_>>()
            .join(", ");
        let src = format!(
            "#include <caijit/caijit.cuh>\n#include <cuda/std/cstdint>\n#include <cuda/std/cstddef>\n\
             using namespace cuda::std;\n{structs}\
             extern \"C\" __global__ void c_kernel({c_list}) {{}}\n\
             __global__ void cpp_kernel({cpp_list}) {{}}\n\
             template <class T> __global__ void t_kernel({t_list}) {{}}\n"
        );
        let expr = format!("t_kernel<{first}>");
        let c = compile_with(&Program::new(src.clone()).name_expression(&expr), Arch(90), &fresh())
            .unwrap_or_else(|e| panic!("{e}\n{src}"));
        let ptx = ptx_entries(&c.ptx).unwrap();
        for (name, params, kernel) in [("c_kernel", &c_params, "c"), ("cpp_kernel", &cpp_params, "cpp"), (expr.as_str(), &cpp_params, "cpp")] {
            let k = c.kernel(name).unwrap_or_else(|e| panic!("{e}\n{src}"));
            let got: Vec<_> = k.params.iter().map(|p| (p.kind.clone(), p.size, p.align, p.offset)).collect();
            prop_assert_eq!(&got, &expected_layout(params, kernel), "{}\n{}", name, src);
            // The PTX agrees parameter by parameter.
            let entry = &ptx[&k.lowered_name];
            prop_assert_eq!(entry.len(), k.params.len());
            for (p, e) in k.params.iter().zip(entry) {
                prop_assert_eq!((p.size, p.align), (e.size, e.align.max(1)), "{}", name);
            }
            // The names: parameters named as declared; C++ kernels demangle to the types.
            prop_assert!(k.params.iter().enumerate().all(|(i, p)| p.name.as_deref() == Some(format!("p{i}").as_str())), "{:?}", k.params);
            match &k.demangled {
                Some(d) => {
                    prop_assert!(d.contains(name.split('<').next().unwrap_or(name)), "{}", d);
                    prop_assert_eq!(k.params.iter().map(|p| p.cpp_type.clone()).collect::<Vec<_>>().len(), params.len());
                }
                None => prop_assert_eq!(k.lowered_name.as_str(), "c_kernel"),
            }
        }
    }
}

/// Issue #26: names of CUDA's and caijit's types that a program may give its own types.
const LOOKALIKES: &[&str] = &["half", "nv_bfloat16", "bfloat16", "complex<float>", "complex<double>", "Array<float, 2>"];

/// Attributes and specifiers NVRTC accepts before `__global__` (`MACRO` and `BOUNDS(n)`
/// are macros the tokenizer cannot expand).
const ATTRIBUTES: &[&str] = &[
    "__launch_bounds__(128)",
    "[[deprecated]]",
    "__noinline__",
    "__attribute__((noinline))",
    "[[maybe_unused, deprecated(\"x\")]]",
    "MACRO",
    "BOUNDS(64)",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn own_types_named_like_cudas_and_attributes_before_global_keep_the_compilers_types(
        types in prop::collection::vec((0..LOOKALIKES.len(), 1..5usize), 1..4),
        attrs in prop::collection::vec(0..ATTRIBUTES.len(), 0..4),
        extern_c in any::<bool>(),
    ) {
        // Each lookalike a struct of its own, of `words` ints (no CUDA type is that size and
        // alignment for every choice: the layout check would catch a misreading).
        let mut src = "#define MACRO\n#define BOUNDS(n) __launch_bounds__(n)\n".to_string();
        let mut declared = Vec::new();
        for (i, (t, words)) in types.iter().enumerate() {
            let spelled = LOOKALIKES[*t];
            let name = spelled.split('<').next().unwrap_or(spelled);
            let body = format!("int w[{}];", words * 3);
            src.push_str(&format!("namespace n{i} {{ "));
            if spelled.contains(',') {
                src.push_str(&format!("template <class T, int N> struct {name} {{ {body} }}; }}\n"));
            } else if spelled.contains('<') {
                src.push_str(&format!("template <class T> struct {name} {{ {body} }}; }}\n"));
            } else {
                src.push_str(&format!("struct {name} {{ {body} }}; }}\n"));
            }
            declared.push((format!("n{i}::{spelled}"), words * 12));
        }
        let list = declared.iter().enumerate().map(|(i, (t, _))| format!("{t} p{i}")).collect::<Vec<_>>().join(", ");
        let attrs = attrs.iter().map(|a| ATTRIBUTES[*a]).collect::<Vec<_>>().join(" ");
        let linkage = if extern_c { "extern \"C\" " } else { "" };
        src.push_str(&format!("{linkage}{attrs} __global__ void k({list}, float* out) {{}}\n"));
        src.push_str(&format!("template <typename T> {attrs} __global__ void t(T* x, {list}) {{}}\n"));
        src.push_str("extern \"C\" __global__ void unrelated(float* o) {}\n");
        let p = Program::new(src.clone());
        let decls = p.declarations();
        let k = decls.kernels.iter().find(|d| d.name == "k").unwrap();
        prop_assert_eq!(k.extern_c, extern_c, "{}", src);
        let t = decls.kernels.iter().find(|d| d.name == "t").unwrap();
        prop_assert_eq!(t.template_params.len(), 1, "{}", src);
        let c = compile_with(&p.name_expression("t<double>"), Arch(90), &fresh()).unwrap_or_else(|e| panic!("{e}\n{src}"));
        prop_assert!(c.unusable.is_empty(), "{:?}\n{}", c.unusable, src);
        let want = || -> Vec<(ParamKind, usize)> { declared.iter().map(|(t, size)| (ParamKind::Struct { name: t.clone() }, *size)).collect() };
        let got = |name: &str| -> Vec<(ParamKind, usize)> {
            c.kernel(name).unwrap_or_else(|e| panic!("{e}\n{src}")).params.iter().map(|p| (p.kind.clone(), p.size)).collect()
        };
        let mut k_want = want();
        k_want.push((ParamKind::Pointer { dtype: Some(DType::F32), is_const: false }, 8));
        prop_assert_eq!(got("k"), k_want, "{}", src);
        let mut t_want = vec![(ParamKind::Pointer { dtype: Some(DType::F64), is_const: false }, 8)];
        t_want.extend(want());
        prop_assert_eq!(got("t<double>"), t_want, "{}", src);
        prop_assert_eq!(got("unrelated").len(), 1);
    }
}
