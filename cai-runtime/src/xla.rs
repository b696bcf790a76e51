//! Kernels as XLA custom calls: launches described by their call's attributes, resolved
//! once per process into a registry keyed by content, served by an XLA FFI handler.
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
//! let launch = prepare(
//!     &program, "scale", &[spec.clone()], &[spec], &[],
//!     &[Binding::Buffer(0), Binding::Buffer(1), Binding::Scalar(Num::Float(2.0)), Binding::Scalar(Num::Int(1024))],
//!     LaunchConfig::new([4, 1, 1], [256, 1, 1]), &[0],
//! )?;
//! // The custom call `caijit_launch` with the attributes
//! // `caijit_fingerprint = launch.fingerprint` and `caijit_launch = launch.description`
//! // now launches it, in this process or any other.
//! # Ok::<(), cai_runtime::Error>(())
//! ```
//!
//! # Rationale
//! A jitted JAX program calls the handler ([`handler_address`], registered with
//! `jax.ffi.register_ffi_target(..., platform="CUDA")`) once per execution, with XLA's
//! buffers and stream. Everything that can be decided before that — the template instance,
//! which kernel parameter is which buffer, the bytes of every static scalar, the launch
//! configuration — is decided once by [`prepare`], when the program is traced.
//!
//! A compiled program outlives the process that traced it (`serialize_executable`,
//! `jax.export`), so the custom call carries the launch itself, not a reference into this
//! process: its attribute `caijit_launch` is a full description (the program: source,
//! options, defines, include directories, name expressions; the kernel's name; the buffers'
//! dtypes and shapes; every parameter's binding; the launch configuration), and
//! `caijit_fingerprint` the SHA-256 of that description (its first 128 bits, in hex). The
//! process's launches live in a registry keyed by fingerprint. [`prepare`] fills it; a call
//! whose fingerprint it lacks (a program made elsewhere) is resolved from its description,
//! which must hash to its fingerprint, compiled through the caches, loaded on every device
//! the driver lists, and registered. The
//! handler resolves at XLA's *instantiate* stage (when XLA builds the program's thunks, at
//! compilation or deserialization: outside any CUDA graph capture), where it also checks
//! that the description is the registered launch's byte for byte; an execute-stage call
//! then costs one map lookup by a 128-bit key (no hashing of the source), the buffer check
//! (count, dtype, element count), the parameter bytes and `cuLaunchKernel` on XLA's stream:
//! no compilation, no allocation beyond the stack, no event, no host synchronisation. XLA
//! orders the call against the rest of its program, so none of the CAI stream protocol
//! applies; and since the launch is one `cuLaunchKernel` on the given stream, the handler
//! declares itself compatible with XLA's command buffers (CUDA graphs).
//!
//! A call whose fingerprint is malformed, whose description does not hash to it or differs
//! from the launch registered under it, or whose buffers differ from the description's, is
//! an XLA error: never another kernel.
//!
//! # Limitations
//! Registered launches live for the process (a jitted function may run at any time). A
//! device a launch was not loaded on is loaded on its first call (from the compilation
//! caches; the architecture's first compilation would then happen there). Include
//! directories are host paths: a description made on another machine compiles only where
//! they exist. A launch asking for more dynamic shared memory than a kernel's default
//! limit (48 KiB) raises that kernel's limit on each device it is loaded on.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};

use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use crate::cai::DType;
use crate::compile::{KernelInfo, Program};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::launch::{trace, LaunchConfig};
use crate::params::{check_array, check_count, encode_scalar, mismatch, param_error, ArrayArg, Num, ParamBuffer};
use crate::runtime::{self, Context};
use crate::signature::{ArrayLayout, ParamKind};
use crate::stats::{bump, COUNTERS};
use crate::sys::xla_ffi::{self, Attributes, BufferRef, Call, Serve};

/// The custom call target name caijit registers, and the attribute carrying the launch's
/// description.
pub const TARGET: &str = "caijit_launch";
/// The attribute carrying the launch's fingerprint (32 hex digits).
pub const FINGERPRINT: &str = "caijit_fingerprint";
/// The first token of every description: its format (bumped when the format changes).
const FORMAT: &str = "caijit-xla-launch/2";

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

