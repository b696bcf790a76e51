//! Bounds-checked debug instances of kernels (`caijit.debug(True)`, `CAIJIT_DEBUG=1`).
//!
//! A debug instance is the kernel's program compiled again with `CAIJIT_BOUNDS_CHECK`
//! defined: a define like any other, so a separate cache entry. In it, `caijit::Array`'s
//! accessors check every index against the shape and write the first violation of a launch
//! to the module's `caijit_bounds_record` (kernels/include/caijit/array.cuh); after the
//! launch, [`check_bounds`] reads it, clears it, and names the argument whose data pointer
//! it recorded.
//!
//! # Limitations
//! Raw pointer parameters cannot be checked (a pointer carries no extent). Only kernels
//! compiled from a program in this process ([`Context::compile`]) have a debug instance;
//! one loaded from a compiled image alone launches unchecked.

use std::ffi::CStr;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use super::{Context, Kernel};
use crate::compile::Program;
use crate::diag::LaunchRecord;
use crate::launch::Arg;
use crate::signature::ParamLayout;
use crate::sync::OnceMap;
use crate::{Error, Result};

/// The define that makes a debug instance.
pub const BOUNDS_CHECK: &str = "CAIJIT_BOUNDS_CHECK";
const RECORD: &CStr = c"caijit_bounds_record";
const WORDS: usize = 21;

/// The program each module compiled in this process came from, by cache key (what a
/// debug instance is compiled from).
static PROGRAMS: LazyLock<Mutex<HashMap<String, Arc<Program>>>> = LazyLock::new(Default::default);
/// Debug instances by device, module key and lowered name.
static TWINS: LazyLock<OnceMap<(usize, String, String), Arc<Kernel>>> = LazyLock::new(Default::default);

/// Keep the program a module with `key` was compiled from.
pub(super) fn remember(key: &str, program: &Program) {
    crate::sync::lock(&PROGRAMS).entry(key.to_string()).or_insert_with(|| Arc::new(program.clone()));
}

fn is_debug_program(p: &Program) -> bool {
    p.defines.iter().any(|(n, _)| n == BOUNDS_CHECK)
}

impl Kernel {
    /// Whether this is a bounds-checked debug instance.
    pub fn is_debug_instance(&self) -> bool {
        self.module.ctx_program().is_some_and(|p| is_debug_program(&p))
    }

    /// The bounds-checked debug instance of this kernel: itself if it is one; `None` when
    /// its program is unknown (loaded from a compiled image alone).
    pub fn debug_instance(&self) -> Result<Option<Arc<Kernel>>> {
        let Some(program) = self.module.ctx_program() else { return Ok(None) };
        if is_debug_program(&program) {
            return Ok(None);
        }
        let ctx: &Arc<Context> = self.context();
        let key = (ctx.ordinal(), self.module.compiled.key.clone(), self.info.lowered_name.clone());
        TWINS
            .get_or_try_insert_with(key, || {
                let debug = (*program).clone().define(BOUNDS_CHECK, Some("1".into()));
                ctx.compile(&debug)?.kernel(&self.info.lowered_name)
            })
            .map(Some)
    }
}

impl super::Module {
    fn ctx_program(&self) -> Option<Arc<Program>> {
        crate::sync::lock(&PROGRAMS).get(&self.compiled.key).cloned()
    }
}

/// After a debug instance's launch (`launched`): wait for it, read the bounds record and,
/// if an access was out of bounds, clear it and return an argument error naming the
/// argument (by its data pointer), the index and the shape.
pub(crate) fn check_bounds(k: &Kernel, launched: &LaunchRecord, args: &[Arg<'_>]) -> Result<()> {
    let d = k.context().bind()?;
    let Some((ptr, size)) = d.module_global(k.module.raw, RECORD)? else { return Ok(()) };
    let stream = crate::sys::RawStream::from_cai(launched.stream);
    d.stream_synchronize(stream)?;
    let mut bytes = [0u8; WORDS * 8];
    let n = bytes.len().min(size);
    d.copy_from_owned(&mut bytes[..n], ptr, stream)?;
    let word = |i: usize| i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    if word(0) == 0 {
        return Ok(());
    }
    d.zero_owned(ptr, n, stream)?;
    d.stream_synchronize(stream)?;
    Err(violation(k.instance(), &k.info.params, args, &(0..WORDS).map(word).collect::<Vec<_>>()))
}

/// The error for a bounds record `w` (see kernels/include/caijit/array.cuh) of a launch of
/// `kernel` with `params` and `args`.
fn violation(kernel: &str, params: &[ParamLayout], args: &[Arg<'_>], w: &[i64]) -> Error {
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

    fn record(data: u64, dim: i64, flat: i64, idx: &[i64], shape: &[i64]) -> Vec<i64> {
        let mut w = vec![0i64; WORDS];
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
        let n = ParamLayout { index: 2, name: Some("n".into()), cpp_type: "int".into(), kind: crate::signature::ParamKind::Scalar(DType::I32), size: 4, align: 4, offset: 80 };
        let params = [array(0, "a"), array(1, "b"), n];
        let a = ArrayView::contiguous(0x1000, &[3, 4], DType::F32, false).unwrap();
        let b = ArrayView::contiguous(0x2000, &[3, 4], DType::F32, false).unwrap();
        let args = [Arg::Array(&a), Arg::Array(&b), Arg::Scalar { value: crate::launch::Num::Int(3), dtype: None }];
        let e = violation("k", &params, &args, &record(0x2000, 1, -1, &[2, 4], &[3, 4]));
        let Error::Argument(a) = e else { panic!("{e:?}") };
        assert_eq!((a.index, a.name.as_deref()), (Some(1), Some("b")));
        assert!(a.message.contains("index (2, 4) is out of bounds for shape (3, 4) in dimension 1"), "{}", a.message);
        let e = violation("k", &params, &args, &record(0x1000, -1, 12, &[], &[3, 4]));
        assert!(e.to_string().contains("argument 0 `a`") && e.to_string().contains("flat index 12 is out of bounds for shape (3, 4) (12 elements)"), "{e}");
        let e = violation("k", &params, &args, &record(0x9000, 0, -1, &[5, 0], &[3, 4]));
        assert!(e.to_string().contains("not an argument"), "{e}");
    }
}
