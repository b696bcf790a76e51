//! Issue #18, "no panic on anything read back": the declaration reader, the include scanner
//! (through a program's bundle key), the PTX `.entry` reader, the demangled-name reader and
//! the disk-cache entry reader return (an error is fine) on arbitrary and on
//! structured-mutated input. A panic fails the test. The same
//! readers are fuzzed for longer by `fuzz/` (cargo-fuzz); this is the quick CI version.

use cai_runtime::compile::{bundle_key, DiskCache, Program};
use cai_runtime::signature::{parse_kernels, ptx_entries};
use proptest::prelude::*;

// What compilation does with what it reads back (as `compile::describe_kernels`): the same
// code the fuzz targets run.
#[path = "../fuzz/fuzz_targets/common/describe.rs"]
mod describe;
use describe::describe;

const CASES: u32 = 1024;

fn all_readers(text: &str) {
    describe(text, text, &[(String::new(), text.to_string())]);
    // The include scanner reads the source (and the headers it finds next to it).
    let _ = bundle_key(&Program::new(text));
}

// ---------------------------------------------------------------------------------------
// Inputs

const CUDA_WORDS: &[&str] = &[
    "__global__",
    "void",
    "extern",
    "\"C\"",
    "\"C++\"",
    "(",
    ")",
    "<",
    ">",
    ",",
    "*",
    "&",
    "[",
    "]",
    "[[",
    "]]",
    "__launch_bounds__",
    "__attribute__",
    "__cluster_dims__",
    "template",
    "typename",
    "class",
    "const",
    "0",
    "1",
    "64",
    "65",
    "18446744073709551615",
    "99999999999999999999",
    ";",
    "{",
    "}",
    "=",
    "::",
    "caijit::Array",
    "Array",
    "float",
    "int",
    "unsigned",
    "long",
    "T",
    "N",
    "x",
    "k",
    "static",
    "#define",
    "\n",
    "//",
    "/*",
    "*/",
    "\"",
    "'",
    "\\",
    "é",
];

const PREPROCESSOR_WORDS: &[&str] = &[
    "#",
    "%:",
    "include",
    "include_next",
    "import",
    "define",
    "pragma",
    "once",
    "_Pragma",
    "ifdef",
    "undef",
    "(",
    ")",
    ",",
    "\"no-such.h\"",
    "<no-such.h>",
    "\"",
    "<",
    ">",
    "__has_include",
    "__has_include_next",
    "_CCCL_HAS_INCLUDE",
    "defined",
    "x",
    "/*",
    "*/",
    "//",
    "\n",
    "\r\n",
    "\\",
    "??=",
    "??/",
    "R\"x(",
    ")x\"",
    "u8R\"(",
    "'",
    "1'0",
    "é",
];

const DIRECTIVES: &[&str] = &["#include", "%:include", "#include_next", "#define", "#define X", "#define F(a)", "#pragma", "# ", "", "x"];
const BETWEEN: &[&str] = &["", " ", "/*\n*/", "/* a */", "/*", "\\\n", "\n", "\r\n", "//"];
const ARGUMENTS: &[&str] = &["(", "\"", "<", "\"a.h\"", "<a.h>", "(a", "(a)", "once", "__has_include(", "__has_include(<a.h>)", ""];

const PTX_WORDS: &[&str] = &[
    ".entry ",
    ".entry",
    "k",
    "_Z1fv",
    "_Z1ki",
    "(",
    ")",
    ",",
    ".param",
    ".b8",
    ".b0",
    ".b7",
    ".u32",
    ".u64",
    ".f32",
    ".s16",
    ".ptr",
    ".global",
    ".align",
    "0",
    "1",
    "8",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999",
    "k_param_1[",
    "k_param_1[]",
    "[",
    "]",
    "[3]",
    "[18446744073709551615]",
    "é",
    "\n",
    "\t",
    " ",
    "{",
    "}",
];

const MANGLED_PIECES: &[&str] = &[
    "1", "2", "3", "4", "9", "f", "i", "v", "c", "d", "l", "h", "P", "K", "R", "F", "E", "I", "T_", "S_", "S0_", "N", "St", "axpy",
    "Array", "6caijit", "5Array", "Li2E", "Lj2E", "Dn", "A", "_", "Z", "6__half",
];

fn soup(words: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(words), prop::bool::ANY), 0..max).prop_map(|ws| {
        let mut s = String::new();
        for (w, spaced) in ws {
            s.push_str(w);
            if spaced {
                s.push(' ');
            }
        }
        s
    })
}

fn mangled() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(MANGLED_PIECES), 0..24).prop_map(|p| format!("_Z{}", p.concat()))
}

const KEY: &str = "00ff";
const MAGIC: &[u8; 8] = b"CAIJIT\x00\x01";

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// An entry body (everything before the digest), as `compile/cache.rs` writes it.
fn entry_body(kind: u8, image: &[u8], ptx: &str, log: &str, lowered: &[(String, String)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put(&mut out, KEY.as_bytes());
    out.push(kind);
    put(&mut out, image);
    put(&mut out, ptx.as_bytes());
    put(&mut out, log.as_bytes());
    out.extend_from_slice(&(lowered.len() as u32).to_le_bytes());
    for (e, l) in lowered {
        put(&mut out, e.as_bytes());
        put(&mut out, l.as_bytes());
    }
    out
}

#[derive(Clone, Debug)]
enum Mutation {
    None,
    Truncate(usize),
    Flip(usize, u8),
    /// Overwrite 8 bytes at this offset with a length (a huge one, or one just too long).
    Length(usize, u64),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::None),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1u8..).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), prop_oneof![Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 32), 0u64..512])
            .prop_map(|(i, n)| Mutation::Length(i, n)),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Append),
    ]
}

