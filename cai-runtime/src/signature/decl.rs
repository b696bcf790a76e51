//! Declarations read from the source: which `__global__` functions there are, in which
//! namespace, with which template parameters and parameter *names*. The parameter
//! *types* read here serve deduction only (which template argument an argument binds);
//! the types a kernel is launched with come from the compiler ([`super::demangle`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::tokens::{is_ident, join_type, matching, matching_angle_backwards, matching_backwards, split_top_level, tokenize, Tok};
use super::types::{CType, ParamType, Rank};
use crate::cai::DType;
use crate::sync::lock;

/// A template parameter of a kernel template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateParam {
    pub name: String,
    /// `typename T` / `class T` (else a non-type parameter such as `int N`).
    pub is_type: bool,
    /// A template template parameter (`template <class> class C`).
    pub is_template: bool,
    /// The type of a non-type parameter as written (`int`, `unsigned`, `T`, `auto`);
    /// empty for a type or template parameter.
    pub value_type: String,
    /// The default argument as written (`float`, `256`, `(N > 4)`).
    pub default: Option<String>,
}

/// A `__global__` function as declared in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDecl {
    pub name: String,
    /// The enclosing named namespaces, outermost first (anonymous ones are left out: their
    /// members are found from the enclosing scope).
    pub scope: Vec<String>,
    pub extern_c: bool,
    /// Empty for a non-template kernel.
    pub template_params: Vec<TemplateParam>,
    pub params: Vec<(Option<String>, ParamType)>,
}

impl KernelDecl {
    pub fn is_template(&self) -> bool {
        !self.template_params.is_empty()
    }

    /// `ns::inner::name` (the name alone at global scope).
    pub fn qualified_name(&self) -> String {
        let mut s = String::new();
        for n in &self.scope {
            s.push_str(n);
            s.push_str("::");
        }
        s.push_str(&self.name);
        s
    }
}

/// The kernels the tokenizer found, and what it could not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Declarations {
    pub kernels: Vec<KernelDecl>,
    /// One line per thing skipped (a parameter or declaration it could not read): the
    /// compiler still decides, so these are notes, not errors.
    pub notes: Vec<String>,
}

const QUALIFIERS: &[&str] =
    &["__restrict__", "__restrict", "restrict", "volatile", "struct", "class", "typename", "enum", "__grid_constant__", "register"];
/// Words that are (part of) a builtin type, never a parameter's name: `unsigned __int128`
/// is one type, not `unsigned` named `__int128`.
const BUILTIN_WORDS: &[&str] = &[
    "unsigned",
    "signed",
    "int",
    "long",
    "short",
    "char",
    "bool",
    "float",
    "double",
    "void",
    "wchar_t",
    "char8_t",
    "char16_t",
    "char32_t",
    "__int128",
    "__int128_t",
    "__uint128_t",
    "__float128",
    "_Float16",
    "_Float32",
    "_Float64",
    "_Float128",
    "__bf16",
    "__fp16",
    "_Bool",
    "_Complex",
];

/// The dtype of a builtin integer type spelled in any word order (`long unsigned int`).
fn integer_words(words: &[&str]) -> Option<DType> {
    let (mut long, mut short, mut char_, mut unsigned, mut signed, mut int) = (0, 0, 0, 0, 0, 0);
    for w in words {
        match *w {
            "long" => long += 1,
            "short" => short += 1,
            "char" => char_ += 1,
            "unsigned" => unsigned += 1,
            "signed" => signed += 1,
            "int" => int += 1,
            _ => return None,
        }
    }
    if unsigned + signed > 1
        || int > 1
        || char_ > 1
        || short > 1
        || long > 2
        || (char_ + short > 0 && long > 0)
        || (char_ > 0 && (short + int) > 0)
    {
        return None;
    }
    Some(match (char_, short, long, unsigned == 1) {
        (1, _, _, false) => DType::I8,
        (1, _, _, true) => DType::U8,
        (_, 1, _, false) => DType::I16,
        (_, 1, _, true) => DType::U16,
        (_, _, 0, false) => DType::I32,
        (_, _, 0, true) => DType::U32,
        (_, _, _, false) => DType::I64,
        (_, _, _, true) => DType::U64,
    })
}

/// The words of a type's spelling, without `const` (`None` when there are none).
fn type_words(name: &str) -> Option<Vec<&str>> {
    let words: Vec<&str> = name.split_whitespace().filter(|w| *w != "const").collect();
    (!words.is_empty()).then_some(words)
}

