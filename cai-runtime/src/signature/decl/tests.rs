//! Tests of `decl`.

use super::*;

fn one(src: &str) -> KernelDecl {
    let d = parse_kernels(src);
    assert_eq!(d.kernels.len(), 1, "{d:?}");
    d.kernels.into_iter().next().unwrap_or_else(|| unreachable!())
}
fn ptr(d: DType, is_const: bool) -> ParamType {
    ParamType::Pointer { elem: CType::Scalar(d), is_const }
}
/// A type parameter (`value_type` empty) or a value of `value_type`.
fn tp(name: &str, value_type: &str, default: Option<&str>) -> TemplateParam {
    TemplateParam {
        name: name.into(),
        is_type: value_type.is_empty(),
        is_template: false,
        value_type: value_type.into(),
        default: default.map(Into::into),
    }
}

#[test]
fn declarations_are_parsed_once_per_source() {
    let src = "template <typename T> __global__ void memo_probe(T* x) {}";
    let (a, b) = (declarations(src), declarations(src));
    assert!(Arc::ptr_eq(&a, &b), "the same source's declarations are shared");
    assert_eq!(*a, parse_kernels(src));
    let other = declarations("__global__ void memo_probe(float* x) {}");
    assert!(!Arc::ptr_eq(&a, &other) && !other.kernels[0].is_template());
    // Past the memo's bound, every source still gets its own declarations.
    for i in 0..MEMO_SOURCES + 3 {
        let src = format!("__global__ void k{i}(int x) {{}}");
        assert_eq!(declarations(&src).kernels[0].name, format!("k{i}"));
    }
}

