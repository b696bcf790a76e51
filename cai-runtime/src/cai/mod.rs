//! The CUDA Array Interface (v3) model: pure Rust, no CUDA calls.
//!
//! | CAI key | type here | rule |
//! | --- | --- | --- |
//! | `version` | [`Descriptor::version`] | 0–3 accepted |
//! | `shape` | [`ArrayView::shape`] | extents ≥ 0; products checked |
//! | `typestr` | [`DType`] | `b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8 c8 c16`; `>` rejected |
//! | `data` | [`Data`] | `ptr == 0` only when empty |
//! | `strides` | [`ArrayView::strides`] | bytes; `None` is C order; negative and zero allowed |
//! | `mask` | — | must be absent or `None` |
//! | `stream` | [`StreamRef`] | absent/`None`: no ordering; `1` legacy; `2` per-thread; `0` rejected |
//!
//! # Examples
//! ```
//! use cai_runtime::cai::{Descriptor, DType};
//! let mut d = Descriptor::new(vec![4, 3], "<f4", 0x7f00_0000_0000, false);
//! d.strides = Some(vec![4, 16]); // a transposed view
//! let v = d.validate()?;
//! assert_eq!(v.dtype(), DType::F32);
//! assert!(v.is_f_contiguous() && !v.is_c_contiguous());
//! # Ok::<(), cai_runtime::cai::InterfaceError>(())
//! ```
//!
//! # Limitations
//! The device of the pointer is not part of this model: it needs the driver, and is
//! resolved when an array is bound to a launch.

mod derive;
mod descriptor;
mod dtype;
mod error;
mod typestr;
mod view;