/// The dtype of a type as the compiler spells it (a demangled name): builtin types, and
/// CUDA's and caijit's own types by their full names only (`__half`, `__nv_bfloat16`,
/// `caijit::complex<float>`). A typedef never reaches a mangled name, so any other name
/// (a program's own `half` or `complex<float>`) is the program's own type.
pub(crate) fn scalar_from_compiler(name: &str) -> Option<DType> {
    let words = type_words(name)?;
    if let Some(d) = integer_words(&words) {
        return Some(d);
    }
    Some(match words.join(" ").as_str() {
        "bool" => DType::Bool,
        "float" => DType::F32,
        "double" => DType::F64,
        "__half" => DType::F16,
        "__nv_bfloat16" => DType::BF16,
        "caijit::complex<float>" => DType::C64,
        "caijit::complex<double>" => DType::C128,
        _ => return None,
    })
}

/// The C++ scalar spelled by `name` in a source (`std::`/`::` prefixes and `const`
/// ignored): the compiler's names (`scalar_from_compiler`), `caijit::complex` and CUDA's
/// types however qualified, and the standard integer typedefs. A name a program may give
/// its own type (`half`, `nv_bfloat16`, `complex<float>`) is not a scalar.
pub fn scalar_from_cpp(name: &str) -> Option<DType> {
    let name = name.trim();
    let name = name.strip_prefix("::").unwrap_or(name);
    let name = name.strip_prefix("std::").unwrap_or(name);
    if let Some(d) = scalar_from_compiler(name) {
        return Some(d);
    }
    Some(match type_words(name)?.join(" ").as_str() {
        "int8_t" => DType::I8,
        "uint8_t" => DType::U8,
        "int16_t" => DType::I16,
        "uint16_t" => DType::U16,
        "int32_t" => DType::I32,
        "uint32_t" => DType::U32,
        "int64_t" | "ptrdiff_t" | "ssize_t" | "intptr_t" => DType::I64,
        "uint64_t" | "size_t" | "uintptr_t" => DType::U64,
        _ => return None,
    })
}

fn ctype_from(toks: &[Tok], tparams: &[TemplateParam], spelling: Spelling) -> CType {
    let text = join_type(toks);
    let scalar = match spelling {
        Spelling::Source => scalar_from_cpp(&text),
        Spelling::Compiler => scalar_from_compiler(&text),
    };
    if let Some(d) = scalar {
        return CType::Scalar(d);
    }
    if tparams.iter().any(|p| p.is_type && p.name == text) {
        return CType::TemplateParam(text);
    }
    CType::Named(text)
}

/// Whether a parameter's text is read from the source (where `Array<T, N>` may be
/// `caijit::Array` after a `using`) or from the compiler (which always qualifies it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    Source,
    Compiler,
}

/// Parse one parameter (`const float* __restrict__ x`, `caijit::Array<T, 2> a`, `int`).
/// The error is the reason it could not be read.
/// The parameter's name, taken off the end of its tokens: a trailing identifier after
/// something that is already a type.
fn split_name(t: &mut Vec<Tok>) -> Option<String> {
    let Some(Tok::Ident(last)) = t.last() else { return None };
    let before = &t[..t.len() - 1];
    let has_type = before.iter().any(|x| match x {
        Tok::Ident(w) => *w != "const",
        Tok::Punct('*' | '>' | '&') => true,
        _ => false,
    });
    let after_scope = matches!(before.last(), Some(Tok::Scope));
    if has_type && !after_scope && !BUILTIN_WORDS.contains(last) && *last != "const" {
        let name = last.to_string();
        t.pop();
        return Some(name);
    }
    None
}

/// The name of a parameter [`parse_param`] cannot read (a reference), for messages.
fn name_of_unreadable(toks: &[Tok]) -> Option<String> {
    let toks = toks.iter().position(|t| *t == Tok::Punct('=')).map_or(toks, |eq| &toks[..eq]);
    let mut t: Vec<Tok> = toks.iter().filter(|t| !matches!(t, Tok::Ident(x) if QUALIFIERS.contains(x))).cloned().collect();
    if t.last() == Some(&Tok::Punct(']')) {
        if let Some(open) = t.iter().rposition(|x| *x == Tok::Punct('[')) {
            t.truncate(open);
        }
    }
    split_name(&mut t)
}

