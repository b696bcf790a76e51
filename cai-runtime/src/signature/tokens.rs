//! A C++ tokenizer good enough to find kernel names and parameter names: comments,
//! preprocessor lines, string and character literals (raw ones included) are skipped or
//! kept whole, so that nothing inside them is read as a declaration.
//!
//! # Limitations
//! It is not a preprocessor: the text of every branch of `#if`/`#ifdef` is read, and
//! macros are not expanded. That is why it only *finds* names; the compiler says what
//! they are (see [`super::demangle`]).

use std::borrow::Cow;

/// One token, borrowing the text it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok<'a> {
    Ident(&'a str),
    /// Without C++14 digit separators (`1'000` is `1000`).
    Num(Cow<'a, str>),
    /// A string or character literal's contents (escapes as written).
    Str(&'a str),
    Punct(char),
    /// `::`
    Scope,
}

/// The length of a raw string literal starting at `i` (`R"d(…)d"`, with an optional
/// `u8`/`u`/`U`/`L` prefix), or `None` when no raw string starts there.
fn raw_string_len(b: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    let prefix = [&b"R\""[..], b"u8R\"", b"uR\"", b"UR\"", b"LR\""].into_iter().find(|p| b.get(i..i + p.len()) == Some(*p))?;
    let delim_start = i + prefix.len();
    let open = delim_start + b.get(delim_start..)?.iter().take(17).position(|&c| c == b'(')?;
    let delim = &b[delim_start..open];
    if delim.iter().any(|c| c.is_ascii_whitespace() || matches!(c, b'\\' | b')')) {
        return None;
    }
    let mut j = open + 1;
    while j < b.len() {
        if b[j] == b')' && b.get(j + 1..j + 1 + delim.len()) == Some(delim) && b.get(j + 1 + delim.len()) == Some(&b'"') {
            return Some((open + 1, j, j + 2 + delim.len()));
        }
        j += 1;
    }
    Some((open + 1, b.len(), b.len()))
}

/// Past the preprocessor line whose `#` is at `i` (and the lines it continues onto), at its
/// newline or the end of `b`.
fn directive_end(b: &[u8], mut i: usize) -> usize {
    loop {
        let Some(p) = memchr::memchr(b'\n', &b[i..]) else { return b.len() };
        i += p;
        // A backslash before the newline (or before a CRLF's) splices the next line on.
        let spliced = b[..i].ends_with(b"\\") || b[..i].ends_with(b"\\\r");
        if !spliced {
            return i;
        }
        i += 1;
    }
}

pub(crate) fn tokenize(src: &str) -> Vec<Tok<'_>> {
    let b = src.as_bytes();
    // About one token in five bytes of C++.
    let mut out = Vec::with_capacity(b.len() / 5);
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
            i = directive_end(b, i);
            continue;
        }
        line_start = false;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |p| i + p);
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = memchr::memmem::find(&b[i + 2..], b"*/").map_or(b.len(), |p| i + 2 + p + 2);
            continue;
        }
        let raw = if matches!(c, b'R' | b'u' | b'U' | b'L') { raw_string_len(b, i) } else { None };
        if let Some((start, end, next)) = raw {
            out.push(Tok::Str(src.get(start..end).unwrap_or_default()));
            i = next;
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
            out.push(Tok::Str(src.get(start..i.min(b.len())).unwrap_or_default()));
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(&src[start..i]));
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'\'') {
                i += 1;
            }
            let num = &src[start..i];
            out.push(Tok::Num(if num.contains('\'') { Cow::Owned(num.replace('\'', "")) } else { Cow::Borrowed(num) }));
            continue;
        }
        if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Scope);
            i += 2;
            continue;
        }
        // Non-ASCII characters are one token each.
        let ch = src[i..].chars().next().unwrap_or(' ');
        out.push(Tok::Punct(ch));
        i += ch.len_utf8();
    }
    out
}

pub(crate) fn is_ident(t: Option<&Tok<'_>>, s: &str) -> bool {
    matches!(t, Some(Tok::Ident(x)) if *x == s)
}