fn mutate(mut body: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let len = body.len().max(1);
    match m {
        Mutation::None => {}
        Mutation::Truncate(n) => body.truncate(n % len),
        Mutation::Flip(i, b) => {
            if let Some(x) = body.get_mut(i % len) {
                *x ^= b;
            }
        }
        Mutation::Length(i, n) => {
            let at = i % len;
            for (k, b) in n.to_le_bytes().into_iter().enumerate() {
                if let Some(x) = body.get_mut(at + k) {
                    *x = b;
                }
            }
        }
        Mutation::Append(extra) => body.extend_from_slice(extra),
    }
    body
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn the_issue_inputs_are_errors_or_nothing_never_panics() {
    assert!(parse_kernels("__global__ void __launch_bounds__ )").kernels.is_empty());
    assert!(ptx_entries(".entry k(.param .b8 k_param_1[").is_err());
    all_readers("__global__ void __launch_bounds__ ) .entry k(.param .b8 k_param_1[)");
}

#[test]
fn a_structured_entry_decodes_and_describes() {
    let ptx = ".entry _Z4axpyIfEvT_PKS0_PS0_i(.param .f32 a, .param .u64 b, .param .u64 c, .param .u32 d)";
    let lowered = vec![("axpy<float>".to_string(), "_Z4axpyIfEvT_PKS0_PS0_i".to_string())];
    let body = entry_body(1, ptx.as_bytes(), ptx, "", &lowered);
    let (p, l) = DiskCache::decode_entry_for_fuzzing(KEY, &body, true).expect("a well-formed entry decodes");
    assert_eq!((p.as_str(), &l), (ptx, &lowered));
    assert!(DiskCache::decode_entry_for_fuzzing(KEY, &body, false).is_err(), "no digest");
    describe("", &p, &l);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_through_every_reader(bytes in prop::collection::vec(any::<u8>(), 0..256), seal in any::<bool>()) {
        all_readers(&String::from_utf8_lossy(&bytes));
        if let Ok((ptx, lowered)) = DiskCache::decode_entry_for_fuzzing(KEY, &bytes, seal) {
            describe("", &ptx, &lowered);
        }
    }

    #[test]
    fn arbitrary_text_through_every_reader(text in ".{0,200}") {
        all_readers(&text);
    }

    #[test]
    fn cuda_token_soups(src in soup(CUDA_WORDS, 48)) {
        all_readers(&src);
        all_readers(&format!("__global__ void f({src}) {{}}"));
        all_readers(&format!("template <{src}> __global__ void f(T x) {{}}"));
        all_readers(&format!("__global__ void {src} f(int x) {{}}"));
    }

    #[test]
    fn preprocessor_soups(src in soup(PREPROCESSOR_WORDS, 48)) {
        all_readers(&src);
    }

    /// Directives with what may come between their parts: a comment may span lines.
    #[test]
    fn directives_with_comments_between_their_parts(
        lines in prop::collection::vec(
            (prop::sample::select(DIRECTIVES), prop::sample::select(BETWEEN), prop::sample::select(ARGUMENTS), prop::sample::select(BETWEEN)),
            1..6,
        ),
    ) {
        let text: String = lines.iter().map(|(d, b, a, e)| format!("{d}{b}{a}{e}")).collect();
        all_readers(&text);
    }

    #[test]
    fn ptx_like_lines(lines in prop::collection::vec(soup(PTX_WORDS, 16), 0..8), decl in soup(CUDA_WORDS, 16)) {
        let ptx = lines.join("\n");
        all_readers(&ptx);
        all_readers(&format!(".entry k({ptx})"));
        // PTX entries meeting an `extern "C"` declaration of the same name.
        describe(&format!("extern \"C\" __global__ void k({decl}) {{}}"), &format!(".entry k({ptx})"), &[]);
    }

    #[test]
    fn mangled_names_and_their_entries(name in mangled(), ptx in soup(PTX_WORDS, 12)) {
        describe("", &format!(".entry {name}({ptx})"), &[("e".into(), name.clone())]);
    }

    #[test]
    fn mutated_cache_entries(
        kind in 0u8..3,
        image in prop::collection::vec(any::<u8>(), 0..16),
        ptx in soup(PTX_WORDS, 12),
        lowered in prop::collection::vec((".{0,8}", mangled()), 0..3),
        m in mutation(),
        seal in prop::bool::weighted(0.9),
    ) {
        let body = mutate(entry_body(kind, &image, &format!(".entry k({ptx})"), "log", &lowered), &m);
        if let Ok((ptx, lowered)) = DiskCache::decode_entry_for_fuzzing(KEY, &body, seal) {
            describe("", &ptx, &lowered);
        }
    }
}
