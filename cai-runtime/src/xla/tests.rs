//! The description, plan and registry of XLA launches, without a GPU.

use std::sync::Arc;

use super::description::{fingerprint_of, parse_fingerprint, Description};
use super::plan::{check_buffers, plan, ParamSource};
use super::registry::{register, resolve, Prepared};
use super::spec::{bind, check_aliases, Binding, BufferSpec};
use crate::cai::DType;
use crate::compile::{KernelInfo, Program};
use crate::launch::{LaunchConfig, Num};
use crate::signature::ParamLayout;
use crate::signature::{ArgType, ParamKind};
use crate::sys::xla_ffi::{self, BufferRef};

fn param(index: usize, name: &str, kind: ParamKind, size: usize, offset: usize) -> ParamLayout {
    ParamLayout { index, name: Some(name.into()), cpp_type: format!("{kind:?}"), kind, size, align: size.min(8), offset }
}

fn info() -> KernelInfo {
    KernelInfo {
        name_expression: None,
        lowered_name: "k".into(),
        demangled: None,
        qualified_name: "k".into(),
        params: vec![
            param(0, "x", ParamKind::Pointer { dtype: Some(DType::F32), is_const: true }, 8, 0),
            param(1, "y", ParamKind::Pointer { dtype: Some(DType::F32), is_const: false }, 8, 8),
            param(2, "n", ParamKind::Scalar(DType::I32), 4, 16),
        ],
    }
}

fn f32s(n: usize) -> BufferSpec {
    BufferSpec { dtype: DType::F32, shape: vec![n] }
}

#[test]
fn plans_buffers_and_scalars() {
    let plan = plan(&info(), &[f32s(4)], &[f32s(4)], &[], &[Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Int(4))]).unwrap();
    assert!(matches!(plan[0], (0, ParamSource::Pointer(0))));
    assert!(matches!(plan[1], (8, ParamSource::Pointer(1))));
    assert!(matches!(&plan[2], (16, ParamSource::Bytes(b)) if b[..] == 4i32.to_le_bytes()));
}

#[test]
fn refuses_what_does_not_fit() {
    let bind = |b: [Binding; 3]| plan(&info(), &[f32s(4)], &[f32s(4)], &[], &b).unwrap_err().to_string();
    let (b0, b1, n) = (Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Int(4)));
    assert!(bind([b1, b0, n]).contains("input 0 is bound to a non-const parameter"), "{}", bind([b1, b0, n]));
    assert!(bind([b0, b1, Binding::Scalar(Num::Int(1 << 40))]).contains("out of range"));
    assert!(bind([b0, n, n]).contains("expected"));
    assert!(bind([b0, Binding::Buffer(7), n]).contains("does not exist"));
    let ints = BufferSpec { dtype: DType::I32, shape: vec![4] };
    let e = plan(&info(), &[ints], &[f32s(4)], &[], &[b0, b1, n]).unwrap_err().to_string();
    assert!(e.starts_with("argument 0 `x`") && e.ends_with("expected a buffer of float32 (float), got int32"), "{e}");
    let e = plan(&info(), &[f32s(4)], &[f32s(4)], &[], &[b0, b1]).unwrap_err().to_string();
    assert_eq!(e, "kernel `k` takes 3 arguments, got 2");
    // An input aliased to an output may be written.
    assert!(plan(&info(), &[f32s(4), f32s(4)], &[], &[(1, 0)], &[b0, b1, n]).is_ok());
}

#[test]
fn buffers_are_checked_against_the_plan() {
    let dims = [4i64];
    let ok = BufferRef { dtype: xla_ffi::dtype::F32, ptr: 0x1000, dims: &dims };
    assert!(check_buffers("argument", &[ok], &[f32s(4)]).is_ok());
    assert!(check_buffers("argument", &[ok], &[f32s(5)]).is_err());
    assert!(check_buffers("argument", &[], &[f32s(4)]).unwrap_err().to_string().contains("has 0 arguments"));
    let wrong = BufferRef { dtype: xla_ffi::dtype::F64, ..ok };
    assert!(check_buffers("argument", &[wrong], &[f32s(4)]).is_err());
}

