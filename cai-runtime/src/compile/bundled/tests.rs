//! Tests of `bundled`.

use super::*;
use crate::compile::compiled::UnusableKernel;

/// A header of the program's include directories that only a toolkit header includes
/// (`<cuda/std/cstdint>` → `<cuda/std/version>`, found in `-I inc` first) is covered: an
/// edit to it changes the key (a bundle then misses, never serves the stale binary).
/// Only where the toolkit's headers are found (a build with NVRTC): a process without
/// them follows no toolkit header, and its key covers what it can name.
#[cfg(feature = "nvrtc")]
#[test]
fn a_header_reached_through_a_toolkit_header_is_covered() {
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("inc");
    std::fs::create_dir_all(inc.join("cuda/std")).unwrap();
    std::fs::write(inc.join("cuda/std/version"), "#define MYVAL 1\n").unwrap();
    let src = "#include <cuda/std/cstdint>\n__global__ void k(int* x) { *x = MYVAL; }";
    let program = Program::new(src).option(format!("-I{}", inc.display()));
    let before = bundle_key(&program).unwrap().unwrap();
    assert_eq!(bundle_key(&program).unwrap().unwrap(), before, "the key is stable");
    std::fs::write(inc.join("cuda/std/version"), "#define MYVAL 2\n").unwrap();
    assert_ne!(bundle_key(&program).unwrap().unwrap(), before, "an edit under -I changes the key");
    // Include directories given as such (not as `-I` options, which are options) are not
    // in the key: moved elsewhere with the same contents, the same key.
    let with_dir = |d: &std::path::Path| {
        let mut p = Program::new(src);
        p.include_dirs = vec![d.to_path_buf()];
        bundle_key(&p).unwrap().unwrap()
    };
    let here = with_dir(&inc);
    let moved = dir.path().join("moved");
    std::fs::rename(&inc, &moved).unwrap();
    assert_eq!(with_dir(&moved), here, "same files, other place: same key");
    std::fs::write(moved.join("cuda/std/version"), "#define MYVAL 3\n").unwrap();
    assert_ne!(with_dir(&moved), here);
    // Without include directories nothing more is covered.
    let plain = Program::new(src);
    assert!(bundle_key(&plain).unwrap().is_ok());
}

/// Stored layouts read back as they were, and any that are not laid out as a
/// compilation lays parameters out are refused.
#[test]
fn stored_layouts_round_trip_and_bad_ones_are_refused() {
    let param = |index, kind, cpp: &str, size, align, offset| ParamLayout {
        index,
        name: Some(format!("p{index}")),
        cpp_type: cpp.into(),
        kind,
        size,
        align,
        offset,
    };
    let kernel = KernelInfo {
        name_expression: Some("k<float>".into()),
        lowered_name: "_Z1kIfEvPKT_S0_".into(),
        demangled: Some("void k<float>(float const*, float)".into()),
        qualified_name: "k".into(),
        params: vec![
            param(0, ParamKind::Pointer { dtype: Some(DType::F32), is_const: true }, "const float*", 8, 8, 0),
            param(1, ParamKind::Scalar(DType::F16), "__half", 2, 2, 8),
            param(2, ParamKind::Array { dtype: None, is_const: false, rank: 2 }, "caijit::Array<S, 2>", 40, 8, 16),
            param(3, ParamKind::Struct { name: "Pair".into() }, "Pair", 12, 4, 56),
        ],
    };
    let compiled = Compiled {
        key: String::new(),
        arch: Arch(90),
        image: Image::Ptx(String::new()),
        ptx: String::new(),
        log: String::new(),
        kernels: vec![kernel],
        unusable: vec![],
        notes: vec!["a note".into()],
        source: CacheSource::Compiled,
        untrusted: None,
        nvrtc_options: vec![],
        aliases: vec![],
    };
    let entries = ".visible .entry _Z1kIfEvPKT_S0_(\n\t.param .u64 a,\n\t.param .b16 b,\n\t.param .align 8 .b8 c[40],\n\t\
                   .param .align 4 .b8 d[12]\n)\n";
    let stored = layouts_json(&compiled).unwrap();
    assert_eq!(layouts_from_json(&stored, entries).unwrap(), (compiled.kernels.clone(), compiled.notes.clone()));
    fn param_of(v: &mut Value) -> &mut Value {
        &mut v["kernels"][0]["params"][1]
    }
    for (what, spoil) in [
        ("misaligned", &(|v: &mut Value| param_of(v)["offset"] = json!(9)) as &dyn Fn(&mut Value)),
        ("a gap", &|v: &mut Value| param_of(v)["offset"] = json!(10)),
        ("the wrong size for its dtype", &|v: &mut Value| param_of(v)["size"] = json!(4)),
        ("an alignment of 3", &|v: &mut Value| param_of(v)["align"] = json!(3)),
        ("an unknown dtype", &|v: &mut Value| param_of(v)["kind"] = json!({"scalar": {"dtype": "float128"}})),
        ("an unknown kind", &|v: &mut Value| param_of(v)["kind"] = json!({"reference": {"dtype": "float32"}})),
        ("an unknown field", &|v: &mut Value| param_of(v)["extra"] = json!(1)),
        ("no params", &|v: &mut Value| v["kernels"][0]["params"] = Value::Null),
        ("fewer params than its entry", &|v: &mut Value| _ = v["kernels"][0]["params"].as_array_mut().unwrap().pop()),
        ("a float where the entry has an integer", &|v: &mut Value| {
            v["kernels"][0]["params"][0]["kind"] = json!({"scalar": {"dtype": "float64"}});
        }),
        ("a rank past the limit", &|v: &mut Value| {
            v["kernels"][0]["params"][2]["kind"] = json!({"array": {"dtype": null, "is_const": false, "rank": 100}});
        }),
        ("a kernel the binary lacks", &|v: &mut Value| v["kernels"][0]["lowered"] = json!("_Z5otherv")),
        ("no rules", &|v: &mut Value| _ = v.as_object_mut().unwrap().remove("rules")),
    ] {
        let mut v = stored.clone();
        spoil(&mut v);
        assert!(layouts_from_json(&v, entries).is_err(), "{what}: {v}");
    }
    // Another entry's parameters: refused.
    assert!(layouts_from_json(&stored, &entries.replace(".b16 b", ".f32 b")).is_err());
    // Layouts of other rules are not read (the hit describes the program again).
    let mut other = stored.clone();
    other["rules"] = json!(LAYOUT_RULES + 1);
    assert!(current_layouts(Some(&other)).is_none() && current_layouts(Some(&stored)).is_some());
    // A kernel that could not be described stores none (a hit describes it again).
    let unusable = UnusableKernel {
        name_expression: None,
        lowered_name: "_Z1kv".into(),
        demangled: None,
        qualified_name: "k".into(),
        reason: crate::signature::SignatureError::TooLarge { kernel: "k".into() },
    };
    assert!(layouts_json(&Compiled { unusable: vec![unusable], ..compiled }).is_none());
}

