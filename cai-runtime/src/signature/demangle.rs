//! Parameter types from the compiler: a C++ kernel's demangled lowered name, or for an
//! `extern "C"` kernel the demangled lowered name of a probe instantiation that encodes
//! its function type.

use super::decl::{parse_param, Spelling};
use super::error::SignatureError;
use super::tokens::{matching_backwards, split_top_level, tokenize, Tok};
use super::ParamType;

/// The name of the probe template appended to every program that has `extern "C"`
/// kernels: `caijit_probe_<decltype(&scale)>` is a kernel whose mangled name encodes
/// `scale`'s exact parameter types.
pub const PROBE_TEMPLATE: &str = "caijit_probe_";

/// The probe's definition, appended to a program's source (on a line of its own).
pub const PROBE_SOURCE: &str = "\ntemplate <class F> __global__ void caijit_probe_() {}\n";

/// The probe's name expression for a kernel named by `expr`: `decltype(&expr)`, or for an
/// overload cast (`(void(*)(double, int))k`, already a pointer) `decltype(expr)`.
pub fn probe_expression(expr: &str) -> String {
    let e = expr.trim();
    if e.starts_with('(') {
        format!("{PROBE_TEMPLATE}<decltype({e})>")
    } else {
        format!("{PROBE_TEMPLATE}<decltype(&{e})>")
    }
}

fn demangle(lowered: &str) -> Result<String, SignatureError> {
    let bad = |e: &dyn std::fmt::Display| SignatureError::Demangle { lowered: lowered.into(), reason: e.to_string() };
    let sym = cpp_demangle::Symbol::new(lowered.as_bytes()).map_err(|e| bad(&e))?;
    sym.demangle().map_err(|e| bad(&e))
}

/// The demangled text of a lowered name (`None` when it cannot be demangled).
pub fn demangled(lowered: &str) -> Option<String> {
    demangle(lowered).ok()
}

/// The parameter list of the group closed by the last `)` in `toks`.
fn last_parameter_list(toks: &[Tok], text: &str, kernel: &str) -> Result<Vec<ParamType>, SignatureError> {
    let no_list = || SignatureError::NoParameterList { demangled: text.into() };
    let close = toks.iter().rposition(|t| *t == Tok::Punct(')')).ok_or_else(no_list)?;
    let open = matching_backwards(toks, close, '(', ')').ok_or_else(no_list)?;
    let inner = toks.get(open + 1..close).ok_or_else(no_list)?;
    if inner.is_empty() || (inner.len() == 1 && matches!(&inner[0], Tok::Ident(v) if v == "void")) {
        return Ok(Vec::new());
    }
    split_top_level(inner)
        .into_iter()
        .enumerate()
        .map(|(index, p)| {
            parse_param(p, &[], Spelling::Compiler).map(|(_, t)| t).map_err(|reason| SignatureError::Param {
                kernel: kernel.into(),
                index,
                name: None,
                ctype: super::tokens::join_type(p),
                reason,
            })
        })
        .collect()
}

/// The demangled text and parameter types of a C++ kernel instance, from its lowered name.
/// `None` for names that are not mangled (`extern "C"` kernels).
pub fn types_from_lowered(lowered: &str) -> Result<Option<(String, Vec<ParamType>)>, SignatureError> {
    if !lowered.starts_with("_Z") {
        return Ok(None);
    }
    let text = demangle(lowered)?;
    // "void axpy<float>(float, float const*, float*, int)": the group closed by the last
    // `)` ("f(void (*)(int), int)", "S::f(int) const").
    let params = last_parameter_list(&tokenize(&text), &text, lowered)?;
    Ok(Some((text, params)))
}

