//! The XLA FFI handler: one call of the custom call served (the buffers checked against
//! the plan, the parameter bytes written, `cuLaunchKernel` on XLA's stream), and the
//! handler's address for JAX.

use smallvec::SmallVec;

use super::plan::{check_buffers, ParamSource};
use super::registry::{resolve, Prepared};
use super::spec::{Binding, FINGERPRINT, TARGET};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::trace;
use crate::params::ParamBuffer;
use crate::signature::ArrayLayout;
use crate::stats::{bump, COUNTERS};
use crate::sys::xla_ffi::{self, Attributes, FfiCall, Serve};

/// Serve one call of the custom call: the launch layer's half of the handler.
fn execute(call: &FfiCall<'_>) -> Result<()> {
    let [fingerprint, description] = call.attributes;
    let p = resolve(fingerprint, description, false)?;
    check_buffers("argument", &call.args, &p.inputs)?;
    check_buffers("result", &call.rets, &p.outputs)?;
    let device = usize::try_from(call.device).map_err(|_| Error::launch(format!("XLA device ordinal {}", call.device)))?;
    let k = p.kernel(device)?;

    let mut buf = ParamBuffer::new(p.buffer_size);
    let buffer = |i: usize| if i < call.args.len() { &call.args[i] } else { &call.rets[i - call.args.len()] };
    for &(offset, ref slot) in &p.plan {
        match slot {
            ParamSource::Pointer(i) => buf.write(offset, &buffer(*i).ptr.to_le_bytes()),
            ParamSource::Array { buffer: i, rank, itemsize } => {
                // XLA's buffers are dense and row-major: strides from the last dimension.
                let b = buffer(*i);
                buf.write(offset + ArrayLayout::DATA, &b.ptr.to_le_bytes());
                let mut stride = *itemsize as i64;
                for d in (0..*rank).rev() {
                    buf.write_dim(offset, *rank, d, b.dims[d], stride);
                    stride *= b.dims[d].max(1);
                }
            }
            ParamSource::Bytes(v) => buf.write(offset, v),
        }
    }
    let d = k.context().bind()?;
    let span = trace::begin(k, &d, call.stream)?;
    // SAFETY: `k` is loaded in the context just bound, and `call.stream` is XLA's stream
    // of that device; every parameter's bytes were laid out at its offset from the kernel's
    // own parameter list (`plan`), and `with_pointers` points at each; the device pointers
    // are XLA's buffers for this call, checked against the plan's dtypes and sizes above,
    // and live until the work XLA enqueues on this stream has run.
    #[allow(unsafe_code)]
    let launched = buf.with_pointers(&p.info.params, |pointers| unsafe { d.launch_checked(k.raw, &p.config, call.stream, pointers) });
    launched?;
    bump(&COUNTERS.launches);
    let launched = p.record(k, call);
    trace::end(span, k, &d, call.stream)?;
    match launched {
        Some(r) => trace::block(k.context(), &r),
        None => Ok(()),
    }
}

impl Prepared {
    /// Write a call's launch into the ring of recent launches, as [`Kernel::launch`] does,
    /// so that a sticky fault reported by a later caijit call names it. Returns its record
    /// when launch-blocking mode or bounds checks need it.
    fn record(&self, k: &Kernel, call: &FfiCall<'_>) -> Option<Box<crate::diag::LaunchRecord>> {
        let specs = || self.inputs.iter().chain(&self.outputs);
        let buffers = || call.args.iter().chain(&call.rets);
        trace::record_with(k, &self.config, call.stream, self.bindings.len(), |slots| {
            for (b, w) in self.bindings.iter().zip(slots) {
                match *b {
                    Binding::Buffer(i) => {
                        // (Checked against the plan before the launch: never absent; a slot is written anyway.)
                        let (Some(spec), Some(got)) = (specs().nth(i), buffers().nth(i)) else {
                            w.pointer(0);
                            continue;
                        };
                        let dims: SmallVec<[usize; 4]> = got.dims.iter().map(|&n| n as usize).collect();
                        w.array(spec.dtype, &dims, got.ptr);
                    }
                    Binding::Scalar(v) => trace::scalar(w, v),
                }
            }
        })
    }
}

/// The handler's [`Serve`] implementation: `CAPTURABLE` says whether it declares itself
/// compatible with XLA's command buffers (CUDA graphs), which lets XLA record the launch
/// into a graph (and, in recent XLA, makes it do so).
struct XlaLaunch<const CAPTURABLE: bool>;

impl<const CAPTURABLE: bool> Serve for XlaLaunch<CAPTURABLE> {
    const ATTRIBUTES: [&'static str; 2] = [FINGERPRINT, TARGET];
    const TRAITS: u32 = if CAPTURABLE { xla_ffi::TRAIT_COMMAND_BUFFER_COMPATIBLE } else { 0 };
    fn instantiate(attributes: &Attributes<'_>) -> std::result::Result<(), String> {
        let [fingerprint, description] = *attributes;
        resolve(fingerprint, description, true).map(drop).map_err(|e| format!("caijit: {e}"))
    }
    fn serve(call: &FfiCall<'_>) -> std::result::Result<(), String> {
        execute(call).map_err(|e| format!("caijit: {e}"))
    }
}

/// The address of the `XLA_FFI_Handler` serving caijit's launches (for a PyCapsule):
/// declared compatible with XLA's command buffers, or not (`command_buffer`). The same
/// handler serves the instantiate and execute stages.
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