#[test]
fn extern_c_kernel() {
    let k = one(r#"extern "C" __global__ void scale(float* __restrict__ y, const float* x, float a, unsigned int n) {}"#);
    assert!(k.extern_c && !k.is_template());
    assert_eq!(k.name, "scale");
    let types: Vec<_> = k.params.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(
        types,
        [
            ptr(DType::F32, false),
            ptr(DType::F32, true),
            ParamType::Value(CType::Scalar(DType::F32)),
            ParamType::Value(CType::Scalar(DType::U32))
        ]
    );
    let names: Vec<_> = k.params.iter().map(|(n, _)| n.clone().unwrap_or_default()).collect();
    assert_eq!(names, ["y", "x", "a", "n"]);
}

#[test]
fn extern_c_blocks_launch_bounds_comments_and_preprocessor() {
    let src = r#"
        #include <cuda_fp16.h>
        // __global__ void commented_out(int x) {}
        extern "C" {
        /* a block comment */ __global__ void __launch_bounds__(256, 2) k1(long long a, __half h, int8_t b) {}
        }
        __global__ void k2(void) {}
        struct S { int a; }; extern "C" { __global__ void a(int n) {} __global__ void b(int n) {} } __global__ void c(int n) {}
    "#;
    let k = parse_kernels(src).kernels;
    let flags: Vec<_> = k.iter().map(|k| (k.name.as_str(), k.extern_c)).collect();
    assert_eq!(flags, [("k1", true), ("k2", false), ("a", true), ("b", true), ("c", false)]);
    assert_eq!(k[0].params[0].1, ParamType::Value(CType::Scalar(DType::I64)));
    assert_eq!(k[0].params[1].1, ParamType::Value(CType::Scalar(DType::F16)));
    assert_eq!(k[0].params[2].1, ParamType::Value(CType::Scalar(DType::I8)));
    assert!(k[1].params.is_empty());
}

#[test]
fn a_pointer_to_an_array_is_named_and_read_as_a_pointer() {
    let k = parse_kernels("__global__ void k(float (*rows)[8], const double (*)[4][2], int n, float (* const p)[4]) {}").kernels;
    assert_eq!(k[0].params[0], (Some("rows".into()), ParamType::Pointer { elem: CType::Scalar(DType::F32), is_const: false }));
    assert_eq!(k[0].params[3], (Some("p".into()), ParamType::Pointer { elem: CType::Scalar(DType::F32), is_const: false }));
    assert_eq!(k[0].params[1], (None, ParamType::Pointer { elem: CType::Scalar(DType::F64), is_const: true }));
    assert_eq!(k[0].params[2].0.as_deref(), Some("n"));
}

#[test]
fn template_parameters_with_defaults_and_comparisons() {
    let src = "template <typename T, int N, bool B = (N > 4), class U = Pair<int, float>, unsigned M = 2>\n\
               __global__ void copy(caijit::Array<const T, N> src, T* dst, int n = 3) {}";
    let k = one(src);
    assert_eq!(
        k.template_params,
        [
            tp("T", "", None),
            tp("N", "int", None),
            tp("B", "bool", Some("(N > 4)")),
            tp("U", "", Some("Pair<int, float>")),
            tp("M", "unsigned", Some("2"))
        ]
    );
    assert_eq!(
        k.params[0].1,
        ParamType::Array { elem: CType::TemplateParam("T".into()), is_const: true, rank: Rank::TemplateParam("N".into()) }
    );
    assert_eq!(k.params[1].1, ParamType::Pointer { elem: CType::TemplateParam("T".into()), is_const: false });
    assert_eq!(k.params[2].0.as_deref(), Some("n"));
}

#[test]
fn every_cpp_scalar_spelling_maps_to_its_dtype() {
    use DType::*;
    let table = [
        ("bool", Bool),
        ("char", I8),
        ("signed char", I8),
        ("char signed", I8),
        ("int8_t", I8),
        ("unsigned char", U8),
        ("uint8_t", U8),
        ("short", I16),
        ("short int", I16),
        ("int short", I16),
        ("signed short", I16),
        ("int16_t", I16),
        ("unsigned short", U16),
        ("short unsigned", U16),
        ("unsigned short int", U16),
        ("uint16_t", U16),
        ("int", I32),
        ("signed", I32),
        ("signed int", I32),
        ("int32_t", I32),
        ("unsigned", U32),
        ("unsigned int", U32),
        ("uint32_t", U32),
        ("long", I64),
        ("long int", I64),
        ("signed long", I64),
        ("long long", I64),
        ("long long int", I64),
        ("signed long long", I64),
        ("int64_t", I64),
        ("ptrdiff_t", I64),
        ("ssize_t", I64),
        ("intptr_t", I64),
        ("unsigned long", U64),
        ("long unsigned int", U64),
        ("long long unsigned", U64),
        ("unsigned long long", U64),
        ("unsigned long long int", U64),
        ("uint64_t", U64),
        ("std::size_t", U64),
        ("size_t", U64),
        ("uintptr_t", U64),
        ("__half", F16),
        ("::__half", F16),
        ("__nv_bfloat16", BF16),
        ("float", F32),
        ("const float", F32),
        ("double", F64),
        ("caijit::complex<float>", C64),
        ("::caijit::complex<float>", C64),
        ("caijit::complex<double>", C128),
    ];
    for (name, d) in table {
        assert_eq!(scalar_from_cpp(name), Some(d), "{name}");
    }
    // Names a program may give its own types, and builtins no dtype is: not scalars.
    for other in [
        "void",
        "S",
        "long double",
        "int int",
        "",
        "long long long",
        "unsigned signed",
        "short char",
        "long char",
        "half",
        "nv_bfloat16",
        "complex<float>",
        "complex<double>",
        "std::complex<float>",
        "ns::__half",
        "unsigned __int128",
        "__int128",
        "wchar_t",
        "char16_t",
    ] {
        assert_eq!(scalar_from_cpp(other), None, "{other}");
        assert_eq!(scalar_from_compiler(other), None, "{other}");
    }
    for d in DType::ALL {
        assert_eq!(scalar_from_cpp(d.cpp_name()), Some(d), "{d}");
        assert_eq!(scalar_from_compiler(d.cpp_name()), Some(d), "{d}");
    }
    // Typedefs never reach the compiler's (mangled) names: they are the program's own.
    for typedef in ["int32_t", "size_t", "std::size_t", "uint8_t"] {
        assert_eq!(scalar_from_compiler(typedef), None, "{typedef}");
    }
}

#[test]
fn the_compilers_text_has_no_parameter_names() {
    let compiled = |text: &str| parse_param(&tokenize(text), &[], Spelling::Compiler).unwrap();
    let named = |n: &str| (None, ParamType::Value(CType::Named(n.into())));
    assert_eq!(compiled("unsigned __int128"), named("unsigned __int128"));
    assert_eq!(compiled("__int128"), named("__int128"));
    assert_eq!(compiled("long double"), named("long double"));
    assert_eq!(compiled("half"), named("half"));
    assert_eq!(compiled("complex<float>"), named("complex<float>"));
    assert_eq!(compiled("unsigned long"), (None, ParamType::Value(CType::Scalar(DType::U64))));
    assert_eq!(compiled("__half const*"), (None, ptr(DType::F16, true)));
    let array = ParamType::Array { elem: CType::Scalar(DType::I16), is_const: false, rank: Rank::Fixed(2) };
    assert_eq!(compiled("caijit::Array<short, (unsigned int)2>"), (None, array.clone()));
    assert_eq!(compiled("caijit::Array<short, 2u>"), (None, array));
    // In a source, the last word after a type is the name, but never a builtin word.
    let source = |text: &str| parse_param(&tokenize(text), &[], Spelling::Source).unwrap();
    assert_eq!(source("unsigned __int128 x"), (Some("x".into()), ParamType::Value(CType::Named("unsigned __int128".into()))));
    assert_eq!(source("unsigned __int128"), named("unsigned __int128"));
    assert_eq!(source("half h"), (Some("h".into()), ParamType::Value(CType::Named("half".into()))));
}

#[test]
fn declarator_forms_name_pointers_and_values() {
    let k = one("__global__ void f(const float v[], S, const S, float* const, std::size_t, float** pp, \
         Pair<const int>* q, Pair<int> const* r, float const* x, caijit::Array<float, 2u> a, ::caijit::Array<const double, 1> b, int, \
         float w[4], __grid_constant__ const int g, long unsigned int lu) {}");
    let named = |n: &str, t: ParamType| (Some(n.to_string()), t);
    let anon = |t: ParamType| (None, t);
    assert_eq!(
        k.params,
        [
            named("v", ptr(DType::F32, true)),
            anon(ParamType::Value(CType::Named("S".into()))),
            anon(ParamType::Value(CType::Named("S".into()))),
            anon(ptr(DType::F32, false)),
            anon(ParamType::Value(CType::Scalar(DType::U64))),
            named("pp", ParamType::Value(CType::Named("float**".into()))),
            named("q", ParamType::Pointer { elem: CType::Named("Pair<const int>".into()), is_const: false }),
            named("r", ParamType::Pointer { elem: CType::Named("Pair<int>".into()), is_const: true }),
            named("x", ptr(DType::F32, true)),
            named("a", ParamType::Array { elem: CType::Scalar(DType::F32), is_const: false, rank: Rank::Fixed(2) }),
            named("b", ParamType::Array { elem: CType::Scalar(DType::F64), is_const: true, rank: Rank::Fixed(1) }),
            anon(ParamType::Value(CType::Scalar(DType::I32))),
            named("w", ptr(DType::F32, false)),
            named("g", ParamType::Value(CType::Scalar(DType::I32))),
            named("lu", ParamType::Value(CType::Scalar(DType::U64))),
        ]
    );
}

#[test]
fn what_cannot_be_read_is_a_note_not_an_error() {
    let d =
        parse_kernels("__global__ void g(caijit::Array<float> a, int n) {}\n__global__ void r(int& x) {}\n__global__ void ok(int n) {}");
    assert_eq!(d.kernels.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["g", "r", "ok"]);
    assert_eq!(d.notes.len(), 2, "{:?}", d.notes);
    assert!(d.notes[0].contains("kernel `g` parameter 0") && d.notes[0].contains("<T, N>"), "{:?}", d.notes);
    assert!(d.notes[1].contains("reference"), "{:?}", d.notes);
    let d = parse_kernels("__global__ void f(int x");
    assert!(d.kernels.is_empty() && d.notes[0].contains("unbalanced"), "{d:?}");
}

#[test]
fn namespaces_qualify_names() {
    let src = "namespace a { __global__ void k(float*, int) {} namespace b::c { template <class T> __global__ void t(T x) {} } }\n\
               namespace { __global__ void anon(int) {} } inline namespace v1 { __global__ void i(int) {} } __global__ void top() {}";
    let k = parse_kernels(src).kernels;
    let names: Vec<_> = k.iter().map(KernelDecl::qualified_name).collect();
    assert_eq!(names, ["a::k", "a::b::c::t", "anon", "v1::i", "top"]);
}

#[test]
fn specifiers_attributes_and_linkage_around_global() {
    let src = r#"
        template <typename T, class U = Pair<int, float>, int N = 4, unsigned M>
        static __forceinline__ __global__ void t(T* a, U b) {}
        __global__ __launch_bounds__(128) void lb(int x) {}
        __global__ void __launch_bounds__(256, 2) lb2(int x) {}
        __global__ void __launch_bounds__(64) __attribute__((noinline)) at(int x) {}
        __global__ void __cluster_dims__(2, 1, 1) cd(int x) {}
        __global__ void [[deprecated]] sq(int x) {}
        extern "C++" __global__ void cpp(int x) {}
        extern __device__ int counter;
        __global__ void void_ptr(void* p) {}
    "#;
    let k = parse_kernels(src).kernels;
    let names: Vec<_> = k.iter().map(|k| (k.name.as_str(), k.extern_c, k.params.len())).collect();
    assert_eq!(
        names,
        [
            ("t", false, 2),
            ("lb", false, 1),
            ("lb2", false, 1),
            ("at", false, 1),
            ("cd", false, 1),
            ("sq", false, 1),
            ("cpp", false, 1),
            ("void_ptr", false, 1)
        ]
    );
    assert_eq!(k[0].template_params.len(), 4);
    assert_eq!(k[7].params[0].1, ParamType::Pointer { elem: CType::Named("void".into()), is_const: false });
}

#[test]
fn any_attributes_and_specifiers_before_global_hide_neither_linkage_nor_template() {
    // Every sequence of attributes and specifiers, in any order, before `__global__`.
    let prefixes = [
        "__launch_bounds__(256)",
        "[[deprecated]]",
        "[[nodiscard, deprecated(\"use k2\")]]",
        "__attribute__((noinline))",
        "__noinline__",
        "__forceinline__",
        "static",
        "inline",
        "__cluster_dims__(2, 1, 1)",
        "__maxnreg__(32)",
        "MY_EXPORT",
        "MY_BOUNDS(128, (4 > 2))",
    ];
    for (n, a) in prefixes.iter().enumerate() {
        let b = prefixes[(n + 5) % prefixes.len()];
        for attrs in [a.to_string(), format!("{a} {b}"), format!("{b} {a}")] {
            for src in [
                format!("extern \"C\" {attrs} __global__ void k(float* o, int n) {{}}"),
                format!("{attrs} extern \"C\" __global__ void k(float* o, int n) {{}}"),
            ] {
                let k = one(&src);
                assert!(k.extern_c && !k.is_template() && k.name == "k" && k.params.len() == 2, "{src}: {k:?}");
            }
            let src = format!("template <typename T, int N = 4> {attrs} __global__ void k(T* o, int n) {{}}");
            let k = one(&src);
            assert!(!k.extern_c && k.template_params.len() == 2, "{src}: {k:?}");
            assert_eq!(k.params[0].1, ParamType::Pointer { elem: CType::TemplateParam("T".into()), is_const: false }, "{src}");
        }
    }
    // A requires-clause between the template head and `__global__`.
    let k = one("template <typename T> requires std::is_floating_point_v<T> __global__ void k(T* o) {}");
    assert_eq!(k.template_params.len(), 1);
    // The nearest linkage decides; an `extern "C" {` block gives its own.
    let k = parse_kernels(
        r#"extern "C" { extern "C++" __launch_bounds__(64) __global__ void cpp(int x) {} [[deprecated]] __global__ void c(int x) {} }"#,
    )
    .kernels;
    assert_eq!(k.iter().map(|k| (k.name.as_str(), k.extern_c)).collect::<Vec<_>>(), [("cpp", false), ("c", true)]);
    // After `void`: an unknown macro with arguments before the name, `noexcept` after it.
    let k =
        parse_kernels("__global__ void MY_BOUNDS(256) [[maybe_unused]] m(int x) {}\n__global__ void ne(int x) noexcept(true) {}").kernels;
    assert_eq!(k.iter().map(|k| (k.name.as_str(), k.params.len())).collect::<Vec<_>>(), [("m", 1), ("ne", 1)]);
    // An explicit instantiation declares no kernel of its own.
    let k = parse_kernels("template <class T> __global__ void t(T x) {}\ntemplate __global__ void t<int>(int);").kernels;
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].template_params.len(), 1);
}

