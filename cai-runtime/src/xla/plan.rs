//! A launch's parameter plan: each parameter's bytes at its offset, checked once against
//! the compiled parameter list, and the check of a call's buffers against the plan.

use smallvec::SmallVec;

use super::spec::{describe, Binding, BufferSpec};
use crate::cai::DType;
use crate::compile::KernelInfo;
use crate::error::{Error, Result};
use crate::params::{check_array, check_count, encode_scalar, mismatch, param_error, ArrayArg};
use crate::signature::ParamKind;
use crate::sys::xla_ffi::{self, BufferRef};

/// How one parameter's bytes are made at a call.
#[derive(Clone, Debug)]
pub(super) enum ParamSource {
    /// A device pointer: buffer `i`'s address.
    Pointer(usize),
    /// `caijit::Array<T, N>` over buffer `i`: its address, shape and C-contiguous strides.
    Array { buffer: usize, rank: usize, itemsize: usize },
    /// Bytes encoded when the launch was prepared.
    Bytes(SmallVec<[u8; 16]>),
}

/// Check `bindings` against the parameter list and lay out the plan.
pub(super) fn plan(
    info: &KernelInfo,
    inputs: &[BufferSpec],
    outputs: &[BufferSpec],
    aliases: &[(usize, usize)],
    bindings: &[Binding],
) -> Result<Vec<(usize, ParamSource)>> {
    check_count(|| info.base_name(), info.params.len(), bindings.len())?;
    let buffers: Vec<&BufferSpec> = inputs.iter().chain(outputs).collect();
    let mut plan = Vec::with_capacity(bindings.len());
    for (p, b) in info.params.iter().zip(bindings) {
        let slot = match (&p.kind, b) {
            (ParamKind::Pointer { .. } | ParamKind::Array { .. }, Binding::Buffer(i)) => {
                let spec =
                    buffers.get(*i).ok_or_else(|| param_error(p, format!("buffer {i} does not exist ({} buffers)", buffers.len())))?;
                let input = *i < inputs.len();
                let immutable = (input && !aliases.iter().any(|&(a, _)| a == *i)).then(|| {
                    format!(
                        "input {i} is bound to a non-const parameter: XLA's inputs are immutable; declare it `const` or alias it to an output (input_output_aliases)"
                    )
                });
                check_array(p, &ArrayArg { noun: "buffer", dtype: spec.dtype, shape: &spec.shape, immutable: immutable.as_deref() })?;
                match p.kind.rank() {
                    Some(rank) => ParamSource::Array { buffer: *i, rank, itemsize: spec.dtype.itemsize() },
                    None => ParamSource::Pointer(*i),
                }
            }
            (ParamKind::Scalar(d), Binding::Scalar(v)) => {
                ParamSource::Bytes(SmallVec::from_slice(&encode_scalar(*v, *d).map_err(|e| param_error(p, e))?))
            }
            (ParamKind::Scalar(_) | ParamKind::Struct { .. }, Binding::Buffer(i)) => return Err(mismatch(p, format_args!("buffer {i}"))),
            (ParamKind::Pointer { .. } | ParamKind::Array { .. } | ParamKind::Struct { .. }, Binding::Scalar(_)) => {
                return Err(mismatch(p, "a scalar"))
            }
        };
        plan.push((p.offset, slot));
    }
    Ok(plan)
}

/// XLA's data type code of a dtype.
pub(super) fn xla_dtype(d: DType) -> i32 {
    use xla_ffi::dtype::*;
    match d {
        DType::Bool => PRED,
        DType::I8 => S8,
        DType::I16 => S16,
        DType::I32 => S32,
        DType::I64 => S64,
        DType::U8 => U8,
        DType::U16 => U16,
        DType::U32 => U32,
        DType::U64 => U64,
        DType::F16 => F16,
        DType::BF16 => BF16,
        DType::F32 => F32,
        DType::F64 => F64,
        DType::C64 => C64,
        DType::C128 => C128,
    }
}

/// Check a call's buffers against the specs it was prepared for.
pub(super) fn check_buffers(what: &str, got: &[BufferRef<'_>], want: &[BufferSpec]) -> Result<()> {
    if got.len() != want.len() {
        return Err(Error::argument(format!("the call has {} {what}s; the launch was prepared for {}", got.len(), want.len())));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let elements = g.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        if g.dtype != xla_dtype(w.dtype) || g.dims.len() != w.shape.len() || elements != Some(w.size()) {
            return Err(Error::argument(format!(
                "{what} {i} is XLA type {} with dims {:?}; the launch was prepared for {}",
                g.dtype,
                g.dims,
                describe(w)
            )));
        }
    }
    Ok(())
}
