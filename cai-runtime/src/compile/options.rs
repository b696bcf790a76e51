//! A program's NVRTC options, sorted by who applies them.
//!
//! caijit applies the options that make NVRTC read files itself: include directories and
//! pre-included headers (in every spelling NVRTC 13 accepts) go to [`super::includes`],
//! which finds, hashes and hands NVRTC each header in memory, and a trusted compile passes
//! none of them on. NVRTC's automatic precompiled headers (`-pch`, `--pch-dir=…`, …) are
//! never passed on: NVRTC reuses, within a process, a PCH made from a header's old contents
//! after the header changed (from memory or from the file system alike; NVRTC 13.0.88), so
//! caijit's own memory and disk caches take their place. Explicit PCH files
//! (`-create-pch=…`, `-use-pch=…`) are read or written by NVRTC itself: such a program is
//! compiled untrusted.

use std::path::PathBuf;

/// The options of a program, by who applies them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sorted {
    /// `-I dir`, `-Idir`, `-I=dir`, `--include-path=dir`, `--include-path dir`.
    pub include_dirs: Vec<PathBuf>,
    /// `-include f`, `-include=f`, `--pre-include=f`, `--pre-include f`.
    pub pre_includes: Vec<String>,
    /// Every other option, for NVRTC, in the order given.
    pub rest: Vec<String>,
    /// An explicit PCH file option (`-use-pch=…`, `-create-pch=…`): NVRTC reads or writes
    /// a file no key covers.
    pub explicit_pch: Option<String>,
}

/// The automatic-PCH options (never passed to NVRTC: see the module's documentation).
fn is_auto_pch(o: &str) -> bool {
    let o = o.strip_prefix("--").or_else(|| o.strip_prefix('-')).unwrap_or(o);
    o == "pch" || ["pch-dir=", "pch-verbose=", "pch-messages=", "instantiate-templates-in-pch="].iter().any(|p| o.starts_with(p))
}

fn is_explicit_pch(o: &str) -> bool {
    ["-create-pch=", "--create-pch=", "-use-pch=", "--use-pch="].iter().any(|p| o.starts_with(p))
}

/// The blanks NVRTC strips from both ends of every option string, a separate value (the
/// directory after `-I`) included: C's `isspace`, space, `\t`, `\n`, `\v`, `\f` and `\r`
/// (asked of NVRTC for every byte by `tests::every_byte_is_read_as_nvrtc_reads_it`).
pub(crate) fn nvrtc_trim(o: &str) -> &str {
    o.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

/// Sort `options`, each read as NVRTC reads it: the blanks at both ends of an option string
/// are not part of it (`" -Iinc "` is `-Iinc`); NVRTC also skips the spaces (only spaces)
/// after a joined `-I` (`-I  dir`), and nothing after `=` (`-I= inc` and `-include= f` name
/// ` inc` and ` f`). Every option NVRTC is given is the trimmed one, so what caijit reads is
/// what NVRTC does.
pub(crate) fn sort(options: &[String]) -> Sorted {
    let mut s = Sorted::default();
    let mut it = options.iter().map(|o| nvrtc_trim(o));
    while let Some(o) = it.next() {
        if o == "-I" || o == "--include-path" {
            match it.next() {
                Some(d) => s.include_dirs.push(PathBuf::from(d)),
                None => s.rest.push(o.to_string()), // NVRTC's own error
            }
        } else if let Some(d) = o.strip_prefix("--include-path=") {
            s.include_dirs.push(PathBuf::from(d));
        } else if let Some(d) = o.strip_prefix("-I") {
            s.include_dirs.push(PathBuf::from(d.strip_prefix('=').unwrap_or_else(|| d.trim_start_matches(' '))));
        } else if o == "-include" || o == "--pre-include" {
            match it.next() {
                Some(h) => s.pre_includes.push(h.to_string()),
                None => s.rest.push(o.to_string()),
            }
        } else if let Some(h) = o.strip_prefix("-include=").or_else(|| o.strip_prefix("--pre-include=")) {
            s.pre_includes.push(h.to_string());
        } else if is_auto_pch(o) {
        } else {
            if is_explicit_pch(o) {
                s.explicit_pch.get_or_insert_with(|| o.to_string());
            }
            s.rest.push(o.to_string());
        }
    }
    s
}

/// The C++ standard the options ask for, when it is older than C++11 (`-std=c++03`): a
/// language without raw string literals, which caijit's include scanner reads as C++11.
pub(crate) fn pre_cxx11_standard(rest: &[String]) -> Option<&str> {
    let mut it = rest.iter().map(String::as_str).peekable();
    while let Some(o) = it.next() {
        let value = match o.strip_prefix("--std").or_else(|| o.strip_prefix("-std")) {
            Some(v) if v.starts_with('=') => &v[1..],
            Some("") => it.peek().copied().unwrap_or(""),
            _ => continue,
        };
        if matches!(value, "c++03" | "c++98" | "gnu++03" | "gnu++98") {
            return Some(value);
        }
    }
    None
}

/// Whether `o` turns off NVRTC's search next to the including file.
pub(crate) fn is_no_source_include(o: &str) -> bool {
    o == "-no-source-include" || o == "--no-source-include"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_include_spelling_is_taken_out() {
        let o = strings(&[
            "-Ia",
            "-I",
            " b",
            "-I=c",
            "-I d",
            " -Ig\t",
            "-I\tt",
            "\x0b-Iv\x0b",
            "-I= h",
            "--include-path=e",
            "--include-path",
            "f",
            "-DX",
            "--pre-include=p.h",
            "-include",
            "q.h",
            "-include=r.h",
            "--pre-include",
            "s.h",
            " -include=t.h",
            "-lineinfo",
            "-no-source-include ",
        ]);
        let s = sort(&o);
        assert_eq!(s.include_dirs, ["a", "b", "c", "d", "g", "\tt", "v", " h", "e", "f"].map(PathBuf::from));
        assert_eq!(s.pre_includes, ["p.h", "q.h", "r.h", "s.h", "t.h"]);
        assert_eq!(s.rest, ["-DX", "-lineinfo", "-no-source-include"]);
        assert_eq!(s.explicit_pch, None);
    }

    #[test]
    fn automatic_pch_is_dropped_and_explicit_pch_is_noted() {
        let s =
            sort(&strings(&[" -pch", "--pch\t", " --pch-dir=/tmp/p", "-pch-verbose=true", "--instantiate-templates-in-pch=false", "-G"]));
        assert_eq!(s.rest, ["-G"]);
        let s = sort(&strings(&["-use-pch=/tmp/x.pch"]));
        assert_eq!(s.explicit_pch.as_deref(), Some("-use-pch=/tmp/x.pch"));
        assert_eq!(s.rest, ["-use-pch=/tmp/x.pch"]);
        assert!(!is_auto_pch("-pchx") && !is_auto_pch("--pch-dir"));
    }

    #[test]
    fn standards_without_raw_strings_are_told() {
        assert_eq!(pre_cxx11_standard(&sort(&strings(&[" -std=c++03"])).rest), Some("c++03"));
        assert_eq!(pre_cxx11_standard(&strings(&["--std", "c++98"])), Some("c++98"));
        assert_eq!(pre_cxx11_standard(&strings(&["-std=c++17", "-DX"])), None);
    }
}
