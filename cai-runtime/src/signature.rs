//! What each kernel's parameters are: declarations read from the source, C++ instances
//! read from their demangled names, sizes and offsets read from the compiled PTX, and
//! Numba-style deduction of template arguments from launch arguments.
//!
//! # Rationale
//! NVRTC does not report parameter types. Three sources together give them exactly:
//! - the source declaration (`extern "C"` kernels and template patterns),
//! - the demangled lowered name (C++ kernels; template arguments already substituted),
//! - the `.entry` of the PTX (the size and alignment of every parameter as compiled).
//!
//! The first two give each parameter's *kind*; the third its *layout*; a disagreement
//! between them is an error, never a guess.
//!
//! # Limitations
//! The declaration reader is a tokenizer, not a C++ front end: macros that expand into a
//! kernel's signature are not seen (give a name expression instead), and only the forms
//! below are understood as arrays: `T*`, `const T*`, `T[]`, `caijit::Array<T, N>`.

use std::collections::BTreeMap;
use std::fmt;

use crate::cai::DType;

/// The element or value type of a parameter, as declared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CType {
    /// A type caijit can pass from an array dtype or a scalar.
    Scalar(DType),
    /// A template type parameter (`T`), before substitution.
    TemplateParam(String),
    /// Any other named type: a struct, `void`, an enum, an unknown typedef.
    Named(String),
}

impl fmt::Display for CType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CType::Scalar(d) => f.write_str(d.cpp_name()),
            CType::TemplateParam(n) | CType::Named(n) => f.write_str(n),
        }
    }
}

/// The rank of a `caijit::Array<T, N>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rank {
    Fixed(usize),
    TemplateParam(String),
}

/// A parameter type as declared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// `T*` / `const T*` (and `T[]`).
    Pointer { elem: CType, is_const: bool },
    /// `caijit::Array<T, N>` / `caijit::Array<const T, N>`.
    Array { elem: CType, is_const: bool, rank: Rank },
    /// A value: scalar or struct.
    Value(CType),
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = |is_const: &bool| if *is_const { "const " } else { "" };
        match self {
            ParamType::Pointer { elem, is_const } => write!(f, "{}{elem}*", c(is_const)),
            ParamType::Array { elem, is_const, rank } => {
                let r = match rank {
                    Rank::Fixed(n) => n.to_string(),
                    Rank::TemplateParam(p) => p.clone(),
                };
                write!(f, "caijit::Array<{}{elem}, {r}>", c(is_const))
            }
            ParamType::Value(t) => write!(f, "{t}"),
        }
    }
}

/// A template parameter of a kernel template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateParam {
    /// `typename T` / `class T`.
    Type(String),
    /// `int N` (any integral type).
    Value(String),
}

impl TemplateParam {
    pub fn name(&self) -> &str {
        match self {
            TemplateParam::Type(n) | TemplateParam::Value(n) => n,
        }
    }
}

/// A `__global__` function as declared in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDecl {
    pub name: String,
    pub extern_c: bool,
    /// Empty for a non-template kernel.
    pub template_params: Vec<TemplateParam>,
    pub params: Vec<(Option<String>, ParamType)>,
}

impl KernelDecl {
    pub fn is_template(&self) -> bool {
        !self.template_params.is_empty()
    }
}

/// A parse failure of a declaration or of PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureError(pub String);

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------
// Tokenizer

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Punct(char),
    /// `::`
    Scope,
}

fn tokenize(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // Preprocessor lines (with continuations) are skipped.
        if line_start && c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\n' {
                    i += 1;
                }
                i += 1;
            }
            continue;
        }
        line_start = false;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let q = c;
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != q {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push(Tok::Str(String::from_utf8_lossy(&b[start..i.min(b.len())]).into_owned()));
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_string()));
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'\'') {
                i += 1;
            }
            out.push(Tok::Num(src[start..i].replace('\'', "")));
            continue;
        }
        if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Scope);
            i += 2;
            continue;
        }
        // Non-ASCII bytes are skipped whole.
        let ch = src[i..].chars().next().unwrap_or(' ');
        out.push(Tok::Punct(ch));
        i += ch.len_utf8();
    }
    out
}

fn is_ident(t: Option<&Tok>, s: &str) -> bool {
    matches!(t, Some(Tok::Ident(x)) if x == s)
}

/// Index of the token closing the bracket opened at `open` (`(`/`)`, `<`/`>`, `{`/`}`).
/// `None` when it is not closed, or when a closing bracket comes first (`open` is not `o`).
fn matching(toks: &[Tok], open: usize, o: char, c: char) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct(x) if *x == o => depth = depth.checked_add(1)?,
            Tok::Punct(x) if *x == c => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// Index of the token opening the bracket closed at `close`, scanning backwards.
