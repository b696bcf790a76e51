//! The error for an out-of-bounds access a debug instance recorded
//! ([`crate::kernel::BoundsRecord`]): the argument is found by its data pointer.

use crate::diag::LaunchRecord;
use crate::error::{Error, Result};
use crate::kernel::{BoundsRecord, Kernel};
use crate::launch::Arg;
use crate::signature::ParamLayout;

/// After a debug instance's launch: an argument error for the first out-of-bounds access,
/// if there was one.
pub(super) fn check_bounds(k: &Kernel, launched: &LaunchRecord, args: &[Arg<'_>]) -> Result<()> {
    match k.take_bounds_record(launched.stream)? {
        Some(w) => Err(violation(k.instance(), &k.info().params, args, &w)),
        None => Ok(()),
    }
}

/// The error for a bounds record `w` of a launch of `kernel` with `params` and `args`.
fn violation(kernel: &str, params: &[ParamLayout], args: &[Arg<'_>], w: &BoundsRecord) -> Error {
    let (data, rank, dim, flat) = (w[1] as u64, w[2].clamp(0, 8) as usize, w[3], w[4]);
    let shape: Vec<i64> = w[13..13 + rank].to_vec();
    let tuple = |v: &[i64]| format!("({})", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "));
    let what = if dim < 0 {
        let size: i64 = shape.iter().product();
        format!("flat index {flat} is out of bounds for shape {} ({size} elements)", tuple(&shape))
    } else {
        let idx = &w[5..5 + rank];
        format!("index {} is out of bounds for shape {} in dimension {dim}", tuple(idx), tuple(&shape))
    };
    let what = format!("{what} (the first out-of-bounds access of kernel {kernel}, caught by its bounds-checked debug instance)");
    let matches: Vec<usize> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            Arg::Array(v) | Arg::ArrayOn(v, _) if v.ptr() == data && v.ndim() == rank => Some(i),
            _ => None,
        })
        .collect();
    match matches.as_slice() {
        [i] => {
            let p = &params[*i];
            Error::argument_at(p.index, p.name.as_deref(), &p.cpp_type, what)
        }
        [] => Error::argument(format!("an array at {data:#x} (not an argument: a copy or a view made in the kernel): {what}")),
        many => Error::argument(format!("one of arguments {many:?} (they share the data pointer {data:#x}): {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cai::{ArrayView, DType};

    fn record(data: u64, dim: i64, flat: i64, idx: &[i64], shape: &[i64]) -> BoundsRecord {
        let mut w = [0i64; 21];
        w[0] = 1;
        w[1] = data as i64;
        w[2] = shape.len() as i64;
        w[3] = dim;
        w[4] = flat;
        w[5..5 + idx.len()].copy_from_slice(idx);
        w[13..13 + shape.len()].copy_from_slice(shape);
        w
    }

    #[test]
    fn a_violation_names_the_argument_by_its_pointer_with_index_and_shape() {
        let array = |index: usize, name: &str| ParamLayout {
            index,
            name: Some(name.into()),
            cpp_type: "caijit::Array<float, 2>".into(),
            kind: crate::signature::ParamKind::Array { dtype: Some(DType::F32), is_const: false, rank: 2 },
            size: 40,
            align: 8,
            offset: 40 * index,
        };
        let n = ParamLayout {
            index: 2,
            name: Some("n".into()),
            cpp_type: "int".into(),
            kind: crate::signature::ParamKind::Scalar(DType::I32),
            size: 4,
            align: 4,
            offset: 80,
        };
        let params = [array(0, "a"), array(1, "b"), n];
        let a = ArrayView::contiguous(0x1000, &[3, 4], DType::F32, false).unwrap();
        let b = ArrayView::contiguous(0x2000, &[3, 4], DType::F32, false).unwrap();
        let args = [Arg::Array(&a), Arg::Array(&b), Arg::Scalar { value: crate::launch::Num::Int(3), dtype: None }];
        let e = violation("k", &params, &args, &record(0x2000, 1, -1, &[2, 4], &[3, 4]));
        let Error::Argument(a) = e else { panic!("{e:?}") };
        assert_eq!((a.index, a.name.as_deref()), (Some(1), Some("b")));
        assert!(a.message.contains("index (2, 4) is out of bounds for shape (3, 4) in dimension 1"), "{}", a.message);
        let e = violation("k", &params, &args, &record(0x1000, -1, 12, &[], &[3, 4]));
        assert!(
            e.to_string().contains("argument 0 `a`")
                && e.to_string().contains("flat index 12 is out of bounds for shape (3, 4) (12 elements)"),
            "{e}"
        );
        let e = violation("k", &params, &args, &record(0x9000, 0, -1, &[5, 0], &[3, 4]));
        assert!(e.to_string().contains("not an argument"), "{e}");
    }
}
