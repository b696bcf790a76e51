//! Every header a program can include, found the way NVRTC finds it.
//!
//! [`resolve`] scans the program for `#include "name"` and `#include <name>` (also spelled
//! `%:include`; and the names probed by `__has_include`), finds each header, and does the same for every header found,
//! so the cache key can hash exactly the headers NVRTC can open. Conditionals are not
//! evaluated: the includes of every branch are followed (hashing a header too many only
//! costs a recompile when it changes).
//!
//! A name is looked for, in order: among caijit's embedded [`HEADERS`] (by exact name);
//! taken as a path when it is absolute; for the quoted form, in the directory of the file
//! that includes it (for the program itself, [`Program::source_dir`]; not with NVRTC's
//! `-no-source-include`); then in the include directories: the program's, its `-I`
//! options', the toolkit's (CUDA's own headers). A pre-included header (`-include`,
//! `--pre-include`) is looked for as NVRTC does: in the current directory, then in the
//! include directories.
//!
//! A trusted compilation hands NVRTC every header found, in memory, under the name it was
//! included by, and no search path: NVRTC compiles the bytes that were hashed and can open
//! nothing else. That holds only while a name means one file everywhere, so
//! [`Includes::untrusted`] says why it does not when:
//! - an include's name is computed (`#include MACRO`) or is an `#include_next`;
//! - a `__has_include` probes a name that is not a literal (`__has_include(MACRO)`, a macro
//!   for `__has_include` itself, `__has_include_next`): macros named like `…has_include`
//!   (CCCL's `_CCCL_HAS_INCLUDE`) may hand their parameter to it, and each of their uses
//!   is read as a probe;
//! - the text has a trigraph `??=` or `??/` (which may spell `#`, or a line splice);
//! - a name means different files (or none) from different including files;
//! - a `#pragma once` (or `_Pragma("once")`) file is reached under two names (in memory,
//!   they are two files);
//! - a pre-included header is found nowhere;
//! - an explicit PCH file option (`-use-pch=…`, `-create-pch=…`);
//! - a header cannot be read, or holds a NUL byte or invalid UTF-8.
//!
//! A header larger than 64 MiB is not read: NVRTC is handed an `#error` under its name. A
//! header that is not a regular file (a FIFO NVRTC would block on, a device) is an error
//! naming it; a directory of a header's name is passed over, as NVRTC passes over it.
//!
//! Such a program is compiled untrusted, as NVRTC finds headers itself, and never cached.
//!
//! The toolkit's headers are read and scanned once per process per version of the file
//! (its device, inode, length, modification and change times); other headers on every call.

use std::collections::HashMap;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use memchr::memmem;
use sha2::{Digest, Sha256};

