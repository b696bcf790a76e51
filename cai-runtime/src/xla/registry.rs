//! The launches this process resolved, by fingerprint: prepared when a program is traced
//! ([`prepare`]), or resolved from a custom call's description in a process that did not
//! trace it, compiled through the caches and loaded on the devices.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};

use super::description::{fingerprint_of, parse_fingerprint, Description};
use super::plan::{plan, ParamSource};
use super::spec::{Binding, BufferSpec, Launch, FINGERPRINT, TARGET};
use crate::compile::{KernelInfo, Program};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::LaunchConfig;
use crate::runtime::{self, Context};

/// A launch resolved in this process: the kernel (per device), its parameter plan and
/// configuration, and the description it was made from.
#[derive(Debug)]
pub struct Prepared {
    pub(super) description: String,
    pub(super) program: Program,
    pub(super) name: String,
    pub(super) info: KernelInfo,
    /// `(offset, slot)` of every parameter.
    pub(super) plan: Vec<(usize, ParamSource)>,
    pub(super) buffer_size: usize,
    pub(super) inputs: Vec<BufferSpec>,
    pub(super) outputs: Vec<BufferSpec>,
    /// What each parameter is bound to (for the ring of recent launches).
    pub(super) bindings: Vec<Binding>,
    pub(super) config: LaunchConfig,
    /// The program's family key its description records ([`compiled_key`]).
    pub(super) headers: String,
    /// The loaded kernel per device ordinal.
    pub(super) kernels: Vec<OnceLock<Arc<Kernel>>>,
}

/// Load `name` of `program` on `device` for launches with `config`, compiled from headers
/// whose family key is `headers` (the description's): a request for more dynamic shared
/// memory than the kernel's limit raises the limit on this device.
fn load(program: &Program, name: &str, config: &LaunchConfig, device: usize, headers: &str) -> Result<Arc<Kernel>> {
    let ctx = Context::new(device)?;
    let (compiled, here) = compiled_key(program, ctx.arch())?;
    if here != headers {
        return Err(Error::argument(format!(
            "the custom call's kernel `{name}` was traced with other headers than {} includes here (header digest {headers} there, \
             {here} here): trace the program again",
            program.name
        )));
    }
    let k = ctx.load_compiled(program, compiled)?.kernel(name)?;
    if i64::from(config.shared_mem) > i64::from(k.max_dynamic_shared_size_bytes()) {
        let bytes = i32::try_from(config.shared_mem)
            .map_err(|_| Error::argument(format!("{} bytes of dynamic shared memory is out of range", config.shared_mem)))?;
        k.set_max_dynamic_shared_size_bytes(bytes)?;
    }
    config.check(&k)?;
    Ok(k)
}

impl Prepared {
    pub(super) fn kernel(&self, device: usize) -> Result<&Arc<Kernel>> {
        let slot = self
            .kernels
            .get(device)
            .ok_or_else(|| Error::launch(format!("XLA runs the call on device {device}, which the driver does not list")))?;
        if let Some(k) = slot.get() {
            return Ok(k);
        }
        let k = load(&self.program, &self.name, &self.config, device, &self.headers)?;
        Ok(slot.get_or_init(|| k))
    }
}

/// Every launch this process resolved, by fingerprint.
static LAUNCHES: LazyLock<RwLock<HashMap<u128, Arc<Prepared>>>> = LazyLock::new(|| RwLock::new(HashMap::new()));

pub(super) fn registered(key: u128) -> Option<Arc<Prepared>> {
    LAUNCHES.read().unwrap_or_else(|p| p.into_inner()).get(&key).cloned()
}

/// Register `p` under `key`, unless a launch is there already (then that one is kept).
pub(super) fn register(key: u128, p: Prepared) -> Arc<Prepared> {
    let mut all = LAUNCHES.write().unwrap_or_else(|p| p.into_inner());
    all.entry(key).or_insert_with(|| Arc::new(p)).clone()
}

/// `program` compiled for `arch`, and what a description records of it beyond its text: its
/// bundle family key, which hashes its own headers' contents as this compilation read them
/// (so that another process with edited headers refuses the launch, and a launch is never
/// described by other headers than its code was compiled from). A program whose headers
/// caijit cannot all name (a computed include) has none: an error.
fn compiled_key(program: &Program, arch: crate::compile::Arch) -> Result<(Arc<crate::compile::Compiled>, String)> {
    let (compiled, _, keys) = crate::compile::compile_recorded(program, arch, &Default::default(), true)?;
    let keys = keys.ok_or_else(|| Error::argument("a compilation gave no bundle key"))?;
    let (_, family) = keys.map_err(|why| {
        Error::argument(format!(
            "{}: caijit cannot name every header the program reads ({why}), so a launch of it cannot be described to another process",
            program.name
        ))
    })?;
    Ok((compiled, family))
}

