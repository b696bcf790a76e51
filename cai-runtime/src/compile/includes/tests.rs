//! Tests of `includes`.

use super::scan::Include;
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
fn digit_separators_are_read_in_one_pass() {
    // Each `'` inside a number separates digits; one after a name opens a character.
    assert_eq!(names("int a = 0x1'f, b = 1.5'0, c = 1'0'0; char d = u8'\"';\n#include \"a.h\"\n"), [("a.h".to_string(), true)]);
    // However many there are (a scanner that looked back over the number at each one took
    // seconds on a header of 100 KB of them).
    let long = format!("int n = 1{};\n#include \"b.h\"\n", "'1".repeat(200_000));
    let t = std::time::Instant::now();
    assert_eq!(names(&long), [("b.h".to_string(), true)]);
    assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn a_probe_token_pasting_may_form_is_opaque() {
    for text in [
        "#define CAT(a, b) a ## b\n#if CAT(__has_, include)(\"opt.h\")\n#endif\n",
        "#define CAT(a, b) a %:%: b\n#if CAT(__HAS, _INCLUDE)(\"opt.h\")\n#endif\n",
        "#define P(x) __has_ ## x\n#if P(include)(<opt.h>)\n#endif\n",
        "#define CAT(a, b) a ## b\n#if CAT(__h, as_include)(\"opt.h\")\n#endif\n",
    ] {
        assert!(scan(text).opaque.is_some_and(|o| o.contains("token pasting")), "{text}");
    }
    // Pieces without pasting, or pasting without pieces: nothing to see.
    assert_eq!(scan("int __has_ = 1, include = 2;\n").opaque, None);
    assert_eq!(scan("#define CAT(a, b) a ## b\nint CAT(x, y);\n").opaque, None);
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

/// One file reached through two directories (symbolic or hard links) has its quoted
/// includes looked for in each: where they mean different files, the key is untrusted;
/// where the same file, it is trusted.
#[test]
fn a_file_linked_into_two_directories_is_followed_from_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["shared", "a", "b"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("shared/common.h"), "#include \"config.h\"\n").unwrap();
    std::os::unix::fs::symlink(d.join("shared/common.h"), d.join("a/common.h")).unwrap();
    std::fs::hard_link(d.join("shared/common.h"), d.join("b/common.h")).unwrap();
    std::fs::write(d.join("a/config.h"), "typedef int T;\n").unwrap();
    std::fs::write(d.join("b/config.h"), "typedef double T;\n").unwrap();
    let mut p = Program::new("#include \"a/common.h\"\n#include \"b/common.h\"\n");
    p.source_dir = Some(d.to_path_buf());
    let r = res(&p);
    assert!(r.untrusted.as_deref().is_some_and(|w| w.contains("\"config.h\" means")), "{:?}", r.untrusted);
    // The same file behind both names: one meaning.
    std::fs::remove_file(d.join("b/config.h")).unwrap();
    std::fs::hard_link(d.join("a/config.h"), d.join("b/config.h")).unwrap();
    let r = res(&p);
    assert_eq!(r.untrusted, None);
    let names: Vec<_> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a/common.h", "b/common.h", "config.h"]);
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