use super::headers::HEADERS;
use super::options;
use super::program::Program;
use crate::sync::lock;

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
fn scan_as(text: &str, raw_strings: bool) -> Scan {
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
                let token = &b[token_start(b, i, true)..i];
                // `1'000` is one number (C++14 digit separators); `u8'a'` is a character.
                i = if token.first().is_some_and(u8::is_ascii_digit) { i + 1 } else { quoted_end(b, i, b'\'') };
            }
            c if is_ident(c) => {
                line_start = false;
                i = word(text, i, ident_end(b, i), define.as_ref(), &mut out);
            }
            _ => {
                line_start = false;
                i += 1;
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

/// Where the identifier (or, with `numbers`, pp-number) that ends just before `end` starts.
fn token_start(b: &[u8], end: usize, numbers: bool) -> usize {
    let mut s = end;
    while s > 0 && (is_ident(b[s - 1]) || (numbers && matches!(b[s - 1], b'.' | b'\''))) {
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
    let prefix = &b[token_start(b, open, false)..open];
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
    if &b[token_start(b, j, false)..j] == b"defined" && b[j..start].iter().filter(|&&c| c == b'(').count() <= 1 {
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

/// What [`resolve`] found for a program.
#[derive(Debug)]
pub(crate) struct Includes {
    /// Every include name, in the order first met, with what it means: the digest of the
    /// file found, `embedded`, or `missing` (NVRTC may supply it itself, or fail).
    pub digest: [u8; 32],
    /// `(include name, contents)` of every header found in a file, for NVRTC to read from
    /// memory (caijit's embedded headers are not repeated here).
    pub headers: Vec<(String, Arc<str>)>,
    /// Why the names cannot be handed to NVRTC (and so the key cannot be trusted); `None`
    /// when they can.
    pub untrusted: Option<String>,
    /// The pre-included headers' names, in order (each is among `headers` when trusted).
    pub pre_includes: Vec<String>,
    /// What a bundle key covers of the headers, from the same reads as `digest` and
    /// `headers` (`Err(why)`: the program cannot be bundled): each name reached from the
    /// program without passing through a toolkit header, with its meaning (the digest of its
    /// file, `embedded`, or `outside`: a toolkit header or none, which belong to the NVRTC
    /// build a bundle records), names sorted; and each header of the program's own
    /// directories that only a toolkit header includes (found before the toolkit's own:
    /// `<cuda/std/version>` in `-I inc`), by name and digest. A process without the
    /// toolkit's headers follows no toolkit header and names the same; one whose include
    /// directories shadow a toolkit header's include gets another key (a miss, never a stale
    /// binary). Include directories themselves are not covered: a bundle serves wherever the
    /// program's headers are found.
    pub bundle: Result<[u8; 32], String>,
}

/// A header file as read: its contents and what they include.
#[derive(Debug)]
struct Loaded {
    contents: Arc<str>,
    digest: [u8; 32],
    scan: Arc<Scan>,
}

/// What an include name means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Embedded(usize),
    File(usize),
    Missing,
}

/// A file found, and how many names it was included by.
struct Found {
    path: PathBuf,
    loaded: Arc<Loaded>,
    names: usize,
    /// Found in a toolkit directory.
    toolkit: bool,
}

/// `(device, inode, length, modified ns, changed ns)`: a file's version, for the toolkit cache.
type Stamp = (u64, u64, u64, i128, i128);

fn stamp(m: &Metadata) -> Stamp {
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    (m.dev(), m.ino(), m.len(), ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()))
}

/// Toolkit headers as last read, by path (pip may update them under a running process,
/// so each use checks the stamp).
type ToolkitFiles = Mutex<HashMap<PathBuf, (Stamp, Arc<Loaded>)>>;

fn toolkit_files() -> &'static ToolkitFiles {
    static FILES: OnceLock<ToolkitFiles> = OnceLock::new();
    FILES.get_or_init(Default::default)
}

/// The scan of embedded header `e` (constant for a build): each is scanned when first met.
fn embedded_scan(e: usize) -> &'static Scan {
    static SCANS: OnceLock<Vec<OnceLock<Scan>>> = OnceLock::new();
    SCANS.get_or_init(|| HEADERS.iter().map(|_| OnceLock::new()).collect())[e].get_or_init(|| scan(HEADERS[e].1))
}

struct Resolver<'a> {
    /// User include directories (the program's, then its options'), then the toolkit's.
    dirs: Vec<PathBuf>,
    toolkit_dirs: &'a [PathBuf],
    found: Vec<Found>,
    by_file: HashMap<(u64, u64), usize>,
    /// Every name met, with its meaning, in the order met.
    names: HashMap<String, Target>,
    order: Vec<String>,
    /// `(includer, name)` of every include met: the includer's index in `order`, `None` for
    /// the program and its options.
    edges: Vec<(Option<usize>, String)>,
    /// Resolutions already made: `(directory of the includer for a quoted name, name)`.
    memo: HashMap<(Option<PathBuf>, String), Target>,
    /// Whether `dirs[k]` has a subdirectory of this name.
    subdirs: HashMap<(usize, std::ffi::OsString), bool>,
    /// Whether `#include "…"` looks next to the including file first (NVRTC's
    /// `-no-source-include` turns that off: then it is `#include <…>`).
    source_include: bool,
    /// Whether the standard has raw string literals (C++11 and later): else every file is
    /// scanned again as pre-C++11 reads it (such a program is compiled untrusted anyway, but
    /// a header NVRTC would block on must still be found first).
    raw_strings: bool,
    untrusted: Option<String>,
    /// The first header found that is not a regular file (an error: NVRTC would block on a
    /// FIFO, or refuse it).
    not_a_file: Option<String>,
}

