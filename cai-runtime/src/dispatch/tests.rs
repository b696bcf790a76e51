//! Tests of `dispatch`.

use super::*;
use crate::cai::DType;

/// A timing harness, not a test: the first call's lookup of `caijit.ops.add`'s float32
/// instance in a bundle, as a first call takes it (open the registered bundle, make the
/// dispatcher, select the instance; `compile::bundled`'s harness of the same name times
/// each step alone). In a fresh process each time, release build:
///
/// ```sh
/// CAIJIT_PHASES_BUNDLE=/tmp/ops90.caijit \
///     target/release/deps/cai_runtime-… --ignored --exact dispatch::tests::first_lookup_phases --nocapture
/// ```
///
/// Prints `phase<TAB>microseconds` lines.
#[test]
#[ignore = "a timing harness: CAIJIT_PHASES_BUNDLE names a kernel library bundle with sm_90"]
fn first_lookup_phases() {
    use std::time::Instant;

    use crate::compile::{CacheSource, OPS};

    let Some(path) = std::env::var_os("CAIJIT_PHASES_BUNDLE") else { return };
    let source = OPS.iter().find(|(n, _)| *n == "elementwise").unwrap().1;
    let mut phases = Vec::new();
    let mut t = Instant::now();
    let mut lap = |name: &'static str, t: &mut Instant| {
        phases.push((name, t.elapsed()));
        *t = Instant::now();
    };
    crate::bundle::add_default(&path);
    lap("register the bundle", &mut t);
    crate::bundle::loaded().unwrap();
    lap("open the bundle (header, TOC, metadata, lookup table)", &mut t);
    let d = Dispatcher::new(Program::new(source).name("elementwise.cu"), Some("binary_contiguous")).unwrap();
    lap("Dispatcher::new (declarations of the source)", &mut t);
    let s = d.select_instance(Arch(90), &[TemplateArg::Type(DType::F32)]).unwrap();
    lap("select_instance (key, find, sections, layouts)", &mut t);
    assert_eq!((s.compiled.source, s.info().unwrap().params.len()), (CacheSource::Bundle, 5));
    for (name, d) in &phases {
        println!("{name}\t{}", d.as_micros());
    }
}

#[test]
fn instances_to_bake_are_named_exactly() {
    let p = Program::new("template <typename T> __global__ void axpy(T a, const T* x, T* y, long long n) {}");
    let e = instance_programs(&p, &["axpy".to_string()]).unwrap_err().to_string();
    assert!(e.contains("names a template") && e.contains("axpy<float>"), "{e}");
    let made = instance_programs(&p, &["axpy<float>".to_string()]).unwrap();
    assert_eq!(made[0].name_expressions, ["axpy<float>"]);
}

#[test]
fn names_resolve_to_declarations_overloads_and_namespaces() {
    let d = Dispatcher::new(Program::new("template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}"), None).unwrap();
    assert_eq!(d.name(), "axpy");
    assert!(d.is_deduced_template() && d.by_argument_types() && !d.is_overloaded());
    let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
    let (p, e) = d.instance_for(&[ArgType::UntypedScalar, f32a, f32a, ArgType::UntypedScalar]).unwrap();
    assert_eq!((e.as_str(), p.name_expressions.as_slice()), ("axpy<float>", ["axpy<float>".to_string()].as_slice()));
    let s = d.specialize("double").unwrap();
    assert_eq!(s.name(), "axpy<double>");
    assert!(!s.is_deduced_template() && !s.by_argument_types());
    assert_eq!(s.instance_for(&[]).unwrap().1, "axpy<double>");

    let ov = Dispatcher::new(Program::new("__global__ void k(float* x) {}\n__global__ void k(double* x) {}"), Some("k")).unwrap();
    assert!(ov.is_overloaded() && ov.by_argument_types());
    assert!(ov.instance_for(&[]).unwrap().0.name_expressions.is_empty(), "overloads are found among the compiled kernels");

    let ns = "namespace a { __global__ void k(int n) {} }\nnamespace b { __global__ void k(int n) {} }";
    let amb = Dispatcher::new(Program::new(ns), Some("k")).unwrap();
    assert!(!amb.is_overloaded() && amb.instance_for(&[]).unwrap().0.name_expressions.is_empty());
    let qualified = Dispatcher::new(Program::new(ns), Some("a::k")).unwrap();
    assert_eq!(qualified.instance_for(&[]).unwrap().0.name_expressions, ["a::k"]);

    let two = Program::new("__global__ void f(int n) {}\n__global__ void g(int n) {}");
    assert!(Dispatcher::new(two, None).unwrap_err().to_string().contains("declares 2 kernels (f, g)"));
    assert!(Dispatcher::new(Program::new("__global__ void f() {}"), Some("  ")).is_err());
}

