//! Kernels as XLA custom calls: launches prepared once, served by an XLA FFI handler.
//!
//! # Examples
//! ```no_run
//! use cai_runtime::cai::DType;
//! use cai_runtime::compile::Program;
//! use cai_runtime::launch::{LaunchConfig, Num};
//! use cai_runtime::xla::{prepare, Binding, BufferSpec};
//! let program = Program::new(r#"extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i]; }"#);
//! let spec = BufferSpec { dtype: DType::F32, shape: vec![1024] };
//! let id = prepare(
//!     &program, "scale", &[spec.clone()], &[spec], &[],
//!     &[Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Float(2.0)), Binding::Scalar(Num::Int(1024))],
//!     LaunchConfig::new([4, 1, 1], [256, 1, 1]), &[0],
//! )?;
//! // The custom call `caijit_launch` with the attribute `caijit_launch = id` now launches it.
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! A jitted JAX program calls the handler ([`handler_address`], registered with
//! `jax.ffi.register_ffi_target(..., platform="CUDA")`) once per execution, with XLA's
//! buffers and stream. Everything that can be decided before that — the template instance,
//! which kernel parameter is which buffer, the bytes of every static scalar, the launch
//! configuration — is decided once by [`prepare`], when the program is traced, and kept
//! under an integer id that the custom call carries as its attribute. A call then reads
//! the id, checks the buffers against the plan (count, dtype, element count), writes their
//! pointers into the parameter buffer and calls `cuLaunchKernel` on XLA's stream: no
//! compilation, no allocation beyond the stack, no event, no host synchronisation. XLA
//! orders the call against the rest of its program, so none of the CAI stream protocol
//! applies; and since the launch is one `cuLaunchKernel` on the given stream, the handler
//! declares itself compatible with XLA's command buffers (CUDA graphs).
//!
//! # Limitations
//! Prepared launches live for the process (a jitted function may run at any time). A
//! device that [`prepare`] was not told about is loaded on its first call (from the
//! compilation caches; the architecture's first compilation would then happen there).

use std::sync::{Arc, OnceLock, RwLock};

use smallvec::SmallVec;

use crate::cai::DType;
use crate::compile::{KernelInfo, Program};
use crate::kernel::Kernel;
use crate::launch::{encode_scalar, LaunchConfig, Num, ParamBuffer};
use crate::runtime::{self, Context};
use crate::signature::{ArrayLayout, ParamKind};
use crate::stats::{bump, COUNTERS};
use crate::sys::xla_ffi::{self, BufferRef, Call, Serve};
use crate::{Error, Result};

/// The custom call target name caijit registers, and the attribute naming the launch.
pub const TARGET: &str = "caijit_launch";

/// The abstract value of a buffer: dtype and shape (row-major, dense).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferSpec {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl BufferSpec {
    fn size(&self) -> usize {
        self.shape.iter().product()
    }
}

/// What a kernel parameter is bound to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Binding {
    /// Buffer `i` of the call: the inputs, then the outputs.
    Buffer(usize),
    /// A value fixed when the launch is prepared.
    Scalar(Num),
}

/// How one parameter's bytes are made at a call.
#[derive(Clone, Debug)]
enum Slot {
    /// A device pointer: buffer `i`'s address.
    Pointer(usize),
    /// `caijit::Array<T, N>` over buffer `i`: its address, shape and C-contiguous strides.
    Array { buffer: usize, rank: usize, itemsize: usize },
    /// Bytes encoded when the launch was prepared.
    Bytes(SmallVec<[u8; 16]>),
}

/// A launch prepared for XLA: the kernel (per device), its parameter plan and configuration.
#[derive(Debug)]
pub struct Prepared {
    program: Program,
    name: String,
    info: KernelInfo,
    /// `(offset, slot)` of every parameter.
    plan: Vec<(usize, Slot)>,
    buffer_size: usize,
    inputs: Vec<BufferSpec>,
    outputs: Vec<BufferSpec>,
    config: LaunchConfig,
    /// The loaded kernel per device ordinal.
    kernels: Vec<OnceLock<Arc<Kernel>>>,
}

