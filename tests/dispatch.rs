//! Dispatch without a GPU: the instances the calls of `gpu_dispatch` select, deduced and
//! compiled for the inspection architecture (device 0's, else `CAIJIT_ARCH` or sm_90).

use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::compile::Program;
use cai_runtime::dispatch::{Dispatcher, TemplateArg};
use cai_runtime::kernel::inspection_arch;
use cai_runtime::launch::Arg;
use cai_runtime::signature::ArgType;
use cai_runtime::Error;
use caijit_integration::DISPATCH_SOURCE;

fn array(dtype: DType, n: usize) -> ArrayView {
    // A made-up device address: selection reads only dtypes and ranks.
    ArrayView::contiguous(0x7f00_0000_0000, &[n], dtype, false).unwrap()
}

fn types(args: &[Arg<'_>]) -> Vec<ArgType> {
    args.iter().map(Arg::arg_type).collect()
}

#[test]
fn a_template_is_deduced_from_arrays_and_typed_scalars() {
    caijit_integration::private_disk_cache();
    let axpy = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("axpy")).unwrap();
    assert!(axpy.is_deduced_template() && axpy.by_argument_types());
    let arch = inspection_arch().unwrap();
    let (x, y) = (array(DType::F32, 1000), array(DType::F32, 1000));
    let f32_call = [Arg::scalar(2.5f32), Arg::Array(&x), Arg::Array(&y), Arg::scalar(1000i32)];
    let chosen = axpy.select(arch, &types(&f32_call)).unwrap();
    assert_eq!(chosen.name, "axpy<float>", "the default template argument is left to the compiler");
    let info = chosen.info().unwrap();
    let params: Vec<&str> = info.params.iter().map(|p| p.cpp_type.as_str()).collect();
    assert_eq!(params, ["float", "const float*", "float*", "int"]);
    assert!(info.demangled.as_deref().is_some_and(|d| d.contains("axpy<float, double>")), "{:?}", info.demangled);

    let (x, y) = (array(DType::F64, 7), array(DType::F64, 7));
    let f64_call = [Arg::scalar(-1.25f64), Arg::Array(&x), Arg::Array(&y), Arg::untyped(7usize)];
    assert_eq!(axpy.select(arch, &types(&f64_call)).unwrap().name, "axpy<double>");
    // An untyped scalar deduces nothing; the arrays suffice.
    let untyped = [Arg::untyped(2.0f64), Arg::Array(&x), Arg::Array(&y), Arg::untyped(7usize)];
    assert_eq!(axpy.select(arch, &types(&untyped)).unwrap().name, "axpy<double>");

    // A typed scalar that disagrees with the arrays is an error naming the template parameter.
    let conflict = [Arg::scalar(2.0f32), Arg::Array(&x), Arg::Array(&y), Arg::untyped(7usize)];
    let e = axpy.select(arch, &types(&conflict)).unwrap_err();
    assert!(matches!(&e, Error::Argument(_)) && e.to_string().contains('T'), "{e}");
    // As is a wrong argument count.
    assert!(axpy.select(arch, &types(&conflict[..3])).is_err());
}

#[test]
fn an_overload_is_picked_by_the_arguments() {
    caijit_integration::private_disk_cache();
    let scale = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("scale")).unwrap();
    assert!(scale.is_overloaded() && scale.by_argument_types());
    let arch = inspection_arch().unwrap();
    let first_param = |args: &[Arg<'_>]| {
        let chosen = scale.select(arch, &types(args)).unwrap();
        chosen.info().unwrap().params.iter().map(|p| p.cpp_type.clone()).collect::<Vec<_>>()
    };
    let (f, d, i) = (array(DType::F32, 3), array(DType::F64, 3), array(DType::I32, 3));
    assert_eq!(first_param(&[Arg::Array(&f), Arg::untyped(3), Arg::scalar(3i64)]), ["float*", "float", "long long"]);
    assert_eq!(first_param(&[Arg::Array(&d), Arg::scalar(0.5f64), Arg::scalar(3i64)]), ["double*", "double", "long long"]);
    assert_eq!(first_param(&[Arg::Array(&i), Arg::scalar(-3i32), Arg::untyped(3usize)]), ["int*", "int", "long long"]);
    // No overload takes uint8 arrays, nor a float32 array with a typed double.
    let u = array(DType::U8, 3);
    let e = scale.select(arch, &types(&[Arg::Array(&u), Arg::untyped(3), Arg::untyped(3)])).unwrap_err();
    assert!(e.to_string().contains("no overload"), "{e}");
    let e = scale.select(arch, &types(&[Arg::Array(&f), Arg::scalar(0.5f64), Arg::untyped(3)])).unwrap_err();
    assert!(e.to_string().contains("no overload"), "{e}");
    // Its attributes exist per overload: the message names the casts that pick one.
    let e = scale.check_single_instance().unwrap_err();
    assert!(e.to_string().contains("(void(*)(float*, float, long long))scale"), "{e}");
}

#[test]
fn nothing_is_cached_before_a_launch() {
    caijit_integration::private_disk_cache();
    let axpy = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("axpy")).unwrap();
    let (x, y) = (array(DType::F32, 4), array(DType::F32, 4));
    assert!(axpy.cached(0, &[Arg::scalar(1.0f32), Arg::Array(&x), Arg::Array(&y), Arg::scalar(4i32)]).is_none());
}

#[test]
fn a_name_the_program_lacks_lists_the_kernels_it_has() {
    caijit_integration::private_disk_cache();
    let d = Dispatcher::new(Program::new(DISPATCH_SOURCE), Some("nope")).unwrap();
    let e = d.select(inspection_arch().unwrap(), &[]).unwrap_err();
    assert!(e.to_string().contains(r#"no kernel named "nope" in the program (it has: axpy, scale)"#), "{e}");
    assert!(matches!(e, Error::Argument(_)));
}

/// Every `long long` template argument has a spelling NVRTC compiles, `i64::MIN` (which has
/// no literal) included.
#[test]
fn an_i64_min_template_argument_compiles() {
    caijit_integration::private_disk_cache();
    let src = "// an_i64_min_template_argument\ntemplate <long long N> __global__ void rr_min(long long* x) { x[0] = N; }\n";
    let d = Dispatcher::new(Program::new(src), Some("rr_min")).unwrap();
    for n in [i64::MIN, -1, 0, i64::MAX] {
        let chosen = d.select_instance(inspection_arch().unwrap(), &[TemplateArg::Int(n)]).unwrap();
        assert_eq!(chosen.info().unwrap().params[0].cpp_type, "long long*");
    }
}