/// Prepare a launch of `name` (a kernel of `program`; a name expression for a template
/// instance) for XLA and return what its custom call carries: `bindings[i]` says what
/// parameter `i` is (`inputs` then `outputs` number the buffers; `aliases` are
/// `(input, output)` pairs XLA gives the same memory). Checks every binding against the
/// compiled parameter list: a buffer's dtype and rank, a scalar's range, that only outputs
/// and aliased inputs are written through non-const parameters. Loads the kernel on each of
/// `devices` (compiling it for their architectures, through the caches); without a CUDA
/// driver it is compiled for the inspection architecture only, so that programs can be
/// traced and lowered anywhere. The launch is registered under its fingerprint; preparing
/// the same launch again finds it there.
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
) -> Result<Launch> {
    // The first device's architecture (else the inspection one): the headers as compiled.
    let arch = match devices.first() {
        Some(&device) => Context::new(device)?.arch(),
        None => crate::kernel::inspection_arch()?,
    };
    let d = Description {
        program: program.clone(),
        headers: compiled_key(program, arch)?.1,
        name: name.to_string(),
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
        aliases: aliases.to_vec(),
        bindings: bindings.to_vec(),
        config,
    };
    let description = d.encode()?;
    let key = fingerprint_of(&description);
    let p = match registered(key) {
        Some(p) => {
            for &device in devices {
                p.kernel(device)?;
            }
            p
        }
        None => register(key, build(d, description.clone(), Devices::These(devices))?),
    };
    Ok(Launch { fingerprint: format!("{key:032x}"), description, kernel: p.info.lowered_name.clone() })
}

/// The number of devices the driver lists (0 without a CUDA driver).
fn device_count() -> Result<usize> {
    match runtime::device_count() {
        Ok(n) => Ok(n),
        Err(Error::CudaNotAvailable(_)) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Which devices [`build`] loads a launch on.
enum Devices<'a> {
    /// These, and a failure on any is the launch's error.
    These(&'a [usize]),
    /// Every device the driver lists, as far as each allows: a device the kernel cannot be
    /// loaded on is left to its first call there (which then reports why).
    Every,
}

/// Compile and check a described launch: load it on `devices`, lay out its plan.
fn build(d: Description, description: String, devices: Devices<'_>) -> Result<Prepared> {
    let count = device_count()?;
    let kernels: Vec<OnceLock<Arc<Kernel>>> = (0..count).map(|_| OnceLock::new()).collect();
    let mut info = None;
    let (list, strict) = match devices {
        Devices::These(list) => (list.to_vec(), true),
        Devices::Every => ((0..count).collect(), false),
    };
    for device in list {
        let slot = kernels.get(device).ok_or_else(|| Error::argument(format!("device {device} does not exist ({count} devices)")))?;
        let k = match load(&d.program, &d.name, &d.config, device, &d.headers) {
            Ok(k) => k,
            Err(e) if strict => return Err(e),
            Err(_) => continue,
        };
        info.get_or_insert_with(|| k.info().clone());
        let _ = slot.set(k);
    }
    let info = match info {
        Some(i) => i,
        None => {
            let (compiled, here) = compiled_key(&d.program, crate::kernel::inspection_arch()?)?;
            if here != d.headers {
                return Err(Error::argument(format!(
                    "the kernel `{}` was described with other headers than {} includes now: trace the program again",
                    d.name, d.program.name
                )));
            }
            compiled.kernel(&d.name)?.clone()
        }
    };
    let plan = plan(&info, &d.inputs, &d.outputs, &d.aliases, &d.bindings)?;
    Ok(Prepared {
        description,
        headers: d.headers,
        program: d.program,
        name: d.name,
        buffer_size: info.param_buffer_size(),
        info,
        plan,
        inputs: d.inputs,
        outputs: d.outputs,
        bindings: d.bindings,
        config: d.config,
        kernels,
    })
}

/// The launch a custom call's attributes name: the one registered under `fingerprint`, or,
/// in a process that has none, the one `description` describes (it must hash to
/// `fingerprint`), compiled, loaded on every device and registered. With `check`, a
/// registered launch's description must be `description` byte for byte (once per call
/// site, not per call).
pub(super) fn resolve(fingerprint: Option<&[u8]>, description: Option<&[u8]>, check: bool) -> Result<Arc<Prepared>> {
    let fingerprint = fingerprint.ok_or_else(|| {
        Error::argument(format!("the custom call has no `{FINGERPRINT}` attribute (a program lowered by an older caijit? trace it again)"))
    })?;
    let key = parse_fingerprint(fingerprint)?;
    if let Some(p) = registered(key) {
        if check && description != Some(p.description.as_bytes()) {
            return Err(Error::argument(format!(
                "the custom call's launch description differs from the launch registered under its fingerprint {key:032x}{}",
                if description.is_none() { format!(" (it has no `{TARGET}` attribute)") } else { String::new() }
            )));
        }
        return Ok(p);
    }
    let text =
        description.ok_or_else(|| Error::argument(format!("the custom call has no `{TARGET}` attribute (its launch's description)")))?;
    let text = std::str::from_utf8(text).map_err(|_| Error::argument(format!("the custom call's `{TARGET}` attribute is not UTF-8")))?;
    if fingerprint_of(text) != key {
        return Err(Error::argument(format!(
            "the custom call's launch description does not match its fingerprint {key:032x}: the program was altered; trace it again"
        )));
    }
    let d = Description::decode(text)?;
    // Each device's compilation is checked against the description's headers as it loads.
    // Loaded on every device now, while XLA instantiates the program (outside any graph
    // capture): a process that did not trace the kernel does not know which devices its
    // JAX uses, and a first call may be recorded into a CUDA graph.
    Ok(register(key, build(d, text.to_string(), Devices::Every)?))
}

/// Resolve a launch from its custom call's attributes, as the handler's instantiate stage
/// does (the launch registered under `fingerprint`, checked against `description`, or
/// the described launch, compiled and registered); returns the kernel's lowered name.
pub fn resolve_launch(fingerprint: &str, description: &str) -> Result<String> {
    Ok(resolve(Some(fingerprint.as_bytes()), Some(description.as_bytes()), true)?.info.lowered_name.clone())
}
