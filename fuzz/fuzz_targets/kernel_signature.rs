//! Arbitrary text as CUDA source, lowered names and PTX: the declaration reader, the PTX
//! `.entry` reader, the demangled-name reader and the layout of what they return never panic.
#![no_main]

#[path = "common/describe.rs"]
mod describe;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The same text as source, PTX and lowered name: PTX entries can then meet their
    // `extern "C"` declarations, and mangled entry names are demangled.
    describe::describe(&text, &text, &[(String::new(), text.to_string())]);
});