/// What a launch is, in full: what its description encodes.
#[derive(Clone, Debug, PartialEq)]
struct Description {
    program: Program,
    /// The family key of `program` as it was compiled where it was traced ([`compiled_key`]):
    /// its source, options and own headers' contents, independent of the NVRTC build.
    headers: String,
    name: String,
    inputs: Vec<BufferSpec>,
    outputs: Vec<BufferSpec>,
    aliases: Vec<(usize, usize)>,
    bindings: Vec<Binding>,
    config: LaunchConfig,
}

/// A launch resolved in this process: the kernel (per device), its parameter plan and
/// configuration, and the description it was made from.
#[derive(Debug)]
pub struct Prepared {
    description: String,
    program: Program,
    name: String,
    info: KernelInfo,
    /// `(offset, slot)` of every parameter.
    plan: Vec<(usize, Slot)>,
    buffer_size: usize,
    inputs: Vec<BufferSpec>,
    outputs: Vec<BufferSpec>,
    /// What each parameter is bound to (for the ring of recent launches).
    bindings: Vec<Binding>,
    config: LaunchConfig,
    /// The program's family key its description records ([`compiled_key`]).
    headers: String,
    /// The loaded kernel per device ordinal.
    kernels: Vec<OnceLock<Arc<Kernel>>>,
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
    fn kernel(&self, device: usize) -> Result<&Arc<Kernel>> {
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

fn registered(key: u128) -> Option<Arc<Prepared>> {
    LAUNCHES.read().unwrap_or_else(|p| p.into_inner()).get(&key).cloned()
}

/// Register `p` under `key`, unless a launch is there already (then that one is kept).
fn register(key: u128, p: Prepared) -> Arc<Prepared> {
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

/// The fingerprint of a description: the first 128 bits of its SHA-256.
fn fingerprint_of(description: &str) -> u128 {
    let digest = Sha256::digest(description.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// A fingerprint attribute's value: exactly 32 hex digits.
fn parse_fingerprint(text: &[u8]) -> Result<u128> {
    let malformed = || {
        Error::argument(format!(
            "the custom call's `{FINGERPRINT}` attribute is {:?}; 32 hex digits were expected",
            String::from_utf8_lossy(&text[..text.len().min(64)])
        ))
    };
    if text.len() != 32 || !text.iter().all(u8::is_ascii_hexdigit) {
        return Err(malformed());
    }
    let text = std::str::from_utf8(text).map_err(|_| malformed())?;
    u128::from_str_radix(text, 16).map_err(|_| malformed())
}

fn describe(b: &BufferSpec) -> String {
    format!("{}{:?}", b.dtype.name(), b.shape)
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
fn resolve(fingerprint: Option<&[u8]>, description: Option<&[u8]>, check: bool) -> Result<Arc<Prepared>> {
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

/// A description's writer: each field is `<byte length>:<bytes>`, so any text fits.
struct Writer(String);

impl Writer {
    fn field(&mut self, v: &str) -> &mut Self {
        let _ = write!(self.0, "{}:{v}", v.len());
        self
    }
    fn num(&mut self, v: impl std::fmt::Display) -> &mut Self {
        self.field(&v.to_string())
    }
    fn path(&mut self, p: &std::path::Path) -> Result<&mut Self> {
        let s = p.to_str().ok_or_else(|| Error::argument(format!("the include path {} is not UTF-8", p.display())))?;
        Ok(self.field(s))
    }
}

/// A description's reader.
struct Reader<'a>(&'a str);

impl<'a> Reader<'a> {
    fn malformed(what: &str) -> Error {
        Error::argument(format!("the custom call's launch description is malformed ({what}); trace the program again"))
    }
    fn field(&mut self) -> Result<&'a str> {
        let colon = self.0.find(':').ok_or_else(|| Self::malformed("a field without a length"))?;
        let len: usize = self.0[..colon].parse().map_err(|_| Self::malformed("a field length"))?;
        let end = (colon + 1).checked_add(len).ok_or_else(|| Self::malformed("a field length"))?;
        let v = self.0.get(colon + 1..end).ok_or_else(|| Self::malformed("a field past its end"))?;
        self.0 = &self.0[end..];
        Ok(v)
    }
    fn num<T: std::str::FromStr>(&mut self) -> Result<T> {
        self.field()?.parse().map_err(|_| Self::malformed("a number"))
    }
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let n: usize = self.num()?;
        (0..n).map(|_| item(self)).collect()
    }
    fn dims(&mut self) -> Result<[u32; 3]> {
        Ok([self.num()?, self.num()?, self.num()?])
    }
}

impl Description {
    fn encode(&self) -> Result<String> {
        // Every field of the program, by name: a new field fails to compile here until the
        // description carries it.
        let Program { source, name, options, include_dirs, defines, name_expressions, source_dir } = &self.program;
        let mut w = Writer(String::with_capacity(source.len() + 256));
        w.field(FORMAT).field(source).field(name).field(&self.headers);
        w.num(options.len());
        for o in options {
            w.field(o);
        }
        w.num(include_dirs.len());
        for d in include_dirs {
            w.path(d)?;
        }
        w.num(defines.len());
        for (n, v) in defines {
            w.field(n).field(if v.is_some() { "1" } else { "0" }).field(v.as_deref().unwrap_or(""));
        }
        w.num(name_expressions.len());
        for e in name_expressions {
            w.field(e);
        }
        match source_dir {
            Some(d) => w.field("1").path(d)?,
            None => w.field("0"),
        };
        w.field(&self.name);
        for specs in [&self.inputs, &self.outputs] {
            w.num(specs.len());
            for s in specs {
                w.field(s.dtype.name()).num(s.shape.len());
                for &d in &s.shape {
                    w.num(d);
                }
            }
        }
        w.num(self.aliases.len());
        for &(i, o) in &self.aliases {
            w.num(i).num(o);
        }
        w.num(self.bindings.len());
        for b in &self.bindings {
            match *b {
                Binding::Buffer(i) => w.field("buffer").num(i),
                Binding::Scalar(Num::Bool(v)) => w.field("bool").num(u8::from(v)),
                Binding::Scalar(Num::Int(v)) => w.field("int").num(v),
                Binding::Scalar(Num::Float(v)) => w.field("float").num(v.to_bits()),
                Binding::Scalar(Num::Complex(re, im)) => w.field("complex").num(re.to_bits()).num(im.to_bits()),
            };
        }
        let LaunchConfig { grid, block, shared_mem, cluster, cooperative } = self.config;
        for d in grid.iter().chain(&block) {
            w.num(d);
        }
        w.num(shared_mem).num(u8::from(cooperative));
        for d in cluster.unwrap_or([0, 0, 0]) {
            w.num(d);
        }
        Ok(w.0)
    }

    fn decode(text: &str) -> Result<Description> {
        let mut r = Reader(text);
        let format = r.field()?;
        if format != FORMAT {
            return Err(Error::argument(format!(
                "the custom call's launch description has format {format:?}; this caijit reads {FORMAT:?} (trace the program again with this caijit)"
            )));
        }
        let flag = |r: &mut Reader<'_>| match r.field()? {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(Reader::malformed("a flag")),
        };
        let source = r.field()?.to_string();
        let name = r.field()?.to_string();
        let headers = r.field()?.to_string();
        let options = r.list(|r| Ok(r.field()?.to_string()))?;
        let include_dirs = r.list(|r| Ok(PathBuf::from(r.field()?)))?;
        let defines = r.list(|r| {
            let n = r.field()?.to_string();
            let has = flag(r)?;
            let v = r.field()?.to_string();
            Ok((n, has.then_some(v)))
        })?;
        let name_expressions = r.list(|r| Ok(r.field()?.to_string()))?;
        let source_dir = if flag(&mut r)? { Some(PathBuf::from(r.field()?)) } else { None };
        let program = Program { source, name, options, include_dirs, defines, name_expressions, source_dir };
        let kernel = r.field()?.to_string();
        let spec = |r: &mut Reader<'_>| {
            let dtype = r.field()?;
            let dtype = DType::from_name(dtype).ok_or_else(|| Reader::malformed("a dtype"))?;
            Ok(BufferSpec { dtype, shape: r.list(|r| r.num())? })
        };
        let inputs = r.list(spec)?;
        let outputs = r.list(spec)?;
        let aliases = r.list(|r| Ok((r.num()?, r.num()?)))?;
        let bindings = r.list(|r| {
            Ok(match r.field()? {
                "buffer" => Binding::Buffer(r.num()?),
                "bool" => Binding::Scalar(Num::Bool(flag(r)?)),
                "int" => Binding::Scalar(Num::Int(r.num()?)),
                "float" => Binding::Scalar(Num::Float(f64::from_bits(r.num()?))),
                "complex" => Binding::Scalar(Num::Complex(f64::from_bits(r.num()?), f64::from_bits(r.num()?))),
                _ => return Err(Reader::malformed("a binding")),
            })
        })?;
        let (grid, block) = (r.dims()?, r.dims()?);
        let shared_mem = r.num()?;
        let cooperative = flag(&mut r)?;
        let cluster = r.dims()?;
        if !r.0.is_empty() {
            return Err(Reader::malformed("text after its last field"));
        }
        let config = LaunchConfig { grid, block, shared_mem, cluster: (cluster != [0, 0, 0]).then_some(cluster), cooperative };
        Ok(Description { program, headers, name: kernel, inputs, outputs, aliases, bindings, config })
    }
}

/// Check `bindings` against the parameter list and lay out the plan.
fn plan(
    info: &KernelInfo,
    inputs: &[BufferSpec],
    outputs: &[BufferSpec],
    aliases: &[(usize, usize)],
    bindings: &[Binding],
) -> Result<Vec<(usize, Slot)>> {
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
                match p.kind {
                    ParamKind::Array { rank, .. } => Slot::Array { buffer: *i, rank, itemsize: spec.dtype.itemsize() },
                    _ => Slot::Pointer(*i),
                }
            }
            (ParamKind::Scalar(d), Binding::Scalar(v)) => {
                Slot::Bytes(SmallVec::from_slice(&encode_scalar(*v, *d).map_err(|e| param_error(p, e))?))
            }
            (_, Binding::Buffer(i)) => return Err(mismatch(p, format_args!("buffer {i}"))),
            (_, Binding::Scalar(_)) => return Err(mismatch(p, "a scalar")),
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
    fn record(&self, k: &Kernel, call: &Call<'_>) -> Option<Box<crate::diag::LaunchRecord>> {
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
    fn serve(call: &Call<'_>) -> std::result::Result<(), String> {
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
        assert!(e.starts_with("argument 0 `x`") && e.ends_with("expected a buffer of float32 (float), got int32"), "{e}");
        let e = plan(&info(), &[f32s(4)], &[f32s(4)], &[], &[b0, b1]).unwrap_err().to_string();
        assert_eq!(e, "kernel `k` takes 3 arguments, got 2");
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

    fn sample() -> Description {
        let program = Program::new("extern \"C\" __global__ void k(const float* x, float* y, int n) { /* 1:2:3: ünï */ }")
            .name("k.cu")
            .option("-DX=1")
            .define("Y", Some("2".into()))
            .define("Z", None)
            .include_dir("/tmp/inc")
            .name_expression("k")
            .located_at("/tmp/src/k.cu");
        Description {
            program,
            headers: "0123abcd".into(),
            name: "k".into(),
            inputs: vec![f32s(4), BufferSpec { dtype: DType::C64, shape: vec![] }],
            outputs: vec![BufferSpec { dtype: DType::BF16, shape: vec![2, 0, 3] }],
            aliases: vec![(1, 0)],
            bindings: vec![
                Binding::Buffer(0),
                Binding::Scalar(Num::Int(-(1 << 100))),
                Binding::Scalar(Num::Float(-0.1)),
                Binding::Scalar(Num::Complex(f64::NAN, 1e300)),
                Binding::Scalar(Num::Bool(true)),
            ],
            config: LaunchConfig::new([3, 2, 1], [128, 1, 1]).shared_mem(65536).cluster([1, 2, 1]),
        }
    }

    #[test]
    fn a_description_decodes_to_what_was_encoded() {
        let d = sample();
        let text = d.encode().unwrap();
        let back = Description::decode(&text).unwrap();
        // NaN != NaN: compare the bits of the floats, the rest as is.
        let bits = |b: &[Binding]| {
            format!(
                "{:?}",
                b.iter()
                    .map(|b| match b {
                        Binding::Scalar(Num::Complex(re, im)) => (re.to_bits(), im.to_bits()),
                        _ => (0, 0),
                    })
                    .collect::<Vec<_>>()
            )
        };
        assert_eq!(bits(&back.bindings), bits(&d.bindings));
        assert_eq!(back.bindings[..3], d.bindings[..3]);
        assert_eq!(
            (&back.program, &back.name, &back.inputs, &back.outputs, &back.aliases),
            (&d.program, &d.name, &d.inputs, &d.outputs, &d.aliases)
        );
        assert_eq!(back.config, d.config);
        assert_eq!(back.encode().unwrap(), text);
        let plain = Description { config: LaunchConfig::new([1, 1, 1], [1, 1, 1]), ..sample() };
        assert_eq!(Description::decode(&plain.encode().unwrap()).unwrap().config, plain.config);
    }

    #[test]
    fn a_malformed_description_is_an_error() {
        let text = sample().encode().unwrap();
        for bad in [&text[..text.len() - 1], &text[1..], "", "19:caijit-xla-launch/0", &format!("{text}1:x")] {
            assert!(Description::decode(bad).is_err(), "{bad:?}");
        }
        let e = Description::decode("19:caijit-xla-launch/0").unwrap_err().to_string();
        assert!(e.contains("format"), "{e}");
    }

    #[test]
    fn fingerprints_are_32_hex_digits_of_the_description() {
        let text = sample().encode().unwrap();
        let key = fingerprint_of(&text);
        assert_eq!(parse_fingerprint(format!("{key:032x}").as_bytes()).unwrap(), key);
        assert_ne!(fingerprint_of(&text.replace("1:2:3", "1:2:4")), key);
        let hex = format!("{key:032x}");
        for bad in ["", "12", &hex[1..], &format!("+{}", &hex[1..]), &format!("{hex}0"), &hex.to_uppercase().replace(char::is_numeric, "G")]
        {
            assert!(parse_fingerprint(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_description_that_does_not_hash_to_its_fingerprint_is_refused() {
        // Nothing is registered under these keys, so the description is what decides; it
        // must hash to the fingerprint before anything is decoded or compiled.
        let text = sample().encode().unwrap();
        let other = format!("{:032x}", fingerprint_of(&text) ^ 1);
        let e = resolve(Some(other.as_bytes()), Some(text.as_bytes()), true).unwrap_err().to_string();
        assert!(e.contains("does not match its fingerprint"), "{e}");
        let e = resolve(None, Some(text.as_bytes()), false).unwrap_err().to_string();
        assert!(e.contains("no `caijit_fingerprint` attribute"), "{e}");
        let e = resolve(Some(other.as_bytes()), None, false).unwrap_err().to_string();
        assert!(e.contains("no `caijit_launch` attribute"), "{e}");
        let e = resolve(Some(b"42"), Some(text.as_bytes()), false).unwrap_err().to_string();
        assert!(e.contains("32 hex digits"), "{e}");
    }

    #[test]
    fn a_registered_launch_is_found_by_its_fingerprint_and_checked_against_its_description() {
        let d = Description { program: Program::new("registry test"), ..sample() };
        let text = d.encode().unwrap();
        let key = fingerprint_of(&text);
        let p = Prepared {
            description: text.clone(),
            headers: d.headers.clone(),
            program: d.program.clone(),
            name: d.name.clone(),
            info: info(),
            plan: Vec::new(),
            buffer_size: 0,
            inputs: d.inputs.clone(),
            outputs: d.outputs.clone(),
            bindings: d.bindings.clone(),
            config: d.config,
            kernels: Vec::new(),
        };
        let registered = register(key, p);
        let fp = format!("{key:032x}");
        let found = resolve(Some(fp.as_bytes()), Some(text.as_bytes()), true).unwrap();
        assert!(Arc::ptr_eq(&found, &registered));
        // An execute-stage call: the fingerprint alone finds it (no hashing, no comparison).
        assert!(Arc::ptr_eq(&resolve(Some(fp.as_bytes()), None, false).unwrap(), &registered));
        // Instantiation compares the description with the registered one.
        let other = text.replace("registry test", "registry tesT");
        let e = resolve(Some(fp.as_bytes()), Some(other.as_bytes()), true).unwrap_err().to_string();
        assert!(e.contains("differs from the launch registered"), "{e}");
        let e = resolve(Some(fp.as_bytes()), None, true).unwrap_err().to_string();
        assert!(e.contains("has no `caijit_launch` attribute"), "{e}");
    }
}