fn matching_backwards(toks: &[Tok], close: usize, o: char, c: char) -> Option<usize> {
    let mut depth = 0usize;
    for j in (0..=close).rev() {
        match toks.get(j)? {
            Tok::Punct(x) if *x == c => depth = depth.checked_add(1)?,
            Tok::Punct(x) if *x == o => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

fn split_top_level(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0isize, 0usize);
    for (j, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct('(' | '<' | '[' | '{') => depth = depth.saturating_add(1),
            Tok::Punct(')' | '>' | ']' | '}') => depth = depth.saturating_sub(1),
            Tok::Punct(',') if depth == 0 => {
                parts.push(&toks[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    if start < toks.len() || !parts.is_empty() {
        parts.push(&toks[start..]);
    }
    parts
}

// ---------------------------------------------------------------------------------------
// Declarations

const QUALIFIERS: &[&str] = &["__restrict__", "__restrict", "restrict", "volatile", "struct", "class", "typename", "enum"];
const BUILTIN_WORDS: &[&str] = &["unsigned", "signed", "int", "long", "short", "char", "bool", "float", "double", "void"];

/// The C++ scalar spelled by `name` (after `std::`/`::` prefixes are removed).
pub fn scalar_from_cpp(name: &str) -> Option<DType> {
    let words: Vec<&str> = name.split_whitespace().filter(|w| *w != "int" || name.split_whitespace().count() == 1).collect();
    let joined = words.join(" ");
    Some(match joined.as_str() {
        "bool" => DType::Bool,
        "char" | "signed char" | "int8_t" => DType::I8,
        "unsigned char" | "uint8_t" => DType::U8,
        "short" | "signed short" | "int16_t" => DType::I16,
        "unsigned short" | "uint16_t" => DType::U16,
        "int" | "signed" | "signed int" | "int32_t" => DType::I32,
        "unsigned" | "unsigned int" | "uint32_t" => DType::U32,
        "long" | "signed long" | "long long" | "signed long long" | "int64_t" | "ptrdiff_t" | "ssize_t" | "intptr_t" => DType::I64,
        "unsigned long" | "unsigned long long" | "uint64_t" | "size_t" | "uintptr_t" => DType::U64,
        "__half" | "half" => DType::F16,
        "__nv_bfloat16" | "nv_bfloat16" => DType::BF16,
        "float" => DType::F32,
        "double" => DType::F64,
        "caijit::complex<float>" | "complex<float>" => DType::C64,
        "caijit::complex<double>" | "complex<double>" => DType::C128,
        _ => return None,
    })
}

fn join_type(toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        let piece = match t {
            Tok::Ident(x) | Tok::Num(x) => x.clone(),
            Tok::Scope => "::".into(),
            Tok::Punct(c) => c.to_string(),
            Tok::Str(x) => format!("\"{x}\""),
        };
        let glue = matches!(t, Tok::Scope | Tok::Punct('<' | '>' | ',' | '*'))
            || s.ends_with("::")
            || s.ends_with('<')
            || s.ends_with(' ')
            || s.is_empty();
        if !glue {
            s.push(' ');
        }
        s.push_str(&piece);
        if matches!(t, Tok::Punct(',')) {
            s.push(' ');
        }
    }
    s
}

fn strip_namespace(name: &str) -> &str {
    name.strip_prefix("::").unwrap_or(name).strip_prefix("std::").unwrap_or(name.strip_prefix("::").unwrap_or(name))
}

fn ctype_from(toks: &[Tok], tparams: &[TemplateParam]) -> CType {
    let text = join_type(toks);
    if let Some(d) = scalar_from_cpp(strip_namespace(&text)) {
        return CType::Scalar(d);
    }
    if tparams.iter().any(|p| matches!(p, TemplateParam::Type(n) if *n == text)) {
        return CType::TemplateParam(text);
    }
    CType::Named(text)
}

/// Parse one parameter (`const float* __restrict__ x`, `caijit::Array<T, 2> a`, `int`).
fn parse_param(toks: &[Tok], tparams: &[TemplateParam]) -> Result<(Option<String>, ParamType), SignatureError> {
    // Drop a default argument.
    let toks = match toks.iter().position(|t| *t == Tok::Punct('=')) {
        Some(eq) => &toks[..eq],
        None => toks,
    };
    let mut t: Vec<Tok> = toks.iter().filter(|t| !matches!(t, Tok::Ident(x) if QUALIFIERS.contains(&x.as_str()))).cloned().collect();
    // `T name[]` is a pointer.
    let mut array_suffix = false;
    if let (Some(Tok::Punct('[')), Some(Tok::Punct(']'))) = (t.len().checked_sub(2).and_then(|i| t.get(i)), t.last()) {
        t.truncate(t.len() - 2);
        array_suffix = true;
    }
    // The name: a trailing identifier after something that is already a type.
    let mut name = None;
    if let Some(Tok::Ident(last)) = t.last() {
        let before = &t[..t.len() - 1];
        let has_type = before.iter().any(|x| match x {
            Tok::Ident(w) => w != "const",
            Tok::Punct('*' | '>' | '&') => true,
            _ => false,
        });
        let after_scope = matches!(before.last(), Some(Tok::Scope));
        if has_type && !after_scope && !BUILTIN_WORDS.contains(&last.as_str()) && last != "const" {
            name = Some(last.clone());
            t.pop();
        }
    }
    if t.contains(&Tok::Punct('&')) {
        return Err(SignatureError(format!("reference parameters are not supported: `{}`", join_type(toks))));
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
        return Err(SignatureError(format!("cannot read the parameter `{}`", join_type(toks))));
    }
    if ptr_depth > 1 {
        let text = join_type(&t);
        return Ok((name, ParamType::Value(CType::Named(text))));
    }
    if ptr_depth == 1 {
        let elem = ctype_from(&base, tparams);
        return Ok((name, ParamType::Pointer { elem, is_const }));
    }
    // caijit::Array<T, N> or Array<T, N>
    let (head, args) = match base.iter().position(|x| *x == Tok::Punct('<')) {
        Some(lt) => (&base[..lt], Some(lt)),
        None => (&base[..], None),
    };
    let head_text = join_type(head);
    if let (Some(lt), "caijit::Array" | "Array" | "::caijit::Array") = (args, head_text.as_str()) {
        let close = matching(&base, lt, '<', '>').ok_or_else(|| SignatureError(format!("unbalanced `<` in `{}`", join_type(toks))))?;
        let inner = split_top_level(&base[lt + 1..close]);
        if inner.len() != 2 {
            return Err(SignatureError(format!("caijit::Array takes <T, N>: `{}`", join_type(toks))));
        }
        let elem_toks: Vec<Tok> = inner[0].to_vec();
        let elem_const = elem_toks.iter().any(|x| is_ident(Some(x), "const"));
        let elem_toks: Vec<Tok> = elem_toks.into_iter().filter(|x| !is_ident(Some(x), "const")).collect();
        let elem = ctype_from(&elem_toks, tparams);
        let rank_text = join_type(inner[1]);
        let rank = match rank_text.trim_end_matches(['u', 'U', 'l', 'L']).parse::<usize>() {
            Ok(n) => Rank::Fixed(n),
            Err(_) => Rank::TemplateParam(rank_text),
        };
        return Ok((name, ParamType::Array { elem, is_const: elem_const, rank }));
    }
    Ok((name, ParamType::Value(ctype_from(&base, tparams))))
}

fn parse_template_params(toks: &[Tok]) -> Vec<TemplateParam> {
    split_top_level(toks)
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            let p = match p.iter().position(|t| *t == Tok::Punct('=')) {
                Some(eq) => &p[..eq],
                None => p,
            };
            let name = p.iter().rev().find_map(|t| if let Tok::Ident(n) = t { Some(n.clone()) } else { None }).unwrap_or_default();
            if is_ident(p.first(), "typename") || is_ident(p.first(), "class") {
                TemplateParam::Type(name)
            } else {
                TemplateParam::Value(name)
            }
        })
        .collect()
}

/// Every `__global__` function declared in `source`.
pub fn parse_kernels(source: &str) -> Result<Vec<KernelDecl>, SignatureError> {
    let toks = tokenize(source);
    let mut out = Vec::new();
    // Ranges of `extern "C" { ... }` blocks.
    let mut extern_blocks = Vec::new();
    for i in 0..toks.len() {
        if is_ident(toks.get(i), "extern") && toks.get(i + 1) == Some(&Tok::Str("C".into())) && toks.get(i + 2) == Some(&Tok::Punct('{')) {
            if let Some(end) = matching(&toks, i + 2, '{', '}') {
                extern_blocks.push(i + 2..end);
            }
        }
    }
    for i in 0..toks.len() {
        if !is_ident(toks.get(i), "__global__") {
            continue;
        }
        // Look back over specifiers for `extern "C"` and `template <...>`.
        let mut j = i;
        let mut extern_c = extern_blocks.iter().any(|r| r.contains(&i));
        let mut template_params = Vec::new();
        while j > 0 {
            match &toks[j - 1] {
                Tok::Ident(w) if matches!(w.as_str(), "static" | "inline" | "__forceinline__" | "__noinline__" | "extern") => j -= 1,
                Tok::Str(s) if s == "C" && is_ident(toks.get(j.wrapping_sub(2)), "extern") => {
                    extern_c = true;
                    j -= 2;
                }
                Tok::Punct('>') => {
                    // Find the `template <` that this `>` closes.
                    let mut depth = 0isize;
                    let mut k = j - 1;
                    loop {
                        match toks[k] {
                            Tok::Punct('>') => depth = depth.saturating_add(1),
                            Tok::Punct('<') => {
                                depth = depth.saturating_sub(1);
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        if k == 0 {
                            break;
                        }
                        k -= 1;
                    }
                    if depth == 0 && k > 0 && is_ident(toks.get(k - 1), "template") {
                        template_params = parse_template_params(&toks[k + 1..j - 1]);
                    }
                    break;
                }
                _ => break,
            }
        }
        // Forward: [specifiers] void [__launch_bounds__(...)] name ( params )
        let mut k = i + 1;
        while k < toks.len() && !is_ident(toks.get(k), "void") {
            k += 1;
        }
        k += 1;
        loop {
            match toks.get(k) {
                Some(Tok::Ident(w)) if w == "__launch_bounds__" || w == "__attribute__" || w == "__cluster_dims__" => {
                    k = matching(&toks, k + 1, '(', ')').map_or(toks.len(), |e| e + 1);
                }
                Some(Tok::Punct('[')) if toks.get(k + 1) == Some(&Tok::Punct('[')) => {
                    k = matching(&toks, k, '[', ']').map_or(toks.len(), |e| e + 1);
                }
                _ => break,
            }
        }
        let Some(Tok::Ident(name)) = toks.get(k) else { continue };
        if toks.get(k + 1) != Some(&Tok::Punct('(')) {
            continue;
        }
        let close = matching(&toks, k + 1, '(', ')')
            .ok_or_else(|| SignatureError(format!("unbalanced parentheses in the declaration of `{name}`")))?;
        let inner = &toks[k + 2..close];
        let params = if inner.is_empty() || (inner.len() == 1 && is_ident(inner.first(), "void")) {
            Vec::new()
        } else {
            split_top_level(inner)
                .into_iter()
                .map(|p| parse_param(p, &template_params))
                .collect::<Result<_, _>>()
                .map_err(|e| SignatureError(format!("kernel `{name}`: {}", e.0)))?
        };
        let decl = KernelDecl { name: name.clone(), extern_c, template_params, params };
        // A forward declaration followed by the definition: keep one.
        if !out.iter().any(|d: &KernelDecl| d.name == decl.name && d.params == decl.params) {
            out.push(decl);
        }
    }
    Ok(out)
}

/// The parameter types of a C++ kernel instance, from its demangled lowered name.
///
/// Returns `None` for names that are not mangled (`extern "C"` kernels).
pub fn demangled_params(lowered: &str) -> Result<Option<(String, Vec<ParamType>)>, SignatureError> {
    if !lowered.starts_with("_Z") {
        return Ok(None);
    }
    let sym = cpp_demangle::Symbol::new(lowered.as_bytes()).map_err(|e| SignatureError(format!("cannot demangle {lowered}: {e}")))?;
    let text = sym.demangle().map_err(|e| SignatureError(format!("cannot demangle {lowered}: {e}")))?;
    // "void axpy<float>(float, float const*, float*, int)": the last top-level parens, the
    // group closed by the last `)` ("f(void (*)(int), int)", "S::f(int) const").
    let toks = tokenize(&text);
    let no_list = || SignatureError(format!("no parameter list in {text}"));
    let close = toks.iter().rposition(|t| *t == Tok::Punct(')')).ok_or_else(no_list)?;
    let open = matching_backwards(&toks, close, '(', ')').ok_or_else(no_list)?;
    let inner = toks.get(open + 1..close).ok_or_else(no_list)?;
    let params = if inner.is_empty() {
        Vec::new()
    } else {
        split_top_level(inner).into_iter().map(|p| parse_param(p, &[]).map(|(_, t)| t)).collect::<Result<_, _>>()?
    };
    Ok(Some((text, params)))
}

// ---------------------------------------------------------------------------------------
// PTX

/// One `.param` of a PTX `.entry`: its size and alignment in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtxParam {
    pub size: usize,
    pub align: usize,
}

/// The parameters of every `.entry` in `ptx`, by lowered name.
pub fn ptx_entries(ptx: &str) -> Result<BTreeMap<String, Vec<PtxParam>>, SignatureError> {
    let mut out = BTreeMap::new();
    let mut rest = ptx;
    while let Some(pos) = rest.find(".entry ") {
        rest = &rest[pos + ".entry ".len()..];
        let name_end = rest.find(|c: char| c == '(' || c.is_whitespace()).unwrap_or(rest.len());
        let name = rest[..name_end].to_string();
        let after = &rest[name_end..];
        let mut params = Vec::new();
        if let Some(open) = after.trim_start().strip_prefix('(') {
            let close = open.find(')').ok_or_else(|| SignatureError(format!("unterminated .entry {name}")))?;
            for decl in open[..close].split(',').map(str::trim).filter(|d| !d.is_empty()) {
                params.push(ptx_param(decl).ok_or_else(|| SignatureError(format!("cannot read PTX parameter `{decl}` of {name}")))?);
            }
        }
        out.insert(name, params);
    }
    Ok(out)
}

fn ptx_param(decl: &str) -> Option<PtxParam> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    if words.first() != Some(&".param") {
        return None;
    }
    let last = *words.last()?;
    let ty = words
        .iter()
        .find(|w| matches!(w.get(..2), Some(".b" | ".u" | ".s" | ".f")) && w[2..].chars().all(|c| c.is_ascii_digit()) && w.len() > 2)?;
    let bits: usize = ty[2..].parse().ok()?;
    let elem = bits / 8;
    if let Some((_, count)) = last.split_once('[') {
        let n: usize = count.strip_suffix(']')?.parse().ok()?;
        let align = words.iter().position(|w| *w == ".align").and_then(|i| words.get(i + 1)).and_then(|a| a.parse().ok()).unwrap_or(elem);
        return Some(PtxParam { size: elem.checked_mul(n)?, align });
    }
    Some(PtxParam { size: elem, align: elem })
}

// ---------------------------------------------------------------------------------------
// Resolved parameters

/// What a parameter of a compiled kernel accepts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParamKind {
    /// `T*` / `const T*`: a contiguous array of dtype `T` (`None`: an opaque pointee).
    Pointer { dtype: Option<DType>, is_const: bool },
    /// `caijit::Array<T, N>`: a strided array of dtype `T` and rank `N`.
    Array { dtype: Option<DType>, is_const: bool, rank: usize },
    /// A scalar converted to exactly this type.
    Scalar(DType),
    /// A struct passed by value: bytes of exactly the parameter's size.
    Struct { name: String },
}

/// One parameter of a compiled kernel: what it accepts and where it lives in the buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamLayout {
    pub index: usize,
    pub name: Option<String>,
    /// The C++ type as caijit understood it.
    pub cpp_type: String,
    pub kind: ParamKind,
    pub size: usize,
    pub align: usize,
    pub offset: usize,
}

/// Size of `caijit::Array<T, N>`: a pointer plus `N` extents and `N` byte strides (int64).
/// Saturates at `usize::MAX` for ranks no array can have (a rank read from a declaration).
pub const fn array_param_size(rank: usize) -> usize {
    rank.saturating_mul(16).saturating_add(8)
}

impl ParamKind {
    /// The size this kind must have, when the kind alone determines it.
    pub fn expected_size(&self) -> Option<usize> {
        match self {
            ParamKind::Pointer { .. } => Some(8),
            ParamKind::Array { rank, .. } => Some(array_param_size(*rank)),
            ParamKind::Scalar(d) => Some(d.itemsize()),
            ParamKind::Struct { .. } => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ParamKind::Pointer { dtype, is_const } => format!(
                "a {}contiguous array of {}",
                if *is_const { "" } else { "writable " },
                dtype.map_or("any dtype".to_string(), |d| d.name().to_string())
            ),
            ParamKind::Array { dtype, is_const, rank } => format!(
                "a {}{rank}-d array of {}",
                if *is_const { "" } else { "writable " },
                dtype.map_or("any dtype".to_string(), |d| d.name().to_string())
            ),
            ParamKind::Scalar(d) => format!("a scalar converted to {} ({})", d.cpp_name(), d.name()),
            ParamKind::Struct { name } => format!("a `{name}` struct passed as bytes"),
        }
    }
}

fn kind_of(t: &ParamType) -> Result<ParamKind, String> {
    let dtype = |c: &CType| match c {
        CType::Scalar(d) => Ok(Some(*d)),
        CType::Named(_) => Ok(None),
        CType::TemplateParam(p) => Err(format!("template parameter {p} is not substituted")),
    };
    Ok(match t {
        ParamType::Pointer { elem, is_const } => ParamKind::Pointer { dtype: dtype(elem)?, is_const: *is_const },
        ParamType::Array { elem, is_const, rank } => match rank {
            Rank::Fixed(n) if *n > crate::cai::MAX_RANK => {
                return Err(format!("caijit::Array of rank {n}: arrays have at most {} dimensions", crate::cai::MAX_RANK))
            }
            Rank::Fixed(n) => ParamKind::Array { dtype: dtype(elem)?, is_const: *is_const, rank: *n },
            Rank::TemplateParam(p) => return Err(format!("template parameter {p} is not substituted")),
        },
        ParamType::Value(CType::Scalar(d)) => ParamKind::Scalar(*d),
        ParamType::Value(CType::Named(n)) => ParamKind::Struct { name: n.clone() },
        ParamType::Value(CType::TemplateParam(p)) => return Err(format!("template parameter {p} is not substituted")),
    })
}

/// Lay out parameters: kinds from the declaration, sizes and alignments from the PTX,
/// each cross-checked against the other.
pub fn layout(kernel: &str, declared: &[(Option<String>, ParamType)], ptx: &[PtxParam]) -> Result<Vec<ParamLayout>, SignatureError> {
    if declared.len() != ptx.len() {
        return Err(SignatureError(format!(
            "kernel `{kernel}`: the declaration has {} parameters but the compiled code has {}",
            declared.len(),
            ptx.len()
        )));
    }
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(declared.len());
    for (index, ((name, ty), p)) in declared.iter().zip(ptx).enumerate() {
        let kind = kind_of(ty).map_err(|e| SignatureError(format!("kernel `{kernel}` parameter {index}: {e}")))?;
        if let Some(size) = kind.expected_size() {
            if size != p.size {
                return Err(SignatureError(format!(
                    "kernel `{kernel}` parameter {index} (`{ty}`): declared as {size} bytes but the compiled code has {} bytes",
                    p.size
                )));
            }
        }
        let align = p.align.max(1);
        let too_large = || SignatureError(format!("kernel `{kernel}`: the parameters take more than {} bytes", usize::MAX));
        offset = offset.checked_next_multiple_of(align).ok_or_else(too_large)?;
        out.push(ParamLayout { index, name: name.clone(), cpp_type: ty.to_string(), kind, size: p.size, align, offset });
        offset = offset.checked_add(p.size).ok_or_else(too_large)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Template deduction

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

/// Deduce the template arguments of `decl` from the launch's argument types, Numba-style.
/// Returns the name expression to instantiate (`axpy<float>`).
pub fn deduce(decl: &KernelDecl, args: &[ArgType]) -> Result<String, String> {
    if decl.params.len() != args.len() {
        return Err(format!("kernel `{}` takes {} arguments, got {}", decl.name, decl.params.len(), args.len()));
    }
    let mut found: BTreeMap<&str, String> = BTreeMap::new();
    let mut bind = |p: &str, value: String, index: usize| -> Result<(), String> {
        match found.get(p) {
            Some(prev) if *prev != value => Err(format!(
                "template parameter {p} of `{}` is {prev} from an earlier argument but {value} from argument {index}",
                decl.name
            )),
            _ => {
                found.insert(decl.template_params.iter().find(|t| t.name() == p).map_or("", |t| t.name()), value);
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
    let mut targs = Vec::with_capacity(decl.template_params.len());
    for tp in &decl.template_params {
        match found.get(tp.name()) {
            Some(v) => targs.push(v.clone()),
            None => {
                return Err(format!(
                    "cannot deduce template parameter {} of `{}` from the arguments; pass a typed scalar (e.g. numpy.float32) or call .specialize(\"{}<...>\")",
                    tp.name(),
                    decl.name,
                    decl.name
                ))
            }
        }
    }
    Ok(format!("{}<{}>", decl.name, targs.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(src: &str) -> KernelDecl {
        let mut k = parse_kernels(src).unwrap();
        assert_eq!(k.len(), 1, "{k:?}");
        k.remove(0)
    }

    fn ptr(d: DType, is_const: bool) -> ParamType {
        ParamType::Pointer { elem: CType::Scalar(d), is_const }
    }

    #[test]
    fn extern_c_kernel() {
        let k = one(r#"extern "C" __global__ void scale(float* __restrict__ y, const float* x, float a, unsigned int n) {}"#);
        assert!(k.extern_c && !k.is_template());
        assert_eq!(k.name, "scale");
        let types: Vec<_> = k.params.iter().map(|(_, t)| t.clone()).collect();
        assert_eq!(
            types,
            vec![
                ptr(DType::F32, false),
                ptr(DType::F32, true),
                ParamType::Value(CType::Scalar(DType::F32)),
                ParamType::Value(CType::Scalar(DType::U32))
            ]
        );
        let names: Vec<_> = k.params.iter().map(|(n, _)| n.clone().unwrap()).collect();
        assert_eq!(names, ["y", "x", "a", "n"]);
    }

    #[test]
    fn extern_c_blocks_launch_bounds_comments_and_preprocessor() {
        let src = r#"
            #include <cuda_fp16.h>
            #define N 4
            // __global__ void commented_out(int x) {}
            extern "C" {
            /* a block comment */ __global__ void __launch_bounds__(256, 2) k1(long long a, __half h, int8_t b) {}
            }
            __global__ void k2(void) {}
        "#;
        let k = parse_kernels(src).unwrap();
        assert_eq!(k.iter().map(|k| (k.name.as_str(), k.extern_c)).collect::<Vec<_>>(), [("k1", true), ("k2", false)]);
        assert_eq!(k[0].params[0].1, ParamType::Value(CType::Scalar(DType::I64)));
        assert_eq!(k[0].params[1].1, ParamType::Value(CType::Scalar(DType::F16)));
        assert_eq!(k[0].params[2].1, ParamType::Value(CType::Scalar(DType::I8)));
        assert!(k[1].params.is_empty());
    }

    #[test]
    fn template_kernel_with_array_params() {
        let src = "template <typename T, int N>\n__global__ void copy(caijit::Array<const T, N> src, T* dst, int n = 3) {}";
        let k = one(src);
        assert_eq!(k.template_params, [TemplateParam::Type("T".into()), TemplateParam::Value("N".into())]);
        assert_eq!(
            k.params[0].1,
            ParamType::Array { elem: CType::TemplateParam("T".into()), is_const: true, rank: Rank::TemplateParam("N".into()) }
        );
        assert_eq!(k.params[1].1, ParamType::Pointer { elem: CType::TemplateParam("T".into()), is_const: false });
        assert_eq!(k.params[2].0.as_deref(), Some("n"));
    }

    #[test]
    fn unnamed_params_structs_and_multiword_types() {
        let k = one("struct S { int a; }; __global__ void f(S s, unsigned, unsigned long long, const S* p, float v[]) {}");
        let t: Vec<_> = k.params.iter().map(|(_, t)| t.clone()).collect();
        assert_eq!(t[0], ParamType::Value(CType::Named("S".into())));
        assert_eq!(t[1], ParamType::Value(CType::Scalar(DType::U32)));
        assert_eq!(t[2], ParamType::Value(CType::Scalar(DType::U64)));
        assert_eq!(t[3], ParamType::Pointer { elem: CType::Named("S".into()), is_const: true });
        assert_eq!(t[4], ptr(DType::F32, false));
        assert_eq!(k.params[1].0, None);
    }

    #[test]
    fn references_are_rejected() {
        assert!(parse_kernels("__global__ void f(int& x) {}").is_err());
    }

    #[test]
    fn demangled_instances() {
        let (text, params) = demangled_params("_Z4axpyIfEvT_PKS0_PS0_i1Sc6__half").unwrap().unwrap();
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
        assert_eq!(demangled_params("scale").unwrap(), None);
    }

    #[test]
    fn ptx_params() {
        let ptx = ".visible .entry k2(\n\t.param .u64 k2_param_0,\n\t.param .u64 .ptr .global .align 4 k2_param_1\n)\n{\n}\n\
                   .weak .entry _Z1fv(\n\t.param .align 8 .b8 _Z1fv_param_0[24],\n\t.param .u8 _Z1fv_param_1,\n\t.param .align 2 .b8 _Z1fv_param_2[2]\n)\n";
        let e = ptx_entries(ptx).unwrap();
        assert_eq!(e["k2"], [PtxParam { size: 8, align: 8 }, PtxParam { size: 8, align: 8 }]);
        assert_eq!(e["_Z1fv"], [PtxParam { size: 24, align: 8 }, PtxParam { size: 1, align: 1 }, PtxParam { size: 2, align: 2 }]);
    }

    #[test]
    fn layout_offsets_and_cross_check() {
        let decl = vec![
            (None, ParamType::Value(CType::Scalar(DType::I8))),
            (None, ParamType::Array { elem: CType::Scalar(DType::F32), is_const: true, rank: Rank::Fixed(2) }),
            (None, ParamType::Value(CType::Scalar(DType::F16))),
        ];
        let ptx = [PtxParam { size: 1, align: 1 }, PtxParam { size: 40, align: 8 }, PtxParam { size: 2, align: 2 }];
        let l = layout("k", &decl, &ptx).unwrap();
        assert_eq!(l.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 8, 48]);
        let bad = [PtxParam { size: 4, align: 4 }, ptx[1], ptx[2]];
        let e = layout("k", &decl, &bad).unwrap_err();
        assert!(e.0.contains("parameter 0") && e.0.contains("4 bytes"), "{e}");
        assert!(layout("k", &decl, &ptx[..2]).is_err());
    }

    #[test]
    fn deduction() {
        let k = one("template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {}");
        let f32a = ArgType::Array { dtype: DType::F32, rank: 1 };
        assert_eq!(deduce(&k, &[ArgType::UntypedScalar, f32a, f32a, ArgType::UntypedScalar]).unwrap(), "axpy<float>");
        let f64a = ArgType::Array { dtype: DType::F64, rank: 1 };
        let e = deduce(&k, &[ArgType::UntypedScalar, f32a, f64a, ArgType::UntypedScalar]).unwrap_err();
        assert!(e.contains("template parameter T") && e.contains("argument 2"), "{e}");
        let k = one("template <typename T> __global__ void fill(T v, int n) {}");
        let e = deduce(&k, &[ArgType::UntypedScalar, ArgType::UntypedScalar]).unwrap_err();
        assert!(e.contains("cannot deduce template parameter T"), "{e}");
        assert_eq!(deduce(&k, &[ArgType::TypedScalar(DType::F16), ArgType::UntypedScalar]).unwrap(), "fill<__half>");
        let k = one("template <typename T, int N> __global__ void c(caijit::Array<const T, N> a, T* o) {}");
        let a3 = ArgType::Array { dtype: DType::I16, rank: 3 };
        let o = ArgType::Array { dtype: DType::I16, rank: 1 };
        assert_eq!(deduce(&k, &[a3, o]).unwrap(), "c<short, 3>");
    }

    fn id(s: &str) -> Tok {
        Tok::Ident(s.into())
    }

    #[test]
    fn tokenizer_reads_identifiers_numbers_strings_scopes_and_punctuation() {
        let toks = tokenize(r#"_a1 ns::b 0x1F 1'000 2.5f "s\"q" '\'' "x y" ? : é *"#);
        assert_eq!(
            toks,
            [
                id("_a1"),
                id("ns"),
                Tok::Scope,
                id("b"),
                Tok::Num("0x1F".into()),
                Tok::Num("1000".into()),
                Tok::Num("2.5f".into()),
                Tok::Str(r#"s\"q"#.into()),
                Tok::Str(r"\'".into()),
                Tok::Str("x y".into()),
                Tok::Punct('?'),
                Tok::Punct(':'),
                Tok::Punct('é'),
                Tok::Punct('*'),
            ]
        );
        assert_eq!(tokenize("a/b"), [id("a"), Tok::Punct('/'), id("b")]);
    }

    #[test]
    fn tokenizer_skips_comments_and_preprocessor_lines_with_continuations() {
        let src = "#define A(x) \\\n    (x)\n  # pragma once\nb // c d\n/* e * f / g */ h #i\n#j \\\\\nk\nl";
        assert_eq!(tokenize(src), [id("b"), id("h"), Tok::Punct('#'), id("i"), id("l")]);
        // Unterminated constructs end the input without reading past it.
        assert_eq!(tokenize("m // n"), [id("m")]);
        assert_eq!(tokenize("m /* n *"), [id("m")]);
        assert_eq!(tokenize("m \"n\\"), [id("m"), Tok::Str("n\\".into())]);
        assert_eq!(tokenize("m\n#n \\"), [id("m")]);
        assert_eq!(tokenize("\"n"), [Tok::Str("n".into())]);
        assert_eq!(tokenize("/* a */ b 1"), [id("b"), Tok::Num("1".into())]);
    }

    #[test]
    fn top_level_split_respects_every_bracket() {
        let toks = tokenize("a<b, c>, f(x, y), g[1, 2], {p, q}, z");
        let parts = split_top_level(&toks);
        let heads: Vec<(&Tok, usize)> = parts.iter().map(|p| (&p[0], p.len())).collect();
        assert_eq!(heads, [(&id("a"), 6), (&id("f"), 6), (&id("g"), 6), (&Tok::Punct('{'), 5), (&id("z"), 1)]);
        assert_eq!(split_top_level(&tokenize("a,")).len(), 2, "a trailing comma leaves an empty part");
        assert!(split_top_level(&[]).is_empty());
    }

    #[test]
    fn every_cpp_scalar_spelling_maps_to_its_dtype() {
        use DType::*;
        let table = [
            ("bool", Bool),
            ("char", I8),
            ("signed char", I8),
            ("int8_t", I8),
            ("unsigned char", U8),
            ("uint8_t", U8),
            ("short", I16),
            ("short int", I16),
            ("signed short", I16),
            ("int16_t", I16),
            ("unsigned short", U16),
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
            ("unsigned long long", U64),
            ("unsigned long long int", U64),
            ("uint64_t", U64),
            ("size_t", U64),
            ("uintptr_t", U64),
            ("__half", F16),
            ("half", F16),
            ("__nv_bfloat16", BF16),
            ("nv_bfloat16", BF16),
            ("float", F32),
            ("double", F64),
            ("caijit::complex<float>", C64),
            ("complex<float>", C64),
            ("caijit::complex<double>", C128),
            ("complex<double>", C128),
        ];
        for (name, d) in table {
            assert_eq!(scalar_from_cpp(name), Some(d), "{name}");
        }
        for other in ["void", "S", "long double", "int int", ""] {
            assert_eq!(scalar_from_cpp(other), None, "{other}");
        }
        for d in DType::ALL {
            assert_eq!(scalar_from_cpp(d.cpp_name()), Some(d), "{d}");
        }
    }

    #[test]
    fn declarator_forms_name_pointers_and_values() {
        let k = one("__global__ void f(const float v[], S, const S, float* const, std::size_t, float** pp, \
             Pair<const int>* q, Pair<int> const* r, float const* x, caijit::Array<float, 2u> a, ::caijit::Array<const double, 1> b, int) {}");
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
            ]
        );
        let e = parse_kernels("__global__ void g(caijit::Array<float> a) {}").unwrap_err();
        assert!(e.0.contains("kernel `g`") && e.0.contains("<T, N>"), "{e}");
        assert_eq!(e.to_string(), e.0);
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
            namespace ns { __global__ void in_ns(int x) {} }
            __global__ void one_arg(int) {}
            __global__ void void_ptr(void* p) {}
        "#;
        let k = parse_kernels(src).unwrap();
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
                ("in_ns", false, 1),
                ("one_arg", false, 1),
                ("void_ptr", false, 1),
            ]
        );
        assert!(k[0].is_template() && !k[1].is_template());
        assert_eq!(
            k[0].template_params,
            [
                TemplateParam::Type("T".into()),
                TemplateParam::Type("U".into()),
                TemplateParam::Value("N".into()),
                TemplateParam::Value("M".into())
            ]
        );
        assert_eq!(k[0].params[0].1, ParamType::Pointer { elem: CType::TemplateParam("T".into()), is_const: false });
        assert_eq!(k[9].params[0].1, ParamType::Pointer { elem: CType::Named("void".into()), is_const: false });
    }

    #[test]
    fn extern_c_blocks_cover_every_kernel_inside_them() {
        let src =
            r#"struct S { int a; }; extern "C" { __global__ void a(int n) {} __global__ void b(int n) {} } __global__ void c(int n) {}"#;
        let k = parse_kernels(src).unwrap();
        assert_eq!(k.iter().map(|k| (k.name.as_str(), k.extern_c)).collect::<Vec<_>>(), [("a", true), ("b", true), ("c", false)]);
    }

    #[test]
    fn forward_declarations_merge_and_overloads_stay_apart() {
        let k = parse_kernels("__global__ void f(int n);\n__global__ void f(int n) {}\n__global__ void f(float x) {}").unwrap();
        assert_eq!(k.len(), 2);
        assert_eq!(k[0].params[0].1, ParamType::Value(CType::Scalar(DType::I32)));
        assert_eq!(k[1].params[0].1, ParamType::Value(CType::Scalar(DType::F32)));
    }

    #[test]
    fn malformed_sources_do_not_panic() {
        for src in
            ["<> __global__ void f(int x) {}", "> __global__", "__global__", "__global__ void", "extern \"C\" {", "__global__ void f(int x"]
        {
            let _ = parse_kernels(src);
        }
        assert!(parse_kernels("__global__ void f(int x").is_err());
    }

    #[test]
    fn demangled_parameter_lists_with_parentheses_inside() {
        let (text, params) = demangled_params("_Z1fPFviEi").unwrap().unwrap();
        assert_eq!(text, "f(void (*)(int), int)");
        assert_eq!(params.len(), 2, "{params:?}");
        assert_eq!(params[1], ParamType::Value(CType::Scalar(DType::I32)));
        let (text, params) = demangled_params("_Z1gv").unwrap().unwrap();
        assert_eq!((text.as_str(), params.len()), ("g()", 0));
        let e = demangled_params("_Z3foo").unwrap_err();
        assert!(e.0.contains("no parameter list in foo"), "{e}");
    }

    #[test]
    fn ptx_scalar_types_and_unterminated_entries() {
        let ptx = ".entry k(.param .f32 a, .param .s16 b, .param .b32 c[3], .param .f64 d)\n.entry e()\n";
        let e = ptx_entries(ptx).unwrap();
        assert_eq!(
            e["k"],
            [
                PtxParam { size: 4, align: 4 },
                PtxParam { size: 2, align: 2 },
                PtxParam { size: 12, align: 4 },
                PtxParam { size: 8, align: 8 }
            ]
        );
        assert_eq!(e["e"], []);
        assert_eq!(e.len(), 2);
        assert!(ptx_entries(".entry k(.param .u32 a").is_err());
        assert!(ptx_entries(".entry k(.reg .u32 a)").is_err());
    }

    #[test]
    fn param_types_print_as_cpp() {
        assert_eq!(ptr(DType::F32, true).to_string(), "const float*");
        assert_eq!(ParamType::Pointer { elem: CType::Named("S".into()), is_const: false }.to_string(), "S*");
        let a = ParamType::Array { elem: CType::TemplateParam("T".into()), is_const: false, rank: Rank::Fixed(2) };
        assert_eq!(a.to_string(), "caijit::Array<T, 2>");
        let a = ParamType::Array { elem: CType::Scalar(DType::I32), is_const: true, rank: Rank::TemplateParam("N".into()) };
        assert_eq!(a.to_string(), "caijit::Array<const int, N>");
        assert_eq!(ParamType::Value(CType::Scalar(DType::C64)).to_string(), "caijit::complex<float>");
        assert_eq!(SignatureError("boom".into()).to_string(), "boom");
    }

    #[test]
    fn kinds_describe_themselves_and_their_sizes() {
        let p = ParamKind::Pointer { dtype: Some(DType::F32), is_const: true };
        assert_eq!((p.describe(), p.expected_size()), ("a contiguous array of float32".into(), Some(8)));
        let p = ParamKind::Pointer { dtype: None, is_const: false };
        assert_eq!(p.describe(), "a writable contiguous array of any dtype");
        let a = ParamKind::Array { dtype: Some(DType::I16), is_const: false, rank: 3 };
        assert_eq!((a.describe(), a.expected_size()), ("a writable 3-d array of int16".into(), Some(56)));
        let a = ParamKind::Array { dtype: None, is_const: true, rank: 1 };
        assert_eq!(a.describe(), "a 1-d array of any dtype");
        let s = ParamKind::Scalar(DType::F64);
        assert_eq!((s.describe(), s.expected_size()), ("a scalar converted to double (float64)".into(), Some(8)));
        let s = ParamKind::Struct { name: "S".into() };
        assert_eq!((s.describe(), s.expected_size()), ("a `S` struct passed as bytes".into(), None));
    }

    #[test]
    fn layout_of_structs_and_unsubstituted_templates() {
        let decl = vec![(Some("s".into()), ParamType::Value(CType::Named("S".into()))), (None, ptr(DType::U8, false))];
        let l = layout("k", &decl, &[PtxParam { size: 12, align: 4 }, PtxParam { size: 8, align: 8 }]).unwrap();
        assert_eq!(l[0].kind, ParamKind::Struct { name: "S".into() });
        assert_eq!((l[0].offset, l[0].size, l[1].offset, l[1].align), (0, 12, 16, 8));
        assert_eq!(l[1].cpp_type, "unsigned char*");
        let t = vec![(None, ParamType::Value(CType::TemplateParam("T".into())))];
        let e = layout("k", &t, &[PtxParam { size: 4, align: 4 }]).unwrap_err();
        assert!(e.0.contains("template parameter T is not substituted"), "{e}");
    }

    // Issue #18: no panic on anything read back (each input below panicked before).

    #[test]
    fn launch_bounds_followed_by_a_closing_paren_is_no_underflow() {
        // `matching` was asked to close a `(` that is a `)`: its depth underflowed.
        for src in
            ["__global__ void __launch_bounds__ ) f(int x) {}", "__global__ void __launch_bounds__ )", "__global__ void __attribute__ ) )"]
        {
            assert_eq!(parse_kernels(src), Ok(vec![]), "{src}");
        }
        assert_eq!(matching(&tokenize(") ("), 0, '(', ')'), None);
        assert_eq!(matching(&tokenize("( ) )"), 0, '(', ')'), Some(1));
        assert_eq!(matching_backwards(&tokenize("( ("), 1, '(', ')'), None);
        assert_eq!(matching_backwards(&tokenize("( ( )"), 2, '(', ')'), Some(1));
    }

    #[test]
    fn malformed_ptx_array_params_are_errors() {
        // `x[` sliced `[open + 1..len - 1]` with the end before the start; `x[5é` cut a char.
        for decl in
            [".param .b8 k_param_1[", ".param .b8 k_param_1[é", ".param .b8 k_param_1[5é", ".param .b8 k_param_1[5", ".param .b8 k[]"]
        {
            let ptx = format!(".entry k({decl})");
            let e = ptx_entries(&ptx).unwrap_err();
            assert!(e.0.contains("cannot read PTX parameter"), "{decl}: {e}");
        }
        assert_eq!(ptx_entries(".entry k(.param .b8 k_param_1[0])").unwrap()["k"], [PtxParam { size: 0, align: 1 }]);
    }

    #[test]
    fn ptx_array_sizes_that_overflow_are_errors() {
        assert!(ptx_entries(".entry k(.param .b64 k_param_0[18446744073709551615])").is_err());
        let e = ptx_entries(".entry k(.param .b8 k_param_0[18446744073709551615])").unwrap();
        assert_eq!(e["k"][0].size, usize::MAX);
    }

    #[test]
    fn layouts_past_the_address_space_are_errors() {
        let s = |n: &str| (None, ParamType::Value(CType::Named(n.into())));
        // The offset of the second parameter rounds past usize::MAX; then the sum overflows.
        let big = PtxParam { size: usize::MAX - 2, align: 1 };
        let e = layout("k", &[s("A"), s("B")], &[big, PtxParam { size: 1, align: 8 }]).unwrap_err();
        assert!(e.0.contains("more than"), "{e}");
        let e = layout("k", &[s("A"), s("B")], &[big, PtxParam { size: 8, align: 1 }]).unwrap_err();
        assert!(e.0.contains("more than"), "{e}");
        // One parameter of every byte there is still lays out.
        assert_eq!(layout("k", &[s("A")], &[PtxParam { size: usize::MAX, align: 1 }]).unwrap()[0].size, usize::MAX);
    }

    #[test]
    fn huge_array_ranks_saturate_instead_of_overflowing() {
        assert_eq!(array_param_size(3), 56);
        assert_eq!(array_param_size(usize::MAX / 16 + 1), usize::MAX);
        assert_eq!(array_param_size(usize::MAX), usize::MAX);
        let k = one("__global__ void f(caijit::Array<float, 18446744073709551615> a) {}");
        assert_eq!(k.params[0].1, ParamType::Array { elem: CType::Scalar(DType::F32), is_const: false, rank: Rank::Fixed(usize::MAX) });
        for size in [40, usize::MAX] {
            let e = layout("f", &k.params, &[PtxParam { size, align: 8 }]).unwrap_err();
            assert!(e.0.contains("parameter 0") && e.0.contains("at most 64 dimensions"), "{e}");
        }
        let k = one("__global__ void f(caijit::Array<float, 64> a) {}");
        assert_eq!(layout("f", &k.params, &[PtxParam { size: array_param_size(64), align: 8 }]).unwrap()[0].size, 1032);
    }

    #[test]
    fn demangled_names_whose_last_paren_does_not_end_them() {
        // A const member function ends in `const`: the list is the group the last `)` closes.
        let (text, params) = demangled_params("_ZNK1S1fEi").unwrap().unwrap();
        assert_eq!(text, "S::f(int) const");
        assert_eq!(params, [ParamType::Value(CType::Scalar(DType::I32))]);
        // A `(` with no `)` after it, and a `)` with no `(` before it, are no parameter lists.
        let toks = tokenize("f ) (");
        let close = toks.iter().rposition(|t| *t == Tok::Punct(')')).unwrap();
        assert_eq!(matching_backwards(&toks, close, '(', ')'), None);
        let e = demangled_params("_Z3foo").unwrap_err();
        assert!(e.0.contains("no parameter list"), "{e}");
    }

    #[test]
    fn template_arguments_print_with_one_space_after_each_comma() {
        let k = one("__global__ void f(Pair<int, float> p, const Pair<int,float>* q, caijit::Array<Pair<int,  long>, 1> a) {}");
        assert_eq!(k.params[0].1, ParamType::Value(CType::Named("Pair<int, float>".into())));
        assert_eq!(k.params[1].1, ParamType::Pointer { elem: CType::Named("Pair<int, float>".into()), is_const: true });
        assert_eq!(k.params[2].1.to_string(), "caijit::Array<Pair<int, long>, 1>");
        let l = layout("f", &k.params[..1], &[PtxParam { size: 8, align: 4 }]).unwrap();
        assert_eq!(l[0].cpp_type, "Pair<int, float>");
        assert_eq!(join_type(&tokenize("std::map<int, std::pair<a, b> >")), "std::map<int, std::pair<a, b>>");
    }
}
