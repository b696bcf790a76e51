//! Expansion tests: what the derives generate, exercised through the runtime's traits.

use cai_runtime::cai::{ArrayView, DType, Descriptor, InterfaceError, StreamRef};
use cai_runtime::{CudaArrayInterface, FromCudaArrayInterface, KernelParams, ParamBytes};

#[derive(CudaArrayInterface, Debug, PartialEq)]
#[cai(dtype = f32)]
struct Image {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    shape: [usize; 2],
    #[cai(stream)]
    stream: Option<u64>,
    label: String,
}

#[derive(CudaArrayInterface, Debug, PartialEq)]
#[cai(dtype = half::f16)]
struct View {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    shape: Vec<usize>,
    #[cai(strides)]
    strides: Option<Vec<i64>>,
    #[cai(readonly)]
    readonly: bool,
}

#[derive(CudaArrayInterface)]
#[cai(dtype = i32)]
struct Vector {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    len: usize,
}

const P: u64 = 0x7f00_0000_0000;

#[test]
fn export_follows_the_producer_rules() {
    let img = Image { ptr: P, shape: [3, 4], stream: Some(0xabc), label: "x".into() };
    let d = img.cai_descriptor().unwrap();
    assert_eq!(d.version, 3);
    assert_eq!(d.shape, [3, 4]);
    assert_eq!(d.typestr, "<f4");
    assert_eq!(d.strides, None);
    assert_eq!(d.stream, Some(0xabc));
    assert_eq!((d.data.ptr, d.data.readonly), (P, false));
    let empty = Vector { ptr: 0, len: 0 };
    assert_eq!(empty.cai_descriptor().unwrap().data.ptr, 0);
    assert_eq!(Vector { ptr: P, len: 5 }.cai_view().unwrap().shape(), [5]);
}

#[test]
fn import_round_trips_and_fills_other_fields_with_defaults() {
    let img = Image { ptr: P, shape: [3, 4], stream: Some(2), label: "ignored".into() };
    let back = Image::from_cai(&img.cai_view().unwrap()).unwrap();
    assert_eq!(back, Image { ptr: P, shape: [3, 4], stream: Some(2), label: String::new() });

    let v = View { ptr: P, shape: vec![4, 5], strides: Some(vec![2, 8]), readonly: true };
    let view = v.cai_view().unwrap();
    assert_eq!(view.dtype(), DType::F16);
    assert!(view.is_f_contiguous());
    assert_eq!(View::from_cai(&view).unwrap(), v);
}

#[test]
fn import_checks_dtype_rank_contiguity_and_readonly() {
    let f64_view = ArrayView::contiguous(P, &[3, 4], DType::F64, false).unwrap();
    assert!(matches!(Image::from_cai(&f64_view), Err(InterfaceError::DtypeMismatch { .. })));
    let rank3 = ArrayView::contiguous(P, &[2, 3, 4], DType::F32, false).unwrap();
    assert!(matches!(Image::from_cai(&rank3), Err(InterfaceError::RankMismatch { expected: 2, got: 3 })));
    let transposed = ArrayView::new(P, &[3, 4], Some(&[4, 12]), DType::F32, false, None).unwrap();
    let e = Image::from_cai(&transposed).unwrap_err();
    assert!(e.to_string().contains("'strides'"), "{e}");
    let ro = ArrayView::contiguous(P, &[3, 4], DType::F32, true).unwrap();
    assert_eq!(Image::from_cai(&ro).unwrap_err(), InterfaceError::Readonly);
    // A producer's descriptor goes through the consumer rules first.
    let mut d = Descriptor::new(vec![3, 4], "<f4", P, false);
    d.stream = Some(1);
    let img = Image::from_descriptor(&d).unwrap();
    assert_eq!(img.stream, Some(1));
    assert_eq!(img.cai_view().unwrap().stream(), Some(StreamRef::Legacy));
    d.stream = Some(0);
    assert_eq!(Image::from_descriptor(&d).unwrap_err(), InterfaceError::StreamZero);
}

/// A raw stream field holding 0 is refused on export (the CAI forbids 0), never exported
/// as "no stream".
#[derive(CudaArrayInterface, Debug)]
#[cai(dtype = f32)]
struct RawStream {
    #[cai(data)]
    ptr: u64,
    #[cai(shape)]
    n: usize,
    #[cai(stream)]
    stream: u64,
}

#[test]
fn a_raw_stream_zero_is_refused_not_exported_as_none() {
    let zero = Image { ptr: P, shape: [3, 4], stream: Some(0), label: String::new() };
    assert_eq!(zero.cai_view().unwrap_err(), InterfaceError::StreamZero);
    assert_eq!(zero.cai_descriptor().unwrap_err(), InterfaceError::StreamZero);
    let none = Image { ptr: P, shape: [3, 4], stream: None, label: String::new() };
    assert_eq!(none.cai_view().unwrap().stream(), None);
    assert_eq!(RawStream { ptr: P, n: 4, stream: 0 }.cai_view().unwrap_err(), InterfaceError::StreamZero);
    assert_eq!(RawStream { ptr: P, n: 4, stream: 2 }.cai_view().unwrap().stream(), Some(StreamRef::PerThread));
    let h = RawStream { ptr: P, n: 4, stream: 0x1234 }.cai_descriptor().unwrap();
    assert_eq!(h.stream, Some(0x1234));
}

/// The CUDA twin: `struct Params { double scale; signed char flag; float v[2]; int n; };`
#[derive(KernelParams, Clone, Copy)]
#[repr(C)]
#[cai(size = 24, align = 8)]
struct Params {
    #[cai(offset = 0)]
    scale: f64,
    #[cai(offset = 8)]
    flag: i8,
    #[cai(offset = 12)]
    v: [f32; 2],
    n: i32,
}

#[test]
fn kernel_params_bytes_follow_the_repr_c_layout() {
    let p = Params { scale: 1.5, flag: -1, v: [2.0, 3.0], n: 7 };
    let b = p.param_bytes();
    assert_eq!(b.len(), 24);
    assert_eq!(&b[0..8], &1.5f64.to_le_bytes());
    assert_eq!(b[8], 0xff);
    assert_eq!(&b[9..12], &[0, 0, 0], "padding is zeroed");
    assert_eq!(&b[12..16], &2.0f32.to_le_bytes());
    assert_eq!(&b[16..20], &3.0f32.to_le_bytes());
    assert_eq!(&b[20..24], &7i32.to_le_bytes());
}

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