fn sample() -> Description {
    let program = Program::new("extern \"C\" __global__ void k(const float* x, float* y, int n) { /* 1:2:3: ünï */ }")
        .name("k.cu")
        .option("-DX=1")
        .define("Y", Some("2".into()))
        .define("Z", None)
        .include_dir("/tmp/inc")
        .name_expression("k")
        .located_at("/tmp/src/k.cu");
    Description {
        program,
        headers: "0123abcd".into(),
        name: "k".into(),
        inputs: vec![f32s(4), BufferSpec { dtype: DType::C64, shape: vec![] }],
        outputs: vec![BufferSpec { dtype: DType::BF16, shape: vec![2, 0, 3] }],
        aliases: vec![(1, 0)],
        bindings: vec![
            Binding::Buffer(0),
            Binding::Scalar(Num::Int(-(1 << 100))),
            Binding::Scalar(Num::Float(-0.1)),
            Binding::Scalar(Num::Complex(f64::NAN, 1e300)),
            Binding::Scalar(Num::Bool(true)),
        ],
        config: LaunchConfig::new([3, 2, 1], [128, 1, 1]).shared_mem(65536).cluster([1, 2, 1]),
    }
}

#[test]
fn a_description_decodes_to_what_was_encoded() {
    let d = sample();
    let text = d.encode().unwrap();
    let back = Description::decode(&text).unwrap();
    // NaN != NaN: compare the bits of the floats, the rest as is.
    let bits = |b: &[Binding]| {
        format!(
            "{:?}",
            b.iter()
                .map(|b| match b {
                    Binding::Scalar(Num::Complex(re, im)) => (re.to_bits(), im.to_bits()),
                    _ => (0, 0),
                })
                .collect::<Vec<_>>()
        )
    };
    assert_eq!(bits(&back.bindings), bits(&d.bindings));
    assert_eq!(back.bindings[..3], d.bindings[..3]);
    assert_eq!(
        (&back.program, &back.name, &back.inputs, &back.outputs, &back.aliases),
        (&d.program, &d.name, &d.inputs, &d.outputs, &d.aliases)
    );
    assert_eq!(back.config, d.config);
    assert_eq!(back.encode().unwrap(), text);
    let plain = Description { config: LaunchConfig::new([1, 1, 1], [1, 1, 1]), ..sample() };
    assert_eq!(Description::decode(&plain.encode().unwrap()).unwrap().config, plain.config);
}

#[test]
fn a_malformed_description_is_an_error() {
    let text = sample().encode().unwrap();
    for bad in [&text[..text.len() - 1], &text[1..], "", "19:caijit-xla-launch/0", &format!("{text}1:x")] {
        assert!(Description::decode(bad).is_err(), "{bad:?}");
    }
    let e = Description::decode("19:caijit-xla-launch/0").unwrap_err().to_string();
    assert!(e.contains("format"), "{e}");
}

#[test]
fn fingerprints_are_32_hex_digits_of_the_description() {
    let text = sample().encode().unwrap();
    let key = fingerprint_of(&text);
    assert_eq!(parse_fingerprint(format!("{key:032x}").as_bytes()).unwrap(), key);
    assert_ne!(fingerprint_of(&text.replace("1:2:3", "1:2:4")), key);
    let hex = format!("{key:032x}");
    for bad in ["", "12", &hex[1..], &format!("+{}", &hex[1..]), &format!("{hex}0"), &hex.to_uppercase().replace(char::is_numeric, "G")] {
        assert!(parse_fingerprint(bad.as_bytes()).is_err(), "{bad:?}");
    }
}

#[test]
fn a_description_that_does_not_hash_to_its_fingerprint_is_refused() {
    // Nothing is registered under these keys, so the description is what decides; it
    // must hash to the fingerprint before anything is decoded or compiled.
    let text = sample().encode().unwrap();
    let other = format!("{:032x}", fingerprint_of(&text) ^ 1);
    let e = resolve(Some(other.as_bytes()), Some(text.as_bytes()), true).unwrap_err().to_string();
    assert!(e.contains("does not match its fingerprint"), "{e}");
    let e = resolve(None, Some(text.as_bytes()), false).unwrap_err().to_string();
    assert!(e.contains("no `caijit_fingerprint` attribute"), "{e}");
    let e = resolve(Some(other.as_bytes()), None, false).unwrap_err().to_string();
    assert!(e.contains("no `caijit_launch` attribute"), "{e}");
    let e = resolve(Some(b"42"), Some(text.as_bytes()), false).unwrap_err().to_string();
    assert!(e.contains("32 hex digits"), "{e}");
}

