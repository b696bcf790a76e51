//! A compiled program loaded into a context ([`Module`]) and its kernels ([`Kernel`]): a
//! kernel couples the driver's function handle with the parameter layout compilation found,
//! checked at load against what the driver says of the loaded code.

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::compile::{Compiled, KernelInfo};
use crate::error::{Error, Result};
use crate::params::Arg;
use crate::runtime::Context;
use crate::signature::{ParamKind, ParamLayout};
use crate::stats::timing::{self, LoadPhase};
use crate::sync::OnceMap;
use crate::sys::{KernelAttributes, RawFunction, RawModule};

/// A program loaded into a context.
#[derive(Debug)]
pub struct Module {
    ctx: Arc<Context>,
    pub(super) compiled: Arc<Compiled>,
    pub(super) raw: RawModule,
    /// Kernels by lowered name: one `Kernel` per driver function, whichever spelling of its
    /// name asked for it, so that a limit raised through one spelling is the limit every
    /// spelling sees. (Callers keep the kernels they use: this is not on the launch path.)
    kernels: OnceMap<String, Arc<Kernel>>,
}

// Modules are never unloaded: a kernel handle handed out (to Python, to another thread)
// stays valid for the process, as CuPy's module cache does.

impl Module {
    /// The module `raw`, loaded into `ctx` from `compiled`, with no kernel asked for yet.
    pub(super) fn new(ctx: Arc<Context>, compiled: Arc<Compiled>, raw: RawModule) -> Module {
        Module { ctx, compiled, raw, kernels: OnceMap::default() }
    }

    pub fn compiled(&self) -> &Arc<Compiled> {
        &self.compiled
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// A kernel by name expression, lowered name or plain name.
    pub fn kernel(self: &Arc<Self>, name: &str) -> Result<Arc<Kernel>> {
        let info = self.compiled.kernel(name)?;
        self.kernels.get_or_try_insert_with(info.lowered_name.clone(), || {
            let probe = timing::start();
            let k = self.load_kernel(info.clone());
            probe.stop(LoadPhase::KernelLoad);
            k
        })
    }

    fn load_kernel(self: &Arc<Self>, info: KernelInfo) -> Result<Arc<Kernel>> {
        let d = self.ctx.bind()?;
        let cname = CString::new(info.lowered_name.as_str()).map_err(|_| Error::argument("kernel name has a NUL byte"))?;
        let raw = d.get_function(self.raw, &cname)?;
        // Cross-check the layout with what the loaded code says: every parameter's offset and
        // size, and their count (drivers of CUDA 12.4+; older ones cannot say, see
        // `driver_checks_parameters`).
        if d.has_param_info() {
            let mismatch = |what: String| Error::launch(format!("kernel {}: {what}", info.lowered_name));
            for p in &info.params {
                match d.param_info(raw, p.index)? {
                    Some((offset, size)) if (offset, size) == (p.offset, p.size) => {}
                    Some((offset, size)) => {
                        return Err(mismatch(format!(
                            "parameter {}: caijit computed offset {} size {}, the driver says offset {offset} size {size}",
                            p.index, p.offset, p.size
                        )))
                    }
                    None => return Err(mismatch(format!("caijit computed {} parameters, the driver says {}", info.params.len(), p.index))),
                }
            }
            if d.param_info(raw, info.params.len())?.is_some() {
                return Err(mismatch(format!("caijit computed {} parameters, the driver says there are more", info.params.len())));
            }
        }
        let attributes = d.func_attributes(raw)?;
        let max_dynamic_shared = AtomicI32::new(attributes.max_dynamic_shared_size_bytes);
        let pointee_alignment = info.params.iter().map(pointee_alignment).collect();
        // Kept for the life of the process, as the kernel itself is (modules are never
        // unloaded): launch records then carry the name by its address (named in the ring).
        let named: &'static str = Box::leak(format!("{}\0", instance_name(&info)).into_boxed_str());
        let instance = &named[..named.len() - 1];
        crate::diag::name_kernel(instance);
        let instance_c = std::ffi::CStr::from_bytes_with_nul(named.as_bytes()).ok();
        Ok(Arc::new(Kernel {
            module: self.clone(),
            instance,
            instance_c,
            info,
            raw,
            attributes,
            max_dynamic_shared,
            pointee_alignment,
            forall_block: OnceLock::new(),
        }))
    }
}

/// A loaded kernel: ready to launch.
#[derive(Debug)]
pub struct Kernel {
    pub(crate) module: Arc<Module>,
    /// The name diagnostics give it ([`instance_name`]).
    pub(crate) instance: &'static str,
    /// The same, NUL-terminated (NVTX range names); `None` if it has a NUL inside.
    pub(crate) instance_c: Option<&'static std::ffi::CStr>,
    pub(crate) info: KernelInfo,
    pub(crate) raw: RawFunction,
    /// The driver's attributes at load; `max_dynamic_shared_size_bytes` is the one a
    /// caller can change, kept in `max_dynamic_shared`.
    attributes: KernelAttributes,
    /// The current limit of dynamic shared memory: read by every launch's check without a
    /// lock (it is one value, written after the driver accepted it).
    max_dynamic_shared: AtomicI32,
    /// Per parameter, the alignment its pointee needs beyond its elements' size (a vector
    /// type's: `float4*` → 16), parsed from its C++ type once instead of on every launch.
    pub(crate) pointee_alignment: Box<[usize]>,
    /// The occupancy-maximising block size without dynamic shared memory (`forall`),
    /// asked of the driver once.
    forall_block: OnceLock<u32>,
}

impl Kernel {
    pub fn info(&self) -> &KernelInfo {
        &self.info
    }
    /// The name diagnostics give this kernel ([`instance_name`]).
    pub fn instance(&self) -> &'static str {
        self.instance
    }
    pub fn context(&self) -> &Arc<Context> {
        &self.module.ctx
    }
    pub fn attributes(&self) -> KernelAttributes {
        KernelAttributes { max_dynamic_shared_size_bytes: self.max_dynamic_shared_size_bytes(), ..self.attributes }
    }

