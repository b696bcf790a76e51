//! Arbitrary text as CUDA source, lowered names and PTX: the readers never panic.
#![no_main]

use cai_runtime::signature::{demangled_params, deduce, parse_kernels, ptx_entries, ArgType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(decls) = parse_kernels(text) {
        for d in &decls {
            let args = vec![ArgType::UntypedScalar; d.params.len()];
            let _ = deduce(d, &args);
        }
    }
    let _ = demangled_params(text);
    let _ = ptx_entries(text);
});
