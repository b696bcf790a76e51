//! Parameter types from the compiler: a C++ kernel's demangled lowered name, or for an
//! `extern "C"` kernel the demangled lowered name of a probe instantiation that encodes
//! its function type.

use super::decl::{parse_param, Spelling};
use super::error::SignatureError;
use super::tokens::{matching_backwards, split_top_level, tokenize, Tok};
use super::types::ParamType;

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

/// cpp_demangle's default recursion limits (96 parsing, 128 printing) stop at template
/// arguments nested about 17 deep; these allow about 200. Demangling that deep needs a few
/// MiB of stack (more in debug builds), so it runs on a thread of its own with
/// [`DEEP_STACK`] bytes of stack, and only for a name the defaults could not demangle.
const DEEP_RECURSION_LIMIT: u32 = 1024;
const DEEP_STACK: usize = 64 << 20;

fn demangle_with(lowered: &str, limit: Option<u32>) -> Result<String, (bool, String)> {
    let (parse, print) = match limit {
        Some(l) => (cpp_demangle::ParseOptions::default().recursion_limit(l), cpp_demangle::DemangleOptions::default().recursion_limit(l)),
        None => (cpp_demangle::ParseOptions::default(), cpp_demangle::DemangleOptions::default()),
    };
    let sym = cpp_demangle::Symbol::new_with_options(lowered.as_bytes(), &parse)
        .map_err(|e| (matches!(e, cpp_demangle::error::Error::TooMuchRecursion), e.to_string()))?;
    // Printing fails only on too much recursion (its error says no more).
    sym.demangle_with_options(&print).map_err(|_| (true, "too much recursion printing the demangled name".to_string()))
}

fn demangle(lowered: &str) -> Result<String, SignatureError> {
    let bad = |reason: String| SignatureError::Demangle { lowered: lowered.into(), reason };
    match demangle_with(lowered, None) {
        Ok(text) => Ok(text),
        Err((false, reason)) => Err(bad(reason)),
        Err((true, _)) => {
            let deep = std::thread::scope(|s| {
                let worker = std::thread::Builder::new()
                    .stack_size(DEEP_STACK)
                    .spawn_scoped(s, || demangle_with(lowered, Some(DEEP_RECURSION_LIMIT)));
                match worker {
                    Ok(w) => w.join().unwrap_or_else(|_| Err((false, "the demangler failed".into()))),
                    Err(e) => Err((false, format!("cannot start a thread to demangle it: {e}"))),
                }
            });
            deep.map_err(|(too_deep, reason)| {
                bad(if too_deep {
                    format!("{reason} (nested deeper than caijit's limit of {DEEP_RECURSION_LIMIT} levels)")
                } else {
                    reason
                })
            })
        }
    }
}

/// The qualified name (`ns::k`) a mangled name starts with, read without demangling it:
/// what names a kernel whose lowered name cannot be demangled. `None` for a name that is
/// not mangled or not read here (a special name, a substitution).
pub fn mangled_qualified_name(lowered: &str) -> Option<String> {
    let mut rest = lowered.strip_prefix("_Z")?;
    rest = rest.strip_prefix('L').unwrap_or(rest);
    let nested = rest.starts_with('N');
    if nested {
        rest = rest[1..].trim_start_matches(['r', 'V', 'K', 'R', 'O']);
    }
    let mut parts: Vec<&str> = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix("St") {
            parts.push("std");
            rest = r;
            continue;
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        let len: usize = rest[..digits].parse().ok()?;
        let name = rest.get(digits..digits.checked_add(len)?)?;
        rest = &rest[digits + len..];
        // The anonymous namespace is found from the enclosing scope.
        if !name.starts_with("_GLOBAL__N") {
            parts.push(name);
        }
        if !nested {
            break;
        }
    }
    (!parts.is_empty()).then(|| parts.join("::"))
}