pub(crate) fn parse_param(toks: &[Tok], tparams: &[TemplateParam], spelling: Spelling) -> Result<(Option<String>, ParamType), String> {
    // Drop a default argument.
    let toks = match toks.iter().position(|t| *t == Tok::Punct('=')) {
        Some(eq) => &toks[..eq],
        None => toks,
    };
    let mut t: Vec<Tok> = toks.iter().filter(|t| !matches!(t, Tok::Ident(x) if QUALIFIERS.contains(x))).cloned().collect();
    // `T name[]` and `T name[N]` are pointers.
    let mut array_suffix = false;
    if t.last() == Some(&Tok::Punct(']')) {
        if let Some(open) = t.iter().rposition(|x| *x == Tok::Punct('[')) {
            t.truncate(open);
            array_suffix = true;
        }
    }
    // A pointer to an array, `T (*name)[N]` (the compiler writes `T (*) [N]`; more bounds,
    // `[N][M]`, may follow): a pointer to `T`, as `T* name` (the bounds only say how the
    // kernel indexes what it points to).
    if array_suffix {
        while t.last() == Some(&Tok::Punct(']')) {
            match t.iter().rposition(|x| *x == Tok::Punct('[')) {
                Some(open) => t.truncate(open),
                None => break,
            }
        }
        // `( * [const…] [name] )` at the end: the pointer declarator (a `const` there makes
        // the pointer itself const, which a kernel's caller does not see).
        let close = t.len().checked_sub(1).filter(|&c| t[c] == Tok::Punct(')'));
        let open = close.and_then(|c| t[..c].iter().rposition(|x| *x == Tok::Punct('(')));
        if let (Some(open), Some(close)) = (open, close) {
            let inner = &t[open + 1..close];
            let words = inner.get(1..).unwrap_or_default();
            let qualifiers = words.iter().take_while(|w| is_ident(Some(w), "const")).count();
            let rest = &words[qualifiers..];
            let name = match rest {
                [] => Some(None),
                [Tok::Ident(n)] => Some(Some(Tok::Ident(n))),
                _ => None,
            };
            if let (Some(name), true, true) = (name, inner.first() == Some(&Tok::Punct('*')), open > 0) {
                t.truncate(open);
                t.push(Tok::Punct('*'));
                t.extend(name);
                array_suffix = false;
            }
        }
    }
    // The compiler's text names no parameters: every word of it is the type's.
    let name = match spelling {
        Spelling::Source => split_name(&mut t),
        Spelling::Compiler => None,
    };
    if t.contains(&Tok::Punct('&')) {
        return Err(format!("reference parameters are not supported: `{}`", join_type(toks)));
    }
    // A parenthesis outside template arguments (not `caijit::Array<T, (unsigned int)2>`).
    let mut angles = 0usize;
    let top_level_paren = t.iter().any(|x| match x {
        Tok::Punct('<') => {
            angles += 1;
            false
        }
        Tok::Punct('>') => {
            angles = angles.saturating_sub(1);
            false
        }
        Tok::Punct('(') => angles == 0,
        _ => false,
    });
    if top_level_paren {
        // A function pointer (`void (*)(int)`): opaque, passed as its bits.
        return Ok((name, ParamType::Value(CType::Named(join_type(&t)))));
    }
    let stars: Vec<usize> = t.iter().enumerate().filter(|(_, x)| **x == Tok::Punct('*')).map(|(i, _)| i).collect();
    let ptr_depth = stars.len() + usize::from(array_suffix);
    let base_end = stars.first().copied().unwrap_or(t.len());
    let base: Vec<Tok> = t[..base_end].to_vec();
    // Only a top-level `const` qualifies the type; one inside `<...>` belongs to an argument.
    let mut depth = 0isize;
    let mut is_const = false;
    let base: Vec<Tok> = base
        .into_iter()
        .filter(|x| {
            match x {
                Tok::Punct('<') => depth = depth.saturating_add(1),
                Tok::Punct('>') => depth = depth.saturating_sub(1),
                _ if depth == 0 && is_ident(Some(x), "const") => {
                    is_const = true;
                    return false;
                }
                _ => {}
            }
            true
        })
        .collect();
    if base.is_empty() {
        return Err(format!("cannot read the parameter `{}`", join_type(toks)));
    }
    if ptr_depth > 1 {
        return Ok((name, ParamType::Value(CType::Named(join_type(&t)))));
    }
    if ptr_depth == 1 {
        return Ok((name, ParamType::Pointer { elem: ctype_from(&base, tparams, spelling), is_const }));
    }
    let (head, args) = match base.iter().position(|x| *x == Tok::Punct('<')) {
        Some(lt) => (&base[..lt], Some(lt)),
        None => (&base[..], None),
    };
    let head_text = join_type(head);
    let is_caijit_array = match spelling {
        Spelling::Source => matches!(head_text.as_str(), "caijit::Array" | "Array" | "::caijit::Array"),
        Spelling::Compiler => head_text == "caijit::Array",
    };
    if let (Some(lt), true) = (args, is_caijit_array) {
        let close = base.iter().rposition(|x| *x == Tok::Punct('>')).filter(|c| *c > lt);
        let close = close.ok_or_else(|| format!("unbalanced `<` in `{}`", join_type(toks)))?;
        let inner = split_top_level(&base[lt + 1..close]);
        if inner.len() != 2 {
            return Err(format!("caijit::Array takes <T, N>: `{}`", join_type(toks)));
        }
        let elem_toks: Vec<Tok> = inner[0].to_vec();
        let elem_const = elem_toks.iter().any(|x| is_ident(Some(x), "const"));
        let elem_toks: Vec<Tok> = elem_toks.into_iter().filter(|x| !is_ident(Some(x), "const")).collect();
        let elem = ctype_from(&elem_toks, tparams, spelling);
        let rank_text = join_type(inner[1]);
        // The compiler may spell a converted rank as a cast: `(unsigned int)2`.
        let literal = match (spelling, rank_text.strip_prefix('(').and_then(|r| r.split_once(')'))) {
            (Spelling::Compiler, Some((_, n))) => n.trim(),
            _ => rank_text.as_str(),
        };
        let rank = match literal.trim_end_matches(['u', 'U', 'l', 'L']).parse::<usize>() {
            Ok(n) => Rank::Fixed(n),
            Err(_) => Rank::TemplateParam(rank_text),
        };
        return Ok((name, ParamType::Array { elem, is_const: elem_const, rank }));
    }
    Ok((name, ParamType::Value(ctype_from(&base, tparams, spelling))))
}