/// A timing harness, not a test: the first lookup of `caijit.ops.add`'s float32 instance
/// (`binary_contiguous<float>` of `elementwise.cu`, for sm_90) in a bundle, step by
/// step, each first in this process (run it in a fresh process each time, release
/// build; `dispatch`'s harness of the same name times the steps as a first call takes
/// them):
///
/// ```sh
/// CAIJIT_PHASES_BUNDLE=/tmp/ops90.caijit \
///     target/release/deps/cai_runtime-… --ignored --exact compile::bundled::tests::first_lookup_phases --nocapture
/// ```
///
/// Prints `phase<TAB>microseconds` lines.
#[test]
#[ignore = "a timing harness: CAIJIT_PHASES_BUNDLE names a kernel library bundle with sm_90"]
fn first_lookup_phases() {
    use std::time::{Duration, Instant};

    use crate::compile::{
        describe::{describe_kernels, Described},
        OPS,
    };

    let Some(path) = std::env::var_os("CAIJIT_PHASES_BUNDLE") else { return };
    let arch = Arch(90);
    let source = OPS.iter().find(|(n, _)| *n == "elementwise").unwrap().1;
    let mut phases: Vec<(String, Duration)> = Vec::new();
    let mut timed = |name: &str, t: Instant| phases.push((name.to_string(), t.elapsed()));
    let t = Instant::now();
    let b = bundle::install(Bundle::open(&path).unwrap()).unwrap();
    timed("open: header, table of contents, metadata, lookup table", t);
    let t = Instant::now();
    drop(Bundle::open(&path).unwrap());
    timed("open (again, warm)", t);
    // The instance's program as a launch asks for it (its one name expression).
    let name = (0..b.program_count())
        .flat_map(|i| b.program_at(i).unwrap().name_expressions.clone())
        .find(|e| e == "binary_contiguous<float>")
        .unwrap();
    let program = Program::new(source).name("elementwise.cu").name_expression(name.clone());
    let t = Instant::now();
    let found = includes::resolve(&program, &options::sort(&program.options), &[]).unwrap();
    timed("key: includes::resolve", t);
    let t = Instant::now();
    embedded_headers_digest();
    timed("key: embedded headers digest", t);
    let t = Instant::now();
    let (key, family) = keys(&program, &found).unwrap();
    timed("key: keys() (again, warm)", t);
    let t = Instant::now();
    let p = b.find(&key, &family, &program.name_expressions).unwrap().unwrap();
    timed("find (key, then family; the program's record read)", t);
    let t = Instant::now();
    let (_, image) = b.image(p, arch.0).unwrap();
    timed(&format!("image: read, checked, inflated ({} B)", image.len()), t);
    let t = Instant::now();
    let details = b.details(p).unwrap();
    timed("description: read, checked, inflated, parsed", t);
    let t = Instant::now();
    let ptx = b.entries(p).unwrap();
    timed("entries: read, checked, inflated", t);
    let t = Instant::now();
    let (kernels, _) = layouts_from_json(details.layouts.as_ref().unwrap(), &ptx).unwrap();
    timed(&format!("layouts read back ({} kernels)", kernels.len()), t);
    assert!(kernels.iter().any(|k| k.name_expression.as_deref() == Some(name.as_str())));
    let t = Instant::now();
    let declared = crate::signature::parse_kernels(&program.source);
    timed("(not on the way: declarations parsed)", t);
    let t = Instant::now();
    let Described { kernels: described, .. } = describe_kernels(&ptx, &details.lowered, &declared.kernels, declared.notes);
    timed("(not on the way: describe_kernels)", t);
    assert_eq!(described, kernels);
    for (name, d) in &phases {
        println!("{name}\t{}", d.as_micros());
    }
}