/// Find every header `program` can include (see the module's documentation). `options`
/// are the program's options as [`options::sort`] sorted them. A header that is not a
/// regular file (a FIFO, a device) is an error naming it.
pub(crate) fn resolve(program: &Program, options: &options::Sorted, toolkit_dirs: &[PathBuf]) -> crate::error::Result<Includes> {
    let mut dirs = program.include_dirs.clone();
    dirs.extend(options.include_dirs.iter().cloned());
    dirs.extend(toolkit_dirs.iter().cloned());
    let mut r = Resolver {
        dirs,
        toolkit_dirs,
        found: Vec::new(),
        by_file: HashMap::new(),
        names: HashMap::new(),
        order: Vec::new(),
        edges: Vec::new(),
        memo: HashMap::new(),
        subdirs: HashMap::new(),
        source_include: !options.rest.iter().any(|o| options::is_no_source_include(o)),
        raw_strings: true,
        untrusted: None,
        not_a_file: None,
    };
    if let Some(std) = options::pre_cxx11_standard(&options.rest) {
        r.distrust(format!("-std={std} has no raw string literals, and caijit's key reads C++11 and later"));
        r.raw_strings = false;
    }
    if let Some(o) = &options.explicit_pch {
        r.distrust(format!("the option {o:?} makes NVRTC read or write a precompiled header file no key covers"));
    }
    // Pre-included headers, as NVRTC finds them: an absolute name as it is, another in the
    // current directory, then in the include directories (not next to the program).
    for name in &options.pre_includes {
        let target = r.resolve_one(name, true, Some(Path::new(".")));
        if target == Target::Missing {
            r.distrust(format!("the pre-included header {name:?} is found nowhere caijit looks"));
        }
        r.record(name, target, "the options", None);
    }
    // The program itself: its quoted includes are searched in its own directory first.
    let own_dir = program.source_dir.clone().or_else(|| Path::new(&program.name).parent().map(Path::to_path_buf));
    r.follow(&scan_as(&program.source, r.raw_strings), own_dir.as_deref(), "the program", None);
    // Then every name found, once each (a name means one header, or the key is not trusted).
    let mut next = 0;
    while next < r.order.len() {
        let name = r.order[next].clone();
        next += 1;
        match r.names[&name] {
            Target::Embedded(e) => r.follow(embedded_scan(e), None, &name, Some(next - 1)),
            Target::File(f) => {
                let loaded = &r.found[f].loaded;
                let scan = if r.raw_strings { loaded.scan.clone() } else { Arc::new(scan_as(&loaded.contents, false)) };
                let dir = r.found[f].path.parent().map(Path::to_path_buf);
                r.follow(&scan, dir.as_deref(), &name, Some(next - 1));
            }
            Target::Missing => {}
        }
    }
    if let Some(why) = r.not_a_file.take() {
        return Err(crate::error::Error::compile(format!("cannot compile {}: {why}", program.name), ""));
    }
    r.distrust_spellings_of_one_name();
    Ok(r.finish(&options.pre_includes))
}

/// `name` without leading `./` (`././x.h` is `x.h`).
fn without_dot_slash(mut name: &str) -> &str {
    while let Some(rest) = name.strip_prefix("./") {
        name = rest;
    }
    name
}