fn parse_template_params(toks: &[Tok]) -> Vec<TemplateParam> {
    split_top_level(toks)
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (p, default) = match p.iter().position(|t| *t == Tok::Punct('=')) {
                Some(eq) => (&p[..eq], Some(join_type(&p[eq + 1..]))),
                None => (p, None),
            };
            let is_template = is_ident(p.first(), "template");
            // `typename T`, `class... Ts`; not `typename T::type V` (a value of that type).
            let is_type = (is_ident(p.first(), "typename") || is_ident(p.first(), "class")) && !p.contains(&Tok::Scope);
            // The last word names the parameter, unless it is a keyword of its kind or type
            // (`int`, `typename`, `template <class> class`: unnamed).
            let named = match p.last() {
                Some(Tok::Ident(n)) if p.len() > 1 => !BUILTIN_WORDS.contains(n) && !matches!(*n, "typename" | "class" | "auto" | "const"),
                _ => false,
            };
            let name = match (named, p.last()) {
                (true, Some(Tok::Ident(n))) => n.to_string(),
                _ => String::new(),
            };
            let value_type = if is_type || is_template { String::new() } else { join_type(if named { &p[..p.len() - 1] } else { p }) };
            TemplateParam { name, is_type, is_template, value_type, default }
        })
        .collect()
}

/// Token ranges of `namespace a::b { … }` blocks with their names (empty: anonymous).
fn namespaces(toks: &[Tok]) -> Vec<(std::ops::Range<usize>, Vec<String>)> {
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if !is_ident(toks.get(i), "namespace") {
            continue;
        }
        let mut names = Vec::new();
        let mut k = i + 1;
        loop {
            match toks.get(k) {
                Some(Tok::Ident(n)) if *n != "inline" => names.push(n.to_string()),
                Some(Tok::Ident(_)) | Some(Tok::Scope) => {}
                _ => break,
            }
            k += 1;
        }
        if toks.get(k) == Some(&Tok::Punct('{')) {
            if let Some(end) = matching(toks, k, '{', '}') {
                out.push((k..end, names));
            }
        }
    }
    out
}

/// Attribute and specifier keywords that may stand between `__global__`, `void` and the
/// kernel's name, each with an optional parenthesized argument list.
const ATTRIBUTE_WORDS: &[&str] = &[
    "__launch_bounds__",
    "__cluster_dims__",
    "__maxnreg__",
    "__attribute__",
    "__declspec",
    "alignas",
    "__align__",
    "__noinline__",
    "__forceinline__",
    "__inline__",
    "inline",
    "static",
    "extern",
    "constexpr",
    "__host__",
    "__device__",
    "__global__",
];

