//! Numba-style deduction of a kernel template's arguments from launch arguments.

use std::collections::BTreeMap;

use super::decl::{KernelDecl, TemplateParam};
use super::error::SignatureError;
use super::types::{CType, ParamType, Rank};
use crate::cai::DType;

/// The type of a launch argument, as far as deduction is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgType {
    /// An array of this dtype and rank.
    Array { dtype: DType, rank: usize },
    /// A scalar of a known type (a NumPy scalar, a typed Rust value).
    TypedScalar(DType),
    /// A Python int, float or bool: converts to the parameter's type, deduces nothing.
    UntypedScalar,
    /// Anything else (raw pointers, bytes): deduces nothing.
    Opaque,
}

/// A deduced instance: the name expression to compile and the headers its types need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// `axpy<float>`, `ns::k<__half, 2>`.
    pub expression: String,
    /// `cuda_fp16.h`, `cuda_bf16.h`, `caijit/complex.cuh`: included before the program so
    /// that the instance compiles whatever the program includes itself.
    pub headers: Vec<&'static str>,
}

/// The headers that the types named in `text` (a name expression) need.
pub fn headers_for(text: &str) -> Vec<&'static str> {
    let mentions = |w: &str| {
        text.match_indices(w).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + w.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    // Only CUDA's own spellings (`half` may be a program's own type, and including
    // cuda_fp16.h would then redefine it).
    let mut out = Vec::new();
    if mentions("__half") || mentions("__half2") {
        out.push("cuda_fp16.h");
    }
    if mentions("__nv_bfloat16") || mentions("nv_bfloat16") || mentions("__nv_bfloat162") {
        out.push("cuda_bf16.h");
    }
    if text.contains("caijit::complex") {
        out.push("caijit/complex.cuh");
    }
    out
}

/// Deduce the template arguments of `decl` from the launch's argument types, Numba-style.
/// A template parameter no argument binds takes its default argument; only one without a
/// default is an error.
pub fn deduce(decl: &KernelDecl, args: &[ArgType]) -> Result<Instance, SignatureError> {
    let kernel = decl.qualified_name();
    if decl.params.len() != args.len() {
        return Err(SignatureError::ArgumentCount { kernel, expected: decl.params.len(), got: args.len() });
    }
    let mut found: BTreeMap<&str, String> = BTreeMap::new();
    let mut bind = |p: &str, value: String, index: usize| -> Result<(), SignatureError> {
        let Some(tp) = decl.template_params.iter().find(|t| t.name == p) else { return Ok(()) };
        match found.get(tp.name.as_str()) {
            Some(prev) if *prev != value => {
                Err(SignatureError::Conflict { kernel: kernel.clone(), param: p.into(), first: prev.clone(), second: value, index })
            }
            _ => {
                found.insert(tp.name.as_str(), value);
                Ok(())
            }
        }
    };
    for (index, ((_, ty), arg)) in decl.params.iter().zip(args).enumerate() {
        match (ty, arg) {
            (ParamType::Pointer { elem: CType::TemplateParam(p), .. }, ArgType::Array { dtype, .. }) => {
                bind(p, dtype.cpp_name().into(), index)?
            }
            (ParamType::Array { elem, rank, .. }, ArgType::Array { dtype, rank: r }) => {
                if let CType::TemplateParam(p) = elem {
                    bind(p, dtype.cpp_name().into(), index)?;
                }
                if let Rank::TemplateParam(p) = rank {
                    bind(p, r.to_string(), index)?;
                }
            }
            (ParamType::Value(CType::TemplateParam(p)), ArgType::TypedScalar(d)) => bind(p, d.cpp_name().into(), index)?,
            _ => {}
        }
    }
    // Each argument deduced or defaulted (`None`: left to its default).
    let mut targs: Vec<Option<String>> = Vec::with_capacity(decl.template_params.len());
    for tp in &decl.template_params {
        match (found.get(tp.name.as_str()), &tp.default) {
            (Some(v), _) => targs.push(Some(v.clone())),
            (None, Some(_)) => targs.push(None),
            (None, None) => return Err(SignatureError::CannotDeduce { kernel, param: tp.name.clone() }),
        }
    }
    // Trailing defaults are left to the compiler. One before a deduced argument must be
    // written out: as the source spells it, with every earlier parameter it names bound to
    // the value chosen for it, so that the compiler evaluates it as it would the default
    // (`(N > 4)` with N = 2 is `(static_cast<int>(2) > 4)`).
    while targs.last().is_some_and(Option::is_none) {
        targs.pop();
    }
    let mut written: Vec<String> = Vec::with_capacity(targs.len());
    for (i, (v, tp)) in targs.into_iter().zip(&decl.template_params).enumerate() {
        let text = match v {
            Some(v) => v,
            None => {
                let bound = bind_earlier(tp.default.as_deref().unwrap_or_default(), &decl.template_params[..i], &written);
                if tp.is_type || tp.is_template {
                    bound
                } else {
                    format!("({bound})")
                }
            }
        };
        written.push(text);
    }
    let expression = instance_expression(&kernel, &written);
    let headers = headers_for(&expression);
    Ok(Instance { expression, headers })
}

