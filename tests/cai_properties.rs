//! Property tests of the CAI model against brute-force enumeration of element offsets.

use cai_runtime::cai::{ArrayView, DType, Descriptor, StreamRef, TypestrOptions};
use proptest::prelude::*;

const BASE: u64 = 0x7f00_0000_0000;

/// Every element's byte offset, in C order (last index fastest).
fn offsets_c_order(shape: &[usize], strides: &[i64]) -> Vec<i128> {
    let size: usize = shape.iter().product();
    let mut out = Vec::with_capacity(size);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..size {
        out.push(idx.iter().zip(strides).map(|(&i, &s)| i as i128 * s as i128).sum());
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn offsets_f_order(shape: &[usize], strides: &[i64]) -> Vec<i128> {
    let rs: Vec<usize> = shape.iter().rev().copied().collect();
    let rt: Vec<i64> = strides.iter().rev().copied().collect();
    offsets_c_order(&rs, &rt)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn stream() -> impl Strategy<Value = Option<StreamRef>> {
    prop_oneof![
        Just(None),
        Just(Some(StreamRef::Legacy)),
        Just(Some(StreamRef::PerThread)),
        (3u64..u64::MAX).prop_map(|h| Some(StreamRef::Handle(h.try_into().unwrap()))),
    ]
}

/// A random, valid array: shape of rank 0–5, strides in itemsizes (or None), a pointer
/// far enough from 0 that negative strides stay in the address space.
fn array() -> impl Strategy<Value = ArrayView> {
    (dtype(), prop::collection::vec(0usize..5, 0..=5), any::<bool>(), stream(), any::<bool>())
        .prop_flat_map(|(dtype, shape, readonly, stream, explicit)| {
            let rank = shape.len();
            let strides = prop::collection::vec(-6i64..=6, rank);
            (Just(dtype), Just(shape), strides, Just(readonly), Just(stream), Just(explicit))
        })
        .prop_map(|(dtype, shape, steps, readonly, stream, explicit)| {
            let item = dtype.itemsize() as i64;
            let strides: Vec<i64> = steps.iter().map(|s| s * item).collect();
            let strides = explicit.then_some(strides.as_slice());
            ArrayView::new(BASE, &shape, strides, dtype, readonly, stream).expect("valid by construction")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn export_then_parse_round_trips(v in array()) {
        let d = v.to_descriptor();
        prop_assert_eq!(d.version, 3);
        let back = ArrayView::from_descriptor(&d, TypestrOptions::BFLOAT16_V2).unwrap();
        prop_assert_eq!(back.shape(), v.shape());
        prop_assert_eq!(back.dtype(), v.dtype());
        prop_assert_eq!(back.readonly(), v.readonly());
        prop_assert_eq!(back.stream(), v.stream());
        prop_assert_eq!(back.size(), v.size());
        if !v.is_empty() {
            prop_assert_eq!(back.ptr(), v.ptr());
            // Same elements at the same addresses (unit dimensions may change stride).
            prop_assert_eq!(offsets_c_order(back.shape(), back.strides()), offsets_c_order(v.shape(), v.strides()));
        } else {
            prop_assert_eq!(d.data.ptr, 0);
        }
        prop_assert_eq!(d.strides.is_none(), v.is_c_contiguous());
    }

    #[test]
    fn layout_facts_agree_with_brute_force(v in array()) {
        let item = v.dtype().itemsize() as i128;
        let c = offsets_c_order(v.shape(), v.strides());
        let dense: Vec<i128> = (0..c.len() as i128).map(|k| k * item).collect();
        prop_assert_eq!(v.is_c_contiguous(), c == dense);
        prop_assert_eq!(v.is_f_contiguous(), offsets_f_order(v.shape(), v.strides()) == dense);
        let (lo, hi) = v.byte_extent();
        if c.is_empty() {
            prop_assert_eq!((lo, hi), (0, 0));
        } else {
            prop_assert_eq!(lo, *c.iter().min().unwrap());
            prop_assert_eq!(hi, *c.iter().max().unwrap() + item);
        }
        prop_assert_eq!(v.nbytes(), c.len() * v.dtype().itemsize());
    }

    #[test]
    fn malformed_descriptors_never_panic(
        version in any::<i64>(),
        shape in prop::collection::vec(prop_oneof![any::<i64>(), -2i64..6], 0..8),
        typestr in "[<>|=]?[biufcVOM]?[0-9]{0,3}",
        ptr in any::<u64>(),
        readonly in any::<bool>(),
        strides in prop::option::of(prop::collection::vec(any::<i64>(), 0..8)),
        mask in any::<bool>(),
        stream in prop::option::of(prop_oneof![0u64..4, any::<u64>()]),
        bf16 in any::<bool>(),
    ) {
        let mut d = Descriptor::new(shape, typestr, ptr, readonly);
        d.version = version;
        d.strides = strides;
        d.mask = mask;
        d.stream = stream;
        let options = if bf16 { TypestrOptions::BFLOAT16_V2 } else { TypestrOptions::default() };
        if let Ok(v) = ArrayView::from_descriptor(&d, options) {
            // Everything derived from an accepted view is computable.
            let _ = (v.is_c_contiguous(), v.is_f_contiguous(), v.is_itemsize_aligned(), v.address_range());
            let again = v.to_descriptor().validate();
            prop_assert!(again.is_ok() || v.dtype() == DType::BF16);
            prop_assert!(v.is_empty() || v.ptr() != 0);
        }
    }
}