/// What stands before the `__global__` at `at`: the linkage the nearest `extern "…"` gives
/// (`Some(true)` for `extern "C"`), and the template parameters of a `template <…>` head.
/// Every attribute and specifier in between is skipped, in any order and however spelled:
/// keywords and macros (`static`, `__launch_bounds__(256)`, `MY_EXPORT`), `[[…]]`,
/// `__attribute__((…))`, and template-ids or qualified names of a requires-clause.
fn before_global(toks: &[Tok], at: usize) -> (Option<bool>, Vec<TemplateParam>) {
    let mut linkage = None;
    let mut j = at;
    while j > 0 {
        match &toks[j - 1] {
            // `extern "C"` / `extern "C++"`: the nearest one is the kernel's linkage.
            Tok::Str(s) if is_ident(toks.get(j.wrapping_sub(2)), "extern") => {
                linkage = linkage.or(Some(*s == "C"));
                j -= 2;
            }
            // An explicit instantiation or specialization: no template head of its own.
            Tok::Ident(w) if *w == "template" => break,
            Tok::Ident(_) | Tok::Scope => j -= 1,
            // The arguments of an attribute (`__launch_bounds__(256)`, `__attribute__((x))`).
            Tok::Punct(')') => match matching_backwards(toks, j - 1, '(', ')') {
                Some(open) if matches!(toks.get(open.wrapping_sub(1)), Some(Tok::Ident(_))) => j = open,
                _ => break,
            },
            // `[[…]]`
            Tok::Punct(']') if toks.get(j.wrapping_sub(2)) == Some(&Tok::Punct(']')) => match matching_backwards(toks, j - 1, '[', ']') {
                Some(open) if toks.get(open + 1) == Some(&Tok::Punct('[')) => j = open,
                _ => break,
            },
            Tok::Punct('>') => match matching_angle_backwards(toks, j - 1) {
                Some(open) if is_ident(toks.get(open.wrapping_sub(1)), "template") => {
                    return (linkage, parse_template_params(&toks[open + 1..j - 1]));
                }
                // A template-id in a requires-clause or an attribute: skipped with its name.
                Some(open) if matches!(toks.get(open.wrapping_sub(1)), Some(Tok::Ident(_))) => j = open,
                _ => break,
            },
            _ => break,
        }
    }
    (linkage, Vec::new())
}

/// The index of the kernel's name in `__global__ [attributes] void [attributes] name (`,
/// the `__global__` being at `at`. An unknown macro with arguments (`MY_BOUNDS(256)`) is an
/// attribute when another name or attribute follows it.
fn name_after_global(toks: &[Tok], at: usize) -> Option<usize> {
    let mut k = at + 1;
    while !is_ident(toks.get(k), "void") {
        match toks.get(k)? {
            Tok::Punct(';' | '{' | '}') => return None,
            _ => k += 1,
        }
    }
    k += 1;
    // Past the attribute starting at `k`, if one does.
    let attribute_end = |k: usize| -> Option<usize> {
        match toks.get(k)? {
            Tok::Punct('[') if toks.get(k + 1) == Some(&Tok::Punct('[')) => matching(toks, k, '[', ']').map(|e| e + 1),
            Tok::Ident(w) if ATTRIBUTE_WORDS.contains(w) => match toks.get(k + 1) {
                Some(Tok::Punct('(')) => matching(toks, k + 1, '(', ')').map(|e| e + 1),
                _ => Some(k + 1),
            },
            _ => None,
        }
    };
    loop {
        if let Some(next) = attribute_end(k) {
            k = next;
            continue;
        }
        let Some(Tok::Ident(_)) = toks.get(k) else { return None };
        if toks.get(k + 1) != Some(&Tok::Punct('(')) {
            return None;
        }
        // `NAME(...)` followed by another `name(` or an attribute is a macro attribute.
        let after = matching(toks, k + 1, '(', ')').map(|e| e + 1);
        let macro_attribute = after.is_some_and(|a| {
            attribute_end(a).is_some()
                || matches!((toks.get(a), toks.get(a + 1)), (Some(Tok::Ident(w)), Some(Tok::Punct('('))) if !matches!(*w, "noexcept" | "throw"))
        });
        match (macro_attribute, after) {
            (true, Some(a)) => k = a,
            _ => return Some(k),
        }
    }
}