/// Index of the token closing the bracket opened at `open` (`(`/`)`, `{`/`}`, `[`/`]`).
/// `None` when it is not closed, or when a closing bracket comes first (`open` is not `o`).
pub(crate) fn matching(toks: &[Tok<'_>], open: usize, o: char, c: char) -> Option<usize> {
    match_bracket(toks, open..toks.len(), o, c)
}

/// Index of the token opening the bracket closed at `close`, scanning backwards.
pub(crate) fn matching_backwards(toks: &[Tok<'_>], close: usize, o: char, c: char) -> Option<usize> {
    match_bracket(toks, (0..=close).rev(), c, o)
}

/// The index where the bracket opened (`into`) at the first of `indices` is closed
/// (`out_of`), walking `indices` in order (forwards or backwards).
fn match_bracket(toks: &[Tok<'_>], indices: impl Iterator<Item = usize>, into: char, out_of: char) -> Option<usize> {
    let mut depth = 0usize;
    for j in indices {
        match toks.get(j)? {
            Tok::Punct(x) if *x == into => depth = depth.checked_add(1)?,
            Tok::Punct(x) if *x == out_of => {
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

/// Index of the `<` that the `>` at `close` closes, scanning backwards: a `>` inside
/// parentheses (`(N > 4)`) is a comparison, not a bracket.
pub(crate) fn matching_angle_backwards(toks: &[Tok<'_>], close: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = close;
    loop {
        match toks.get(j)? {
            Tok::Punct(')') => j = matching_backwards(toks, j, '(', ')')?,
            Tok::Punct('>') => depth = depth.checked_add(1)?,
            Tok::Punct('<') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
        j = j.checked_sub(1)?;
    }
}

/// Split at top-level commas. Brackets are tracked on a stack, so a `>` inside parentheses
/// (a comparison) closes nothing, and neither does a `>` with no `<` open.
pub(crate) fn split_top_level<'t, 'a>(toks: &'t [Tok<'a>]) -> Vec<&'t [Tok<'a>]> {
    let mut parts = Vec::new();
    let mut stack: Vec<char> = Vec::new();
    let mut start = 0usize;
    for (j, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct(o @ ('(' | '[' | '{')) => stack.push(*o),
            Tok::Punct('<') if stack.last() != Some(&'(') => stack.push('<'),
            Tok::Punct('>') if stack.last() == Some(&'<') => {
                stack.pop();
            }
            Tok::Punct(c @ (')' | ']' | '}')) => {
                let o = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                // Close the bracket and any `<` left open inside it (a comparison).
                if let Some(at) = stack.iter().rposition(|x| *x == o) {
                    stack.truncate(at);
                }
            }
            Tok::Punct(',') if stack.is_empty() => {
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

/// Tokens joined back into C++ text, one space after each comma, none around `::`.
pub(crate) fn join_type(toks: &[Tok<'_>]) -> String {
    let mut s = String::new();
    let mut angles = 0usize;
    for t in toks {
        // A `>` with no `<` open is a comparison, spaced like one.
        let closes_angle = match t {
            Tok::Punct('<') => {
                angles += 1;
                true
            }
            Tok::Punct('>') if angles > 0 => {
                angles -= 1;
                true
            }
            _ => false,
        };
        let piece = match t {
            Tok::Ident(x) => (*x).into(),
            Tok::Num(x) => x.to_string(),
            Tok::Scope => "::".into(),
            Tok::Punct(c) => c.to_string(),
            Tok::Str(x) => format!("\"{x}\""),
        };
        let glue = closes_angle
            || matches!(t, Tok::Scope | Tok::Punct(',' | '*' | ')' | '['))
            || (matches!(t, Tok::Punct('(')) && s.ends_with(')'))
            || s.ends_with("::")
            || s.ends_with('<')
            || s.ends_with('(')
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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Tok<'_> {
        Tok::Ident(s)
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
                Tok::Str(r#"s\"q"#),
                Tok::Str(r"\'"),
                Tok::Str("x y"),
                Tok::Punct('?'),
                Tok::Punct(':'),
                Tok::Punct('é'),
                Tok::Punct('*'),
            ]
        );
        assert_eq!(tokenize("a/b"), [id("a"), Tok::Punct('/'), id("b")]);
    }

    #[test]
    fn raw_strings_are_one_token_whatever_they_contain() {
        let src = r#"const char* s = R"txt(needs a 5" screen; see extern "C" __global__ void f(int x) )txt"; g"#;
        let toks = tokenize(src);
        assert_eq!(toks.iter().filter(|t| matches!(t, Tok::Str(_))).count(), 1, "{toks:?}");
        assert_eq!(toks.last(), Some(&id("g")));
        assert_eq!(tokenize(r#"u8R"(a)" LR"x()x" b"#), [Tok::Str("a"), Tok::Str(""), id("b")]);
        // An unterminated raw string ends the input; `R` alone is an identifier.
        assert_eq!(tokenize(r#"R"(abc"#), [Tok::Str("abc")]);
        assert_eq!(tokenize("R + 1"), [id("R"), Tok::Punct('+'), Tok::Num("1".into())]);
    }

    #[test]
    fn tokenizer_skips_comments_and_preprocessor_lines_with_continuations() {
        let src = "#define A(x) \\\n    (x)\n  # pragma once\nb // c d\n/* e * f / g */ h #i\n#j \\\\\nk\nl";
        assert_eq!(tokenize(src), [id("b"), id("h"), Tok::Punct('#'), id("i"), id("l")]);
        assert_eq!(tokenize("m // n"), [id("m")]);
        assert_eq!(tokenize("m /* n *"), [id("m")]);
        assert_eq!(tokenize("m \"n\\"), [id("m"), Tok::Str("n\\")]);
        assert_eq!(tokenize("m\n#n \\"), [id("m")]);
        assert_eq!(tokenize("\"n"), [Tok::Str("n")]);
        assert_eq!(tokenize("/* a */ b 1"), [id("b"), Tok::Num("1".into())]);
        // The `*/` of `/*/` does not close the comment it opens; a directive may end the text.
        assert_eq!(tokenize("m /*/ n */ o\n#"), [id("m"), id("o")]);
        assert_eq!(tokenize("#a\\\r\nb\nc"), [id("c")]);
    }

    #[test]
    fn top_level_split_respects_every_bracket_and_comparisons() {
        let toks = tokenize("a<b, c>, f(x, y), g[1, 2], {p, q}, z");
        let parts = split_top_level(&toks);
        let heads: Vec<(&Tok, usize)> = parts.iter().map(|p| (&p[0], p.len())).collect();
        assert_eq!(heads, [(&id("a"), 6), (&id("f"), 6), (&id("g"), 6), (&Tok::Punct('{'), 5), (&id("z"), 1)]);
        assert_eq!(split_top_level(&tokenize("a,")).len(), 2, "a trailing comma leaves an empty part");
        assert!(split_top_level(&[]).is_empty());
        assert_eq!(split_top_level(&tokenize("int N, bool B = (N > 4), int M = (N < 2)")).len(), 3);
        assert_eq!(split_top_level(&tokenize("X<(1 > 2)>, Y")).len(), 2);
    }

    #[test]
    fn brackets_match_forwards_and_backwards() {
        assert_eq!(matching(&tokenize(") ("), 0, '(', ')'), None);
        assert_eq!(matching(&tokenize("( ) )"), 0, '(', ')'), Some(1));
        assert_eq!(matching_backwards(&tokenize("( ("), 1, '(', ')'), None);
        assert_eq!(matching_backwards(&tokenize("( ( )"), 2, '(', ')'), Some(1));
        let t = tokenize("template < int N , bool B = ( N > 4 ) >");
        assert_eq!(matching_angle_backwards(&t, t.len() - 1), Some(1));
        assert_eq!(matching_angle_backwards(&tokenize("a >"), 1), None);
    }

    #[test]
    fn joined_types_have_one_space_after_each_comma() {
        assert_eq!(join_type(&tokenize("std::map<int, std::pair<a, b> >")), "std::map<int, std::pair<a, b>>");
        assert_eq!(join_type(&tokenize("void (*)(int, float)")), "void (*)(int, float)");
    }
}