pub use derive::{
    check_import, export_view, CudaArrayInterface, DataField, Element, FromCudaArrayInterface, ShapeField, StreamField, StreamFieldImport,
    StridesField,
};
pub use descriptor::{Data, Descriptor};
pub use dtype::{DType, TypestrOptions};
pub use error::{shorten_plain, InterfaceError};
pub use view::{c_strides, exported_ptr, is_multiple_of, ArrayView, StreamRef, MAX_RANK};

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 0x7f12_3400_0000;

    fn desc(shape: &[i64], typestr: &str) -> Descriptor {
        Descriptor::new(shape.to_vec(), typestr, P, false)
    }

    #[test]
    fn versions_zero_to_three_are_accepted_and_others_rejected() {
        for v in 0..=3 {
            let mut d = desc(&[2], "<f4");
            d.version = v;
            assert_eq!(d.validate().unwrap().version(), v as u8);
        }
        for v in [-1, 4, 100] {
            let mut d = desc(&[2], "<f4");
            d.version = v;
            let e = d.validate().unwrap_err();
            assert_eq!(e, InterfaceError::UnsupportedVersion { version: v });
            assert!(e.to_string().contains("'version'"));
        }
    }

    #[test]
    fn a_mask_is_rejected() {
        let mut d = desc(&[2], "<f4");
        d.mask = true;
        let e = d.validate().unwrap_err();
        assert_eq!(e, InterfaceError::MaskUnsupported);
        assert!(e.to_string().contains("masked arrays are not supported"));
    }

    #[test]
    fn stream_values_map_as_the_spec_says() {
        let with = |s: Option<u64>| {
            let mut d = desc(&[2], "<f4");
            d.stream = s;
            d.validate()
        };
        assert_eq!(with(None).unwrap().stream(), None);
        assert_eq!(with(Some(1)).unwrap().stream(), Some(StreamRef::Legacy));
        assert_eq!(with(Some(2)).unwrap().stream(), Some(StreamRef::PerThread));
        assert_eq!(with(Some(0xdead_beef)).unwrap().stream(), Some(StreamRef::Handle(std::num::NonZeroU64::new(0xdead_beef).unwrap())));
        let e = with(Some(0)).unwrap_err();
        assert_eq!(e, InterfaceError::StreamZero);
        assert!(e.to_string().contains("'stream'"));
    }

    #[test]
    fn null_pointer_only_for_empty_arrays() {
        let mut d = desc(&[3, 0], "<f4");
        d.data.ptr = 0;
        assert!(d.validate().unwrap().is_empty());
        let mut d = desc(&[3], "<f4");
        d.data.ptr = 0;
        let e = d.validate().unwrap_err();
        assert_eq!(e, InterfaceError::NullPointer { size: 3 });
        assert!(e.to_string().contains("'data'"));
        // A 0-d array has one element, so it needs a pointer.
        let mut d = desc(&[], "<f4");
        d.data.ptr = 0;
        assert_eq!(d.validate().unwrap_err(), InterfaceError::NullPointer { size: 1 });
    }

    #[test]
    fn zero_d_arrays_have_one_element() {
        let v = desc(&[], "<f8").validate().unwrap();
        assert_eq!((v.ndim(), v.size(), v.nbytes()), (0, 1, 8));
        assert!(v.is_c_contiguous() && v.is_f_contiguous());
        assert_eq!(v.byte_extent(), (0, 8));
    }

    #[test]
    fn negative_extents_are_rejected() {
        let e = desc(&[2, -1], "<f4").validate().unwrap_err();
        assert_eq!(e, InterfaceError::NegativeExtent { axis: 1, value: -1 });
        assert!(e.to_string().contains("'shape'"));
    }

    #[test]
    fn shape_products_are_checked() {
        let e = desc(&[1 << 32, 1 << 32], "<f4").validate().unwrap_err();
        assert!(matches!(e, InterfaceError::ShapeOverflow { .. }), "{e}");
        // Fits in elements but not in bytes: the message says so.
        let e = desc(&[1 << 62], "<f8").validate().unwrap_err();
        assert_eq!(e, InterfaceError::ByteSizeOverflow { shape: vec![1 << 62], itemsize: 8 });
        let e = desc(&[1 << 31, 1 << 31], "<f4").validate().unwrap_err();
        assert!(e.to_string().contains("4-byte elements is more bytes than fit"), "{e}");
        assert!(!e.to_string().contains("elements than fit"), "{e}");
        // Huge extents next to a zero extent make an empty array, not an error.
        let mut d = desc(&[0, i64::MAX, i64::MAX], "<f4");
        d.data.ptr = 0;
        assert_eq!(d.validate().unwrap().size(), 0);
    }

    #[test]
    fn byte_sizes_are_checked_with_explicit_strides_too() {
        for strides in [vec![8], vec![0]] {
            let mut d = desc(&[1 << 62], "<f8");
            d.strides = Some(strides);
            let e = d.validate().unwrap_err();
            assert_eq!(e, InterfaceError::ByteSizeOverflow { shape: vec![1 << 62], itemsize: 8 });
        }
    }

    #[test]
    fn strides_must_match_the_rank() {
        let mut d = desc(&[2, 3], "<f4");
        d.strides = Some(vec![4]);
        let e = d.validate().unwrap_err();
        assert_eq!(e, InterfaceError::StridesRank { shape: 2, strides: 1 });
        assert!(e.to_string().contains("'strides'"));
    }

    #[test]
    fn none_strides_mean_c_order() {
        let v = desc(&[2, 3, 4], "<i2").validate().unwrap();
        assert_eq!(v.strides(), &[24, 8, 2]);
        assert!(v.is_c_contiguous() && !v.is_f_contiguous());
        assert_eq!(v.byte_extent(), (0, 48));
    }

    #[test]
    fn negative_and_zero_strides_are_allowed() {
        let mut d = desc(&[4, 3], "<f4");
        d.strides = Some(vec![-12, 0]);
        let v = d.validate().unwrap();
        assert_eq!(v.byte_extent(), (-36, 4));
        assert!(!v.is_c_contiguous() && !v.is_f_contiguous());
        assert_eq!(v.address_range(), (P as u128 - 36)..(P as u128 + 4));
    }

    #[test]
    fn addresses_outside_the_address_space_are_rejected() {
        let mut d = desc(&[4], "<f4");
        d.data.ptr = 8;
        d.strides = Some(vec![-4]);
        assert!(matches!(d.validate().unwrap_err(), InterfaceError::AddressOverflow { .. }));
        let mut d = desc(&[4], "<f4");
        d.data.ptr = u64::MAX - 4;
        assert!(matches!(d.validate().unwrap_err(), InterfaceError::AddressOverflow { .. }));
        let mut d = desc(&[3, 3], "<f4");
        d.strides = Some(vec![i64::MAX, i64::MAX]);
        assert!(d.validate().is_err());
    }

    #[test]
    fn contiguity_ignores_unit_dimensions_like_numpy() {
        let mut d = desc(&[1, 5, 1], "<f4");
        d.strides = Some(vec![999, 4, -7]);
        let v = d.validate().unwrap();
        assert!(v.is_c_contiguous());
        assert!(v.is_f_contiguous(), "a single non-unit dimension is both C and F contiguous");
        let mut d = desc(&[0, 3], "<f4");
        d.strides = Some(vec![5, 7]);
        let v = d.validate().unwrap();
        assert!(v.is_c_contiguous() && v.is_f_contiguous(), "empty arrays are contiguous");
    }

    #[test]
    fn itemsize_alignment_is_reported() {
        assert!(desc(&[4], "<f4").validate().unwrap().is_itemsize_aligned());
        let mut d = desc(&[4], "<f4");
        d.data.ptr = P + 2;
        assert!(!d.validate().unwrap().is_itemsize_aligned());
        let mut d = desc(&[4], "<f4");
        d.strides = Some(vec![6]);
        assert!(!d.validate().unwrap().is_itemsize_aligned());
        let mut d = desc(&[1], "<f4");
        d.strides = Some(vec![6]);
        assert!(d.validate().unwrap().is_itemsize_aligned(), "unit dimensions are never stepped");
    }

    #[test]
    fn export_follows_the_producer_rules() {
        let v = ArrayView::new(P, &[2, 3], None, DType::F32, true, Some(StreamRef::PerThread)).unwrap();
        let d = v.to_descriptor();
        assert_eq!(d.version, 3);
        assert_eq!(d.strides, None);
        assert_eq!(d.stream, Some(2));
        assert_eq!(d.data, Data { ptr: P, readonly: true });
        let t = ArrayView::new(P, &[2, 3], Some(&[4, 8]), DType::F32, false, None).unwrap();
        assert_eq!(t.to_descriptor().strides, Some(vec![4, 8]));
        let e = ArrayView::new(P, &[0, 3], None, DType::F32, false, Some(StreamRef::Legacy)).unwrap();
        assert_eq!(e.to_descriptor().data, Data { ptr: 0, readonly: false });
        assert_eq!(e.to_descriptor().stream, Some(1));
    }

    #[test]
    fn rank_is_bounded() {
        let d = desc(&[1; MAX_RANK + 1], "<f4");
        assert!(matches!(d.validate().unwrap_err(), InterfaceError::RankTooLarge { .. }));
        assert_eq!(desc(&[1; MAX_RANK], "<f4").validate().unwrap().ndim(), MAX_RANK, "NumPy's maximum itself is accepted");
    }

    #[test]
    fn arrays_may_touch_both_ends_of_the_address_space() {
        let mut d = desc(&[4], "<f4");
        d.data.ptr = 12;
        d.strides = Some(vec![-4]);
        assert_eq!(d.validate().unwrap().address_range(), 0..16);
        d.data.ptr = 11;
        assert!(matches!(d.validate().unwrap_err(), InterfaceError::AddressOverflow { .. }));
        let mut d = desc(&[4], "<f4");
        d.data.ptr = u64::MAX - 15;
        assert_eq!(d.validate().unwrap().address_range(), (u128::from(u64::MAX) - 15)..(1u128 << 64));
        d.data.ptr = u64::MAX - 14;
        assert!(matches!(d.validate().unwrap_err(), InterfaceError::AddressOverflow { .. }));
        let mut d = desc(&[4], "<f4");
        d.data.ptr = 1 << 62;
        assert_eq!(d.validate().unwrap().byte_extent(), (0, 16));
    }

    #[test]
    fn views_report_what_they_were_built_from() {
        let v = ArrayView::new(P, &[2, 3], Some(&[12, 4]), DType::I32, true, Some(StreamRef::Legacy)).unwrap();
        assert_eq!((v.ptr(), v.shape(), v.strides(), v.dtype()), (P, &[2, 3][..], &[12, 4][..], DType::I32));
        assert_eq!((v.readonly(), v.stream(), v.version(), v.ndim()), (true, Some(StreamRef::Legacy), 3, 2));
        assert_eq!((v.size(), v.nbytes(), v.is_empty(), v.is_owned_by_caijit()), (6, 24, false, false));
        let w = v.clone().with_stream(None).owned_by_caijit(true);
        assert_eq!((w.stream(), w.is_owned_by_caijit()), (None, true));
        assert!(!w.owned_by_caijit(false).is_owned_by_caijit());
        let c = ArrayView::contiguous(P, &[5], DType::U16, false).unwrap();
        assert_eq!((c.strides(), c.readonly(), c.stream(), c.nbytes()), (&[2][..], false, None, 10));
        assert_eq!(StreamRef::Handle(std::num::NonZeroU64::new(7).unwrap()).to_cai(), 7);
    }

    #[test]
    fn c_strides_are_checked_byte_strides() {
        assert_eq!(c_strides(&[2, 3, 4], 2), Some(vec![24, 8, 2]));
        assert_eq!(c_strides(&[], 4), Some(vec![]));
        assert_eq!(c_strides(&[3, 0, 2], 4), Some(vec![4, 4, 4]), "empty arrays step by the itemsize everywhere");
        assert_eq!(c_strides(&[0, 1 << 62, 1 << 62], 4), Some(vec![4, 4, 4]));
        assert_eq!(c_strides(&[1 << 62, 4], 8), None);
        assert_eq!(c_strides(&[2], usize::MAX), None);
    }

    #[test]
    fn shape_fields_convert_to_and_from_dims() {
        assert_eq!(<[usize; 2] as ShapeField>::RANK, Some(2));
        assert_eq!([2usize, 3].dims(), [2, 3]);
        assert_eq!(<[usize; 2]>::from_dims(&[2, 3]), Some([2, 3]));
        assert_eq!(<[usize; 2]>::from_dims(&[2]), None);
        assert_eq!(<Vec<usize> as ShapeField>::RANK, None);
        assert_eq!(vec![4usize, 0, 5].dims(), [4, 0, 5]);
        assert_eq!(<Vec<usize>>::from_dims(&[4, 0, 5]), Some(vec![4, 0, 5]));
        assert_eq!(<usize as ShapeField>::RANK, Some(1));
        assert_eq!(7usize.dims(), [7]);
        assert_eq!(usize::from_dims(&[7]), Some(7));
        assert_eq!(usize::from_dims(&[7, 1]), None);
        assert_eq!(usize::from_dims(&[]), None);
    }

    #[test]
    fn strides_fields_convert_and_none_means_c_order() {
        assert_eq!(StridesField::strides(&[8i64, -4]), Some(vec![8, -4]));
        assert_eq!(<[i64; 2]>::from_strides(&[8, -4]), Some([8, -4]));
        assert_eq!(<[i64; 2]>::from_strides(&[8]), None);
        assert_eq!(StridesField::strides(&vec![8i64, -4]), Some(vec![8, -4]));
        assert_eq!(<Vec<i64>>::from_strides(&[8, -4]), Some(vec![8, -4]));
        assert_eq!(StridesField::strides(&Some([8i64, -4])), Some(vec![8, -4]));
        assert_eq!(StridesField::strides(&None::<Vec<i64>>), None);
        assert_eq!(<Option<[i64; 2]>>::from_strides(&[8, -4]), Some(Some([8, -4])));
        assert_eq!(<Option<[i64; 2]>>::from_strides(&[8]), Some(None));
    }

    #[test]
    fn stream_fields_keep_a_raw_zero_for_export_to_refuse() {
        // The CAI forbids 0: it is kept, and export refuses it (StreamZero), rather than
        // read as "no stream"; `None` is the way to say none.
        assert_eq!(StreamField::stream(&0u64), Some(0));
        assert_eq!(super::derive::export_view(1 << 40, &[4], None, DType::F32, false, Some(0)).unwrap_err(), InterfaceError::StreamZero);
        assert_eq!(StreamField::stream(&2u64), Some(2));
        assert_eq!(StreamField::stream(&0xdead_beefu64), Some(0xdead_beef));
        assert_eq!(StreamField::stream(&Some(0u64)), Some(0));
        assert_eq!(StreamField::stream(&Some(7u64)), Some(7));
        assert_eq!(StreamField::stream(&None::<u64>), None);
        assert_eq!(StreamField::stream(&std::sync::Arc::new(7u64)), Some(7));
        assert_eq!(StreamField::stream(&std::sync::Arc::new(0u64)), Some(0));
        assert_eq!(<u64 as StreamFieldImport>::from_stream(Some(7)), Some(7));
        assert_eq!(<u64 as StreamFieldImport>::from_stream(None), Some(0));
        assert_eq!(<Option<u64> as StreamFieldImport>::from_stream(Some(7)), Some(Some(7)));
        assert_eq!(<Option<u64> as StreamFieldImport>::from_stream(None), Some(None));
    }

    #[test]
    fn raw_pointer_data_fields_are_writable() {
        assert_eq!(DataField::device_ptr(&P), P);
        assert!(DataField::writable(&P));
    }

    #[test]
    fn export_view_validates_the_stream_and_keeps_the_layout() {
        let v = export_view(P, &[2, 3], Some(vec![4, 8]), DType::F32, true, Some(2)).unwrap();
        assert_eq!((v.ptr(), v.shape(), v.strides(), v.dtype()), (P, &[2, 3][..], &[4, 8][..], DType::F32));
        assert_eq!((v.readonly(), v.stream()), (true, Some(StreamRef::PerThread)));
        assert_eq!(export_view(P, &[2], None, DType::F32, false, None).unwrap().stream(), None);
        assert_eq!(export_view(P, &[2], None, DType::F32, false, Some(0)).unwrap_err(), InterfaceError::StreamZero);
    }

    #[test]
    fn check_import_names_each_unmet_expectation() {
        let v = ArrayView::new(P, &[2, 3], None, DType::F32, false, None).unwrap();
        assert_eq!(check_import(&v, DType::F32, Some(2), true, true), Ok(()));
        assert_eq!(check_import(&v, DType::F32, None, true, true), Ok(()));
        let e = check_import(&v, DType::F64, Some(2), false, false).unwrap_err();
        assert_eq!(e, InterfaceError::DtypeMismatch { expected: DType::F64, got: DType::F32 });
        assert!(e.to_string().contains("'typestr'"));
        let e = check_import(&v, DType::F32, Some(3), false, false).unwrap_err();
        assert_eq!(e, InterfaceError::RankMismatch { expected: 3, got: 2 });
        let t = ArrayView::new(P, &[2, 3], Some(&[4, 8]), DType::F32, true, None).unwrap();
        let e = check_import(&t, DType::F32, Some(2), true, false).unwrap_err();
        assert_eq!(e, InterfaceError::NotContiguous { strides: vec![4, 8] });
        assert_eq!(check_import(&t, DType::F32, Some(2), false, true), Err(InterfaceError::Readonly));
        assert_eq!(check_import(&t, DType::F32, Some(2), false, false), Ok(()));
    }
}