/// [`parse_kernels`] of `source`, parsed once per process per source text (of the last
/// `MEMO_SOURCES` distinct ones): a kernel's dispatcher and each of its instances read the
/// same declarations.
pub fn declarations(source: &str) -> Arc<Declarations> {
    static MEMO: Mutex<Option<HashMap<Box<str>, Arc<Declarations>>>> = Mutex::new(None);
    if let Some(d) = lock(&MEMO).as_ref().and_then(|m| m.get(source)) {
        return d.clone();
    }
    let probe = crate::stats::timing::start();
    let parsed = Arc::new(parse_kernels(source));
    probe.stop(crate::stats::timing::LoadPhase::Declarations);
    let mut memo = lock(&MEMO);
    let memo = memo.get_or_insert_with(HashMap::new);
    if memo.len() >= MEMO_SOURCES {
        memo.clear();
    }
    memo.entry(source.into()).or_insert(parsed).clone()
}

/// How many sources' declarations [`declarations`] keeps.
const MEMO_SOURCES: usize = 64;

/// Every `__global__` function declared in `source`, with notes on what could not be read.
pub fn parse_kernels(source: &str) -> Declarations {
    let toks = tokenize(source);
    let mut out = Declarations::default();
    // Per kernel kept, per parameter: whether two declarations named it differently.
    let mut renamed: Vec<Vec<bool>> = Vec::new();
    let mut extern_blocks = Vec::new();
    for i in 0..toks.len() {
        if is_ident(toks.get(i), "extern") && toks.get(i + 1) == Some(&Tok::Str("C")) && toks.get(i + 2) == Some(&Tok::Punct('{')) {
            if let Some(end) = matching(&toks, i + 2, '{', '}') {
                extern_blocks.push(i + 2..end);
            }
        }
    }
    let spaces = namespaces(&toks);
    for i in 0..toks.len() {
        if !is_ident(toks.get(i), "__global__") {
            continue;
        }
        let (linkage, template_params) = before_global(&toks, i);
        let extern_c = linkage.unwrap_or_else(|| extern_blocks.iter().any(|r| r.contains(&i)));
        let Some(k) = name_after_global(&toks, i) else { continue };
        let Some(Tok::Ident(name)) = toks.get(k) else { continue };
        if toks.get(k + 1) != Some(&Tok::Punct('(')) {
            continue;
        }
        let Some(close) = matching(&toks, k + 1, '(', ')') else {
            out.notes.push(format!("the declaration of `{name}` has unbalanced parentheses"));
            continue;
        };
        let inner = &toks[k + 2..close];
        let mut params = Vec::new();
        if !(inner.is_empty() || (inner.len() == 1 && is_ident(inner.first(), "void"))) {
            for (index, p) in split_top_level(inner).into_iter().enumerate() {
                match parse_param(p, &template_params, Spelling::Source) {
                    Ok(param) => params.push(param),
                    Err(reason) => {
                        out.notes.push(format!("kernel `{name}` parameter {index}: {reason}"));
                        params.push((name_of_unreadable(p), ParamType::Value(CType::Named(join_type(p)))));
                    }
                }
            }
        }
        let mut scope: Vec<(usize, &Vec<String>)> = spaces.iter().filter(|(r, _)| r.contains(&i)).map(|(r, n)| (r.start, n)).collect();
        scope.sort_by_key(|(s, _)| *s);
        let scope = scope.into_iter().flat_map(|(_, n)| n.iter().cloned()).collect();
        let decl = KernelDecl { name: name.to_string(), scope, extern_c, template_params, params };
        // A forward declaration followed by the definition (or one kernel in two `#if`
        // branches): keep one. A parameter keeps its name only where every declaration
        // that names it agrees: the tokenizer cannot tell which branch is compiled.
        let same = |d: &KernelDecl| {
            d.name == decl.name && d.scope == decl.scope && d.params.iter().map(|p| &p.1).eq(decl.params.iter().map(|p| &p.1))
        };
        match out.kernels.iter().position(same) {
            Some(at) => {
                for ((mine, theirs), renamed) in out.kernels[at].params.iter_mut().zip(decl.params).zip(&mut renamed[at]) {
                    match (&mine.0, theirs.0) {
                        (_, None) => {}
                        (None, Some(n)) if !*renamed => mine.0 = Some(n),
                        (Some(m), Some(n)) if *m != n => {
                            *renamed = true;
                            mine.0 = None;
                        }
                        _ => {}
                    }
                }
            }
            None => {
                renamed.push(vec![false; decl.params.len()]);
                out.kernels.push(decl);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