#[test]
fn explicit_instances_are_the_program_with_one_name_expression() {
    use TemplateArg::{Int, Type};
    assert_eq!(template_instance("k", &[Type(DType::C64), Int(-4), Type(DType::U8)]), "k<caijit::complex<float>, -4, unsigned char>");
    let src = "template <typename T, int N> __global__ void k(T* x) {}";
    let d = Dispatcher::new(Program::new(src).name("k.cu"), None).unwrap();
    let (p, name) = d.explicit_instance_for(&[Type(DType::F16), Int(8)]).unwrap();
    assert_eq!(name, "k<__half, 8>");
    // The program `specialize` compiles (a deduced instance too): with the header of
    // `__half`, so that a bundle baked for the instance serves each way of asking.
    assert_eq!(p, Program::new(src).name("k.cu").including(&["cuda_fp16.h"]).name_expression("k<__half, 8>"));
    assert_eq!(p, d.specialize("__half, 8").unwrap().instance_for(&[]).unwrap().0);
    assert_eq!(
        d.explicit_instance_for(&[Type(DType::F32), Int(8)]).unwrap().0,
        Program::new(src).name("k.cu").name_expression("k<float, 8>")
    );
    // i64::MIN has no literal: written as NVRTC reads a `long long` constant.
    assert_eq!(template_instance("k", &[Int(i64::MIN)]), "k<(-9223372036854775807LL - 1)>");
    // Only a template's plain name has explicit instances.
    let e = |d: &Dispatcher, args: &[TemplateArg]| d.explicit_instance_for(args).unwrap_err().to_string();
    assert!(e(&d, &[]).contains("`k` needs template arguments"), "{}", e(&d, &[]));
    let one = d.specialize("float, 2").unwrap();
    assert!(e(&one, &[Type(DType::F32)]).contains("`k<float, 2>` names one instance already"), "{}", e(&one, &[Type(DType::F32)]));
    let plain = Dispatcher::new(Program::new("__global__ void f(int n) {}"), None).unwrap();
    assert!(e(&plain, &[Int(1)]).contains("`f` is not a template: no instance `f<1>`"), "{}", e(&plain, &[Int(1)]));
    let ov = Dispatcher::new(Program::new("__global__ void g(float* x) {}\n__global__ void g(double* x) {}"), None).unwrap();
    assert!(e(&ov, &[Int(1)]).contains("overload set"), "{}", e(&ov, &[Int(1)]));
    // A name the tokenizer does not find (made by a macro): NVRTC decides.
    let made = Dispatcher::new(Program::new("#define K template <class T> __global__ void m(T* x) {}\nK"), Some("m")).unwrap();
    assert_eq!(made.explicit_instance_for(&[Type(DType::F32)]).unwrap().1, "m<float>");
}