/// The name expression of `kernel`'s instance on the template arguments `targs` (as
/// written): `k<float, 4>`, and `k<caijit::complex<double> >` with a space between closing
/// brackets. The one spelling of an instance, deduced or named by its arguments, so that
/// both are one program.
pub fn instance_expression(kernel: &str, targs: &[String]) -> String {
    let mut expression = format!("{kernel}<{}>", targs.join(", "));
    if expression.ends_with(">>") {
        expression.insert(expression.len() - 1, ' ');
    }
    expression
}

/// `text` (a default template argument, or a non-type parameter's type) with each earlier
/// template parameter it names replaced by the argument written for it: a type by its
/// spelling, a value by itself converted to its parameter's type (as the parameter's name
/// would be), a template by its name. A name after `::`, `.` or `->` is a member, not the
/// parameter.
fn bind_earlier(text: &str, params: &[TemplateParam], values: &[String]) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            // A number (`0x1F`, `4u`) is never a name.
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push_str(&text[start..i]);
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == b'_') {
            out.push(char::from(c));
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let word = &text[start..i];
        let before = text[..start].trim_end();
        let member = before.ends_with("::") || before.ends_with('.') || before.ends_with("->");
        match params.iter().rposition(|p| p.name == word && !p.name.is_empty()).filter(|_| !member) {
            Some(at) => {
                let p = &params[at];
                let value = &values[at];
                let ty = bind_earlier(&p.value_type, &params[..at], &values[..at]);
                let called = text[i..].trim_start().starts_with(['(', '{']);
                if p.is_type && called && value.contains(' ') && !value.contains(['<', ':', '(']) {
                    // A functional cast needs one name: `T(3)` with T = `unsigned int`.
                    out.push_str(&format!("decltype(static_cast<{value}>(0))"));
                } else if p.is_type || p.is_template {
                    out.push_str(value);
                } else if ty.is_empty() || ty.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == "auto") {
                    out.push_str(&format!("({value})"));
                } else {
                    out.push_str(&format!("static_cast<{ty}>({value})"));
                }
            }
            None => out.push_str(word),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::decl::parse_kernels;

    fn one(src: &str) -> KernelDecl {
        let mut k = parse_kernels(src).kernels;
        assert_eq!(k.len(), 1, "{k:?}");
        k.remove(0)
    }
    fn expr(d: &KernelDecl, a: &[ArgType]) -> String {
        deduce(d, a).unwrap().expression
    }

    #[test]
    fn deduction() {
        let k = one("template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}");
        let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
        assert_eq!(expr(&k, &[ArgType::UntypedScalar, f32a, f32a, ArgType::UntypedScalar]), "axpy<float>");
        let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
        let e = deduce(&k, &[ArgType::UntypedScalar, f32a, f64a, ArgType::UntypedScalar]).unwrap_err();
        assert!(matches!(&e, SignatureError::Conflict { param, index: 2, .. } if param == "T"), "{e}");
        let k = one("template <typename T> __global__ void fill(T v, int n) {}");
        let e = deduce(&k, &[ArgType::UntypedScalar, ArgType::UntypedScalar]).unwrap_err();
        assert!(e.to_string().contains("cannot deduce template parameter T"), "{e}");
        let i = deduce(&k, &[ArgType::TypedScalar(DType::F16), ArgType::UntypedScalar]).unwrap();
        assert_eq!((i.expression.as_str(), i.headers), ("fill<__half>", vec!["cuda_fp16.h"]));
        let k = one("template <typename T, int N> __global__ void c(caijit::Array<const T, N> a, T* o) {}");
        let a3 = ArgType::Array { dtype: DType::I16, rank: 3 };
        let o = ArgType::Array { dtype: DType::I16, rank: 1 };
        assert_eq!(expr(&k, &[a3, o]), "c<short, 3>");
        assert!(matches!(deduce(&k, &[a3]).unwrap_err(), SignatureError::ArgumentCount { expected: 2, got: 1, .. }));
    }

    #[test]
    fn defaults_fill_what_no_argument_deduces() {
        let k = one("template <typename T, typename Acc = float> __global__ void k(const T* x, float* y) {}");
        let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
        let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
        assert_eq!(expr(&k, &[f64a, f32a]), "k<double>");
        let k = one("template <typename T, int BLOCK = 256> __global__ void k(T* x, int n) {}");
        assert_eq!(expr(&k, &[f32a, ArgType::UntypedScalar]), "k<float>");
        let k = one("template <int N, bool B = (N > 4), typename T = int> __global__ void k(T* x, caijit::Array<float, N> a) {}");
        assert_eq!(k.template_params.len(), 3, "{k:?}");
        assert_eq!(k.template_params[1].default.as_deref(), Some("(N > 4)"));
        let a2 = ArgType::Array { dtype: DType::F32, rank: 2 };
        // A default before a deduced argument is written with the earlier ones bound.
        assert_eq!(expr(&k, &[ArgType::Array { dtype: DType::F64, rank: 1 }, a2]), "k<2, ((static_cast<int>(2) > 4)), double>");
        assert_eq!(expr(&k, &[ArgType::Opaque, a2]), "k<2>");
        let k = one("namespace a { namespace b { template <typename T> __global__ void k(T* x) {} } }");
        assert_eq!(expr(&k, &[f32a]), "a::b::k<float>");
        let k = one("template <typename T> __global__ void k(T* x) {}");
        let i = deduce(&k, &[ArgType::Array { dtype: DType::C64, rank: 1 }]).unwrap();
        assert_eq!((i.expression.as_str(), i.headers), ("k<caijit::complex<float> >", vec!["caijit/complex.cuh"]));
    }

    #[test]
    fn written_defaults_bind_the_earlier_parameters_they_name() {
        let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
        let u32a = ArgType::Array { dtype: DType::U32, rank: 1 };
        let k = one("template <typename T, typename U = typename Traits<T>::type, int B = sizeof(T) * 8, \
                     unsigned M = B + (T(3) > 2), typename V = int> __global__ void k(T* x, V* y) {}");
        assert_eq!(
            expr(&k, &[u32a, f64a]),
            "k<unsigned int, typename Traits<unsigned int>::type, (sizeof (unsigned int)* 8), \
             (static_cast<int>((sizeof (unsigned int)* 8)) + (decltype(static_cast<unsigned int>(0)) (3) > 2)), double>"
        );
        // A value of a dependent type is converted to that type; `auto` keeps its own.
        let k =
            one("template <typename T, T Z = T(1), auto A = Z + 1, bool B = (A > Z), typename V = int> __global__ void k(T* x, V* y) {}");
        assert_eq!(
            expr(&k, &[f64a, u32a]),
            "k<double, (double (1)), (static_cast<double>((double (1))) + 1), ((((static_cast<double>((double (1))) + 1)) > \
             static_cast<double>((double (1))))), unsigned int>"
        );
        // Members and qualified names that spell a parameter's name are not the parameter.
        let k = one("template <int N, int M = S::N + s.N + N, typename T = int> __global__ void k(caijit::Array<T, N> a) {}");
        assert_eq!(expr(&k, &[ArgType::Array { dtype: DType::F32, rank: 3 }]), "k<3, (S::N + s . N + static_cast<int>(3)), float>");
    }

    #[test]
    fn headers_follow_the_types_named() {
        assert_eq!(headers_for("k<__half>"), ["cuda_fp16.h"]);
        assert_eq!(headers_for("k<__nv_bfloat16, 2>"), ["cuda_bf16.h"]);
        assert_eq!(headers_for("k<caijit::complex<float> >"), ["caijit/complex.cuh"]);
        assert!(headers_for("k<halfway, complexity, half, std::complex<float>>").is_empty());
        assert_eq!(headers_for("k<__half2, __nv_bfloat16>"), ["cuda_fp16.h", "cuda_bf16.h"]);
    }
}
