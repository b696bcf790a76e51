//! Arbitrary CAI descriptors: validation never panics, and what it accepts is consistent.
#![no_main]

use arbitrary::Arbitrary;
use cai_runtime::cai::{ArrayView, Descriptor, TypestrOptions};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    version: i64,
    shape: Vec<i64>,
    typestr: String,
    ptr: u64,
    readonly: bool,
    strides: Option<Vec<i64>>,
    mask: bool,
    stream: Option<u64>,
    bfloat16: bool,
}

fuzz_target!(|i: Input| {
    let mut d = Descriptor::new(i.shape, i.typestr, i.ptr, i.readonly);
    d.version = i.version;
    d.strides = i.strides;
    d.mask = i.mask;
    d.stream = i.stream;
    let options = if i.bfloat16 { TypestrOptions::BFLOAT16_V2 } else { TypestrOptions::default() };
    if let Ok(v) = ArrayView::from_descriptor(&d, options) {
        let _ = (v.is_c_contiguous(), v.is_f_contiguous(), v.is_itemsize_aligned(), v.address_range(), v.nbytes());
        assert!(v.is_empty() || v.ptr() != 0);
        let again = ArrayView::from_descriptor(&v.to_descriptor(), TypestrOptions::BFLOAT16_V2).expect("export re-parses");
        assert_eq!((again.shape(), again.dtype(), again.stream()), (v.shape(), v.dtype(), v.stream()));
    }
});