/// One request is one program, however it is made: named (`caijit.kernel(src,
/// "k<__half>")`), deduced from argument types (a launch), by template arguments
/// (`Dispatcher::instance`), by `specialize`, with name expressions (`compile()`, the
/// CLI's `--instantiate`) and by `bundle build --instance`; so one bundle key.
#[test]
fn every_way_of_asking_for_an_instance_makes_one_program() {
    use TemplateArg::{Int, Type};
    let arr = |dtype| ArgType::Array { dtype, rank: 1 };
    let both = "template <typename A, typename B> __global__ void k(const A* a, B* b) {}";
    // (source, the plain name, the instance, argument types that deduce it, its template arguments)
    type Row<'a> = (&'a str, &'a str, &'a str, Vec<ArgType>, Vec<TemplateArg>);
    let table: Vec<Row> = vec![
        ("template <typename T> __global__ void k(T* x) {}", "k", "k<float>", vec![arr(DType::F32)], vec![Type(DType::F32)]),
        ("template <typename T> __global__ void k(T* x) {}", "k", "k<__half>", vec![arr(DType::F16)], vec![Type(DType::F16)]),
        (both, "k", "k<__half, __nv_bfloat16>", vec![arr(DType::F16), arr(DType::BF16)], vec![Type(DType::F16), Type(DType::BF16)]),
        (both, "k", "k<__nv_bfloat16, __half>", vec![arr(DType::BF16), arr(DType::F16)], vec![Type(DType::BF16), Type(DType::F16)]),
        // A default template argument is left to the compiler however it is asked for.
        (
            "template <typename T, int N = 4> __global__ void k(T* x) {}",
            "k",
            "k<caijit::complex<double> >",
            vec![arr(DType::C128)],
            vec![Type(DType::C128)],
        ),
        ("template <typename T, int N> __global__ void k(T* x) {}", "k", "k<unsigned char, -3>", vec![], vec![Type(DType::U8), Int(-3)]),
        ("__global__ void k(int* x) {}\ntemplate <typename T> __global__ void k(T* x) {}", "k", "k<double>", vec![], vec![]),
    ];
    for (src, name, expr, types, targs) in table {
        let program = Program::new(src).name("k.cu");
        let named = Dispatcher::new(program.clone(), Some(expr)).unwrap().instance_for(&[]).unwrap().0;
        let mut made = vec![
            ("with name expressions", with_name_expressions(program.clone(), [expr.to_string()])),
            ("bundle build --instance", instance_programs(&program, &[expr.to_string()]).unwrap().remove(0)),
        ];
        let plain = Dispatcher::new(program.clone(), Some(name)).unwrap();
        if !targs.is_empty() {
            made.push(("by template arguments", plain.explicit_instance_for(&targs).unwrap().0));
        }
        if !types.is_empty() {
            made.push(("deduced", plain.instance_for(&types).unwrap().0));
        }
        if plain.is_deduced_template() {
            let args = expr.split_once('<').unwrap().1.strip_suffix('>').unwrap();
            made.push(("specialize", plain.specialize(args).unwrap().instance_for(&[]).unwrap().0));
        }
        let key = crate::compile::bundle_key(&named).unwrap().unwrap();
        for (how, p) in made {
            assert_eq!(p, named, "{expr} {how}");
            assert_eq!(crate::compile::bundle_key(&p).unwrap().unwrap(), key, "{expr} {how}");
        }
    }
}

#[test]
fn argument_errors_get_the_index_and_the_declared_parameter() {
    let d = Dispatcher::new(Program::new("template <typename T> __global__ void k(int n, const T* x) {}"), None).unwrap();
    let Error::Argument(a) = d.name_argument(1, Error::argument("argument 1: a numpy.ndarray is host memory")) else { panic!() };
    assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(1), Some("x"), Some("const T*")));
    assert_eq!(a.message, "argument 1: a numpy.ndarray is host memory");
    // What an error already says is kept.
    let Error::Argument(a) = d.name_argument(0, Error::argument_at(0, Some("m"), "long", "too big")) else { panic!() };
    assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(0), Some("m"), Some("long")));
    // Without a declaration, the index alone.
    let macro_made = Dispatcher::new(Program::new("#define K(n) __global__ void n(int x) {}\nK(k)"), Some("k")).unwrap();
    // A deduction conflict names the argument that disagrees.
    let t = Dispatcher::new(Program::new("template <typename T> __global__ void t(T a, const T* x) {}"), None).unwrap();
    let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
    let Err(Error::Argument(a)) = t.instance_for(&[ArgType::TypedScalar(DType::F32), f64a]) else { panic!() };
    assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (Some(1), Some("x"), Some("const T*")), "{}", a.message);
    let Error::Argument(a) = macro_made.name_argument(3, Error::argument("bad")) else { panic!() };
    assert_eq!((a.index, a.name, a.ctype), (Some(3), None, None));
    assert!(matches!(d.name_argument(0, Error::launch("x")), Error::Launch(_)));
    // A malformed interface, too: it names the argument, and stays an interface error.
    let Error::InterfaceAt(a) = d.name_argument(1, Error::Interface(crate::cai::InterfaceError::StreamZero)) else { panic!() };
    assert_eq!((a.index, a.name.as_deref(), a.ctype.as_deref()), (1, Some("x"), Some("const T*")));
    assert_eq!((d.parameter(0), d.parameter(2)), ((Some("n"), Some("int".to_string())), (None, None)));
}

