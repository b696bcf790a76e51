//! Compiled programs loaded into a context ([`Module`]) and their kernels ([`Kernel`]):
//! the layer between compilation and launches. A kernel couples the driver's function
//! handle with the parameter layout compilation found (checked here against what the
//! driver says of the loaded code); [`crate::launch`] launches it.
//!
//! The two types are `kernel/loaded.rs`'s; this file loads programs into a context
//! ([`Context::load`]) and picks the architecture kernels are inspected for;
//! `kernel/debug.rs` makes bounds-checked debug instances.
//!
//! # Limitations
//! Modules stay loaded for the life of the process (kernel handles may be held anywhere).

use std::sync::{Arc, LazyLock};

mod debug;
mod loaded;

pub use debug::{BoundsRecord, BOUNDS_CHECK};
pub(crate) use loaded::{check_args, pointee_alignment};
pub use loaded::{instance_name, Kernel, Module};

use crate::compile::{self, Arch, Compiled, Program};
use crate::error::{Error, Result};
use crate::runtime::Context;
use crate::stats::timing::{self, LoadPhase};
use crate::stats::{bump, COUNTERS};
use crate::sync::OnceMap;
pub use crate::sys::KernelAttributes;
use crate::sys::RawModule;

/// sm_90: the architecture kernels are inspected for without a GPU unless `CAIJIT_ARCH`
/// says otherwise.
const DEFAULT_INSPECT_ARCH: Arch = Arch(90);

/// The architecture kernels are compiled for to be inspected (parameter layouts, compile
/// errors, XLA lowerings): device 0's; without a usable device (no driver, or none
/// reported), `CAIJIT_ARCH` (an error naming it when it cannot be read), else
/// sm_90, so that kernels can be read on machines without a GPU.
pub fn inspection_arch() -> Result<Arch> {
    match crate::runtime::device_count() {
        Ok(n) if n > 0 => return Ok(Context::new(0)?.arch()),
        Ok(_) | Err(Error::CudaNotAvailable(_)) => {}
        Err(e) => return Err(e),
    }
    match std::env::var("CAIJIT_ARCH") {
        Ok(v) => Arch::parse(&v).map_err(|e| Error::argument(format!("CAIJIT_ARCH={v:?}: {e}"))),
        Err(_) => Ok(DEFAULT_INSPECT_ARCH),
    }
}

/// Every module loaded so far, by device ordinal and cache key: each loaded once, also
/// when several threads ask for it first at the same time (a module is never unloaded, so
/// a second load would leak).
static MODULES: LazyLock<OnceMap<(usize, String), Arc<Module>>> = LazyLock::new(Default::default);

/// The driver's modules by device ordinal and image key: a program's key up to a `/`
/// ([`Compiled::key`]): several programs of one bundled binary share its module.
static IMAGES: LazyLock<OnceMap<(usize, String), RawModule>> = LazyLock::new(Default::default);

impl Context {
    pub fn arch(&self) -> Arch {
        let (major, minor) = self.compute_capability();
        Arch::from_capability(major, minor)
    }

    /// Compile `program` for this device's architecture and load it.
    pub fn compile(self: &Arc<Self>, program: &Program) -> Result<Arc<Module>> {
        self.load_compiled(program, compile::compile(program, self.arch())?)
    }

    /// Load `compiled`, made from `program` (kept, so that its bounds-checked debug instance
    /// can be compiled when debug mode asks for it).
    pub fn load_compiled(self: &Arc<Self>, program: &Program, compiled: Arc<Compiled>) -> Result<Arc<Module>> {
        debug::remember(&compiled.key, program);
        self.load(compiled)
    }

    /// Load a compiled program (once per context and cache key).
    pub fn load(self: &Arc<Self>, compiled: Arc<Compiled>) -> Result<Arc<Module>> {
        MODULES.get_or_try_insert_with((self.ordinal(), compiled.key.clone()), || {
            let image = compiled.key.split('/').next().unwrap_or_default().to_string();
            let raw = IMAGES.get_or_try_insert_with((self.ordinal(), image), || {
                let probe = timing::start();
                let raw = self.bind()?.load_module(compiled.image.bytes())?;
                probe.stop(LoadPhase::ModuleLoad);
                bump(&COUNTERS.modules_loaded);
                Ok::<_, Error>(raw)
            })?;
            Ok(Arc::new(Module::new(self.clone(), compiled, raw)))
        })
    }
}