    /// The limit of threads per block (fixed at load).
    pub(crate) fn max_threads_per_block(&self) -> i32 {
        self.attributes.max_threads_per_block
    }

    /// The current limit of dynamic shared memory per block.
    pub(crate) fn max_dynamic_shared_size_bytes(&self) -> i32 {
        self.max_dynamic_shared.load(Ordering::Relaxed)
    }

    /// Allow up to `bytes` of dynamic shared memory (above the 48 KiB default).
    pub fn set_max_dynamic_shared_size_bytes(&self, bytes: i32) -> Result<()> {
        let d = self.context().bind()?;
        d.set_max_dynamic_shared(self.raw, bytes)?;
        self.max_dynamic_shared.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The block size that maximises occupancy, with `dynamic_smem` bytes per block.
    pub fn occupancy_block_size(&self, dynamic_smem: usize) -> Result<u32> {
        if dynamic_smem == 0 {
            if let Some(&b) = self.forall_block.get() {
                return Ok(b);
            }
        }
        let d = self.context().bind()?;
        let block = d.occupancy_block_size(self.raw, dynamic_smem)?.1.max(1) as u32;
        if dynamic_smem == 0 {
            let _ = self.forall_block.set(block);
        }
        Ok(block)
    }
}

/// The name launch records, NVTX ranges and profiles give a kernel: its name expression
/// (`axpy<float>`), else its demangled signature, else its lowered name.
pub fn instance_name(info: &KernelInfo) -> String {
    info.name_expression.clone().unwrap_or_else(|| info.display_name().to_string())
}

/// Check `args` against the parameters of `info` as a launch does (their count, then each
/// against its parameter: dtype, constness, contiguity, alignment, scalar range), packing
/// nothing that is kept. `alignment`: each parameter's [`pointee_alignment`].
pub(crate) fn check_args(info: &KernelInfo, alignment: &[usize], args: &[Arg<'_>]) -> Result<()> {
    crate::params::check_count(|| info.base_name(), info.params.len(), args.len())?;
    crate::params::marshal(&info.params, alignment, args, &mut crate::params::ParamBuffer::new(info.param_buffer_size()))
}

/// The alignment a pointer parameter's pointee needs beyond its elements' size: its CUDA
/// vector type's for an untyped pointer to one, else 1. Parsed from the C++ type once per
/// kernel (at load: [`Kernel`] keeps it), not on every launch.
pub(crate) fn pointee_alignment(p: &ParamLayout) -> usize {
    match p.kind {
        ParamKind::Pointer { dtype: None, .. } => vector_alignment(&p.cpp_type).unwrap_or(1),
        ParamKind::Pointer { dtype: Some(_), .. } | ParamKind::Array { .. } | ParamKind::Scalar(_) | ParamKind::Struct { .. } => 1,
    }
}

/// The alignment of the CUDA vector type a pointer parameter points to (`const float4*` →
/// 16), `None` for other pointees.
fn vector_alignment(cpp_type: &str) -> Option<usize> {
    let name = cpp_type.replace("__restrict__", "").replace("const", "").replace(['*', ' '], "");
    let lanes = name.chars().last()?.to_digit(10)? as usize;
    let base = &name[..name.len() - 1];
    let size = match base.trim_start_matches("__") {
        "half" | "nv_bfloat16" if lanes == 2 => return Some(4),
        "char" | "uchar" => 1,
        "short" | "ushort" => 2,
        "int" | "uint" | "float" => 4,
        "long" | "ulong" | "longlong" | "ulonglong" | "double" => 8,
        _ => return None,
    };
    match lanes {
        1 | 3 => Some(size),
        2 | 4 => Some((size * lanes).min(16)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_pointees_have_their_alignment() {
        assert_eq!(vector_alignment("const float4*"), Some(16));
        assert_eq!(vector_alignment("float2*"), Some(8));
        assert_eq!(vector_alignment("double2 * __restrict__"), Some(16));
        assert_eq!(vector_alignment("uchar4*"), Some(4));
        assert_eq!(vector_alignment("float3*"), Some(4));
        assert_eq!(vector_alignment("__half2*"), Some(4));
        assert_eq!(vector_alignment("MyStruct*"), None);
        assert_eq!(vector_alignment("S2*"), None);
    }
}