impl Resolver<'_> {
    fn distrust(&mut self, why: String) {
        self.untrusted.get_or_insert(why);
    }

    /// NVRTC 12 takes `./x.h` and `x.h` for one in-memory header (seen with 12.9: a `<x.h>`
    /// was served the header handed as `./x.h`): names that differ only so must mean one
    /// file, or the key is not trusted.
    fn distrust_spellings_of_one_name(&mut self) {
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let mut clash = None;
        for name in &self.order {
            let plain = without_dot_slash(name);
            match seen.get(plain) {
                Some(&other) if self.names[other] != self.names[name.as_str()] => {
                    clash = Some(format!("{other:?} and {name:?} name different headers (NVRTC may take them for one)"));
                    break;
                }
                Some(_) => {}
                None => {
                    seen.insert(plain, name);
                }
            }
        }
        if let Some(why) = clash {
            self.distrust(why);
        }
    }

    /// Resolve and record every include of a file in `dir` (`at`: its index in `order`).
    fn follow(&mut self, scan: &Scan, dir: Option<&Path>, includer: &str, at: Option<usize>) {
        if let Some(d) = &scan.opaque {
            self.distrust(format!("{includer} has {d}: caijit cannot name every header it may read"));
        }
        for inc in &scan.includes {
            let quoted = inc.quoted && self.source_include;
            let target = self.resolve_one(&inc.name, quoted, dir);
            self.record(&inc.name, target, includer, at);
        }
    }

    /// Record what `name` means where `includer` (at `at` in `order`) includes it: one name
    /// must mean one file.
    fn record(&mut self, name: &str, target: Target, includer: &str, at: Option<usize>) {
        self.edges.push((at, name.to_string()));
        match self.names.get(name) {
            None => {
                self.names.insert(name.to_string(), target);
                self.order.push(name.to_string());
                if let Target::File(f) = target {
                    self.found[f].names += 1;
                    if self.found[f].names > 1 && self.found[f].loaded.scan.pragma_once {
                        let p = self.found[f].path.display().to_string();
                        self.distrust(format!(
                            "{p} has `#pragma once` (or `_Pragma(\"once\")`) and is included by two names (one is {name:?})"
                        ));
                    }
                }
            }
            Some(&prev) if prev != target => {
                let what = |t: Target, r: &Self| match t {
                    Target::File(f) => r.found[f].path.display().to_string(),
                    Target::Embedded(_) => "an embedded header".into(),
                    Target::Missing => "nothing".into(),
                };
                let (before, now) = (what(prev, self), what(target, self));
                self.distrust(format!("{name:?} means {before} in one place and {now} in {includer}"));
            }
            Some(_) => {}
        }
    }

    /// What `name`, included from a file in `dir`, means; `quoted`: looked for in `dir` first.
    fn resolve_one(&mut self, name: &str, quoted: bool, dir: Option<&Path>) -> Target {
        let dir = dir.filter(|_| quoted);
        let memo_key = (dir.map(Path::to_path_buf), name.to_string());
        if let Some(&t) = self.memo.get(&memo_key) {
            return t;
        }
        let target = self.search(name, dir);
        self.memo.insert(memo_key, target);
        target
    }

    fn search(&mut self, name: &str, dir: Option<&Path>) -> Target {
        if let Some(e) = HEADERS.iter().position(|(n, _)| *n == name) {
            return Target::Embedded(e);
        }
        let name = Path::new(name);
        if name.is_absolute() {
            return self.open(name.to_path_buf()).unwrap_or(Target::Missing);
        }
        if let Some(t) = dir.and_then(|d| self.open(d.join(name))) {
            return t;
        }
        // `cuda/std/x` is not in a directory without `cuda/`: one look per directory and
        // first component (most of CCCL's names are looked for in two directories).
        let first = name.components().next().filter(|_| name.components().nth(1).is_some());
        for k in 0..self.dirs.len() {
            if let Some(first) = first {
                let key = (k, first.as_os_str().to_os_string());
                if !*self.subdirs.entry(key).or_insert_with(|| self.dirs[k].join(first).is_dir()) {
                    continue;
                }
            }
            if let Some(t) = self.open(self.dirs[k].join(name)) {
                return t;
            }
        }
        Target::Missing
    }

    /// The file at `path`, read once per resolution (and once per process for the
    /// toolkit's, while unchanged); `None` when there is no file there.
    fn open(&mut self, path: PathBuf) -> Option<Target> {
        let meta = std::fs::metadata(&path).ok()?;
        if meta.is_dir() {
            // NVRTC passes over a directory of the header's name and searches on.
            return None;
        }
        if !meta.is_file() {
            let what = crate::error::file_kind_name(meta.file_type());
            self.not_a_file.get_or_insert_with(|| format!("the header {} is {what}, not a regular file", path.display()));
            return Some(Target::Missing);
        }
        let id = (meta.dev(), meta.ino());
        if let Some(&f) = self.by_file.get(&id) {
            return Some(Target::File(f));
        }
        let toolkit = self.toolkit_dirs.iter().any(|d| path.starts_with(d));
        let loaded = if toolkit { load_toolkit(&path, &meta) } else { load(&path).map(|(_, l)| l) };
        match loaded {
            Ok(loaded) => {
                self.found.push(Found { path, loaded, names: 0, toolkit });
                self.by_file.insert(id, self.found.len() - 1);
                Some(Target::File(self.found.len() - 1))
            }
            Err(e) => {
                self.distrust(format!("{}: {e}", path.display()));
                Some(Target::Missing)
            }
        }
    }

    fn finish(self, pre_includes: &[String]) -> Includes {
        let mut h = Sha256::new();
        let mut part = |p: &[u8]| {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        };
        let mut headers = Vec::new();
        for name in &self.order {
            part(name.as_bytes());
            match self.names[name] {
                Target::Embedded(_) => part(b"embedded"),
                Target::Missing => part(b"missing"),
                Target::File(f) => {
                    let found = &self.found[f];
                    part(&found.loaded.digest);
                    // Compiled from the file system, NVRTC sees paths (`__FILE__`, messages).
                    if self.untrusted.is_some() {
                        part(found.path.as_os_str().as_encoded_bytes());
                    }
                    headers.push((name.clone(), found.loaded.contents.clone()));
                }
            }
        }
        if let Some(why) = &self.untrusted {
            part(why.as_bytes());
        }
        let bundle = match &self.untrusted {
            Some(why) => Err(why.clone()),
            None => Ok(self.bundle_digest()),
        };
        Includes { digest: h.finalize().into(), headers, pre_includes: pre_includes.to_vec(), untrusted: self.untrusted, bundle }
    }

    /// [`Includes::bundle`]: the names reached from the program and its options
    /// through anything but toolkit headers, and the program's own headers reached only
    /// through toolkit headers.
    fn bundle_digest(&self) -> [u8; 32] {
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.order.len()];
        let mut stack = Vec::new();
        let at: HashMap<&str, usize> = self.order.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        for (from, name) in &self.edges {
            match from {
                Some(f) => children[*f].push(at[name.as_str()]),
                None => stack.push(at[name.as_str()]),
            }
        }
        let toolkit = |t: Target| matches!(t, Target::File(f) if self.found[f].toolkit);
        let mut direct = vec![false; self.order.len()];
        while let Some(n) = stack.pop() {
            let target = self.names[&self.order[n]];
            // A toolkit header's includes are followed only by a process that has it.
            if !std::mem::replace(&mut direct[n], true) && target != Target::Missing && !toolkit(target) {
                stack.extend(&children[n]);
            }
        }
        let mut meanings: Vec<(&str, &str, &[u8])> = Vec::new();
        for (n, name) in self.order.iter().enumerate() {
            let target = self.names[name];
            let file = |f: usize| &self.found[f].loaded.digest[..];
            match (direct[n], target) {
                (true, Target::Embedded(_)) => meanings.push((name, "embedded", b"")),
                (true, Target::File(f)) if !toolkit(target) => meanings.push((name, "file", file(f))),
                (true, _) => meanings.push((name, "outside", b"")),
                (false, Target::File(f)) if !toolkit(target) => meanings.push((name, "through the toolkit", file(f))),
                (false, _) => {}
            }
        }
        meanings.sort_unstable();
        let mut h = Sha256::new();
        for (name, what, digest) in meanings {
            for p in [name.as_bytes(), what.as_bytes(), digest] {
                h.update((p.len() as u64).to_le_bytes());
                h.update(p);
            }
        }
        h.finalize().into()
    }
}

