//! Tests of `compile` against NVRTC itself.

use super::*;

/// NVRTC's CUBINs are whole as the loader checks them (`sys::binary_extent`), which
/// hands them to the driver without a copy: for every architecture this NVRTC knows of
/// those caijit ships for, with and without line information.
#[test]
fn a_cubin_of_nvrtc_is_whole() {
    let fresh = CompileOptions { disk_cache: Some(None), skip_memory_cache: true, ..Default::default() };
    let source = "template <typename T> __global__ void k(T* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; }";
    let supported = &toolkit().expect("NVRTC (scripts/setup.sh)").supported_archs;
    let archs: Vec<u32> = [75, 80, 86, 89, 90, 100, 120].into_iter().filter(|a| supported.contains(&(*a as i32))).collect();
    assert!(archs.contains(&90), "{supported:?}");
    for arch in archs {
        for lineinfo in [false, true] {
            let mut program = Program::new(source).name_expression("k<double>");
            if lineinfo {
                program = program.option("-lineinfo");
            }
            let c = compile_with(&program, Arch(arch), &fresh).unwrap();
            let Image::Cubin(cubin) = &c.image else { panic!("sm_{arch} gives a CUBIN") };
            assert_eq!(crate::sys::binary_extent(cubin), Some(Ok(())), "sm_{arch}, -lineinfo {lineinfo}");
            assert!(matches!(crate::sys::binary_extent(&cubin[..cubin.len() - 1]), Some(Err(_))), "sm_{arch}");
        }
    }
}