#[test]
fn expressions_bring_the_headers_their_types_need() {
    let p = with_name_expressions(Program::new("__global__ void k() {}"), ["k<__half>".to_string(), "k<float>".to_string()]);
    assert_eq!(p.name_expressions, ["k<__half>", "k<float>"]);
    assert!(p.source.starts_with("#include <cuda_fp16.h>\n#line 1\n"), "{}", p.source);
}

fn chosen_program(d: &Dispatcher, array: ArgType) -> Program {
    d.instance_for(&[ArgType::UntypedScalar, array, array, ArgType::UntypedScalar]).unwrap().0
}

/// A bundle made here, by hand, as `bake` writes one (fake CUBIN bytes: nothing is
/// loaded on a device): the bundled instances of a template are deduced, found by the
/// bundle key and laid out from the bundle's `.entry` declarations, with no NVRTC (the
/// build without the `nvrtc` feature runs this too).
#[test]
fn a_template_is_deduced_and_laid_out_from_a_bundle_without_nvrtc() {
    use crate::bundle::{self, Bundle, ProgramBlobs};
    use crate::compile::{bundle_key, family_key, CacheSource};
    use serde_json::json;
    let src = "// dispatched from a bundle\ntemplate <typename T> __global__ void axpy(T a, const T* x, T* y, long long n) {}";
    let program = Program::new(src).name("axpy_bundled.cu");
    let exprs = ["axpy<float>", "axpy<double>"];
    let lowered = ["_Z4axpyIfEvT_PKS0_PS0_x", "_Z4axpyIdEvT_PKS0_PS0_x"];
    let whole = exprs.iter().fold(program.clone(), |p, e| p.name_expression(*e));
    let entries: String = lowered
        .iter()
        .zip([".f32", ".f64"])
        .map(|(l, a)| {
            format!(
                ".entry {l}(\n.param {a} {l}_param_0,\n.param .u64 {l}_param_1,\n.param .u64 {l}_param_2,\n.param .u64 {l}_param_3\n)\n"
            )
        })
        .collect();
    let blobs = ProgramBlobs {
        description: json!({
            "key": bundle_key(&whole).unwrap().unwrap(), "family": family_key(&whole).unwrap().unwrap(),
            "name": "axpy_bundled.cu", "source_sha256": "", "options": [], "defines": [], "name_expressions": exprs,
            "nvrtc_options": [], "lowered": exprs.iter().zip(lowered).map(|(e, l)| json!([e, l])).collect::<Vec<_>>(), "kernels": [],
        }),
        entries,
        cubins: vec![(90, b"\x7fELF, not really".to_vec())],
        ptx: None,
    };
    bundle::install(Bundle::from_vec(bundle::write("13.0", "none", &[90], vec![blobs], &[]), "by-hand.caijit").unwrap()).unwrap();

    let axpy = Dispatcher::new(program, Some("axpy")).unwrap();
    let f64s = ArgType::Array { dtype: DType::F64, rank: 1 };
    let chosen = axpy.select(Arch(90), &[ArgType::UntypedScalar, f64s, f64s, ArgType::UntypedScalar]).unwrap();
    assert_eq!((chosen.name.as_str(), chosen.compiled.source), ("axpy<double>", CacheSource::Bundle));
    let params: Vec<(&str, usize, usize)> = chosen.info().unwrap().params.iter().map(|p| (p.cpp_type.as_str(), p.offset, p.size)).collect();
    assert_eq!(params, [("double", 0, 8), ("const double*", 8, 8), ("double*", 16, 8), ("long long", 24, 8)]);
    let f32s = ArgType::Array { dtype: DType::F32, rank: 1 };
    let chosen = axpy.select(Arch(90), &[ArgType::TypedScalar(DType::F32), f32s, f32s, ArgType::UntypedScalar]).unwrap();
    assert_eq!(chosen.info().unwrap().params[0].cpp_type, "float");
    // What `bundle build --instance` bakes is what these launches look up.
    let baked = instance_programs(axpy.program(), &["axpy<double>".to_string()]).unwrap();
    assert_eq!(baked, [chosen_program(&axpy, f64s)]);
    // No code for sm_80 and, without NVRTC, nothing to compile it with: an error, not a guess.
    if crate::compile::toolkit().is_err() {
        let e = axpy.select(Arch(80), &[ArgType::UntypedScalar, f64s, f64s, ArgType::UntypedScalar]).unwrap_err().to_string();
        assert!(e.contains("no code for this device's architecture sm_80"), "{e}");
    }
}