/// The largest header read into memory (and handed to NVRTC from there); a larger one is
/// handed to NVRTC as an `#error`.
const MAX_HEADER: u64 = 64 << 20;

/// Read and scan a header.
fn load(path: &Path) -> Result<(Stamp, Arc<Loaded>), String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    // Not sized from the metadata: a file may claim any length (a sparse one, a growing one).
    let mut bytes = Vec::new();
    (&mut file).take(MAX_HEADER + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    let text = if bytes.len() as u64 > MAX_HEADER {
        // Not left to NVRTC either (it would read all of it, and run out of memory): handed
        // in memory in its place, this fails the compile when the header is included.
        format!("#error header larger than {} MiB, more than caijit reads into memory\n", MAX_HEADER >> 20).into_bytes()
    } else {
        bytes
    };
    let text = String::from_utf8(text).map_err(|_| "not UTF-8 text, which NVRTC cannot be handed in memory".to_string())?;
    if text.contains('\0') {
        return Err("holds a NUL byte, which NVRTC cannot be handed in memory".into());
    }
    let digest = Sha256::digest(text.as_bytes()).into();
    let scan = Arc::new(scan(&text));
    Ok((stamp(&meta), Arc::new(Loaded { contents: text.into(), digest, scan })))
}

/// A toolkit header, from the process-wide cache while its stamp is unchanged.
fn load_toolkit(path: &Path, meta: &Metadata) -> Result<Arc<Loaded>, String> {
    let cache = toolkit_files();
    let now = stamp(meta);
    if let Some((s, l)) = lock(cache).get(path) {
        if *s == now {
            return Ok(l.clone());
        }
    }
    let (read_stamp, loaded) = load(path)?;
    // Kept only if it did not change between the look and the read.
    if read_stamp == now {
        lock(cache).insert(path.to_path_buf(), (now, loaded.clone()));
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(p: &Program) -> Includes {
        resolve(p, &options::sort(&p.options), &[]).unwrap()
    }

    fn names(text: &str) -> Vec<(String, bool)> {
        scan(text).includes.into_iter().map(|i| (i.name, i.quoted)).collect()
    }

    #[test]
    fn scans_directives_outside_comments_and_literals() {
        let text = r##"
#include "a.h"
  #  include <b/c.h> // trailing
/* #include "no1.h"
   #include "no2.h" */
// #include "no3.h"
const char* s = "#include \"no4.h\"";
const char* r = R"x(
#include "no5.h"
)x";
int n = 1'000; char c = '"';
/**/ #include "d.h"
#if 0
#include "dead.h"
#endif
#define INC(x) #x
#include \
  "spliced.h"
"##;
        let expected = ["a.h", "b/c.h", "d.h", "dead.h", "spliced.h"];
        let got = names(text);
        assert_eq!(got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), expected);
        assert!(!got[1].1 && got[0].1);
        assert_eq!(scan(text).opaque, None);
        assert!(!scan(text).pragma_once);
    }

    #[test]
    fn a_comment_across_lines_inside_a_directive_is_one_space() {
        // A comment is replaced by one space before directives are read: the directive goes
        // on after it. (These once made the scanner slice past the line it had measured.)
        assert_eq!(names("#include /*\n*/ \"a.h\"\n"), [("a.h".to_string(), true)]);
        assert_eq!(names("%:include/*\n*/<b.h>\n"), [("b.h".to_string(), false)]);
        assert_eq!(names("#define/*\n*/(\n#include \"c.h\""), [("c.h".to_string(), true)]);
        for text in ["#define/*\n*/(", "%:include/*\n*/\"", "%:include/*\n*/<", "#define X/*\n*/(a"] {
            assert!(scan(text).includes.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn finds_probes_pragma_once_and_computed_includes() {
        let s = scan(
            "#pragma once\n#if __has_include(<x.h>) && _CCCL_HAS_INCLUDE( \"y.h\" )\n#endif\n#define X_HAS_INCLUDE(_X) __has_include(_X)\n",
        );
        assert!(s.pragma_once);
        assert_eq!(s.includes, vec![Include { name: "x.h".into(), quoted: false }, Include { name: "y.h".into(), quoted: true }]);
        assert_eq!(s.opaque, None);
        assert!(scan("#include HEADER\n").opaque.is_some_and(|w| w.contains("#include HEADER")));
        assert!(scan("#include_next <z.h>\n").opaque.is_some());
        assert!(!scan("#pragma onceler\n").pragma_once);
    }

    #[test]
    fn resolves_quoted_includes_next_to_their_includer_and_detects_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::create_dir_all(d.join("inc")).unwrap();
        std::fs::write(d.join("sub/a.h"), "#include \"b.h\"\n#include \"../top.h\"\n#include <caijit/array.cuh>\n").unwrap();
        std::fs::write(d.join("sub/b.h"), "// b\n").unwrap();
        std::fs::write(d.join("top.h"), "#include \"top.h\"\n").unwrap();
        std::fs::write(d.join("inc/b.h"), "// other b\n").unwrap();
        let mut p = Program::new("#include \"sub/a.h\"\n#include \"missing.h\"\n");
        p.source_dir = Some(d.to_path_buf());
        let r = res(&p);
        assert_eq!(r.untrusted, None);
        let names: Vec<_> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["sub/a.h", "b.h", "../top.h", "top.h"]);
        // `b.h` from the program itself is another file: one name, two meanings.
        let p = p.include_dir(d.join("inc"));
        let mut q = p.clone();
        q.source = format!("{}#include \"b.h\"\n", p.source);
        let r = res(&q);
        assert!(r.untrusted.as_deref().is_some_and(|w| w.contains("\"b.h\" means")), "{:?}", r.untrusted);
        // With `-no-source-include`, NVRTC looks next to no file: both are `inc/b.h`.
        let r = res(&q.option("-no-source-include"));
        assert_eq!(r.untrusted, None);
        let names: Vec<_> = r.headers.iter().map(|(n, c)| (n.as_str(), c.as_ref())).collect();
        assert_eq!(names, [("b.h", "// other b\n")]);
    }

    /// `./h.h` and `h.h` meaning different files (or one nothing) make the key untrusted:
    /// NVRTC 12 serves `<h.h>` the in-memory header handed as `./h.h`.
    #[test]
    fn names_that_differ_by_a_leading_dot_slash_must_mean_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/pre.h"), "#include \"./h.h\"\n").unwrap();
        std::fs::write(d.join("sub/h.h"), "// h\n").unwrap();
        let mut p = Program::new("#include <h.h>\n").option(format!("-include={}/sub/pre.h", d.display()));
        p.source_dir = Some(d.to_path_buf());
        let r = resolve(&p, &options::sort(&p.options), &[]).unwrap();
        assert!(r.untrusted.as_deref().is_some_and(|w| w.contains("\"./h.h\"") && w.contains("\"h.h\"")), "{:?}", r.untrusted);
        // The same file by both names is fine.
        let mut q =
            Program::new("#include <h.h>\n").option(format!("-include={}/sub/pre.h", d.display())).option(format!("-I{}/sub", d.display()));
        q.source_dir = Some(d.to_path_buf());
        assert_eq!(resolve(&q, &options::sort(&q.options), &[]).unwrap().untrusted, None);
    }

    /// A header that is not a regular file is an error naming it, before NVRTC runs (which
    /// would block opening a FIFO).
    #[test]
    fn a_header_that_is_not_a_regular_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("dir.h")).unwrap();
        let fifo = d.join("fifo.h");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for (text, what) in [("#include \"fifo.h\"\n", "a FIFO"), ("#include \"/dev/null\"\n", "a device")] {
            let mut p = Program::new(text);
            p.source_dir = Some(d.to_path_buf());
            let e = resolve(&p, &options::sort(&p.options), &[]).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("not a regular file"), "{e}");
        }
        // A directory of the header's name is passed over, as NVRTC passes over it: the
        // header of the next directory is found.
        std::fs::create_dir(d.join("inc")).unwrap();
        std::fs::write(d.join("inc/dir.h"), "// the real one\n").unwrap();
        let mut p = Program::new("#include \"dir.h\"\n").include_dir(d.join("inc"));
        p.source_dir = Some(d.to_path_buf());
        let r = resolve(&p, &options::sort(&p.options), &[]).unwrap();
        assert_eq!(r.headers.iter().map(|(n, c)| (n.as_str(), c.as_ref())).collect::<Vec<_>>(), [("dir.h", "// the real one\n")]);
        let p = Program::new("").option("-include").option(fifo.display().to_string());
        let e = resolve(&p, &options::sort(&p.options), &[]).unwrap_err().to_string();
        assert!(e.contains(&fifo.display().to_string()) && e.contains("a FIFO"), "{e}");
        // Before C++11, `R"x(` opens an ordinary literal: the include on the next line is
        // real there (and NVRTC, compiling untrusted, would block opening the FIFO).
        let behind_raw = "const char* s = R\"x(\n#include \"fifo.h\"\n)x\";\n";
        for (std, found) in [("-std=c++03", true), ("-std=c++17", false)] {
            let mut p = Program::new(behind_raw).option(std);
            p.source_dir = Some(d.to_path_buf());
            let r = resolve(&p, &options::sort(&p.options), &[]);
            assert_eq!(r.as_ref().is_err_and(|e| e.to_string().contains("a FIFO")), found, "{std}: {:?}", r.map(|r| r.untrusted));
        }
    }

    /// Pre-included headers are found as NVRTC finds them (the current directory, then the
    /// include directories), hashed and handed in memory; one found nowhere is not trusted.
    #[test]
    fn pre_includes_are_resolved_in_every_spelling() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pre.h"), "#include \"inner.h\"\n").unwrap();
        std::fs::write(dir.path().join("inner.h"), "// inner\n").unwrap();
        let d = dir.path().display().to_string();
        for opts in [vec!["-include", "pre.h"], vec!["-include=pre.h"], vec!["--pre-include=pre.h"], vec!["--pre-include", "pre.h"]] {
            let mut p = Program::new("").option(format!("-I{d}"));
            for o in &opts {
                p = p.option(*o);
            }
            let r = res(&p);
            assert_eq!(r.untrusted, None, "{opts:?}");
            assert_eq!(r.pre_includes, ["pre.h"]);
            let names: Vec<_> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["pre.h", "inner.h"], "{opts:?}");
        }
        let r = res(&Program::new("").option("-include=nowhere-to-be-found.h"));
        assert!(r.untrusted.as_deref().is_some_and(|w| w.contains("nowhere-to-be-found.h")), "{:?}", r.untrusted);
    }

    /// `%:` is `#` in every C++ standard; a trigraph (`??=` is `#`, `??/` a backslash with
    /// `-std=c++11/14`) may spell a directive the scanner cannot see.
    #[test]
    fn digraph_directives_are_read_and_trigraphs_are_opaque() {
        assert_eq!(
            names("%:include \"t.h\"\n  %:  include <u.h>\n/**/%:include \"v.h\"\nint a = 5 %: 3;\n"),
            [("t.h".to_string(), true), ("u.h".to_string(), false), ("v.h".to_string(), true)]
        );
        assert_eq!(scan("%:include \"t.h\"\n").opaque, None);
        assert_eq!(names("%:if __has_include(\"p.h\")\n%:endif\n"), [("p.h".to_string(), true)]);
        for text in ["??=include \"t.h\"\n", "#include ??/\n\"t.h\"\n", "const char* s = \"??=\";\n"] {
            assert!(scan(text).opaque.is_some_and(|w| w.contains("trigraph")), "{text:?}");
        }
    }

    /// Only `…has_include("name")` / `…has_include(<name>)` names a probed header; every
    /// other use of a probe (a macro for the name, a macro for `__has_include`) is opaque.
    #[test]
    fn probes_of_names_that_are_not_literals_are_opaque() {
        let literal = [
            "#if __has_include(\"opt.h\")\n",
            "#if __has_include/**/(\"opt.h\")\n",
            "#if __has_include( /*x*/ \"opt.h\" /**/ )\n",
            "#if __has_include \\\n (\"opt.h\")\n",
            "#if _CCCL_HAS_INCLUDE(\"opt.h\")\n",
            "#if defined(__has_include) && __has_include(\"opt.h\")\n",
            "#ifdef __has_include\n#  define _CCCL_HAS_INCLUDE(_X) __has_include(_X)\n#else\n#  define _CCCL_HAS_INCLUDE(_X) 0\n#endif\n\
             #if _CCCL_HAS_INCLUDE(\"opt.h\") // _CCCL_HAS_INCLUDE(OPT)\n",
            "#define MY_HAS_INCLUDE __has_include\n#if MY_HAS_INCLUDE(\"opt.h\")\n",
            "// __has_include(OPT)\n/* __has_include(H) */ const char* s = \"__has_include(X)\";\n#if __has_include(\"opt.h\")\n",
        ];
        for text in literal {
            let s = scan(text);
            assert_eq!(s.opaque, None, "{text:?}");
            assert_eq!(s.includes, [Include { name: "opt.h".into(), quoted: true }], "{text:?}");
        }
        let opaque = [
            "#define H \"opt.h\"\n#if __has_include(H)\n",
            "#define P __has_include\n#if P(\"opt.h\")\n",
            "#define HAS(x) __has_include(x)\n#define OPT \"opt.h\"\n#if HAS(OPT)\n",
            "#define HAS(x) _CCCL_HAS_INCLUDE(x)\n",
            "#define X_HAS_INCLUDE(x) __has_include(OPT)\n",
            "#if _CCCL_HAS_INCLUDE(OPT)\n",
            "#if __has_include(\"a.h\" OPT)\n",
            "#if __has_include\n",
            "#if __has_include_next(\"opt.h\")\n",
            "#define X_HAS_INCLUDE(x) __has_include_next(x)\n",
        ];
        for text in opaque {
            assert!(scan(text).opaque.is_some_and(|w| w.contains("has_include") || w.contains("HAS_INCLUDE")), "{text:?}");
        }
    }

    #[test]
    fn pragma_once_in_every_spelling() {
        for text in [
            "#pragma once\n",
            "%:pragma once\n",
            "_Pragma(\"once\")\n",
            "_Pragma ( \" once \" )\n",
            "_Pragma(L\"once\")\n",
            "#define P(x) _Pragma(#x)\nP(once)\n",
        ] {
            assert!(scan(text).pragma_once, "{text:?}");
        }
        for text in ["_Pragma(\"onceler\")\n", "// once\n", "const char* s = \"once\";\n", "_Pragma(\"unroll\")\n"] {
            assert!(!scan(text).pragma_once, "{text:?}");
        }
    }

    /// A `_Pragma("once")` header reached by two names is compiled from the file system.
    #[test]
    fn a_pragma_operator_once_header_under_two_names_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("a.h"), "_Pragma(\"once\")\nstruct S { int x; };\n").unwrap();
        std::fs::write(d.join("sub/b.h"), "#include \"../a.h\"\n").unwrap();
        let mut p = Program::new("#include \"a.h\"\n#include \"sub/b.h\"\n");
        p.source_dir = Some(d.to_path_buf());
        let r = res(&p);
        assert!(r.untrusted.as_deref().is_some_and(|w| w.contains("included by two names")), "{:?}", r.untrusted);
    }

    /// A header larger than caijit reads (here a sparse terabyte) is not read, nor allocated
    /// for: NVRTC is handed an `#error` in its place.
    #[test]
    fn a_huge_header_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::File::create(dir.path().join("big.h")).unwrap().set_len(1 << 40).unwrap();
        let mut p = Program::new("#include \"big.h\"\n");
        p.source_dir = Some(dir.path().to_path_buf());
        let r = res(&p);
        assert_eq!(r.untrusted, None);
        assert_eq!(r.headers.len(), 1);
        assert_eq!(r.headers[0].0, "big.h");
        assert!(r.headers[0].1.starts_with("#error header larger than 64 MiB"), "{}", r.headers[0].1);
    }
}