/// The parameter types a probe's lowered name encodes (`_Z13caijit_probe_IPFvPfiEEvv`:
/// `void caijit_probe_<void (*)(float*, int)>()` → `float*, int`). `None` when `lowered`
/// is not a probe.
pub fn probe_types(lowered: &str) -> Result<Option<Vec<ParamType>>, SignatureError> {
    if !lowered.starts_with("_Z") || !lowered.contains(PROBE_TEMPLATE) {
        return Ok(None);
    }
    let text = demangle(lowered)?;
    let toks = tokenize(&text);
    let Some(at) = toks.iter().position(|t| matches!(t, Tok::Ident(n) if n == PROBE_TEMPLATE)) else { return Ok(None) };
    // The template argument: from the `<` after the name to the `>` before the probe's own
    // (empty) parameter list.
    let no_list = || SignatureError::NoParameterList { demangled: text.clone() };
    let end = toks.iter().rposition(|t| *t == Tok::Punct('>')).filter(|e| *e > at + 1).ok_or_else(no_list)?;
    let arg = &toks[at + 2..end];
    last_parameter_list(arg, &text, lowered).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cai::DType;
    use crate::signature::{CType, Rank};

    fn ptr(d: DType, is_const: bool) -> ParamType {
        ParamType::Pointer { elem: CType::Scalar(d), is_const }
    }

    #[test]
    fn demangled_instances() {
        let (text, params) = types_from_lowered("_Z4axpyIfEvT_PKS0_PS0_i1Sc6__half").unwrap().unwrap();
        assert_eq!(text, "void axpy<float>(float, float const*, float*, int, S, char, __half)");
        assert_eq!(
            params,
            vec![
                ParamType::Value(CType::Scalar(DType::F32)),
                ptr(DType::F32, true),
                ptr(DType::F32, false),
                ParamType::Value(CType::Scalar(DType::I32)),
                ParamType::Value(CType::Named("S".into())),
                ParamType::Value(CType::Scalar(DType::I8)),
                ParamType::Value(CType::Scalar(DType::F16)),
            ]
        );
        assert_eq!(types_from_lowered("scale").unwrap(), None);
    }

    #[test]
    fn parameter_lists_with_parentheses_inside_and_after() {
        let (text, params) = types_from_lowered("_Z1fPFviEi").unwrap().unwrap();
        assert_eq!(text, "f(void (*)(int), int)");
        assert_eq!(params.len(), 2, "{params:?}");
        assert_eq!(params[1], ParamType::Value(CType::Scalar(DType::I32)));
        let (text, params) = types_from_lowered("_Z1gv").unwrap().unwrap();
        assert_eq!((text.as_str(), params.len()), ("g()", 0));
        let (text, params) = types_from_lowered("_ZNK1S1fEi").unwrap().unwrap();
        assert_eq!(text, "S::f(int) const");
        assert_eq!(params, [ParamType::Value(CType::Scalar(DType::I32))]);
        let e = types_from_lowered("_Z3foo").unwrap_err();
        assert!(matches!(&e, SignatureError::NoParameterList { demangled } if demangled == "foo"), "{e}");
        assert!(matches!(types_from_lowered("_Zzz").unwrap_err(), SignatureError::Demangle { .. }));
    }

    #[test]
    fn a_users_own_array_is_a_struct_and_caijits_is_an_array() {
        // void k(Array<float, 4>, caijit::Array<float const, 2>)
        let (_, params) = types_from_lowered("_Z1k5ArrayIfLi4EEN6caijit5ArrayIKfLi2EEE").unwrap().unwrap();
        assert_eq!(params[0], ParamType::Value(CType::Named("Array<float, 4>".into())));
        assert_eq!(params[1], ParamType::Array { elem: CType::Scalar(DType::F32), is_const: true, rank: Rank::Fixed(2) });
    }

    #[test]
    fn probes_encode_function_and_pointer_types() {
        let t = probe_types("_Z13caijit_probe_IPFvPffib6__half1StcxPKdEEvv").unwrap().unwrap();
        assert_eq!(t.len(), 10);
        assert_eq!(t[0], ptr(DType::F32, false));
        assert_eq!(t[4], ParamType::Value(CType::Scalar(DType::F16)));
        assert_eq!(t[5], ParamType::Value(CType::Named("S".into())));
        assert_eq!(t[9], ptr(DType::F64, true));
        assert_eq!(probe_types("_Z13caijit_probe_IFvvEEvv").unwrap(), Some(vec![]));
        assert_eq!(probe_types("_Z1fv").unwrap(), None);
        assert_eq!(probe_types("scale").unwrap(), None);
        assert_eq!(probe_expression("scale"), "caijit_probe_<decltype(&scale)>");
        assert_eq!(probe_expression(" (void(*)(int))k"), "caijit_probe_<decltype((void(*)(int))k)>");
    }
}