impl Prepared {
    fn kernel(&self, device: usize) -> Result<&Arc<Kernel>> {
        let slot = self
            .kernels
            .get(device)
            .ok_or_else(|| Error::launch(format!("XLA runs the call on device {device}, which the driver does not list")))?;
        if let Some(k) = slot.get() {
            return Ok(k);
        }
        let k = Context::new(device)?.compile(&self.program)?.kernel(&self.name)?;
        self.config.check(&k)?;
        Ok(slot.get_or_init(|| k))
    }
}

static PREPARED: RwLock<Vec<Arc<Prepared>>> = RwLock::new(Vec::new());

/// The prepared launch `id`.
fn prepared(id: u64) -> Option<Arc<Prepared>> {
    let all = PREPARED.read().unwrap_or_else(|p| p.into_inner());
    all.get(usize::try_from(id).ok()?).cloned()
}

fn describe(b: &BufferSpec) -> String {
    format!("{}{:?}", b.dtype.name(), b.shape)
}

/// Prepare a launch of `name` (a kernel of `program`; a name expression for a template
/// instance) for XLA and return its id: `bindings[i]` says what parameter `i` is
/// (`inputs` then `outputs` number the buffers; `aliases` are `(input, output)` pairs XLA
/// gives the same memory). Checks every binding against the compiled parameter list: a
/// buffer's dtype and rank, a scalar's range, that only outputs and aliased inputs are
/// written through non-const parameters. Loads the kernel on each of `devices` (compiling
/// it for their architectures, through the caches); without a CUDA driver it is compiled
/// for the inspection architecture only, so that programs can be traced and lowered
/// anywhere.
#[allow(clippy::too_many_arguments)]
pub fn prepare(
    program: &Program,
    name: &str,
    inputs: &[BufferSpec],
    outputs: &[BufferSpec],
    aliases: &[(usize, usize)],
    bindings: &[Binding],
    config: LaunchConfig,
    devices: &[usize],
) -> Result<u64> {
    let count = match runtime::device_count() {
        Ok(n) => n,
        Err(Error::CudaNotAvailable(_)) => 0,
        Err(e) => return Err(e),
    };
    let kernels: Vec<OnceLock<Arc<Kernel>>> = (0..count).map(|_| OnceLock::new()).collect();
    let mut info = None;
    for &d in devices {
        let k = Context::new(d)?.compile(program)?.kernel(name)?;
        config.check(&k)?;
        info.get_or_insert_with(|| k.info().clone());
        let _ = kernels[d].set(k);
    }
    let info = match info {
        Some(i) => i,
        None => crate::compile::compile(program, crate::kernel::inspection_arch()?)?.kernel(name)?.clone(),
    };
    let plan = plan(&info, inputs, outputs, aliases, bindings)?;
    let prepared = Prepared {
        program: program.clone(),
        name: name.to_string(),
        buffer_size: info.param_buffer_size(),
        info,
        plan,
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
        config,
        kernels,
    };
    let mut all = PREPARED.write().unwrap_or_else(|p| p.into_inner());
    all.push(Arc::new(prepared));
    Ok(all.len() as u64 - 1)
}

/// Check `bindings` against the parameter list and lay out the plan.
fn plan(
    info: &KernelInfo,
    inputs: &[BufferSpec],
    outputs: &[BufferSpec],
    aliases: &[(usize, usize)],
    bindings: &[Binding],
) -> Result<Vec<(usize, Slot)>> {
    if bindings.len() != info.params.len() {
        return Err(Error::argument(format!(
            "kernel `{}` takes {} parameters; {} were bound",
            info.base_name(),
            info.params.len(),
            bindings.len()
        )));
    }
    let buffers: Vec<&BufferSpec> = inputs.iter().chain(outputs).collect();
    let mut plan = Vec::with_capacity(bindings.len());
    for (p, b) in info.params.iter().zip(bindings) {
        let named = |what: String| {
            let name = p.name.as_deref().map(|n| format!(" `{n}`")).unwrap_or_default();
            Error::argument(format!("kernel `{}` parameter {}{name} (`{}`): {what}", info.base_name(), p.index, p.cpp_type))
        };
        let slot = match (&p.kind, b) {
            (ParamKind::Pointer { dtype, is_const } | ParamKind::Array { dtype, is_const, .. }, Binding::Buffer(i)) => {
                let spec = buffers.get(*i).ok_or_else(|| named(format!("buffer {i} does not exist ({} buffers)", buffers.len())))?;
                if let Some(d) = dtype {
                    if *d != spec.dtype {
                        return Err(named(format!("expected {} buffers, got {}", d.name(), describe(spec))));
                    }
                }
                let input = *i < inputs.len();
                let aliased = input && aliases.iter().any(|&(a, _)| a == *i);
                if input && !aliased && !is_const {
                    return Err(named(format!(
                        "input {i} is bound to a non-const parameter: XLA's inputs are immutable; declare it `const` or alias it to an output (input_output_aliases)"
                    )));
                }
                match p.kind {
                    ParamKind::Array { rank, .. } => {
                        if rank != spec.shape.len() {
                            return Err(named(format!("expected a {rank}-d buffer, got {}", describe(spec))));
                        }
                        Slot::Array { buffer: *i, rank, itemsize: spec.dtype.itemsize() }
                    }
                    _ => Slot::Pointer(*i),
                }
            }
            (ParamKind::Scalar(d), Binding::Scalar(v)) => Slot::Bytes(SmallVec::from_slice(&encode_scalar(*v, *d).map_err(named)?)),
            (kind, Binding::Buffer(i)) => return Err(named(format!("expected {}, got buffer {i}", kind.describe()))),
            (kind, Binding::Scalar(_)) => return Err(named(format!("expected {}, got a scalar", kind.describe()))),
        };
        plan.push((p.offset, slot));
    }
    Ok(plan)
}