#[test]
fn template_parameters_know_their_kinds_types_and_names() {
    let k = one("template <typename T, T V = T(3), unsigned long M = sizeof(T), template <class> class C = Box, typename T::type W = 0, int, class> __global__ void k(T* x) {}");
    let p = &k.template_params;
    assert_eq!(
        p.iter().map(|t| (t.name.as_str(), t.is_type, t.is_template, t.value_type.as_str())).collect::<Vec<_>>(),
        [
            ("T", true, false, ""),
            ("V", false, false, "T"),
            ("M", false, false, "unsigned long"),
            ("C", false, true, ""),
            ("W", false, false, "typename T::type"),
            ("", false, false, "int"),
            ("", true, false, ""),
        ]
    );
}

#[test]
fn forward_declarations_merge_and_overloads_stay_apart() {
    let k = parse_kernels("__global__ void f(int);\n__global__ void f(int n) {}\n__global__ void f(float x) {}").kernels;
    assert_eq!(k.len(), 2);
    assert_eq!(k[0].params[0], (Some("n".into()), ParamType::Value(CType::Scalar(DType::I32))));
    assert_eq!(k[1].params[0].1, ParamType::Value(CType::Scalar(DType::F32)));
}

#[test]
fn malformed_sources_do_not_panic() {
    for src in [
        "<> __global__ void f(int x) {}",
        "> __global__",
        "__global__",
        "__global__ void",
        "extern \"C\" {",
        "__global__ void f(int x",
        "__global__ void __launch_bounds__ ) f(int x) {}",
        "namespace",
        "namespace a::",
        "template <int N, bool B = (N > 4)> __global__ void k(",
    ] {
        let _ = parse_kernels(src);
    }
}

#[test]
fn a_raw_string_hides_no_declaration() {
    let src = r#"const char* help = R"txt(needs a 5" screen; see extern "C" __global__ void scale(int* x, int a, int n) )txt";
extern "C" __global__ void scale(float* x, float a, int n) {}"#;
    let k = one(src);
    assert_eq!(k.params[1].1, ParamType::Value(CType::Scalar(DType::F32)));
}