#[test]
fn a_registered_launch_is_found_by_its_fingerprint_and_checked_against_its_description() {
    let d = Description { program: Program::new("registry test"), ..sample() };
    let text = d.encode().unwrap();
    let key = fingerprint_of(&text);
    let p = Prepared {
        description: text.clone(),
        headers: d.headers.clone(),
        program: d.program.clone(),
        name: d.name.clone(),
        info: info(),
        plan: Vec::new(),
        buffer_size: 0,
        inputs: d.inputs.clone(),
        outputs: d.outputs.clone(),
        bindings: d.bindings.clone(),
        config: d.config,
        kernels: Vec::new(),
    };
    let registered = register(key, p);
    let fp = format!("{key:032x}");
    let found = resolve(Some(fp.as_bytes()), Some(text.as_bytes()), true).unwrap();
    assert!(Arc::ptr_eq(&found, &registered));
    // An execute-stage call: the fingerprint alone finds it (no hashing, no comparison).
    assert!(Arc::ptr_eq(&resolve(Some(fp.as_bytes()), None, false).unwrap(), &registered));
    // Instantiation compares the description with the registered one.
    let other = text.replace("registry test", "registry tesT");
    let e = resolve(Some(fp.as_bytes()), Some(other.as_bytes()), true).unwrap_err().to_string();
    assert!(e.contains("differs from the launch registered"), "{e}");
    let e = resolve(Some(fp.as_bytes()), None, true).unwrap_err().to_string();
    assert!(e.contains("has no `caijit_launch` attribute"), "{e}");
}

#[test]
fn parameters_bind_to_named_scalars_then_buffers_in_order() {
    let names = [Some("x".to_string()), Some("y".to_string()), Some("n".to_string())];
    let n = vec![("n".to_string(), (Num::Int(4), None))];
    let (b, types) = bind("k", &names, &[f32s(4)], &[f32s(4)], &[], &n).unwrap();
    assert_eq!(b, [Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Int(4))]);
    assert_eq!(types[2], ArgType::UntypedScalar);
    assert_eq!(types[0], ArgType::Array { dtype: DType::F32, rank: 1 });
    // An output aliased to an input takes no parameter of its own when the kernel has one fewer.
    let two = [Some("x".to_string()), Some("n".to_string())];
    let (b, _) = bind("k", &two, &[f32s(4)], &[f32s(4)], &[(0, 0)], &n).unwrap();
    assert_eq!(b, [Binding::Buffer(0), Binding::Scalar(Num::Int(4))]);
    let e = bind("k", &names, &[f32s(4)], &[], &[], &n).unwrap_err().to_string();
    assert!(e.contains("has 2 buffer parameters") && e.contains("1 inputs and 0 outputs"), "{e}");
    let e = bind("k", &names, &[f32s(4)], &[f32s(4)], &[], &[("m".to_string(), (Num::Int(1), None))]).unwrap_err().to_string();
    assert!(e.contains("no parameter named `m` (its parameters: x, y, n)"), "{e}");
}

#[test]
fn aliases_pair_existing_buffers_of_one_kind() {
    assert!(check_aliases(&[f32s(4)], &[f32s(4)], &[(0, 0)]).is_ok());
    let e = check_aliases(&[f32s(4)], &[f32s(5)], &[(0, 0)]).unwrap_err().to_string();
    assert!(e.contains("input 0 (float32[4]) and output 0 (float32[5]) differ"), "{e}");
    let e = check_aliases(&[f32s(4)], &[f32s(4)], &[(0, 1)]).unwrap_err().to_string();
    assert!(e.contains("no input 0 or no output 1"), "{e}");
}