/// A typo in a template argument is named in caijit's words, not NVRTC's pseudo-file;
/// an error in the program itself keeps the compiler's log.
#[test]
fn a_bad_name_expression_is_named_as_such() {
    let fresh = CompileOptions { disk_cache: Some(None), skip_memory_cache: true, ..Default::default() };
    let source = "template <typename T> __global__ void axpy(T* x) { x[0] += 1; }";
    let e = compile_with(&Program::new(source).name_expression("axpy<flaot>"), Arch(90), &fresh).unwrap_err().to_string();
    assert!(e.contains(r#"the kernel name "axpy<flaot>" is not valid in kernel.cu: identifier "flaot" is undefined"#), "{e}");
    assert!(!e.contains("__nv_name_map"), "{e}");
    let broken = "template <typename T> __global__ void axpy(T* x) { x[0] += undeclared; }";
    let e = compile_with(&Program::new(broken).name_expression("axpy<float>"), Arch(90), &fresh).unwrap_err().to_string();
    assert!(e.contains("NVRTC could not compile") && e.contains(r#"identifier "undeclared" is undefined"#), "{e}");
}

/// Every byte value, in every position where NVRTC might read it as a blank, read by caijit
/// as by NVRTC itself (the NVRTC found, asked now): before and after an option, after a
/// joined `-I` and `=`, around a separate value, for include directories, pre-included
/// headers, `-arch` (which caijit refuses) and `-pch` (which it drops). Bytes from 0x80 on
/// are those of U+0080..U+00FF (an option is UTF-8 text).
#[test]
fn every_byte_is_read_as_nvrtc_reads_it() {
    let tk = toolkit().expect("NVRTC (scripts/setup.sh)");
    let dir = tempfile::tempdir().unwrap();
    let inc = dir.path().join("inc");
    std::fs::create_dir(&inc).unwrap();
    std::fs::write(inc.join("probe.h"), "#define FOUND 1\n").unwrap();
    let pre = dir.path().join("pre.h");
    std::fs::write(&pre, "#define FOUND 1\n").unwrap();
    let (inc, pre) = (inc.display().to_string(), pre.display().to_string());
    let arch = "-arch=sm_90".to_string();
    // Whether NVRTC compiles `text` with `options`: it found the header.
    let nvrtc_finds = |text: &str, options: &[String]| {
        let mut p = tk.nvrtc.create_program(text, "probe.cu", &[]).unwrap();
        let mut all = vec![arch.clone()];
        all.extend_from_slice(options);
        p.compile(&all).unwrap_or(false)
    };
    let include = "#include <probe.h>\n#ifndef FOUND\n#error\n#endif\n";
    let preincluded = "#ifndef FOUND\n#error\n#endif\n";
    let dirs = |o: &[String]| options::sort(o).include_dirs == [std::path::PathBuf::from(&inc)];
    // The file caijit opens (`//tmp/pre.h` is `/tmp/pre.h`; `/tmp/pre.h/` is none).
    let pres = |o: &[String]| {
        let found: Vec<_> = options::sort(o).pre_includes.iter().map(|p| std::fs::canonicalize(p).ok()).collect();
        found == [std::fs::canonicalize(&pre).ok()]
    };
    type Case<'a> = (&'a str, &'a str, Box<dyn Fn(char) -> Vec<String> + Sync + 'a>, Box<dyn Fn(&[String]) -> bool + Sync + 'a>);
    let cases: Vec<Case> = vec![
        ("before -I", include, Box::new(|c| vec![format!("{c}-I{inc}")]), Box::new(dirs)),
        ("after -I", include, Box::new(|c| vec![format!("-I{inc}{c}")]), Box::new(dirs)),
        ("after a joined -I", include, Box::new(|c| vec![format!("-I{c}{inc}")]), Box::new(dirs)),
        ("after -I=", include, Box::new(|c| vec![format!("-I={c}{inc}")]), Box::new(dirs)),
        ("before -I's value", include, Box::new(|c| vec!["-I".into(), format!("{c}{inc}")]), Box::new(dirs)),
        ("after -I's value", include, Box::new(|c| vec!["--include-path".into(), format!("{inc}{c}")]), Box::new(dirs)),
        ("before -include=", preincluded, Box::new(|c| vec![format!("{c}-include={pre}")]), Box::new(pres)),
        ("after -include=", preincluded, Box::new(|c| vec![format!("-include={pre}{c}")]), Box::new(pres)),
        ("after --pre-include=", preincluded, Box::new(|c| vec![format!("--pre-include={c}{pre}")]), Box::new(pres)),
        ("before -include's value", preincluded, Box::new(|c| vec!["-include".into(), format!("{c}{pre}")]), Box::new(pres)),
    ];
    let chars: Vec<char> = (1u8..=255).map(char::from).collect();
    let disagree = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for part in chars.chunks(chars.len().div_ceil(4)) {
            let (cases, disagree, inc, nvrtc_finds) = (&cases, &disagree, &inc, &nvrtc_finds);
            s.spawn(move || {
                for &c in part {
                    for (what, text, options, caijit_reads) in cases {
                        let o = options(c);
                        if nvrtc_finds(text, &o) != caijit_reads(&o) {
                            disagree.lock().unwrap().push(format!("{:#04x} {what}", c as u32));
                        }
                    }
                    // The options caijit takes out itself, with a byte before them: taken
                    // out exactly when NVRTC reads the option (as it reads `-I` there), or
                    // it is their long spelling (`--arch`, `--pch`).
                    let blank = nvrtc_finds(include, &[format!("{c}-I{inc}")]) || c == '-';
                    let arch_refused = program_arch_option(&format!("{c}-arch=sm_80"));
                    let pch_dropped = options::sort(&[format!("{c}-pch")]).rest.is_empty();
                    if arch_refused != blank || pch_dropped != blank {
                        disagree.lock().unwrap().push(format!("{:#04x} before -arch or -pch", c as u32));
                    }
                }
            });
        }
    });
    let disagree = disagree.into_inner().unwrap();
    assert!(disagree.is_empty(), "caijit reads these bytes otherwise than NVRTC {}.{}: {disagree:?}", tk.version.0, tk.version.1);
}

/// Whether caijit refuses `o` as an architecture given as an option.
fn program_arch_option(o: &str) -> bool {
    let program = Program::new("").option(o);
    let tk = toolkit().unwrap();
    let sorted = options::sort(&program.options);
    nvrtc_options(&program, Arch(90), tk, &sorted, None).is_err()
}
