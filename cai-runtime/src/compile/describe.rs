//! A compilation's kernels described: each kernel of the PTX with its parameters (types
//! from the compiler, layouts from the PTX, names from the source), or why it cannot be
//! launched.

use std::collections::HashMap;

use super::compiled::{KernelInfo, UnusableKernel};
use crate::signature::{self, KernelDecl};

/// Every kernel of the PTX with its parameters: types from the compiler (demangled lowered
/// names, probes for `extern "C"` kernels), layouts from the PTX, names from the source.
/// A kernel whose types caijit has no way to learn is left out, with a note; one whose
/// types it cannot read or lay out is unusable, with the reason: no other kernel suffers.
/// `ptx` is the PTX (or its `.entry` declarations), `lowered_names` every name expression NVRTC
/// was given with its lowered name.
pub(super) fn describe_kernels(ptx: &str, lowered_names: &[(String, String)], decls: &[KernelDecl], mut notes: Vec<String>) -> Described {
    let entries = signature::ptx_entries_each(ptx);
    let probe_prefix = format!("{}<", signature::PROBE_TEMPLATE);
    // `extern "C"` kernel name → its parameter types, from its probe.
    let mut probed: HashMap<String, std::result::Result<Vec<signature::ParamType>, signature::SignatureError>> = HashMap::new();
    let mut probe_symbols = Vec::new();
    for (expr, lowered) in lowered_names {
        let Some(target) = expr.strip_prefix(&probe_prefix) else { continue };
        probe_symbols.push(lowered.as_str());
        let target = target.trim_end_matches('>').trim_start_matches("decltype(").trim_end_matches(')').trim_start_matches('&');
        let name = target.rsplit("::").next().unwrap_or(target).to_string();
        // An error names the kernel, not its probe.
        match signature::probe_types(lowered) {
            Ok(Some(types)) => {
                probed.insert(name, Ok(types));
            }
            Ok(None) => {}
            Err(e) => {
                let e = e.for_kernel(&name, &agreed_names(decls, target, None));
                probed.insert(name, Err(e));
            }
        }
    }
    let mut kernels = Vec::with_capacity(entries.len());
    let mut unusable = Vec::new();
    for (lowered, ptx_params) in entries {
        if probe_symbols.contains(&lowered.as_str()) || lowered.starts_with("_Z13caijit_probe_") {
            continue;
        }
        let name_expression = lowered_names.iter().find(|(e, l)| *l == lowered && !e.starts_with(&probe_prefix)).map(|(e, _)| e.clone());
        // The types from the demangled name, which is demangled once for both.
        let from_name = signature::types_from_lowered(&lowered);
        let demangled = match &from_name {
            Ok(Some((text, _))) => Some(text.clone()),
            Ok(None) => None,
            Err(_) => signature::demangled(&lowered),
        };
        // The kernel's name: from its demangled name, else read off its mangled name.
        let shown = match &demangled {
            Some(t) => qualified_name_of(t),
            None => signature::mangled_qualified_name(&lowered).unwrap_or_else(|| lowered.clone()),
        };
        // An error names the kernel (its qualified name), not its lowered name.
        let named = |e: signature::SignatureError| e.for_kernel(&shown, &agreed_names(decls, &shown, None));
        let types = match from_name {
            Ok(Some((_, types))) => Ok(types),
            Err(e) => Err(named(e)),
            Ok(None) => match probed.get(&lowered) {
                Some(types) => types.clone(),
                None => {
                    notes.push(format!(
                        "`extern \"C\"` kernel `{lowered}` is left out: caijit found no declaration of it to ask the compiler about \
                         (is it made by a macro?); name it (caijit.kernel(source, \"{lowered}\")) to launch it"
                    ));
                    continue;
                }
            },
        };
        let params = types.and_then(|types| {
            let names = agreed_names(decls, &shown, Some(&types));
            signature::layout_compiled(&shown, &types, &names, &ptx_params.map_err(named)?)
        });
        match params {
            Ok(params) => kernels.push(KernelInfo { name_expression, lowered_name: lowered, demangled, qualified_name: shown, params }),
            Err(reason) => {
                let k = UnusableKernel { name_expression, lowered_name: lowered, demangled, qualified_name: shown, reason };
                notes.push(k.error().to_string());
                unusable.push(k);
            }
        }
    }
    Described { kernels, unusable, notes }
}

/// What [`describe_kernels`] found.
pub(super) struct Described {
    pub(super) kernels: Vec<KernelInfo>,
    pub(super) unusable: Vec<UnusableKernel>,
    pub(super) notes: Vec<String>,
}

/// Parameter names from the declarations of `qualified` (of the compiled `types`' arity,
/// when given), where they agree: a position any two name differently is unnamed. A
/// declaration whose types the tokenizer read exactly (builtin scalars, pointers and
/// arrays of them) and that differ from the compiled ones is another `#if` branch's, and
/// has no say.
fn agreed_names(decls: &[KernelDecl], qualified: &str, types: Option<&[signature::ParamType]>) -> Vec<Option<String>> {
    use signature::{CType, ParamType, Rank};
    let exact = |t: &ParamType| match t {
        ParamType::Pointer { elem, .. } | ParamType::Value(elem) => matches!(elem, CType::Scalar(_)),
        ParamType::Array { elem, rank, .. } => matches!(elem, CType::Scalar(_)) && matches!(rank, Rank::Fixed(_)),
    };
    let arity = types.map(<[_]>::len);
    let other_branch =
        |d: &KernelDecl| types.is_some_and(|ts| d.params.iter().all(|(_, t)| exact(t)) && !d.params.iter().map(|(_, t)| t).eq(ts.iter()));
    let mut candidates =
        decls.iter().filter(|d| d.qualified_name() == qualified && arity.is_none_or(|n| d.params.len() == n) && !other_branch(d));
    let Some(first) = candidates.next() else { return vec![None; arity.unwrap_or(0)] };
    let mut names: Vec<Option<String>> = first.params.iter().map(|(n, _)| n.clone()).collect();
    for d in candidates {
        if d.params.len() != names.len() {
            return vec![None; arity.unwrap_or(0)];
        }
        for (mine, (theirs, _)) in names.iter_mut().zip(&d.params) {
            if mine != theirs {
                *mine = None;
            }
        }
    }
    names
}

/// `void ns::axpy<float>(float, ...)` → `ns::axpy`.
fn qualified_name_of(demangled: &str) -> String {
    let demangled = demangled.replace("(anonymous namespace)::", "");
    let head = demangled.split('(').next().unwrap_or(&demangled);
    let mut depth = 0i32;
    let mut no_templates = String::new();
    for c in head.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => no_templates.push(c),
            _ => {}
        }
    }
    no_templates.split_whitespace().last().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names() {
        assert_eq!(qualified_name_of("void axpy<float>(float, float const*)"), "axpy");
        assert_eq!(qualified_name_of("void ns::inner::k<caijit::Array<float, 2> >(int)"), "ns::inner::k");
        assert_eq!(qualified_name_of("void (anonymous namespace)::k(int)"), "k");
        assert_eq!(qualified_name_of("void plain(int)"), "plain");
    }
}
