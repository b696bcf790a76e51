//! The native half of `caijit.jax`: launches prepared for XLA custom calls (each described
//! in full by its call's attributes), and the address of the XLA FFI handler that serves
//! them (`cai_runtime::xla`).

use cai_runtime::cai::DType;
use cai_runtime::launch::{LaunchConfig, Num};
use cai_runtime::xla::{self, BufferSpec};
use cai_runtime::Error;
use pyo3::prelude::*;

use crate::args::number;
use crate::errors::{PyCaiError, PyCaiResult};
use crate::kernel::{inspection_arch, Kernel};
use crate::pyobj::type_name;

fn buffer_spec(what: &str, i: usize, (dtype, shape): &(String, Vec<usize>)) -> PyCaiResult<BufferSpec> {
    let dtype =
        DType::from_name(dtype).ok_or_else(|| PyCaiError::argument(format!("{what} {i}: caijit kernels do not take {dtype} buffers")))?;
    Ok(BufferSpec { dtype, shape: shape.clone() })
}

/// A static scalar's value and, for a NumPy scalar, its dtype (which deduces templates).
/// An error names the scalar's parameter: its name, and its index and declared type where
/// the kernel's source declares a parameter of that name.
fn scalar(kernel: &Kernel, name: &str, obj: &Bound<'_, PyAny>) -> PyCaiResult<(Num, Option<DType>)> {
    let param = kernel.parameter_named(name);
    let read = match number(param.as_ref().map_or(0, |p| p.0), obj) {
        Ok(Some(v)) => return Ok(v),
        Ok(None) => PyCaiError::argument(format!(
            "scalar `{name}`: expected a Python or NumPy number known when the function is traced, got a {}; pass values computed inside jit as arrays",
            type_name(obj)
        )),
        Err(e) => e,
    };
    Err(match (param, read) {
        (Some((index, ctype)), e) => e.at_argument(index, Some(name), ctype.as_deref()),
        // (no parameter of that name: the bindings say so; the error still names the scalar)
        (None, PyCaiError::Cai(Error::Argument(mut a))) => {
            a.name.get_or_insert_with(|| name.to_string());
            PyCaiError::Cai(Error::Argument(a))
        }
        (None, e) => e,
    })
}

/// Prepare a launch of `kernel` for XLA: deduce the template instance from the buffers'
/// dtypes, compile it (caches as usual), load it on `devices`, bind its parameters, and
/// return `((fingerprint, description), kernel name)`; the custom call `caijit_launch` with
/// the attributes `caijit_fingerprint=fingerprint` and `caijit_launch=description`
/// launches it, in this process or any other.
#[pyfunction]
#[pyo3(signature = (kernel, inputs, outputs, aliases, scalars, grid, block, shared_mem, devices))]
#[allow(clippy::too_many_arguments)] // the Python signature
pub fn xla_prepare(
    py: Python<'_>,
    kernel: PyRef<'_, Kernel>,
    inputs: Vec<(String, Vec<usize>)>,
    outputs: Vec<(String, Vec<usize>)>,
    aliases: Vec<(usize, usize)>,
    scalars: Vec<(String, Bound<'_, PyAny>)>,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    devices: Vec<usize>,
) -> PyCaiResult<((String, String), String)> {
    let inputs: Vec<BufferSpec> = inputs.iter().enumerate().map(|(i, s)| buffer_spec("input", i, s)).collect::<PyCaiResult<_>>()?;
    let outputs: Vec<BufferSpec> = outputs.iter().enumerate().map(|(i, s)| buffer_spec("output", i, s)).collect::<PyCaiResult<_>>()?;
    xla::check_aliases(&inputs, &outputs, &aliases)?;
    let scalars: Vec<(String, (Num, Option<DType>))> =
        scalars.iter().map(|(n, v)| Ok((n.clone(), scalar(&kernel, n, v)?))).collect::<PyCaiResult<_>>()?;
    let k = kernel.name().to_string();
    let bind = |names: &[Option<String>]| xla::bind(&k, names, &inputs, &outputs, &aliases, &scalars);
    let buffers = || {
        let b: Vec<String> = inputs.iter().chain(&outputs).map(|b| format!("{}{:?}", b.dtype.name(), b.shape)).collect();
        format!("buffers ({}) and scalars", b.join(", "))
    };
    let arch = inspection_arch(py)?;
    // Scalars bind by the compiled kernel's parameter names; the dispatcher picks the
    // instance (a deduced template's, or the overload the bindings fit) as a launch does.
    let dispatcher = kernel.dispatcher();
    let (chosen, bindings) = py.detach(|| dispatcher.select_bound(arch, bind, buffers))?;
    let (program, name) = (chosen.program, chosen.name);
    let config = LaunchConfig::new(grid, block).shared_mem(shared_mem);
    let launch = py.detach(|| xla::prepare(&program, &name, &inputs, &outputs, &aliases, &bindings, config, &devices))?;
    Ok(((launch.fingerprint, launch.description), name))
}

/// Resolve a launch from its custom call's attributes as the handler does when XLA
/// instantiates the call: the launch registered under `fingerprint` (its description must
/// be `description`), or the one `description` describes (it must hash to `fingerprint`),
/// compiled and registered. Returns the kernel's lowered name; a mismatch is an
/// `ArgumentError`.
#[pyfunction]
pub fn xla_resolve(py: Python<'_>, fingerprint: String, description: String) -> PyCaiResult<String> {
    Ok(py.detach(|| xla::resolve_launch(&fingerprint, &description))?)
}

/// The address of caijit's XLA FFI handler (`XLA_FFI_Handler*`), to be wrapped with
/// `jax.ffi.pycapsule` and registered with `jax.ffi.register_ffi_target`; declared
/// compatible with XLA's command buffers or not.
#[pyfunction]
#[pyo3(signature = (command_buffer = true))]
pub fn xla_handler_address(command_buffer: bool) -> usize {
    xla::handler_address(command_buffer)
}

/// `{name: value}` of every struct size and field offset of caijit's binding of
/// `xla/ffi/api/c_api.h`, and the API version it reports (for the header check).
#[pyfunction]
pub fn xla_ffi_layout() -> (Vec<(&'static str, usize)>, (i32, i32)) {
    (xla::ffi_layout(), xla::ffi_api_version())
}