/// XLA's data type code of a dtype.
fn xla_dtype(d: DType) -> i32 {
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
fn check_buffers(what: &str, got: &[BufferRef<'_>], want: &[BufferSpec]) -> Result<()> {
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

/// Serve one call of the custom call: the launch layer's half of the handler.
fn execute(call: &Call<'_>) -> Result<()> {
    let id = call.attribute.ok_or_else(|| Error::argument(format!("the custom call has no `{TARGET}` attribute")))?;
    let p = u64::try_from(id)
        .ok()
        .and_then(prepared)
        .ok_or_else(|| Error::argument(format!("no prepared launch {id} (was it prepared in another process?)")))?;
    check_buffers("argument", &call.args, &p.inputs)?;
    check_buffers("result", &call.rets, &p.outputs)?;
    let device = usize::try_from(call.device).map_err(|_| Error::launch(format!("XLA device ordinal {}", call.device)))?;
    let k = p.kernel(device)?;

    let mut buf = ParamBuffer::new(p.buffer_size);
    let buffer = |i: usize| if i < call.args.len() { &call.args[i] } else { &call.rets[i - call.args.len()] };
    for &(offset, ref slot) in &p.plan {
        match slot {
            Slot::Pointer(i) => buf.write(offset, &buffer(*i).ptr.to_le_bytes()),
            Slot::Array { buffer: i, rank, itemsize } => {
                // XLA's buffers are dense and row-major: strides from the last dimension.
                let b = buffer(*i);
                buf.write(offset + ArrayLayout::DATA, &b.ptr.to_le_bytes());
                let mut stride = *itemsize as i64;
                for d in (0..*rank).rev() {
                    buf.write_dim(offset, *rank, d, b.dims[d], stride);
                    stride *= b.dims[d].max(1);
                }
            }
            Slot::Bytes(v) => buf.write(offset, v),
        }
    }
    let d = k.context().bind()?;
    // Every parameter's bytes were laid out from the kernel's own parameter list; the
    // device pointers are XLA's buffers for this call, checked against the plan's dtypes
    // and sizes above, and live until the work XLA enqueues on this stream has run.
    buf.with_pointers(&p.info.params, |pointers| d.launch_checked(k.raw, &p.config, call.stream, pointers))?;
    bump(&COUNTERS.launches);
    Ok(())
}

/// The handler's [`Serve`] implementation: `CAPTURABLE` says whether it declares itself
/// compatible with XLA's command buffers (CUDA graphs), which lets XLA record the launch
/// into a graph (and, in recent XLA, makes it do so).
struct XlaLaunch<const CAPTURABLE: bool>;

impl<const CAPTURABLE: bool> Serve for XlaLaunch<CAPTURABLE> {
    const ATTRIBUTE: &'static str = TARGET;
    const TRAITS: u32 = if CAPTURABLE { xla_ffi::TRAIT_COMMAND_BUFFER_COMPATIBLE } else { 0 };
    fn serve(call: &Call<'_>) -> std::result::Result<(), String> {
        execute(call).map_err(|e| format!("caijit: {e}"))
    }
}

/// The address of the `XLA_FFI_Handler` serving prepared launches (for a PyCapsule):
/// declared compatible with XLA's command buffers, or not (`command_buffer`).
pub fn handler_address(command_buffer: bool) -> usize {
    if command_buffer {
        xla_ffi::handler_address::<XlaLaunch<true>>() as usize
    } else {
        xla_ffi::handler_address::<XlaLaunch<false>>() as usize
    }
}

/// `(name, value)` of every struct size and field offset of the XLA FFI binding, named as
/// `xla/ffi/api/c_api.h` names them (`"XLA_FFI_CallFrame.args"` is an offset,
/// `"XLA_FFI_CallFrame_STRUCT_SIZE"` a size), for tests that compile the header.
pub fn ffi_layout() -> Vec<(&'static str, usize)> {
    xla_ffi::layout()
}

/// The XLA FFI API version the handler reports.
pub fn ffi_api_version() -> (i32, i32) {
    xla_ffi::API_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::ParamLayout;

    fn param(index: usize, name: &str, kind: ParamKind, size: usize, offset: usize) -> ParamLayout {
        ParamLayout { index, name: Some(name.into()), cpp_type: format!("{kind:?}"), kind, size, align: size.min(8), offset }
    }

    fn info() -> KernelInfo {
        KernelInfo {
            name_expression: None,
            lowered_name: "k".into(),
            demangled: None,
            qualified_name: "k".into(),
            params: vec![
                param(0, "x", ParamKind::Pointer { dtype: Some(DType::F32), is_const: true }, 8, 0),
                param(1, "y", ParamKind::Pointer { dtype: Some(DType::F32), is_const: false }, 8, 8),
                param(2, "n", ParamKind::Scalar(DType::I32), 4, 16),
            ],
        }
    }

    fn f32s(n: usize) -> BufferSpec {
        BufferSpec { dtype: DType::F32, shape: vec![n] }
    }

    #[test]
    fn plans_buffers_and_scalars() {
        let plan =
            plan(&info(), &[f32s(4)], &[f32s(4)], &[], &[Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Int(4))]).unwrap();
        assert!(matches!(plan[0], (0, Slot::Pointer(0))));
        assert!(matches!(plan[1], (8, Slot::Pointer(1))));
        assert!(matches!(&plan[2], (16, Slot::Bytes(b)) if b[..] == 4i32.to_le_bytes()));
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let bind = |b: [Binding; 3]| plan(&info(), &[f32s(4)], &[f32s(4)], &[], &b).unwrap_err().to_string();
        let (b0, b1, n) = (Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Int(4)));
        assert!(bind([b1, b0, n]).contains("input 0 is bound to a non-const parameter"), "{}", bind([b1, b0, n]));
        assert!(bind([b0, b1, Binding::Scalar(Num::Int(1 << 40))]).contains("out of range"));
        assert!(bind([b0, n, n]).contains("expected"));
        assert!(bind([b0, Binding::Buffer(7), n]).contains("does not exist"));
        let ints = BufferSpec { dtype: DType::I32, shape: vec![4] };
        let e = plan(&info(), &[ints], &[f32s(4)], &[], &[b0, b1, n]).unwrap_err().to_string();
        assert!(e.contains("expected float32 buffers, got int32[4]"), "{e}");
        // An input aliased to an output may be written.
        assert!(plan(&info(), &[f32s(4), f32s(4)], &[], &[(1, 0)], &[b0, b1, n]).is_ok());
    }

    #[test]
    fn buffers_are_checked_against_the_plan() {
        let dims = [4i64];
        let ok = BufferRef { dtype: xla_ffi::dtype::F32, ptr: 0x1000, dims: &dims };
        assert!(check_buffers("argument", &[ok], &[f32s(4)]).is_ok());
        assert!(check_buffers("argument", &[ok], &[f32s(5)]).is_err());
        assert!(check_buffers("argument", &[], &[f32s(4)]).unwrap_err().to_string().contains("has 0 arguments"));
        let wrong = BufferRef { dtype: xla_ffi::dtype::F64, ..ok };
        assert!(check_buffers("argument", &[wrong], &[f32s(4)]).is_err());
    }
}
