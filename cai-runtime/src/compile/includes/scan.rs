//! The scan of one file for what it includes: `#include` and `__has_include` directives
//! outside comments and literals, `#pragma once`, and what would make the set of headers
//! unknowable without preprocessing (a computed include, a probe of a macro, a trigraph).

use memchr::memmem;

/// One `#include` (or `__has_include`) of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Include {
    pub name: String,
    /// `"name"` (searched next to the including file first) rather than `<name>`.
    pub quoted: bool,
}

/// What a scan found in one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    pub includes: Vec<Include>,
    pub pragma_once: bool,
    /// Why not every header the file may read can be named without preprocessing (the
    /// first such thing found: a computed include, a probe of a macro, a trigraph).
    pub opaque: Option<String>,
}

/// Find the include directives of C++ text, outside comments and literals.
pub(crate) fn scan(text: &str) -> Scan {
    scan_as(text, true)
}

/// [`scan`] as a standard with (`raw_strings`: C++11 and later) or without raw string
/// literals reads `text`: before C++11, `R"x(` opens an ordinary literal that ends on its
/// line, and a directive on a later line of what C++11 reads as one raw string is a directive.
pub(super) fn scan_as(text: &str, raw_strings: bool) -> Scan {
    let mut out = Scan::default();
    // Trigraphs (with `-std=c++11` or `c++14`) spell `#` (`??=`) and the backslash of a line
    // splice (`??/`): directives the scanner would not see.
    let raw = text.as_bytes();
    if let Some(p) = memmem::find(raw, b"??=").or_else(|| memmem::find(raw, b"??/")) {
        out.opaque = Some(format!("the trigraph `{}` (it may spell a directive or a line splice)", &text[p..p + 3]));
    }
    // Line splicing comes before everything else in C++.
    let spliced;
    let text = if memmem::find(raw, b"\\\n").is_some() || memmem::find(raw, b"\\\r\n").is_some() {
        spliced = text.replace("\\\r\n", "").replace("\\\n", "");
        spliced.as_str()
    } else {
        text
    };
    let b = text.as_bytes();
    let mut i = 0;
    // Only blanks and comments since the last newline: a `#` here starts a directive.
    let mut line_start = true;
    // The `#define` whose body is being read (to the end of its line).
    let mut define: Option<Define> = None;
    // Where the pp-number read last ends, if it was the last token (a `'` there is a digit
    // separator: `1'000'000`, read in one pass however many there are).
    let mut number_end: Option<usize> = None;
    // Token pasting (`##`, `%:%:`) may form `__has_include` from pieces no scan names.
    let pastes = memmem::find(b, b"##").is_some() || memmem::find(b, b"%:%:").is_some();
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line_start = true;
                define = None;
                i += 1;
            }
            b' ' | b'\t' | b'\r' | 0x0b | 0x0c => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => i = find(b, i, b"\n"),
            b'/' if b.get(i + 1) == Some(&b'*') => i = find(b, i + 2, b"*/").saturating_add(2).min(b.len()),
            // `%:` is `#` (a digraph, in every C++ standard).
            b'#' | b'%' if line_start && (b[i] == b'#' || b.get(i + 1) == Some(&b':')) => {
                line_start = false;
                (i, define) = directive(text, i + if b[i] == b'#' { 1 } else { 2 }, &mut out);
            }
            b'"' => {
                line_start = false;
                i = if raw_strings { string_end(b, i) } else { quoted_end(b, i, b'"') };
            }
            b'\'' => {
                line_start = false;
                // `1'000` is one number (C++14 digit separators); `u8'a'` is a character.
                if number_end == Some(i) {
                    i += 1;
                    number_end = Some(i);
                } else {
                    i = quoted_end(b, i, b'\'');
                }
            }
            c if is_ident(c) => {
                line_start = false;
                let number = c.is_ascii_digit() || number_end == Some(i);
                if pastes && out.opaque.is_none() && !number && is_probe_piece(&text[i..ident_end(b, i)]) {
                    let piece = &text[i..ident_end(b, i)];
                    out.opaque = Some(format!("token pasting and `{piece}`, which may be pasted into `__has_include`"));
                }
                i = word(text, i, ident_end(b, i), define.as_ref(), &mut out);
                number_end = number.then_some(i);
            }
            c => {
                line_start = false;
                i += 1;
                // `1.5'0`: a `.` inside a number continues it.
                number_end = (c == b'.' && number_end == Some(i - 1)).then_some(i);
            }
        }
    }
    out
}

