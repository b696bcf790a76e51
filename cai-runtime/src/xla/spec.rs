//! What a launch for XLA is made of: its buffers' abstract values, what each kernel
//! parameter is bound to, what its custom call carries, and the rules that bind a kernel's
//! parameters to a call's buffers and named scalars.

use crate::cai::DType;
use crate::error::{Error, Result};
use crate::launch::Num;
use crate::signature::ArgType;

/// The custom call target name caijit registers, and the attribute carrying the launch's
/// description.
pub const TARGET: &str = "caijit_launch";
/// The attribute carrying the launch's fingerprint (32 hex digits).
pub const FINGERPRINT: &str = "caijit_fingerprint";
/// The abstract value of a buffer: dtype and shape (row-major, dense).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferSpec {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl BufferSpec {
    pub(super) fn size(&self) -> usize {
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

/// A prepared launch as its custom call carries it: the attributes `caijit_fingerprint`
/// ([`FINGERPRINT`]) and `caijit_launch` ([`TARGET`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// 32 hex digits: the first 128 bits of the description's SHA-256.
    pub fingerprint: String,
    /// Everything the handler needs to compile, load and bind the kernel in any process.
    pub description: String,
    /// The kernel's name as compiled (the instance's lowered name for a template).
    pub kernel: String,
}

pub(super) fn describe(b: &BufferSpec) -> String {
    format!("{}{:?}", b.dtype.name(), b.shape)
}

/// Check `(input, output)` pairs XLA gives the same memory: both exist, with the same dtype
/// and shape.
pub fn check_aliases(inputs: &[BufferSpec], outputs: &[BufferSpec], aliases: &[(usize, usize)]) -> Result<()> {
    for &(i, o) in aliases {
        match (inputs.get(i), outputs.get(o)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                return Err(Error::argument(format!(
                    "input_output_aliases: input {i} ({}) and output {o} ({}) differ",
                    describe(a),
                    describe(b)
                )))
            }
            _ => return Err(Error::argument(format!("input_output_aliases: no input {i} or no output {o}"))),
        }
    }
    Ok(())
}

/// Bind each kernel parameter to a buffer or a named scalar: parameters named by `scalars`
/// take those values; the others take the inputs, then the outputs, in order, the outputs
/// aliased to inputs left out when the kernel has one parameter fewer for each.
pub fn bind(
    kernel: &str,
    names: &[Option<String>],
    inputs: &[BufferSpec],
    outputs: &[BufferSpec],
    aliases: &[(usize, usize)],
    scalars: &[(String, (Num, Option<DType>))],
) -> Result<(Vec<Binding>, Vec<ArgType>)> {
    for (s, _) in scalars {
        if !names.iter().any(|n| n.as_deref() == Some(s.as_str())) {
            let all: Vec<_> = names.iter().map(|n| n.as_deref().unwrap_or("<unnamed>")).collect();
            let why = if names.iter().any(Option::is_none) {
                "; a parameter is unnamed when a declaration leaves it unnamed or two declarations \
                 (`#if` branches, a forward declaration) name it differently: give it one name in every declaration"
            } else {
                ""
            };
            return Err(Error::argument(format!(
                "kernel `{kernel}` has no parameter named `{s}` (its parameters: {}){why}",
                all.join(", ")
            )));
        }
    }
    let scalar_of = |n: &Option<String>| n.as_deref().and_then(|n| scalars.iter().find(|(s, _)| s == n)).map(|(_, v)| *v);
    let buffer_params = names.iter().filter(|n| scalar_of(n).is_none()).count();
    let (n_in, n_out) = (inputs.len(), outputs.len());
    let mut order: Vec<usize> = (0..n_in + n_out).collect();
    if buffer_params != order.len() {
        let aliased: Vec<usize> = aliases.iter().map(|&(_, o)| n_in + o).collect();
        order.retain(|b| !aliased.contains(b));
        if buffer_params != order.len() {
            return Err(Error::argument(format!(
                "kernel `{kernel}` has {buffer_params} buffer parameters (those not given as scalars), but the call has {n_in} inputs and {n_out} outputs{}",
                if aliases.is_empty() { String::new() } else { format!(" ({} aliased)", aliases.len()) }
            )));
        }
    }
    let specs: Vec<&BufferSpec> = inputs.iter().chain(outputs).collect();
    let mut next = order.into_iter();
    let mut out = Vec::with_capacity(names.len());
    let mut types = Vec::with_capacity(names.len());
    for n in names {
        match scalar_of(n) {
            Some((value, dtype)) => {
                out.push(Binding::Scalar(value));
                types.push(dtype.map_or(ArgType::UntypedScalar, ArgType::TypedScalar));
            }
            None => {
                let b = next.next().expect("counted above");
                out.push(Binding::Buffer(b));
                types.push(ArgType::Array { dtype: specs[b].dtype, rank: specs[b].shape.len() });
            }
        }
    }
    Ok((out, types))
}