/// The demangled text of a mangled name (`None` for a name that is not mangled, such as an
/// `extern "C"` kernel's, or that cannot be demangled).
pub fn demangled(lowered: &str) -> Option<String> {
    // Not every name demangles as a function (`s` alone is the type `short`).
    lowered.starts_with("_Z").then(|| demangle(lowered).ok()).flatten()
}

/// The parameter list of the group closed by the last `)` in `toks`.
fn last_parameter_list(toks: &[Tok], text: &str, kernel: &str) -> Result<Vec<ParamType>, SignatureError> {
    let no_list = || SignatureError::NoParameterList { demangled: text.into() };
    let close = toks.iter().rposition(|t| *t == Tok::Punct(')')).ok_or_else(no_list)?;
    let open = matching_backwards(toks, close, '(', ')').ok_or_else(no_list)?;
    let inner = toks.get(open + 1..close).ok_or_else(no_list)?;
    if inner.is_empty() || (inner.len() == 1 && matches!(&inner[0], Tok::Ident(v) if *v == "void")) {
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
    let Some(at) = toks.iter().position(|t| matches!(t, Tok::Ident(n) if *n == PROBE_TEMPLATE)) else { return Ok(None) };
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
    use crate::signature::types::{CType, Rank};

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
        assert_eq!((demangled("s"), demangled("scale")), (None, None));
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
    fn a_pointer_to_an_array_is_a_pointer_to_its_elements() {
        // void k(float (*)[8], int), void k(double const (*)[4][2]), void k(void (*)(int))
        let (_, params) = types_from_lowered("_Z1kPA8_fi").unwrap().unwrap();
        assert_eq!(params, [ptr(DType::F32, false), ParamType::Value(CType::Scalar(DType::I32))]);
        let (_, params) = types_from_lowered("_Z1kPA4_A2_Kd").unwrap().unwrap();
        assert_eq!(params, [ptr(DType::F64, true)]);
        let (_, params) = types_from_lowered("_Z1kPFviE").unwrap().unwrap();
        assert!(matches!(&params[0], ParamType::Value(CType::Named(n)) if n.contains("(*)")), "{params:?}");
    }

    /// `void k<W<W<…<int>…>>>(W<…>, int*)` nested `depth` deep.
    fn nested(depth: usize) -> String {
        let mut t = String::from("i");
        for _ in 0..depth {
            t = format!("1WI{t}E");
        }
        format!("_Z1kI{t}EvT_Pi")
    }

    #[test]
    fn template_arguments_nested_far_past_the_demanglers_defaults() {
        for depth in [1, 16, 18, 40, 100, 180] {
            let (text, params) = types_from_lowered(&nested(depth)).unwrap_or_else(|e| panic!("depth {depth}: {e}")).unwrap();
            assert_eq!(text.matches("W<").count(), 2 * depth, "{text}");
            assert_eq!(params.len(), 2);
            assert_eq!(params[1], ptr(DType::I32, false));
        }
        // Past caijit's limit: an error about this name alone, saying why.
        let e = types_from_lowered(&nested(400)).unwrap_err();
        assert!(matches!(&e, SignatureError::Demangle { .. }) && e.to_string().contains("recursion"), "{e}");
        assert_eq!(mangled_qualified_name(&nested(400)).as_deref(), Some("k"));
    }

    #[test]
    fn qualified_names_read_off_mangled_names() {
        for (lowered, name) in [
            ("_Z1kIiEvv", Some("k")),
            ("_ZN2ns5inner4axpyIfEEvT_", Some("ns::inner::axpy")),
            ("_ZN12_GLOBAL__N_16hiddenEs", Some("hidden")),
            ("_ZL1sv", Some("s")),
            ("_ZNSt3fooEv", Some("std::foo")),
            ("scale", None),
            ("_Z", None),
            ("_Z99k", None),
        ] {
            assert_eq!(mangled_qualified_name(lowered).as_deref(), name, "{lowered}");
        }
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