/// The index of `pat` at or after `from`, or the end of `b`.
fn find(b: &[u8], from: usize, pat: &[u8]) -> usize {
    b.get(from..).and_then(|rest| memmem::find(rest, pat)).map_or(b.len(), |p| from + p)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Where the identifier (or pp-number's start) that starts at `start` ends.
fn ident_end(b: &[u8], start: usize) -> usize {
    start + b.get(start..).map_or(0, |rest| rest.iter().take_while(|&&c| is_ident(c)).count())
}

/// Where the identifier that ends just before `end` starts.
fn token_start(b: &[u8], end: usize) -> usize {
    let mut s = end;
    while s > 0 && is_ident(b[s - 1]) {
        s -= 1;
    }
    s
}

/// Past a `'…'` or `"…"` literal that opens at `open` (or the end of its line: none spans
/// lines, so a misread one costs at most the rest of its line).
fn quoted_end(b: &[u8], open: usize, close: u8) -> usize {
    let mut i = open + 1;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            b'\\' => i += 2,
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    i.min(b.len())
}

/// Past the string literal that opens at `open`, raw (`R"d(…)d"`, which may span lines) or not.
fn string_end(b: &[u8], open: usize) -> usize {
    let prefix = &b[token_start(b, open)..open];
    if !matches!(prefix, b"R" | b"u8R" | b"uR" | b"UR" | b"LR") {
        return quoted_end(b, open, b'"');
    }
    let Some(paren) = b[open + 1..].iter().take(17).position(|&c| c == b'(') else { return quoted_end(b, open, b'"') };
    let delim = &b[open + 1..open + 1 + paren];
    let mut close = Vec::with_capacity(delim.len() + 2);
    close.push(b')');
    close.extend_from_slice(delim);
    close.push(b'"');
    find(b, open + 2 + paren, &close).saturating_add(close.len()).min(b.len())
}

/// Skip blanks and `/* */` comments within a line.
fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    loop {
        match b.get(i) {
            Some(b' ' | b'\t' | b'\r' | 0x0b | 0x0c) => i += 1,
            Some(b'/') if b.get(i + 1) == Some(&b'*') => i = find(b, i + 2, b"*/").saturating_add(2).min(b.len()),
            _ => return i,
        }
    }
}

/// The `#define` a macro body belongs to, as far as `__has_include` needs it.
#[derive(Debug)]
struct Define {
    /// Its name has `has_include` in it (`_CCCL_HAS_INCLUDE`): each of its uses is read as a
    /// probe itself, so its body may hand a parameter on to `__has_include`.
    wrapper: bool,
    params: Vec<String>,
}

/// Read the directive after the `#` (or `%:`) that ends at `i`; returns where scanning goes
/// on, and the macro being defined when it is a `#define` (its body is the rest of the line).
fn directive(text: &str, i: usize, out: &mut Scan) -> (usize, Option<Define>) {
    let b = text.as_bytes();
    let start = skip_blanks(b, i);
    let end = ident_end(b, start);
    // Each line end is looked for past the blanks skipped, as a `/* */` skipped may span
    // lines (a comment is one space, so the directive goes on after it).
    match &text[start..end] {
        word @ ("include" | "include_next" | "import") => {
            let arg = skip_blanks(b, end);
            let line_end = find(b, arg, b"\n");
            let closing = match b.get(arg) {
                Some(b'"') => Some(b'"'),
                Some(b'<') => Some(b'>'),
                _ => None,
            };
            let close = closing.and_then(|c| b[arg + 1..line_end].iter().position(|&x| x == c)).map(|p| arg + 1 + p);
            match close {
                Some(close) if word != "include_next" => {
                    out.includes.push(Include { name: text[arg + 1..close].to_string(), quoted: b[arg] == b'"' });
                    (close + 1, None)
                }
                _ => {
                    out.opaque.get_or_insert_with(|| format!("`#{}` (a computed include or an include_next)", text[i..line_end].trim()));
                    (line_end, None)
                }
            }
        }
        "pragma" => {
            let word = skip_blanks(b, end);
            let once = b[word..].starts_with(b"once") && b.get(word + 4).is_none_or(|&c| !is_ident(c));
            out.pragma_once |= once;
            (end, None)
        }
        // The name tested (`#ifdef __has_include`) is no probe.
        "ifdef" | "ifndef" | "elifdef" | "elifndef" | "undef" => (ident_end(b, skip_blanks(b, end)), None),
        "define" => {
            let name_start = skip_blanks(b, end);
            let name_end = ident_end(b, name_start);
            let line_end = find(b, name_end, b"\n");
            let wrapper = contains_ignoring_case(&text[name_start..name_end], "has_include");
            // A function-like macro's `(` follows its name with no blank.
            let close = (b.get(name_end) == Some(&b'('))
                .then(|| b[name_end..line_end].iter().position(|&c| c == b')'))
                .flatten()
                .map(|p| name_end + p);
            match close {
                Some(close) => {
                    let params = text[name_end + 1..close].split(',').map(|p| p.trim().to_string()).collect();
                    (close + 1, Some(Define { wrapper, params }))
                }
                None => (name_end, Some(Define { wrapper, params: Vec::new() })),
            }
        }
        _ => (end, None),
    }
}

/// Read the identifier (or pp-number) `text[start..end]`; returns where scanning goes on.
fn word(text: &str, start: usize, end: usize, define: Option<&Define>, out: &mut Scan) -> usize {
    let b = text.as_bytes();
    let w = &text[start..end];
    match w {
        // `#pragma once`, and whatever else may spell it (`P(once)` with `P(x)` `_Pragma(#x)`).
        "once" => out.pragma_once = true,
        // `_Pragma("once")`, `_Pragma ( L" once " )`.
        "_Pragma" => {
            let open = skip_blanks(b, end);
            if b.get(open) == Some(&b'(') {
                let lit = skip_blanks(b, open + 1);
                let quote = ident_end(b, lit);
                if matches!(&b[lit..quote], b"" | b"L" | b"u8" | b"u" | b"U") && b.get(quote) == Some(&b'"') {
                    let close = quoted_end(b, quote, b'"');
                    if close > quote + 1 && b[close - 1] == b'"' {
                        let pragma = text[quote + 1..close - 1].replace("\\\"", "\"").replace("\\\\", "\\");
                        out.pragma_once |= pragma.split_whitespace().eq(["once"]);
                    }
                }
            }
        }
        _ if contains_ignoring_case(w, "has_include") => return probe(text, start, end, define, out),
        _ => {}
    }
    end
}

/// Whether `word` may be a piece of `__has_include` pasted together: its start (`__has_`,
/// three characters or more) or its end (`_include`, four or more), in any case.
fn is_probe_piece(word: &str) -> bool {
    const PROBE: &[u8] = b"__has_include";
    let w = word.as_bytes();
    let n = w.len();
    (3..PROBE.len()).contains(&n) && (PROBE[..n].eq_ignore_ascii_case(w) || (n >= 4 && PROBE[PROBE.len() - n..].eq_ignore_ascii_case(w)))
}

/// Whether `word` contains `part` (ASCII, lower case), in any case; without allocating (every
/// identifier of every header scanned is asked).
fn contains_ignoring_case(word: &str, part: &str) -> bool {
    word.len() >= part.len() && word.as_bytes().windows(part.len()).any(|w| w.eq_ignore_ascii_case(part.as_bytes()))
}

/// A `__has_include` (or a macro named like it, `_CCCL_HAS_INCLUDE`) at `text[start..end]`:
/// `…has_include(<name>)` or `…has_include("name")` records the name; a wrapper's body may
/// hand it one of its parameters, and `defined` may test it. Anything else (a macro for the
/// name, a macro for `__has_include`, `__has_include_next`, which searches past the file
/// found) makes the file opaque. Returns where scanning goes on.
fn probe(text: &str, start: usize, end: usize, define: Option<&Define>, out: &mut Scan) -> usize {
    let b = text.as_bytes();
    let ident = &text[start..end];
    let next = contains_ignoring_case(ident, "has_include_next");
    let wrapper = define.filter(|d| d.wrapper && !next);
    // `defined(__has_include)`, `defined __has_include`.
    let mut j = start;
    while j > 0 && matches!(b[j - 1], b' ' | b'\t' | b'\r' | 0x0b | 0x0c | b'(') {
        j -= 1;
    }
    if &b[token_start(b, j)..j] == b"defined" && b[j..start].iter().filter(|&&c| c == b'(').count() <= 1 {
        return end;
    }
    let open = skip_blanks(b, end);
    if b.get(open) == Some(&b'(') {
        let arg = skip_blanks(b, open + 1);
        let line_end = find(b, arg, b"\n");
        let closing = match b.get(arg) {
            Some(b'"') => Some(b'"'),
            Some(b'<') => Some(b'>'),
            _ => None,
        };
        let lit_end = closing.and_then(|c| b[arg + 1..line_end].iter().position(|&x| x == c)).map(|p| arg + 1 + p);
        if let Some(lit_end) = lit_end {
            let paren = skip_blanks(b, lit_end + 1);
            if b.get(paren) == Some(&b')') && !next {
                out.includes.push(Include { name: text[arg + 1..lit_end].to_string(), quoted: b[arg] == b'"' });
                return paren + 1;
            }
        }
        // `#define _CCCL_HAS_INCLUDE(_X) __has_include(_X)`.
        let param_end = ident_end(b, arg);
        let paren = skip_blanks(b, param_end);
        if wrapper.is_some_and(|d| d.params.iter().any(|p| p.as_bytes() == &b[arg..param_end])) && b.get(paren) == Some(&b')') {
            return paren + 1;
        }
    } else if wrapper.is_some() {
        // `#define _X_HAS_INCLUDE __has_include`: each use of the alias is a probe.
        return end;
    }
    let line = &text[text[..start].rfind('\n').map_or(0, |p| p + 1)..find(b, start, b"\n")];
    let line: String = line.trim().chars().take(160).collect();
    out.opaque.get_or_insert_with(|| format!("`{line}` (`{ident}` whose header is not a literal name)"));
    end
}
